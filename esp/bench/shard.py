"""Sharded runs under `torchrun` (or `accelerate launch`): this process's rank, its share of the work and
its device, and gathering everything on rank 0. Without a launcher it is a world of one."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import torch

from esp.errors import ESPError


@dataclass(frozen=True)
class Shard:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    local_world: int = 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    def mine(self, n: int) -> list[int]:
        """Indices of this rank's items among n: round robin, so every rank gets a mix of categories."""
        return list(range(self.rank, n, self.world))

    def device(self) -> str | None:
        """cuda:local_rank when sharded over visible GPUs (shared round robin when the node has fewer GPUs
        than processes); None (the default device) otherwise."""
        if self.world > 1 and torch.cuda.is_available():
            return f"cuda:{self.local_rank % torch.cuda.device_count()}"
        return None

    def gpus(self) -> tuple[int, ...]:
        """This rank's share of the visible GPUs, for a model spread over several (device_map="auto")."""
        n = torch.cuda.device_count()
        per = n // self.local_world
        if per < 1:
            raise ESPError(f"--device-map auto needs at least one visible GPU per process "
                           f"({n} GPUs for {self.local_world} processes on this node).")
        return tuple(range(self.local_rank * per, (self.local_rank + 1) * per))

    def gather(self, obj) -> list | None:
        """Every rank's `obj`, in rank order, on rank 0 (None elsewhere)."""
        if self.world == 1:
            return [obj]
        import torch.distributed as dist

        out = [None] * self.world if self.main else None
        dist.gather_object(obj, out, dst=0)
        dist.barrier()  # no rank tears its connections down while rank 0 still reads from them
        return out

    def share(self, obj):
        """Rank 0's `obj` on every rank (`obj` itself in a world of one); every rank must call it."""
        if self.world == 1:
            return obj
        import torch.distributed as dist

        box = [obj if self.main else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def close(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            dist.destroy_process_group()

    def leave(self) -> None:
        """End a launched process once its output is written: flush, then exit without the interpreter's
        teardown, where c10d's native threads can abort a finished run with SIGABRT ("terminate called
        without an active exception": once in 180 runs here; see pytorch/pytorch#179291).
        A world of one returns and exits as usual."""
        if self.world > 1:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)


def start() -> Shard:
    """The shard that the launcher's environment describes, with its process group up (gloo on CPU, nccl on GPU)."""
    env = os.environ
    world = int(env.get("WORLD_SIZE", 1))
    if world == 1:
        return Shard()
    import torch.distributed as dist

    shard = Shard(int(env["RANK"]), world, int(env.get("LOCAL_RANK", 0)), int(env.get("LOCAL_WORLD_SIZE", world)))
    if torch.cuda.is_available():
        torch.cuda.set_device(shard.device())
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return shard

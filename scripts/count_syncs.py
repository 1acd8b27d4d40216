"""Host sync points per decoding step, per method: every place the host waits for the device.

    python -m scripts.count_syncs [--methods ar,esp:k=2:bc=60,...] [--tokens 32] [--json F]

On a CPU nothing waits, so the script counts what would: every read of a tensor's value on the host
(Tensor.item / tolist / __int__ / __float__ / __bool__ / __index__ / cpu / numpy, torch.equal), through a
TorchFunctionMode, and every torch.cuda.synchronize the engine would call on CUDA (the device-timing paths
are switched on as on a GPU and synchronize is replaced by a counter; bc=auto's forward timer, which on
CUDA reads its events a step later without waiting, counts as one sync per step). Each count is an upper bound of a
GPU's syncs: a read of a tensor that lives on the host anyway (PLD's token history) counts too. Pageable
host-to-device copies are not counted. On CUDA (--cuda) torch.cuda.set_sync_debug_mode("warn") adds the
runtime's own count of synchronizing calls as a cross-check.

Each method runs twice: with step timings (the app's mode) and without (`Decoder(timings=False)`, the
bench's timed runs; an engine without that switch times every step). To measure another revision with the same
script, run it from a worktree of that revision (`git worktree add /tmp/base REV`, copy this file to
/tmp/base/scripts/, then `python -m scripts.count_syncs` there). The model is a tiny random Llama (the counts
depend on the code, not the weights), or --model embedded.
"""
from __future__ import annotations

import argparse
import json
import statistics
import warnings
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode

from esp.bench.provenance import provenance

READS = frozenset({"item", "tolist", "__int__", "__float__", "__bool__", "__index__", "cpu", "numpy", "equal"})
METHODS = "ar,esp:k=2:bc=60,esp:k=2:bc=60:tree=dynamic,pld,stand,lade,tr,hybrid:bc=60,hybrid:bc=auto"


class Reads(TorchFunctionMode):
    """Counts host reads of tensor values (see READS)."""

    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in READS:
            self.n += 1
        return func(*args, **(kwargs or {}))


def tiny_lm(seed: int = 0):
    """A 2-layer random Llama with the stand-in tokenizer (no EOS, so every run has its full length)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from esp.models.lm import LM
    from esp.models.lm import IdTokenizer

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048)
    model = LlamaForCausalLM(cfg).eval()
    model.generation_config.eos_token_id = None
    return LM(model, IdTokenizer(), "tiny-llama")


def count(lm, spec: str, prompt: list[int], tokens: int, timings: bool = True, views: bool = False) -> dict:
    """Per decoding step after the prefill: host reads and (simulated on a CPU) device synchronizes;
    `timings=False` is the bench's mode (engines without the switch always time their phases); `views=True`
    records what the app draws (the alignment, the Mask Lens and the verifier's eye), as the app's runs do."""
    import esp.decoding.engine as engine
    from esp.methods import build

    syncs = [0]
    real_sync, cuda = torch.cuda.synchronize, lm.device.type == "cuda"

    def counted_sync(*a, **k):
        syncs[0] += 1
        if cuda:
            real_sync(*a, **k)

    torch.cuda.synchronize = counted_sync
    patched = _as_on_cuda(lm, syncs) if not cuda else []
    try:
        kw = {} if timings or "timings" not in engine.Decoder.__init__.__code__.co_varnames else {"timings": False}
        if views:
            kw.update(align=True, lens=True)
        dec = engine.Decoder(lm, build(spec), max_new_tokens=tokens, **kw)
        if hasattr(dec, "_cuda"):  # older engines decide per decoder whether their timestamps sync
            dec._cuda = True
        stream = dec.stream(prompt)
        next(stream)  # the prefill: the prompt's forward, not a decoding step
        reads, per_step = Reads(), []
        while True:
            before = (reads.n, syncs[0])
            with reads:
                step = next(stream, None)
            if step is None:
                break
            per_step.append((reads.n - before[0], syncs[0] - before[1]))
    finally:
        torch.cuda.synchronize = real_sync
        for obj, name, value in patched:
            setattr(obj, name, value)
    r = [a for a, _ in per_step]
    s = [b for _, b in per_step]
    return {"steps": len(per_step), "reads_mean": statistics.mean(r), "reads_max": max(r),
            "syncs_mean": statistics.mean(s), "syncs_max": max(s), "total_mean": statistics.mean(a + b for a, b in per_step)}


def _as_on_cuda(lm, syncs: list[int]) -> list[tuple]:
    """Switch the engine's CUDA-only sync paths on while running on a CPU; returns what to restore."""
    undo = []
    try:
        import esp.decoding.timer as timer
    except ImportError:
        timer = None
    if timer is not None:  # the phase timer syncs when asked and the device is CUDA
        init = timer.Phases.__init__

        def cuda_init(self, device="cpu", sync=True):
            init(self, device, sync)
            self._cuda = sync

        undo.append((timer.Phases, "__init__", init))
        timer.Phases.__init__ = cuda_init
    if timer is not None and hasattr(timer, "ForwardTimer"):  # bc=auto's forward timing: counted as one sync
        stop = timer.ForwardTimer.stop

        def counted_stop(self, *a, **k):
            syncs[0] += 1
            return stop(self, *a, **k)

        undo.append((timer.ForwardTimer, "stop", stop))
        timer.ForwardTimer.stop = counted_stop
    if hasattr(lm, "head_seconds"):  # the older LM head synced after every call on CUDA
        head = lm.head

        def synced_head(hidden):
            syncs[0] += 1
            return head(hidden)

        undo.append((lm, "head", head))
        lm.head = synced_head
    return undo


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--methods", default=METHODS)
    p.add_argument("--model", default="tiny", help="'tiny' (random 2-layer Llama) or a name for esp.models.loader.load")
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--cuda", action="store_true", help="run on CUDA and cross-check with the sync debug mode")
    p.add_argument("--json")
    a = p.parse_args()
    torch.set_num_threads(1)
    if a.model == "tiny":
        lm = tiny_lm()
        if a.cuda:
            from esp.models.lm import LM

            lm = LM(lm.model.to("cuda"), lm.tokenizer, lm.name)
        prompt = (list(range(40, 60)) * 3)[:50]
    else:
        from esp.models.loader import load

        lm = load(a.model, device="cuda" if a.cuda else "cpu")
        prompt = lm.chat_ids("Write a Python function that returns the first n prime numbers, with a docstring.")
    out = {"provenance": provenance(None, "python -m scripts.count_syncs"), "model": lm.name, "device": str(lm.device),
           "tokens": a.tokens, "methods": {}}
    print(f"host sync points per decoding step ({lm.name} on {lm.device}, {a.tokens} tokens)")
    for spec in a.methods.split(","):
        r = count(lm, spec, prompt, a.tokens)
        untimed = count(lm, spec, prompt, a.tokens, timings=False)
        r.update({f"{k}_untimed": untimed[k] for k in ("reads_mean", "syncs_mean", "total_mean")})
        if a.cuda:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                torch.cuda.set_sync_debug_mode("warn")
                try:
                    count(lm, spec, prompt, a.tokens)
                finally:
                    torch.cuda.set_sync_debug_mode(0)
            r["cuda_sync_warnings_per_step"] = len(caught) / max(r["steps"], 1)
        out["methods"][spec] = r
        print(f"  {spec:28s} reads {r['reads_mean']:5.1f} (max {r['reads_max']:3d})  synchronize {r['syncs_mean']:4.1f}"
              f"  total {r['total_mean']:5.1f} | timings off: total {r['total_mean_untimed']:5.1f}")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

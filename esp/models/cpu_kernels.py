"""A CPU model's linear layers through oneDNN's prepacked weights, where a short check on the loaded model finds
them faster than torch's default kernels. The check runs once per CPU, instruction set, thread count, model
and dtype, and is stored next to the cost curves (`esp.paths.cache_root() / "kernels"`).

Why a check and not a rule: the default float32 linear is MKL's, and how fast it is depends on the CPU. On a
2-core AMD EPYC (AVX512) a one-row forward of SmolLM2-135M took 41 ms through it and 21 ms through oneDNN's
packed weights, and four rows 1.55x one row against 1.22x (the LM head alone: 7.1 ms against 1.5 ms); an Intel
Xeon measured oneDNN 2x slower for one row. Packed weights also give each row the same numbers whatever the
number of rows (MKL's do not), so a tree's verified rows round as a one-row step does.
"""
from __future__ import annotations

import json
import statistics
import time

import torch

from esp.models.cpu_dtype import CHECK_CONTEXT, CHECK_REPEATS, CHECK_ROUNDS, CHECK_ROWS, machine, verdict_path
from esp.models.packed import PackedLinear, packing_op
from esp.paths import write_atomic

FASTER = 1.05  # packed weights are kept only when the check finds the model at least this much faster


Swap = tuple[torch.nn.Module, str, torch.nn.Linear, PackedLinear]  # (parent, attribute, dense, packed)


def packable(model) -> list[Swap]:
    """Every nn.Linear of a CPU model in a dtype oneDNN packs here, with its packed twin (none where this torch
    or this CPU cannot pack it). The twins exist beside the dense layers until `use` drops one kind."""
    embed = model.get_input_embeddings()
    shared = {id(embed.weight)} if embed is not None else set()
    out = []
    for parent in model.modules():
        for attr, child in parent.named_children():
            if type(child) is torch.nn.Linear and child.weight.device.type == "cpu" \
                    and packing_op(child.weight.dtype) is not None:
                out.append((parent, attr, child, PackedLinear(child, keep_dense=id(child.weight) in shared)))
    return out


def use(swaps: list[Swap], packed: bool) -> None:
    """Put the packed (or the dense) layers in their parents."""
    for parent, attr, dense, twin in swaps:
        setattr(parent, attr, twin if packed else dense)


def pick(model, tokenizer, name: str) -> bool:
    """Leave `model` (loaded, on the CPU) with packed linear layers if the stored (else now timed, then stored)
    check found it FASTER times faster with them; returns whether it did."""
    dtype = str(model.dtype).removeprefix("torch.")
    path = verdict_path(name, "kernels", f"{dtype}-{torch.backends.cpu.get_cpu_capability()}")
    try:
        stored = json.loads(path.read_text())["packed"]
    except (OSError, ValueError, KeyError, TypeError):
        stored = None  # none stored yet (or damaged): check now
    if stored is False:
        return False
    swaps = packable(model)
    if not swaps:
        return False
    if stored is None:
        dense_s, packed_s = compare(model, tokenizer, name, swaps)
        stored = dense_s >= FASTER * packed_s
        write_atomic(path, json.dumps({"packed": stored, "dense_s": round(dense_s, 6), "packed_s": round(packed_s, 6),
                                       "dtype": dtype, **machine()}))
    use(swaps, stored)
    return stored


def compare(model, tokenizer, name: str, swaps: list[Swap]) -> tuple[float, float]:
    """Seconds of the check's forwards (the median per width, summed) with the dense and the packed layers, in
    turn so that a change of machine speed hits both alike; the model is left dense."""
    from esp.models.lm import LM
    from esp.models.timing import measure

    runs: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(CHECK_ROUNDS):
        for packed in runs:
            use(swaps, packed)
            runs[packed].append(sum(measure(LM(model, tokenizer, name), CHECK_ROWS, CHECK_CONTEXT, CHECK_REPEATS).values()))
    use(swaps, False)
    return statistics.median(runs[False]), statistics.median(runs[True])

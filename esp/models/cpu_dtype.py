"""dtype="auto" on a CPU: bfloat16 where the CPU computes it natively and a short check on the loaded model
finds it faster, else float32. The check runs once per CPU, thread count and model, and is stored next to
the cost curves (`esp.paths.cache_root() / "dtype"`); later loads read it in microseconds.

bfloat16 changes the model's numbers: its tokens equal a bfloat16 greedy run's up to rounding ties
(`esp.bench.verdict`), not a float32 one's. So "auto" is for speed (the command lines' default); float32 stays
the default wherever exact equality with a float32 run matters (the engine's `load`, the tests,
`--reference`, the app).
"""
from __future__ import annotations

import copy
import json
import platform
import re
import statistics
import time
from pathlib import Path

import torch

from esp.device import NATIVE, cpu_flags, cpuinfo, native_bf16
from esp.paths import cache_root, write_atomic

FASTER = 1.1  # bfloat16 is kept only when the check finds it at least this much faster
CHECK_ROWS = (1, 4)  # the check times forwards of these widths (a plain step and a small tree) ...
CHECK_CONTEXT = 128  # ... over a cache of this many tokens,
CHECK_ROUNDS = 2  # ... float32 and bfloat16 in turn, this many rounds of
CHECK_REPEATS = 3  # ... this many timings per width


def cpu_name() -> str:
    return cpuinfo("model name") or platform.processor() or platform.machine()


def verdict_path(model_name: str, kind: str = "dtype", extra: str = "") -> Path:
    """Where a check's verdict (`kind`: "dtype", "kernels") for `model_name` on this CPU and thread count is kept;
    `extra` names what else it depends on."""
    safe = lambda s: re.sub(r"[^A-Za-z0-9_.-]+", "_", s).strip("_")
    tail = f"-{safe(extra)}" if extra else ""
    return cache_root() / kind / f"{safe(model_name)}-{safe(cpu_name())}-{torch.get_num_threads()}t{tail}.json"


def machine() -> dict:
    """What a stored verdict was measured on: the CPU, its native flags, torch's kernel level, threads, when."""
    return {"cpu": cpu_name(), "flags": sorted(set(NATIVE) & cpu_flags()),
            "capability": torch.backends.cpu.get_cpu_capability(), "threads": torch.get_num_threads(),
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def pick(model, tokenizer, name: str) -> torch.dtype:
    """float32 or bfloat16 for `model` (loaded in float32, on the CPU): bfloat16 only on a CPU that has it
    natively and where the stored (else now timed, then stored) check found it FASTER times faster."""
    if not native_bf16(cpu_flags()):
        return torch.float32
    path = verdict_path(name)
    try:
        return {"float32": torch.float32, "bfloat16": torch.bfloat16}[json.loads(path.read_text())["dtype"]]
    except (OSError, ValueError, KeyError, TypeError):
        pass  # none stored yet (or damaged): check now
    fp32_s, bf16_s = compare(model, tokenizer, name)
    dtype = torch.bfloat16 if fp32_s >= FASTER * bf16_s else torch.float32
    record = {"dtype": str(dtype).removeprefix("torch."), "float32_s": round(fp32_s, 6), "bfloat16_s": round(bf16_s, 6),
              "rows": list(CHECK_ROWS), "context": CHECK_CONTEXT, **machine()}
    write_atomic(path, json.dumps(record))  # a read-only cache: the next load checks again
    return dtype


def compare(model, tokenizer, name: str) -> tuple[float, float]:
    """Seconds of the check's forwards (the median per width, summed) in float32 and in bfloat16, timed in
    turn so that a change of machine speed hits both alike; the bfloat16 copy is dropped afterwards."""
    from esp.models.timing import measure
    from esp.models.lm import LM

    lms = {torch.float32: LM(model, tokenizer, name), torch.bfloat16: LM(copy.deepcopy(model).to(torch.bfloat16), tokenizer, name)}
    runs: dict[torch.dtype, list[float]] = {dt: [] for dt in lms}
    for _ in range(CHECK_ROUNDS):
        for dt, lm in lms.items():
            runs[dt].append(sum(measure(lm, CHECK_ROWS, CHECK_CONTEXT, CHECK_REPEATS).values()))
    return statistics.median(runs[torch.float32]), statistics.median(runs[torch.bfloat16])

"""Where, when and how a result was made: written into every JSON the bench writes, read by esp.bench.report.

A figure means little without its machine: on a CPU the cost of a wider block (and so every speed-up) turns on
the vector units (AVX2, AVX512, native bfloat16 through AVX512-BF16 or AMX), the cores and the torch build.
"""
from __future__ import annotations

import os
import platform
import shlex
import sys
import time
from pathlib import Path

from esp.device import hardware_flags, held, isa_class

# The CPU flags that change what a forward of several rows costs, in the order a reader ranks them.
FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")
PROG = "python -m esp.bench"


def cpu(cpuinfo: str | None = None) -> tuple[str, list[str]]:
    """(CPU model name, the FLAGS it has) from /proc/cpuinfo's text (read when not given); elsewhere
    platform's processor name and no flags."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    fields = dict(line.split(":", 1) for line in cpuinfo.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    have = set(fields.get("flags", "").split())
    return fields.get("model name") or platform.processor() or platform.machine(), [f for f in FLAGS if f in have]


def machine() -> dict:
    """This machine as a result records it: CPU model and flags, cores, torch's threads, the GPU if any, versions."""
    import torch
    import transformers

    name, flags = cpu()
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    return {"cpu": name, "flags": flags, **isa(), "cores": os.cpu_count(), "threads": torch.get_num_threads(),
            "gpu": gpu, "python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__}


def isa() -> dict:
    """The instruction-set class this process's kernels ran as (`esp.device.isa_class`) and whether it was emulated:
    a process held below its CPU's class (`esp.device.HOLDS`) names the CPU's own class and the holds too."""
    run, own = isa_class(), isa_class(hardware_flags())
    return {"isa": run, "emulated": run != own} | ({"isa_hardware": own, "held": held()} if run != own else {})


def note_kernels(made: dict, lm) -> None:
    """Record in a provenance's machine which linear kernels the loaded model ran on (esp.models.cpu_kernels):
    on one CPU they can change a forward's time twofold."""
    made["machine"]["kernels"] = "packed" if getattr(lm, "packed", False) else "default"


def command(argv: list[str] | None, prog: str = PROG) -> str:
    """The command line that ran, as a reader would type it again (`argv` as given to main, else sys.argv's)."""
    return " ".join([prog, shlex.join(sys.argv[1:] if argv is None else argv)]).strip()


def provenance(argv: list[str] | None, prog: str = PROG) -> dict:
    """{machine, date (UTC, ISO 8601), command}: what every results file carries."""
    return {"machine": machine(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "command": command(argv, prog)}


def isa_of(m: dict) -> str:
    """A machine record's instruction-set class as a heading groups it: 'AVX2', 'AVX2 (emulated)' for a process
    held below its CPU's class, 'unknown' where the record has none (a file from before the bench wrote it)."""
    return "unknown" if not m.get("isa") else f"{m['isa']} (emulated)" if m.get("emulated") else m["isa"]


def describe(m: dict) -> str:
    """One line for a heading: 'Intel Xeon, 2 cores, AMX (avx2 avx512f avx512_bf16 amx_bf16)' (a GPU named first;
    flags None: not recorded); an emulated class names the CPU's own class and what held it."""
    flags = m.get("flags")
    flags = "flags not recorded" if flags is None else " ".join(flags) or f"none of {', '.join(FLAGS)}"
    kind = f"class {isa_of(m)}"
    if m.get("emulated"):
        holds = " ".join(f"{k}={v}" for k, v in (m.get("held") or {}).items())
        kind += f" on an {m.get('isa_hardware', 'unknown')} CPU held by {holds or 'nothing recorded'}"
    packed = ", oneDNN packed kernels" if m.get("kernels") == "packed" else ""
    where = f"{m['cpu']}, {m['cores']} cores, {kind} ({flags}){packed}"
    return f"{m['gpu']} (host: {where})" if m.get("gpu") else where

"""Host-to-device copies that do not stall the host, device names that compare equal, and what the CPU runs:
its instruction-set class and whether it computes bfloat16 natively."""
from __future__ import annotations

import os
from pathlib import Path

import torch

NATIVE = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo flags of CPUs with bfloat16 arithmetic in hardware
# The instruction-set classes that decide what a forward of several rows costs on a CPU, best first, each with
# the /proc/cpuinfo flag that makes it (AVX512-BF16 and AMX compute bfloat16 natively).
CLASSES = (("AMX", "amx_bf16"), ("AVX512-BF16", "avx512_bf16"), ("AVX512", "avx512f"), ("AVX2", "avx2"))
# What holds torch and its libraries below the CPU's instruction set for one process: ATen's own kernels (which
# `torch.backends.cpu.get_cpu_capability()` reports), oneDNN's and MKL's. ATEN_CPU_CAPABILITY=avx2 (with the
# others) on an AVX512 CPU approximates an AVX2 one: the process then counts as AVX2, emulated.
HOLDS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")


def canonical(device: torch.device | str) -> torch.device:
    """`device` with its index: torch.device("cuda") != torch.device("cuda:0"), though they are one GPU."""
    d = torch.device(device)
    if d.type == "cuda" and d.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return d


def to_device(values, device: torch.device, dtype: torch.dtype = torch.long) -> torch.Tensor:
    """A host list (or CPU tensor) on `device`: through pinned memory and a non-blocking copy on CUDA, so
    the host queues the copy and moves on; a plain tensor on the CPU."""
    t = values if isinstance(values, torch.Tensor) else torch.tensor(values, dtype=dtype)
    if device.type != "cuda":
        return t
    return t.pin_memory().to(device, non_blocking=True)


def read_all(parts: list[torch.Tensor]) -> list[list]:
    """Every tensor of `parts` back on the host in one read (one device sync for all), each as its own
    `tolist()` would give it, as floats (integer ids come back exact below 2^53)."""
    if not parts:
        return []
    flat = torch.cat([x.reshape(-1).to(torch.float64) for x in parts]).tolist()
    out, i = [], 0
    for x in parts:
        values, i = flat[i : i + x.numel()], i + x.numel()
        width = x.shape[-1] if x.dim() == 2 else 0
        out.append([values[r : r + width] for r in range(0, len(values), width)] if width else values)
    return out


def cpuinfo(field: str) -> str:
    """The first value of `field` in /proc/cpuinfo ("" where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""
    line = next((ln for ln in text.splitlines() if ln.startswith(field)), "")
    return line.partition(":")[2].strip()


def hardware_flags() -> set[str]:
    """The CPU's feature flags as /proc/cpuinfo lists them (empty where it is not there)."""
    return set(cpuinfo("flags").split())


def cpu_flags() -> set[str]:
    """The CPU's feature flags as this process's kernels use them: the hardware's, less AVX512 and AMX where
    torch's kernels are held to AVX2 (`HOLDS`), so that such a process prices its forwards, picks its dtype and
    names its class as an AVX2 machine would."""
    flags = hardware_flags()
    if cpu_capability() == "AVX2":
        flags = {f for f in flags if not f.startswith(("avx512", "amx"))}
    return flags


def isa_class(flags: set[str] | None = None) -> str:
    """The instruction-set class of a CPU with `flags` (default: this process's, `cpu_flags`): AMX, AVX512-BF16,
    AVX512 or AVX2, "other" below AVX2 or off x86."""
    flags = cpu_flags() if flags is None else flags
    return next((name for name, flag in CLASSES if flag in flags), "other")


def held() -> dict[str, str]:
    """The `HOLDS` variables set for this process, as set."""
    return {k: os.environ[k] for k in HOLDS if os.environ.get(k)}


def cpu_vendor() -> str:
    """Who made the CPU, as /proc/cpuinfo names it ("GenuineIntel", "AuthenticAMD"; "" where unknown)."""
    return cpuinfo("vendor_id")


def cpu_capability() -> str:
    """The vector instructions torch's CPU kernels run here ("AVX512", "AVX2", "DEFAULT", ...)."""
    return torch.backends.cpu.get_cpu_capability()


def native_bf16(flags: set[str] | None = None) -> bool:
    """True when the CPU computes bfloat16 in hardware (AVX512-BF16 or AMX)."""
    return bool(set(NATIVE) & (cpu_flags() if flags is None else flags))

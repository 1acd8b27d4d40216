"""Host-to-device copies that do not stall the host, device names that compare equal, and whether the CPU
computes bfloat16 natively."""
from __future__ import annotations

from pathlib import Path

import torch

NATIVE = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo flags of CPUs with bfloat16 arithmetic in hardware


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


def cpu_flags() -> set[str]:
    """The CPU's feature flags (empty where /proc/cpuinfo is not there)."""
    return set(cpuinfo("flags").split())


def cpu_vendor() -> str:
    """Who made the CPU, as /proc/cpuinfo names it ("GenuineIntel", "AuthenticAMD"; "" where unknown)."""
    return cpuinfo("vendor_id")


def cpu_capability() -> str:
    """The vector instructions torch's CPU kernels run here ("AVX512", "AVX2", "DEFAULT", ...)."""
    return torch.backends.cpu.get_cpu_capability()


def native_bf16(flags: set[str] | None = None) -> bool:
    """True when the CPU computes bfloat16 in hardware (AVX512-BF16 or AMX)."""
    return bool(set(NATIVE) & (cpu_flags() if flags is None else flags))

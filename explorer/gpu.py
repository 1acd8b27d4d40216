"""Where the app's GPU work runs, on which device, and for how long it may.

Three modes, read from the environment at each call:
- **local**: no `spaces`, a CPU machine or a dedicated GPU: a GPU function is a call in this process, on a
  thread of its own (`explorer.own_thread`), and the model is loaded on the default device (CUDA in the
  engine's dtype, else the CPU in fp32, or in bf16 for a visitor who picks it where the CPU computes bf16
  natively: `bf16_missing`).
- **zerogpu**: on a ZeroGPU Space (the platform sets SPACES_ZERO_GPU): `spaces.GPU` runs each call in a
  worker forked from the main process. The main process loads the model on the CPU and never touches
  CUDA; each call moves the model to the GPU itself (`on_device`).
- **emulated**: ESP_EMULATE_ZEROGPU=1: the same, with `explorer.emulation` in place of `spaces` (tests).
"""
from __future__ import annotations

import copy
import functools
import os
import re

import torch

import esp.device
from esp.models.cpu_kernels import pick as pick_kernels
from esp.models.lm import LM
from esp.models.loader import default_device, load

from . import emulation
from .own_thread import own_thread

try:  # only present (and only active) on a Space; elsewhere the local mode needs nothing from it
    import spaces
except ImportError:
    spaces = None

MAX_CALL_S = 60.0  # ZeroGPU checks the requested duration against a visitor's daily quota (minutes)
SETUP_S = 8.0  # per call: the model to the GPU, the CUDA context, the cost curve (read, or measured once)
TOKEN_S = 0.05  # worst case per new token for a model of up to 1B parameters: one forward per token (ar)
MARGIN_S = 4.0  # a decode ends itself this long before its call's duration, so that its last steps arrive
# The emulation runs on a CPU the work that ZeroGPU's duration is sized for on a GPU: its limit is that
# duration times this factor, so that what it checks is the mechanism, not the CPU's speed.
EMULATED_CPU_FACTOR = 10.0


def mode() -> str:
    """'emulated', 'zerogpu' or 'local' (see the module's docstring)."""
    if os.environ.get("ESP_EMULATE_ZEROGPU") == "1":
        return "emulated"
    if spaces is not None and os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true"):
        return "zerogpu"
    return "local"


def call_seconds(params: int, new_tokens: int) -> float | None:
    """The duration to ask for a call that decodes up to `new_tokens` with a model of `params` weights;
    None (no limit) in the local mode."""
    m = mode()
    if m == "local":
        return None
    seconds = min(MAX_CALL_S, SETUP_S + new_tokens * TOKEN_S * max(1.0, params / 1e9))
    return seconds * (EMULATED_CPU_FACTOR if m == "emulated" else 1.0)


def _duration(*_, seconds: float | None = None, **__) -> float:
    """`spaces.GPU`'s dynamic duration: every GPU function here takes its duration as `seconds=`."""
    return seconds or MAX_CALL_S


def gpu(fn):
    """Run `fn` (a function or a generator function taking `seconds=`) where the mode says: in this
    process, in a ZeroGPU worker, or in the emulation's forked worker."""
    zero = spaces.GPU(fn, duration=_duration) if spaces is not None else fn
    emulated = emulation.worker_call(fn, _duration)
    local = own_thread(fn)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        return {"local": local, "zerogpu": zero, "emulated": emulated}[mode()](*args, **kwargs)

    return call


def bf16_missing() -> str | None:
    """Why this server does not offer bfloat16 runs (one sentence), or None where it does: where the model
    runs on this machine's CPU and the CPU computes bfloat16 natively (elsewhere bf16 is emulated and slower
    than float32). A GPU runs the model in its own dtype (`esp.models.loader.dtype_policy`), unchanged."""
    if mode() != "local" or torch.cuda.is_available():
        return "This server runs its model on a GPU in the GPU's own dtype: it offers no bfloat16 choice."
    if not esp.device.native_bf16(esp.device.cpu_flags()):
        return "This server does not offer bfloat16: its CPU does not compute it natively (float32 runs here)."
    return None


_BF16: dict[str, LM] = {}  # model name -> its one bfloat16 copy (names are the server's few models)


def load_model(name: str, dtype: str = "float32") -> LM:
    """`name` (already checked against the server's limits), loaded once per process: on the default
    device locally, on the CPU in fp32 under ZeroGPU (the main process must not touch CUDA). With `dtype`
    "bfloat16" (offered only where `bf16_missing()` is None), one bfloat16 copy of it, made once and kept."""
    lm = load(name) if mode() == "local" else load(name, device="cpu", dtype="float32")
    if dtype != "bfloat16" or lm.dtype == torch.bfloat16:
        return lm
    if name not in _BF16:  # copied from the float32 weights: the same model, rounded once (a deep copy is dense)
        model = copy.deepcopy(lm.model).to(torch.bfloat16)
        if lm.device.type == "cpu":
            pick_kernels(model, lm.tokenizer, lm.name)
        _BF16[name] = LM(model, lm.tokenizer, lm.name)
    return _BF16[name]


def enter_call() -> None:
    """First thing in every GPU function. In a forked worker, one torch CPU thread: a process whose
    OpenMP pool has run cannot be forked safely (GNU libgomp is not fork-safe, and the child's first
    parallel region waits for pool threads that the fork did not copy: checked, the child hangs), and
    one thread needs no pool. On a GPU the CPU threads only launch kernels, so one costs nothing."""
    if mode() != "local":
        torch.set_num_threads(1)


_MOVED: dict[int, LM] = {}


def on_device(lm: LM) -> LM:
    """The model on this call's device: as loaded, unless it was loaded on the CPU for ZeroGPU and this
    worker has a GPU, where it is moved once (in the engine's dtype for this device) and kept."""
    if lm.device.type != "cpu" or mode() == "local" or not torch.cuda.is_available():
        return lm
    if id(lm) not in _MOVED:
        device, dtype = default_device()
        _MOVED[id(lm)] = LM(lm.model.to(device, dtype), lm.tokenizer, lm.name)
    return _MOVED[id(lm)]


def device_label(lm: LM) -> str:
    """A short name of the device a call ran on, for sentences: 'CPU', 'T4', 'H200', 'GeForce RTX 4090'."""
    if lm.device.type != "cuda":
        return lm.device.type.upper()
    name = re.sub(r"^(NVIDIA|Tesla)\s+", "", torch.cuda.get_device_name(lm.device))
    first = name.split()[0]
    return first.split("-")[0] if any(c.isdigit() for c in first) else name

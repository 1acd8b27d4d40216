"""What the server lets a browser ask for: which models, how long a prompt, how many new tokens.

Set by environment variables, read once at start: ESP_APP_MODELS (comma-separated names: 'embedded', Hub
ids, folders), ESP_APP_MAX_PROMPT_TOKENS, ESP_APP_MAX_NEW_TOKENS, ESP_APP_THREADS. The CLI and the benchmark do not go
through these limits: they load any id or folder they are given.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

from esp.errors import ESPError
from esp.models import EMBEDDED, in_local_cache
from esp.offline import offline_models

# Small Hub models offered on a Space (which has network access) besides the embedded one.
SPACE_MODELS = ("HuggingFaceTB/SmolLM2-360M-Instruct", "Qwen/Qwen3-0.6B")


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    try:
        value = int(env.get(name, default))
    except ValueError:
        raise ESPError(f"{name} must be a whole number, not {env.get(name)!r}.") from None
    if value < 1:
        raise ESPError(f"{name} must be at least 1, not {value}.")
    return value


@dataclass(frozen=True)
class Limits:
    """The server's limits; every request is checked against them before anything is loaded."""

    models: tuple[str, ...] = (EMBEDDED,)
    max_prompt_tokens: int = 1024
    max_new_tokens: int = 512
    # torch CPU threads for decoding. One core is left to the web server (and, on a laptop, the browser):
    # with every core in torch's pool, a busy 2-core machine made steps 5x slower (pool threads spin-wait
    # for a core) and Stop, which acts at step boundaries, took seconds.
    threads: int = max(1, (os.cpu_count() or 1) - 1)

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> "Limits":
        """The limits set by the environment; defaults: the embedded model, the other offline models that
        are installed (`make qwen`), plus SPACE_MODELS on a Space (SPACE_ID set) or, offline, those of them
        already in the local cache."""
        listed = [m.strip() for m in env.get("ESP_APP_MODELS", "").split(",") if m.strip()]
        if not listed:
            on_space = bool(env.get("SPACE_ID"))
            listed = [EMBEDDED, *offline_models()] + [m for m in SPACE_MODELS if on_space or in_local_cache(m)]
        return cls(tuple(dict.fromkeys(listed)), _int(env, "ESP_APP_MAX_PROMPT_TOKENS", cls.max_prompt_tokens),
                   _int(env, "ESP_APP_MAX_NEW_TOKENS", cls.max_new_tokens), _int(env, "ESP_APP_THREADS", cls.threads))

    def check_model(self, name: str | None) -> str:
        """The model name if this server offers it; otherwise one refusing sentence (nothing is loaded)."""
        name = (name or EMBEDDED).strip()
        if name not in self.models:
            raise ESPError(f"This server does not offer the model {name!r}: choose one of {', '.join(self.models)}.")
        return name

    def check_new_tokens(self, n: int) -> None:
        if n > self.max_new_tokens:
            raise ESPError(f"This server generates at most {self.max_new_tokens} new tokens per run, not {n}.")

    def check_prompt(self, n_tokens: int) -> None:
        if n_tokens > self.max_prompt_tokens:
            raise ESPError(f"The prompt is {n_tokens} tokens (chat template included); this server takes at most "
                           f"{self.max_prompt_tokens}: shorten it.")

"""What the server lets a browser ask for (which models, how long a prompt, how many new tokens) and how it
shares its one model among visitors (queue, sessions, Compare's tokens, concurrency per kind of event).

Set by environment variables, read once at start: ESP_APP_MODELS (comma-separated names: 'embedded', Hub
ids, folders), ESP_APP_MAX_PROMPT_TOKENS, ESP_APP_MAX_NEW_TOKENS, ESP_APP_MAX_COMPARE_TOKENS,
ESP_APP_QUEUE_SIZE, ESP_APP_MAX_SESSIONS, ESP_APP_HELD_RUNS, ESP_APP_LINE_SIZE, ESP_APP_BATCH_ROWS, ESP_APP_THREADS,
ESP_APP_VISITOR_RUNS, ESP_APP_VISITOR_WAITING, ESP_APP_VISITOR_SESSIONS, ESP_APP_SESSION_RENDERS,
ESP_APP_SESSION_IDLE_S, ESP_APP_ROOMS, ESP_APP_VISITOR_ROOMS, ESP_APP_ROOM_TTL_S and ESP_APP_TRUSTED_PROXIES
(comma-separated addresses or networks).
docs/SECURITY.md lists every cap and where it is enforced. The CLI and the benchmark do not go through these
limits: they load any id or folder they are given.
"""
from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

from esp.errors import ESPError
from esp.models.loader import EMBEDDED, in_local_cache
from esp.models.offline import offline_models

CPU_MAX = Path("/sys/fs/cgroup/cpu.max")


def usable_cores(cpu_max: Path = CPU_MAX) -> int:
    """The CPU cores this process may use: its affinity, capped by its container's cgroup (v2) CPU quota, which a
    Space sets and os.cpu_count() does not see (it names the host's cores)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        quota, period = cpu_max.read_text().split()[:2]
        if quota != "max":
            cores = min(cores, int(quota) // int(period))
    except (OSError, ValueError):
        pass  # no cgroup v2 quota here
    return max(1, cores)


# Small Hub models offered on a Space (which has network access) besides the embedded one.
SPACE_MODELS = ("HuggingFaceTB/SmolLM2-360M-Instruct", "Qwen/Qwen3-0.6B")
# Offered on a Space with a GPU as well: a model big enough for ESP's masks to win (on Qwen2.5-Coder-1.5B ESP
# alone out-drafts every baseline: BENCHMARKS), preloaded when the Space is built (README: preload_from_hub).
GPU_SPACE_MODELS = ("Qwen/Qwen2.5-Coder-1.5B-Instruct",)
# On a Space the app is reached through Hugging Face's proxy, from its internal network (the connection's
# address is a 10.x one there); the proxy names the visitor in X-Forwarded-For (docs/SECURITY.md).
SPACE_PROXIES = ("10.0.0.0/8",)


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    try:
        value = int(env.get(name, default))
    except ValueError:
        raise ESPError(f"{name} must be a whole number, not {env.get(name)!r}.") from None
    if value < 1:
        raise ESPError(f"{name} must be at least 1, not {value}.")
    return value


def space_gpu(env: Mapping[str, str]) -> bool:
    """Whether this Space runs on a GPU: ZeroGPU (the platform sets SPACES_ZERO_GPU; its main process never
    touches CUDA, so it is not asked) or a GPU of its own."""
    if env.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true"):
        return True
    import torch

    return torch.cuda.is_available()


def _networks(values: Iterable[str]) -> tuple[str, ...]:
    """Addresses or networks (ESP_APP_TRUSTED_PROXIES), each checked, as networks ('10.0.0.0/8', '::1/128')."""
    out = []
    for value in (v.strip() for v in values):
        if not value:
            continue
        try:
            out.append(str(ipaddress.ip_network(value, strict=False)))
        except ValueError:
            raise ESPError(f"ESP_APP_TRUSTED_PROXIES: {value!r} is not an address or a network.") from None
    return tuple(out)


@dataclass(frozen=True)
class Limits:
    """The server's limits; every request is checked against them before anything is loaded."""

    models: tuple[str, ...] = (EMBEDDED,)
    max_prompt_tokens: int = 1024
    max_new_tokens: int = 512
    # Compare decodes the prompt once per registered method: methods x max new tokens, at most this.
    max_compare_tokens: int = 1024
    # Requests waiting in the queue at once (every queued event counts); more get Gradio's "busy" answer. It
    # holds a class: every one of visitor_sessions sessions with its run waiting, and their views besides.
    queue_size: int = 256
    # Browser sessions whose state the server keeps (Gradio's state_session_capacity; the oldest go first).
    max_sessions: int = 256
    # Sessions holding a run's steps (the heavy part: up to max_new_tokens + 1 steps of <= 120 x 121 mask
    # cells each); beyond this the least recently used one's steps are let go (explorer.session).
    held_runs: int = 64
    # Events re-rendering stored steps (scrub, play, focus, tour, open a trace) at once; exports at once.
    render_concurrency: int = 2
    export_concurrency: int = 1
    # The model's events (Run, Compare, What-if; concurrency_id "model") inside the server at once: waiting in
    # its line for the model, each told its place (explorer.line), or using it; more wait in Gradio's queue.
    line_size: int = 64
    # Runs decoded together in one batch, each a row of its own (explorer.batch): a class, every student at once.
    batch_rows: int = 32
    # torch CPU threads for decoding: every core this process may use. Since the page's player draws in the
    # browser, the server's own work beside a decode is small; on two cores a class's slowest run and Stop were
    # both faster than with a core left to the web server (docs/BENCHMARKS.md, the class's section).
    threads: int = usable_cores()
    # Per visitor (one address, explorer.door), checked before anything is queued: runs (Run, Compare,
    # What-if) queued or running; requests of any kind waiting in the queue (its share of queue_size); and
    # sessions open. A school's class reaches the server through one address (NAT), so these are ceilings
    # against abuse sized for a class: each session has at most one run queued or running, and the runs are
    # served in turn across visitors and sessions (explorer.fair), so more sessions buy no more turns.
    visitor_runs: int = 64
    visitor_waiting: int = 128
    visitor_sessions: int = 64
    # Per session: views being drawn (scrub, Play, Focus, opening a trace: no model) queued or running.
    session_renders: int = 4
    # Seconds without a queued request after which a session stops counting against its visitor's sessions
    # (holding pages open to keep places gains nothing); its next request counts it again.
    session_idle_s: int = 600
    # Lesson rooms (explorer.room): at most this many at once on the server, this many opened per visitor,
    # each ending this many seconds after it opened (and all of them with the server: memory only).
    rooms: int = 8
    visitor_rooms: int = 2
    room_ttl_s: int = 4 * 3600
    # The proxies whose X-Forwarded-For names the visitor (addresses or networks); from anyone else the
    # header is ignored. Default: none, or SPACE_PROXIES on a Space.
    trusted_proxies: tuple[str, ...] = ()
    # Loopback callers (the server's own machine) are limited like anyone else, so that a local probe with
    # two addresses (127.0.0.1 and 127.0.0.2) sees what a Space's visitors see; ESP_APP_LOCAL_UNLIMITED=1
    # lifts the per-visitor limits for them (the test suite, a local load test).
    local_unlimited: bool = False

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> "Limits":
        """The limits set by the environment; defaults: the embedded model, the other offline models that
        are installed (`make qwen`), plus SPACE_MODELS on a Space (SPACE_ID set) and GPU_SPACE_MODELS on one
        with a GPU, or, off a Space, those of them already in the local cache."""
        listed = [m.strip() for m in env.get("ESP_APP_MODELS", "").split(",") if m.strip()]
        if not listed:
            listed = [EMBEDDED, *offline_models()]
            if env.get("SPACE_ID"):
                listed += [*SPACE_MODELS, *(GPU_SPACE_MODELS if space_gpu(env) else ())]
            else:
                listed += [m for m in (*SPACE_MODELS, *GPU_SPACE_MODELS) if in_local_cache(m)]
        numbers = {name: _int(env, f"ESP_APP_{name.upper()}", getattr(cls, name))
                   for name in ("max_prompt_tokens", "max_new_tokens", "max_compare_tokens", "queue_size",
                                "max_sessions", "held_runs", "line_size", "batch_rows", "threads", "visitor_runs", "visitor_waiting",
                                "visitor_sessions", "session_renders", "session_idle_s", "rooms", "visitor_rooms",
                                "room_ttl_s")}
        proxies = env.get("ESP_APP_TRUSTED_PROXIES")
        proxies = SPACE_PROXIES if proxies is None and env.get("SPACE_ID") else (proxies or "").split(",")
        return cls(tuple(dict.fromkeys(listed)), **numbers, trusted_proxies=_networks(proxies),
                   local_unlimited=env.get("ESP_APP_LOCAL_UNLIMITED", "") == "1")

    def check_model(self, name: str | None) -> str:
        """The model name if this server offers it; otherwise one refusing sentence (nothing is loaded)."""
        name = (name or EMBEDDED).strip()
        if name not in self.models:
            raise ESPError(f"This server does not offer the model {name!r}: choose one of {', '.join(self.models)}.")
        return name

    @property
    def max_prompt_chars(self) -> int:
        """Characters a typed prompt may have, checked before it is tokenized (tokenizing megabytes costs
        seconds): 16 per allowed token, far more than any prompt within the token cap needs."""
        return 16 * self.max_prompt_tokens

    def check_new_tokens(self, n: int) -> None:
        if n > self.max_new_tokens:
            raise ESPError(f"This server generates at most {self.max_new_tokens} new tokens per run, not {n}.")

    def check_compare(self, n_methods: int, new_tokens: int) -> None:
        """Compare's total tokens (one run per method) within max_compare_tokens."""
        if n_methods * new_tokens > self.max_compare_tokens:
            each = self.max_compare_tokens // n_methods
            raise ESPError(f"Compare decodes {n_methods} methods, at most {self.max_compare_tokens} tokens in all on "
                           f"this server: set max new tokens to {each} or less (not {new_tokens}).")

    def check_prompt(self, n_tokens: int) -> None:
        if n_tokens > self.max_prompt_tokens:
            raise ESPError(f"The prompt is {n_tokens} tokens (chat template included); this server takes at most "
                           f"{self.max_prompt_tokens}: shorten it.")

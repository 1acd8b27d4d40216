"""The one check of every request: each value an endpoint takes, its kind and its bounds or choices.

A public page's endpoints are called with anything (`gradio_client`, plain HTTP), and Gradio's own value
checks are off for these inputs (`checked_by_us` in app.py), so the server is the only guard. Every
control of the page is built from the fields here (app.py), so the page cannot offer what the server
refuses, nor the server take what the page does not offer. Every handler that takes a value from the
page runs `guard` before anything else (the settings hint and the knobs of a method parse theirs with
`run_settings` and `METHOD`); the others take only the server's own state (the session, the tour's stop). A bad value is refused in one line (the ⚠️ status, one log line,
no traceback); an exception that still escapes a handler is a bug: logged with its traceback, and the
visitor gets one line too.
"""
from __future__ import annotations

import functools
import inspect
import logging
import math
from dataclasses import dataclass
from typing import Any, Callable

from components.limits import Limits
from components.settings import DTYPES, INITS, LAYOUTS, MODES, TREES, RunSettings
from esp import methods
from esp.errors import ESPError

from . import gpu
from .session import HELD
from .views import refusal, refusal_error

log = logging.getLogger("esp.app")
LIMITS = Limits.from_env()  # the server's caps (models, prompt, tokens, queue, sessions): read once at start
HELD.limit = LIMITS.held_runs
# Steps a stored run may have, as a bound on any step index sent: runs stop at max new tokens (one step
# emits at least one token), opened traces at their own cap; within that, each handler checks its run.
MAX_STEP = 100_000
SEED_MAX = 2**31 - 1


def shown(value: Any) -> str:
    """A sent value as a refusal quotes it: its repr cut to 40 characters (it may be huge). The refusal
    reaches the page as text (explorer.views.refusal_line), markup and links included."""
    big = isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30
    text = f"a {value.bit_length()}-bit number" if big else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass(frozen=True)
class Number:
    """A finite number from `low` to `high` (an int when `whole`); None only when `optional`."""

    label: str
    low: float
    high: float
    step: float = 1
    default: float | None = None
    whole: bool = False
    optional: bool = False
    too_high: str = "{label} must be at most {high:g}, not {value}."

    def parse(self, value: Any) -> int | float | None:
        if value is None and self.optional:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ESPError(f"{self.label} must be a number, not {shown(value)}.")
        if isinstance(value, float) and not math.isfinite(value):
            raise ESPError(f"{self.label} must be a finite number, not {value}.")
        if self.whole and value != int(value):
            raise ESPError(f"{self.label} must be a whole number, not {value:g}.")
        if value < self.low:
            raise ESPError(f"{self.label} must be at least {self.low:g}, not {shown(value)}.")
        if value > self.high:
            raise ESPError(self.too_high.format(label=self.label, high=self.high, value=shown(value)))
        return int(value) if self.whole else float(value)

    def slider(self) -> dict:
        """The keyword arguments of a gr.Slider showing this field."""
        return {"minimum": self.low, "maximum": self.high, "step": self.step, "value": self.default}


@dataclass(frozen=True)
class Choice:
    """Exactly one of `options` (strings)."""

    label: str
    options: tuple[str, ...]
    default: str | None = None
    unknown: str = "Unknown {label} {value}: choose from {options}."

    def parse(self, value: Any) -> str:
        if isinstance(value, str) and value in self.options:
            return value
        raise ESPError(self.unknown.format(label=self.label, value=shown(value), options=", ".join(self.options)))


@dataclass(frozen=True)
class Text:
    """A string of at most `max_chars` characters (None reads as empty)."""

    label: str
    max_chars: int

    def parse(self, value: Any) -> str:
        value = "" if value is None else value
        if not isinstance(value, str):
            raise ESPError(f"The {self.label} must be text, not {shown(value)}.")
        if len(value) > self.max_chars:
            raise ESPError(f"The {self.label} is {len(value)} characters; this server takes at most "
                           f"{self.max_chars}: shorten it.")
        return value


class Dtype(Choice):
    """The run's dtype: one of `options`, bfloat16 only where this server offers it (`gpu.bf16_missing`,
    asked at each request: the machine decides, not the page)."""

    def parse(self, value: Any) -> str:
        value = super().parse(value)
        missing = gpu.bf16_missing() if value == "bfloat16" else None
        if missing:
            raise ESPError(missing)
        return value


Field = Number | Choice | Text

# ---------------------------------------------------------------- every control of the page

K = Number("k", 1, 4, default=2, whole=True)
BC = Number("BC", 4, 120, default=30, whole=True)
LAM = Number("λ", 0, 1, step=0.01, default=0.1)
INIT = Choice("mask init", INITS, "mean")
TREE = Choice("tree", TREES, "static")
MODE = Choice("decoding", MODES, "greedy")
TEMPERATURE = Number("temperature", 0.05, 2, step=0.05, default=0.7)
TOP_P = Number("top-p", 0.05, 1, step=0.01, default=0.95)
SEED = Number("seed", 0, SEED_MAX, default=0, whole=True)
MAX_NEW = Number("max new tokens", 1, LIMITS.max_new_tokens, default=min(64, LIMITS.max_new_tokens), whole=True,
                 too_high="This server generates at most {high} new tokens per run, not {value}.")
LAYOUT = Choice("mask construction", tuple(LAYOUTS), "efficient")
METHOD = Choice("method", tuple(methods.available()), "esp")
MODEL = Choice("model", LIMITS.models, LIMITS.models[0],
               unknown="This server does not offer the model {value}: choose one of {options}.")
PROMPT = Text("prompt", LIMITS.max_prompt_chars)
STEP = Number("step", 0, MAX_STEP, whole=True, optional=True)
DTYPE = Dtype("dtype", DTYPES, "float32")
# The drafting and decoding settings of a run, by RunSettings' names (the order of the page's controls).
SETTINGS: dict[str, Field] = {"k": K, "bc": BC, "lam": LAM, "init": INIT, "tree": TREE, "mode": MODE,
                              "temperature": TEMPERATURE, "top_p": TOP_P, "seed": SEED, "max_new_tokens": MAX_NEW,
                              "layouts": LAYOUT, "method": METHOD, "dtype": DTYPE}


def run_settings(**raw: Any) -> RunSettings:
    """RunSettings from the values a request sent (any of SETTINGS' names), each checked first."""
    return RunSettings(**{name: SETTINGS[name].parse(value) for name, value in raw.items()})


def guard(where: str, outputs: int | None, status_at: int = 0, **fields: Field) -> Callable:
    """A handler whose arguments named in `fields` are parsed before it runs. A bad value, or an ESPError
    the handler raises, is answered by the refusal output: `outputs` values, each gr.skip() but the ⚠️
    line at `status_at`; with `outputs` None (a handler with no status output, e.g. Export) the line is
    a gr.Error (explorer.views.refusal_error).
    Generators stay generators (Gradio streams them)."""
    def refused(message: str):
        if outputs is None:
            raise refusal_error(message, where)
        out = refusal(message, outputs, where)
        return (*out[1: status_at + 1], out[0], *out[status_at + 1:])

    def answer(e: Exception):
        if isinstance(e, ESPError):
            return refused(str(e))
        log.error("%s failed", where, exc_info=e)  # a bug, not a bad request: its traceback stays in the log
        return refused(f"Something went wrong on the server ({type(e).__name__}); it is logged.")

    def wrap(fn: Callable) -> Callable:
        signature = inspect.signature(fn)

        def parsed(args, kwargs) -> inspect.BoundArguments:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            for name, field in fields.items():
                bound.arguments[name] = field.parse(bound.arguments[name])
            return bound

        if inspect.isgeneratorfunction(fn):
            @functools.wraps(fn)
            def stream(*args, **kwargs):
                try:
                    bound = parsed(args, kwargs)
                    yield from fn(*bound.args, **bound.kwargs)
                    return
                except Exception as e:  # noqa: BLE001 - see answer
                    failure = e
                yield answer(failure)
            return stream

        @functools.wraps(fn)
        def call(*args, **kwargs):
            try:
                bound = parsed(args, kwargs)
                return fn(*bound.args, **bound.kwargs)
            except Exception as e:  # noqa: BLE001 - see answer
                failure = e
            return answer(failure)
        return call
    return wrap

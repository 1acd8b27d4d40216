"""A run's recipe in a link (issue 37): the prompt, the model, the method and its settings, the dtype, the
decoding rule and the token limit, as an address's query string, and back.

Greedy decoding is deterministic and every method here is lossless, so a run's settings are the run: a link
that carries them reproduces it (press Run). The query is the page's own vocabulary (the names of its
controls) and every value in it is checked exactly as a request's (explorer.requests: bounds, allow-lists,
text stays text), then by the engine's own rules (RunSettings); a bad one refuses the whole link in one
line, so a link never opens a run other than the one it was made from. A run that cannot be carried (its
query would be longer than MAX_LINK_CHARS, or it came from a file) gets a sentence saying so instead.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping
from urllib.parse import urlencode

from components.settings import RunSettings, knob_reasons
from esp.errors import ESPError
from esp.models.offline import MODELS

from .requests import (BC, DTYPE, INIT, K, LAM, LAYOUT, LIMITS, MAX_NEW, METHOD, MODE, MODEL, PROMPT, SEED, STEP,
                       TEMPERATURE, TOP_P, TREE, Field, Number, shown)

# A link's query stays within this many characters: what every browser, proxy and chat app carries (the
# step and the tab add a few more). An ASCII prompt of about 1,800 characters fits; longer ones are refused
# with a sentence, never cut.
MAX_LINK_CHARS = 2000
# The link's keys, in the order a link lists them, each checked by the field of the control it fills.
FIELDS: dict[str, Field] = {"prompt": PROMPT, "model": MODEL, "method": METHOD, "k": K, "bc": BC, "lam": LAM,
                            "tree": TREE, "init": INIT, "dtype": DTYPE, "mode": MODE, "temperature": TEMPERATURE,
                            "top_p": TOP_P, "seed": SEED, "max_new": MAX_NEW, "layouts": LAYOUT}
# Every key that names the run on screen ("trace": a shipped one); assets/explorer.js keeps the same list
# (RUN_KEYS) to replace them in the address when another run is shown.
RUN_KEYS = ("trace", *FIELDS)
SAMPLING_ONLY = ("temperature", "top_p")  # a greedy run has neither
NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d{1,4})?")
TOO_LONG = ("This run's prompt is too long for a link (its link would be {n:,} characters; a link carries at most "
            "{cap:,}): share its trace instead (Export, then Open a trace).")
FROM_FILE = "This run was opened from a file, which a link cannot carry: share the file instead (Export)."
RUNNING = "A run is going: its link is ready when it ends."


def _settings_name(key: str) -> str:
    return "max_new_tokens" if key == "max_new" else key


@dataclass(frozen=True)
class Recipe:
    """Everything a Run takes: the prompt, an offered model and checked settings."""

    prompt: str
    model: str
    settings: RunSettings

    def values(self) -> dict[str, Any]:
        """The link's values by key, in FIELDS order: the knobs the method takes, temperature and top-p only
        when sampling."""
        s = asdict(self.settings)
        takes = knob_reasons(self.settings.method)
        out = {"prompt": self.prompt, "model": self.model}
        for key in FIELDS:
            if key in out or (key in takes and takes[key] is not None):
                continue
            if key in SAMPLING_ONLY and self.settings.mode != "sampling":
                continue
            out[key] = s[_settings_name(key)]
        return out

    def query(self) -> str:
        """The link's query string (urlencoded, as a browser's URLSearchParams reads it)."""
        return urlencode({key: _text(value) for key, value in self.values().items()})

    def to_dict(self) -> dict[str, Any]:
        """Plain values (kept in a run's meta and a gr.State); `from_dict` reads them back."""
        return {"prompt": self.prompt, "model": self.model, **asdict(self.settings)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Recipe":
        names = {f.name for f in fields(RunSettings)}
        return cls(d["prompt"], d["model"], RunSettings(**{k: v for k, v in d.items() if k in names}))


def _text(value: Any) -> str:
    """A value as the link writes it: whole numbers without a point, other floats exactly (repr)."""
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    return str(value)


def _number(key: str, field: Number, raw: str) -> float:
    if not NUMBER.fullmatch(raw.strip()):
        raise ESPError(f"{field.label} must be a number, not {shown(raw)}.")
    value = float(raw)
    return int(value) if field.whole and value.is_integer() and abs(value) < 2**63 else value


def is_recipe(query: Mapping[str, str]) -> bool:
    """Whether a link's query carries a run's recipe (any of its keys)."""
    return any(key in query for key in FIELDS)


def from_query(query: Mapping[str, str], repeated: tuple[str, ...] = ()) -> tuple[Recipe, int | None]:
    """The recipe and the step (None: the run's last) a link's query carries, each value checked as a request
    sent from the page would be; ESPError with one line for the first bad one. `repeated`: keys the query
    holds more than once (a link says each once)."""
    if "trace" in query:
        raise ESPError("This link names both a recorded trace and a run's settings: it holds one or the other.")
    twice = [k for k in repeated if k in (*FIELDS, "step")]
    if twice:
        raise ESPError(f"This link gives {twice[0]} more than once.")
    values: dict[str, Any] = {}
    for key, field in FIELDS.items():
        if key not in query:
            continue
        raw = query[key]
        values[key] = field.parse(_number(key, field, raw) if isinstance(field, Number) else raw)
    if not values.get("prompt", "").strip():
        raise ESPError("This link has no prompt: a run's link carries the prompt it decoded.")
    method = values.get("method", METHOD.default)
    for key, why in knob_reasons(method).items():
        if why is not None and key in values:
            raise ESPError(f"This link sets {key}, which {method} does not take.")
    if values.get("mode", MODE.default) != "sampling":
        extra = [key for key in SAMPLING_ONLY if key in values]
        if extra:
            raise ESPError(f"This link sets {extra[0]}, which only sampling uses (it decodes greedily).")
    if len(urlencode({"prompt": values["prompt"]})) > MAX_LINK_CHARS:
        raise ESPError(f"This link's prompt is longer than a link carries ({MAX_LINK_CHARS:,} characters).")
    settings = RunSettings(**{_settings_name(k): v for k, v in values.items() if k not in ("prompt", "model")})
    recipe = Recipe(values["prompt"], values.get("model", MODEL.default), settings)
    step = None
    if "step" in query:
        step = STEP.parse(_number("step", STEP, query["step"]))
        if step > settings.max_new_tokens:
            raise ESPError(f"This link's step {step} is past the run's end: a run of at most "
                           f"{settings.max_new_tokens} new tokens has steps 0-{settings.max_new_tokens}.")
    return recipe, step


def link_of(meta: Mapping[str, Any]) -> tuple[str, str]:
    """(query, note) for the run whose meta this is: a shipped trace by name, a run made on the page by its
    recipe; "" and a sentence on why when it cannot be linked (too long, opened from a file)."""
    if meta.get("shipped"):
        return urlencode({"trace": meta["shipped"]}), ""
    if "recipe" not in meta:
        return "", FROM_FILE
    query = Recipe.from_dict(meta["recipe"]).query()
    if len(query) > MAX_LINK_CHARS:
        return "", TOO_LONG.format(n=len(query), cap=MAX_LINK_CHARS)
    return query, ""


def offered_model(name: str | None) -> str | None:
    """The model this server offers under `name`, or under the other name of the same weights (an offline
    model's name and the Hub id it was made from: a trace recorded offline opens on a Space, and back);
    None when neither is offered."""
    if not name:
        return None
    same = [name, *(m.hub_id for m in MODELS.values() if m.name == name),
            *(m.name for m in MODELS.values() if m.hub_id == name)]
    return next((m for m in same if m in LIMITS.models), None)

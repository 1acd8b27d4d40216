"""An opened trace is untrusted input: its caps, its schema, and the one check that stands between a file and
the session.

`load_trace` reads a trace file in four passes, each refusing with one sentence (ValueError): the file's
size before it is read, its JSON nesting depth before it is parsed, the parse itself (no NaN or Infinity),
then the schema below (right types everywhere, every string, list and number within its cap, the tree and
the block consistent). `check_against` then holds it to the server's own limits (steps, prompt and output
lengths, token ids inside the named model's vocabulary). Only a trace that passes every check becomes
StepTraces, so every view can render it.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, model_validator

from esp import methods
from esp.errors import ESPError
from esp.decoding.layout import BUILDERS
from esp.trace import ACCEPTED, LENS_TOP, PRUNED, REJECTED, ROOT, SOURCES, StepTrace

from .limits import Limits

# Caps that do not depend on the server's limits (docs/SECURITY.md lists them all).
MAX_TRACE_BYTES = 10 * 2**20  # what the app's Export writes for a 512-token run at BC=30 is ~3 MB
MAX_DEPTH = 8  # a trace nests 7 deep (steps > step > lens > record > tokens > layer)
MAX_NODES = 512  # per step (the page's BC goes to 120; pruned candidates add nodes that are not rows)
MAX_ROWS = 256  # block rows per step, so a step's mask is at most 256 x 257 cells
MAX_CELLS = 1_000_000  # mask cells over the whole trace (8 MB of Python list slots in a session)
MAX_LAYERS = 256  # alignment cosines per record
MAX_RECORDS = 64  # alignment records per step
MAX_CURVE = 256  # knots of a cost curve
MAX_LENS_CELLS = 1_000_000  # Mask Lens entries (ids, probabilities, ranks) over the whole trace
MAX_VOCAB = 2**20  # token ids of a model this server cannot name (the largest real vocabularies: ~262k)
MAX_ID = 2**31 - 1  # positions, counts, seeds
TOKEN_CHARS = 256  # a token's text
LABEL_CHARS = 256  # method, spec, settings, model, device, row labels and kinds, file names
CHARS_PER_TOKEN = 32  # prompt and output text: at most this many characters per token of their caps

Token = Annotated[int, Field(ge=0, lt=MAX_VOCAB)]
Probability = Annotated[float, Field(ge=0, le=1)]
Rank = Annotated[int, Field(ge=1, le=MAX_VOCAB)]
Count = Annotated[int, Field(ge=0, le=MAX_ID)]
Finite = float  # NaN and infinities are refused by the model config (allow_inf_nan=False)
Seconds = Annotated[float, Field(ge=0)]
Label = Annotated[str, StringConstraints(max_length=LABEL_CHARS)]
TokenText = Annotated[str, StringConstraints(max_length=TOKEN_CHARS)]


class _Record(BaseModel):
    """Strict: a number where text belongs (or text where a number belongs) is refused, never coerced."""

    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)


class _Loose(_Record):
    """A free-form record (run meta, cost notes): unknown keys are dropped, known ones are checked."""

    model_config = ConfigDict(strict=True, extra="ignore", allow_inf_nan=False)


class Curve(_Record):
    q: Annotated[list[Annotated[float, Field(gt=0)]], Field(min_length=1, max_length=MAX_CURVE)]
    t: Annotated[list[Annotated[float, Field(gt=0)]], Field(min_length=1, max_length=MAX_CURVE)]

    @model_validator(mode="after")
    def _same_length(self):
        if len(self.q) != len(self.t):
            raise ValueError(f"a cost curve needs one time per width ({len(self.q)} widths, {len(self.t)} times)")
        return self


class Node(_Record):
    index: Count
    token: Token
    text: TokenText
    parent: Annotated[int, Field(ge=-1, le=MAX_NODES)]
    depth: Annotated[int, Field(ge=0, le=MAX_NODES)]
    prob: Finite
    cum_prob: Finite
    status: Literal[ROOT, ACCEPTED, REJECTED, PRUNED]
    row: Annotated[int, Field(ge=0, lt=MAX_ROWS)] | None
    position: Count | None
    sources: Annotated[list[Literal[SOURCES]], Field(max_length=len(SOURCES))] = []
    p: Finite | None = None
    target_rank: Rank | None = None
    target_p: Probability | None = None


class Alignment(_Record):
    source_step: Count
    j: Annotated[int, Field(ge=1, le=MAX_RECORDS)]
    position: Count
    accepted: bool
    cos: Annotated[list[Finite], Field(max_length=MAX_LAYERS)]
    cos_raw: Annotated[list[Finite], Field(max_length=MAX_LAYERS)]


class Lens(_Record):
    """One mask's raw logit lens: per layer its LENS_TOP best ids and their probabilities, and their texts
    (JSON keys are strings: each must be one of the ids listed)."""

    j: Annotated[int, Field(ge=1, le=MAX_RECORDS)]
    position: Count
    tokens: Annotated[list[Annotated[list[Token], Field(max_length=LENS_TOP)]], Field(min_length=1,
                                                                                     max_length=MAX_LAYERS)]
    probs: Annotated[list[Annotated[list[Probability], Field(max_length=LENS_TOP)]], Field(max_length=MAX_LAYERS)]
    texts: Annotated[dict[Annotated[str, StringConstraints(pattern=r"^\d{1,7}$")], TokenText],
                     Field(max_length=MAX_LAYERS * LENS_TOP)]

    @model_validator(mode="after")
    def _shape(self):
        if [len(r) for r in self.tokens] != [len(r) for r in self.probs]:
            raise ValueError("a lens record needs one probability per token at every layer")
        listed = {t for row in self.tokens for t in row}
        stray = next((k for k in self.texts if int(k) not in listed), None)
        if stray is not None:
            raise ValueError(f"a lens record names the text of token {stray}, which it does not list")
        return self


class LensReal(_Record):
    """A mask's lens against the token that came: that token's probability and rank at every layer."""

    source_step: Count
    j: Annotated[int, Field(ge=1, le=MAX_RECORDS)]
    token: Token
    text: TokenText
    accepted: bool
    prob: Annotated[list[Probability], Field(max_length=MAX_LAYERS)]
    rank: Annotated[list[Rank], Field(max_length=MAX_LAYERS)]

    @model_validator(mode="after")
    def _shape(self):
        if len(self.prob) != len(self.rank):
            raise ValueError("a resolved lens record needs one rank per probability")
        return self


class Backoff(_Loose):
    plain_left: Count | None = None
    fails: Count | None = None
    backoffs: Count | None = None
    loss: Finite | None = None
    gain: Finite | None = None
    t1_s: Finite | None = None
    draft_rate: Finite | None = None
    plain_rate: Finite | None = None
    draft_rate_all: Finite | None = None
    plain_rate_all: Finite | None = None


class Cost(_Loose):
    budget: Literal["auto"] | Count | None = None
    rows: Annotated[int, Field(ge=1, le=MAX_ROWS)]
    cap: Count | None = None
    mode: Literal["draft", "plain"] | None = None
    expected_tokens: Finite | None = None
    reliability: Finite | None = None
    predicted_s: Seconds | None = None
    measured_s: Seconds | None = None
    curve: Curve | None = None
    drift: Finite | None = None
    backoff: Backoff | None = None


class Step(_Record):
    step: Count
    method: Label
    n_past: Count
    root: Token
    nodes: Annotated[list[Node], Field(min_length=1, max_length=MAX_NODES)]
    accepted: Annotated[list[Token], Field(max_length=MAX_NODES)]
    bonus: Token
    emitted: Annotated[list[Token], Field(max_length=MAX_NODES + 1)]
    emitted_text: Annotated[list[TokenText], Field(max_length=MAX_NODES + 1)]
    row_labels: Annotated[list[Label], Field(max_length=MAX_ROWS)]
    row_kinds: Annotated[list[Label], Field(max_length=MAX_ROWS)]
    positions: Annotated[list[Count], Field(max_length=MAX_ROWS)]
    mask: Annotated[list[Annotated[list[bool], Field(max_length=MAX_ROWS + 1)]], Field(max_length=MAX_ROWS)]
    accepted_rows: Annotated[list[Annotated[int, Field(ge=0, lt=MAX_ROWS)]], Field(max_length=MAX_ROWS)]
    shape: Annotated[list[Count], Field(max_length=MAX_NODES)]
    timings: Annotated[dict[Annotated[str, StringConstraints(max_length=32)], Seconds], Field(max_length=16)]
    ema: Annotated[dict[Annotated[str, StringConstraints(max_length=32)], Finite], Field(max_length=16)] | None = None
    alignment: Annotated[list[Alignment], Field(max_length=MAX_RECORDS)] = []
    prefill: bool = False
    cost: Cost | None = None
    top2: Annotated[list[Annotated[list[Finite], Field(max_length=16)]], Field(max_length=MAX_NODES + 1)] = []
    eye: Annotated[list[Annotated[list[Finite], Field(max_length=2 * LENS_TOP)]], Field(max_length=MAX_NODES + 1)] = []
    lens: Annotated[list[Lens], Field(max_length=MAX_RECORDS)] = []
    lens_real: Annotated[list[LensReal], Field(max_length=MAX_RECORDS)] = []

    @model_validator(mode="after")
    def _consistent(self):
        """The tree is a tree (node 0 the root, every parent earlier), and the block's lists agree, so that
        every view can draw it."""
        for i, n in enumerate(self.nodes):
            if n.index != i:
                raise ValueError(f"node {i} says it is node {n.index}")
            if (i == 0) != (n.status == ROOT) or (i == 0) != (n.parent == -1):
                raise ValueError(f"node {i}: only node 0 is the root, with parent -1")
            if i and not (0 <= n.parent < i and n.depth == self.nodes[n.parent].depth + 1):
                raise ValueError(f"node {i}: its parent must be an earlier node, one level up")
            if n.row is not None and n.row >= len(self.row_labels):
                raise ValueError(f"node {i} sits in row {n.row} of a {len(self.row_labels)}-row block")
        rows = len(self.row_labels)
        if len(self.row_kinds) != rows or len(self.positions) != rows:
            raise ValueError(f"{rows} row labels, {len(self.row_kinds)} row kinds and {len(self.positions)} positions")
        if self.mask and (len(self.mask) != rows or any(len(r) != rows + 1 for r in self.mask)):
            raise ValueError(f"the mask must be {rows} rows of {rows + 1} cells (the prefix column, then the block)")
        if any(r >= rows for r in self.accepted_rows):
            raise ValueError("an accepted row is outside the block")
        if len(self.emitted_text) != len(self.emitted):
            raise ValueError(f"{len(self.emitted)} emitted tokens but {len(self.emitted_text)} texts")
        if any(len(r.cos) != len(r.cos_raw) for r in self.alignment):
            raise ValueError("an alignment record has unequal cos and cos_raw")
        if any(v < 0 or not float(v).is_integer() for row in self.top2 for v in row[::2]):
            raise ValueError("top2 rows alternate token ids and logits")
        if any(len(row) % 2 or any(v < 0 or not float(v).is_integer() for v in row[::2])
               or any(not 0 <= v <= 1 for v in row[1::2]) for row in self.eye):
            raise ValueError("eye rows alternate token ids and probabilities")
        if len(self.eye) > len(self.emitted):
            raise ValueError(f"{len(self.eye)} eye rows for {len(self.emitted)} emitted tokens")
        return self


class Sampling(_Record):
    temperature: Annotated[float, Field(ge=0, le=100)] = 0.0
    top_p: Annotated[float, Field(gt=0, le=1)] = 1.0
    top_k: Count = 0
    seed: Count = 0


class Meta(_Loose):
    """What the session keeps of an opened trace's meta: only these keys, each checked."""

    model: Label | None = None
    model_name: Label | None = None
    prompt: str | None = None  # capped by the server's prompt limit (check_against)
    prompt_ids: Annotated[list[Token], Field(max_length=2**16)] | None = None
    method: Label | None = None
    spec: Label | None = None
    settings: Label | None = None
    sampling: Sampling | None = None
    max_new_tokens: Annotated[int, Field(ge=1, le=MAX_ID)] | None = None
    layouts: Literal[tuple(BUILDERS)] | None = None
    curve: Curve | None = None
    device: Label | None = None
    dtype: Label | None = None
    text: str | None = None  # capped by the server's output limit (check_against)
    opened: Label | None = None


class Summary(_Loose):
    method: Label
    tokens: Count
    forwards: Count
    tau: Finite
    seconds: Seconds
    tokens_per_s: Seconds
    accept_hist: Annotated[dict[Annotated[str, StringConstraints(pattern=r"^\d{1,4}$")], Count],
                           Field(max_length=MAX_NODES + 1)]


class Trace(_Record):
    meta: Meta
    steps: Annotated[list[Step], Field(min_length=1)]
    summary: Summary | None = None  # recomputed from the steps when shown; checked, then dropped

    @model_validator(mode="after")
    def _numbered(self):
        for i, s in enumerate(self.steps):
            if s.step != i or s.prefill != (i == 0):
                raise ValueError(f"step {i} is numbered {s.step}{' (a prefill)' if s.prefill else ''}: steps are "
                                 "0 (the prefill), 1, 2, ... in order")
        cells = sum(len(s.mask) * (len(s.mask[0]) if s.mask else 0) for s in self.steps)
        if cells > MAX_CELLS:
            raise ValueError(f"its masks hold {cells:,} cells; at most {MAX_CELLS:,} are taken")
        lens = sum(2 * sum(map(len, r.tokens)) for s in self.steps for r in s.lens)
        lens += sum(2 * len(r.rank) for s in self.steps for r in s.lens_real)
        if lens > MAX_LENS_CELLS:
            raise ValueError(f"its Mask Lens holds {lens:,} entries; at most {MAX_LENS_CELLS:,} are taken")
        return self


_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_DEPTH = np.zeros(256, dtype=np.int8)
_DEPTH[[ord("["), ord("{")]], _DEPTH[[ord("]"), ord("}")]] = 1, -1


def json_depth(data: bytes) -> int:
    """The deepest nesting of `data`'s arrays and objects, brackets inside strings not counted (C speed: a
    regex drops the strings, numpy sums the brackets)."""
    steps = _DEPTH[np.frombuffer(_STRING.sub(b'""', data), dtype=np.uint8)]
    return int(np.cumsum(steps, dtype=np.int64).max(initial=0))


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number a trace may hold")


def _where(loc: tuple) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".") or "the file"


def _first_error(e: ValidationError) -> str:
    err = e.errors(include_url=False)[0]
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and ("[" in p or p.startswith("function-"))))
    if err["type"] == "missing":
        return f"{_where(loc[:-1])}: no {loc[-1]!r} field"
    return f"{_where(loc)}: {err['msg'][0].lower()}{err['msg'][1:]}"


def parse_trace(path: str | Path) -> Trace:
    """The file at `path` as a checked Trace; ValueError (one sentence) for anything the caps or the schema
    refuse. The size is checked before the file is read, the depth before it is parsed."""
    size = Path(path).stat().st_size
    if size > MAX_TRACE_BYTES:
        raise ValueError(f"the file is {size / 2**20:.1f} MB; a trace may be at most {MAX_TRACE_BYTES / 2**20:.0f} MB")
    data = Path(path).read_bytes()
    depth = json_depth(data)
    if depth > MAX_DEPTH:
        raise ValueError(f"its JSON nests {depth} levels deep; a trace nests at most {MAX_DEPTH}")
    try:
        raw = json.loads(data, parse_constant=_no_constant)
    except (UnicodeDecodeError, RecursionError) as e:
        raise ValueError(f"it is not UTF-8 JSON ({type(e).__name__})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"it is not JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"it holds a JSON {type(raw).__name__}, not a trace object")
    try:
        return Trace.model_validate(raw)
    except ValidationError as e:
        raise ValueError(_first_error(e)) from None


def _vocab_ids(trace: Trace):
    """(where, token id) for every token id the trace holds."""
    for t in trace.meta.prompt_ids or []:
        yield "meta.prompt_ids", t
    for s in trace.steps:
        where = f"steps[{s.step}]"
        yield where, s.root
        yield where, s.bonus
        yield from ((where, t) for t in (*s.accepted, *s.emitted, *(n.token for n in s.nodes)))
        yield from ((where, int(v)) for row in (*s.top2, *s.eye) for v in row[::2])
        yield from ((where, t) for r in s.lens for row in r.tokens for t in row)
        yield from ((where, r.token) for r in s.lens_real)


def check_against(trace: Trace, limits: Limits, vocab: int | None) -> None:
    """Hold a parsed trace to what this server lets a typed prompt have: steps, prompt and output lengths, a
    method spec the engine builds, and token ids inside `vocab` (the named model's vocabulary; MAX_VOCAB when
    the server cannot tell)."""
    meta, steps = trace.meta, trace.steps
    if len(steps) > limits.max_new_tokens + 1:
        raise ValueError(f"it has {len(steps)} steps; this server decodes at most {limits.max_new_tokens} new tokens "
                         f"(at most {limits.max_new_tokens + 1} steps)")
    if meta.prompt_ids is not None and len(meta.prompt_ids) > limits.max_prompt_tokens:
        raise ValueError(f"its prompt is {len(meta.prompt_ids)} tokens; this server takes at most "
                         f"{limits.max_prompt_tokens}")
    if meta.max_new_tokens is not None and meta.max_new_tokens > limits.max_new_tokens:
        raise ValueError(f"it asked for {meta.max_new_tokens} new tokens; this server generates at most "
                         f"{limits.max_new_tokens}")
    emitted = sum(len(s.emitted) for s in steps)
    if emitted > min(limits.max_new_tokens, meta.max_new_tokens or limits.max_new_tokens):
        raise ValueError(f"it emitted {emitted} tokens, more than its limit of "
                         f"{min(limits.max_new_tokens, meta.max_new_tokens or limits.max_new_tokens)} new tokens")
    for name, text, cap in (("prompt", meta.prompt, limits.max_prompt_tokens), ("text", meta.text, limits.max_new_tokens)):
        if text is not None and len(text) > CHARS_PER_TOKEN * cap:
            raise ValueError(f"its {name} is {len(text):,} characters; at most {CHARS_PER_TOKEN * cap:,} are taken")
    if meta.spec is not None:  # it sets the page's controls: the engine's own rules decide what it may say
        try:
            methods.build(meta.spec)
        except ESPError as e:
            raise ValueError(f"meta.spec: {e}") from None
    vocab = vocab or MAX_VOCAB
    for where, t in _vocab_ids(trace):
        if t >= vocab:
            raise ValueError(f"{where} holds token id {t}, outside the {vocab:,}-token vocabulary of "
                             f"{meta.model_name or 'its model'}")


def known_vocab(name: str | None, offered: tuple[str, ...]) -> int | None:
    """The vocabulary size of model `name` when this server offers it and its config is on disk (one small
    JSON read, no weight loaded); None otherwise (the engine checks ids again when the model is loaded)."""
    if not name or name not in offered:
        return None
    from esp.models.offline import MODELS, converted, is_converted

    entry = MODELS.get(name)
    if entry is not None:
        config = converted(entry) / "config.json" if is_converted(entry) else None
    elif Path(name).expanduser().is_dir():
        config = Path(name).expanduser() / "config.json"
    else:
        from huggingface_hub import try_to_load_from_cache

        try:
            found = try_to_load_from_cache(name, "config.json")
        except ValueError:
            found = None
        config = Path(found) if isinstance(found, str) else None
    try:
        cfg = json.loads(config.read_text()) if config else {}
    except (OSError, ValueError):
        return None
    size = cfg.get("vocab_size") or (cfg.get("text_config") or {}).get("vocab_size")
    return size if isinstance(size, int) and size > 0 else None


def load_trace(path: str | Path, limits: Limits) -> tuple[dict[str, Any], list[StepTrace]]:
    """(meta, steps) of the trace file at `path`, checked by every cap above and held to `limits`; one
    ValueError sentence for anything refused."""
    trace = parse_trace(path)
    check_against(trace, limits, known_vocab(trace.meta.model_name, limits.models))
    meta = trace.meta.model_dump(exclude_none=True)
    return meta, [StepTrace.from_dict(s.model_dump()) for s in trace.steps]

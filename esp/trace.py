"""Plain, JSON-serialisable records of what every decoding step did.

The app, the benchmark and the tests all read these; nothing here touches torch.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field

# Node statuses in a step's draft tree.
ROOT, ACCEPTED, REJECTED, PRUNED = "root", "accepted", "rejected", "pruned"
# Where a drafted token came from (NodeTrace.sources): ESP's mask rows, a copy of earlier text (prompt or
# output lookup), the table of the model's own past distributions, LADE's lookahead n-gram pool.
ESP, LOOKUP, TABLE, POOL = "esp", "lookup", "table", "pool"
SOURCES = (ESP, LOOKUP, TABLE, POOL)


@dataclass
class NodeTrace:
    """One node of a step's draft tree (index 0 is the root, the token fed first)."""

    index: int  # position in StepTrace.nodes
    token: int
    text: str
    parent: int  # index of the parent node, -1 for the root
    depth: int
    prob: float  # draft probability of this token under its parent's distribution
    cum_prob: float  # product of draft probabilities along the path
    status: str  # root / accepted / rejected / pruned
    row: int | None  # row of this node in the block (None for pruned candidates, never fed)
    position: int | None  # its position id (None when pruned)
    sources: list[str] = field(default_factory=list)  # SOURCES that proposed this token (empty for the root)
    p: float | None = None  # calibrated P(accepted), product along the path; None where nothing calibrates


@dataclass
class AlignmentTrace:
    """Per-layer cosine between a mask's hidden state and the real token later at its position."""

    source_step: int  # the step whose forward produced the mask state
    j: int  # mask index (1-based) at that step's last accepted node
    position: int
    accepted: bool  # the step after source_step accepted at least j drafts
    cos: list[float]  # per layer (0 = embeddings, last = post-norm), mean-centred
    cos_raw: list[float]  # per layer, raw


@dataclass
class StepTrace:
    """Everything one decoding step (one target forward) did."""

    step: int
    method: str
    n_past: int  # committed tokens in the KV cache before this step
    root: int  # token id of the root (last emitted token, fed first)
    nodes: list[NodeTrace]
    accepted: list[int]  # accepted draft tokens, in order
    bonus: int  # token the target itself produced after the last accepted node
    emitted: list[int]  # tokens this step added to the output (accepted + bonus, cut at EOS / max)
    emitted_text: list[str]
    row_labels: list[str]  # one per traced block row, e.g. "root", "node 3", "mask 3.1"
    row_kinds: list[str]  # "root" / "node" / "mask" / "lookahead" / ...
    positions: list[int]  # position id of each traced block row
    mask: list[list[bool]]  # rows x (1 prefix column + block columns): True = visible
    accepted_rows: list[int]  # block rows whose KV was committed (root and accepted nodes)
    shape: list[int]  # node count per depth (depth 1..)
    timings: dict[str, float]  # seconds: draft, mask, forward, verify, commit, total
    ema: dict[str, float] | None = None  # ESP mask state: norm, cos_init
    alignment: list[AlignmentTrace] = field(default_factory=list)
    prefill: bool = False
    # Budgeted drafters only (bc=auto or a hybrid): how this step's width was chosen. Keys:
    #   budget ("auto" or the fixed cap), rows (block width fed), cap (most rows allowed),
    #   expected_tokens (1 + sum of the chosen nodes' P + value of the masks fed, P scaled by reliability:
    #   accepted drafts over the sum of their P so far), reliability,
    #   predicted_s (t(rows) from the curve), measured_s (this forward, LM head included),
    #   curve {"q": [...], "t": [...]} (seconds per forward of q rows, as corrected so far).
    cost: dict | None = None
    # Per emitted token, the best esp.bench.verdict.TOP_K of the row that chose it: [id1, logit1, id2, logit2, ...].
    top2: list[list] = field(default_factory=list)

    def to_dict(self) -> dict:
        """A plain dict (JSON-ready)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "StepTrace":
        """The inverse of `to_dict` (for stored or exported traces)."""
        d = dict(d)
        d["nodes"] = [NodeTrace(**n) for n in d["nodes"]]
        d["alignment"] = [AlignmentTrace(**a) for a in d.get("alignment", [])]
        return cls(**d)


@dataclass
class RunSummary:
    """Totals for one generation."""

    method: str
    tokens: int  # generated tokens
    forwards: int  # target forward passes, prefill included
    tau: float  # tokens per forward
    seconds: float
    tokens_per_s: float
    accept_hist: dict[int, int]  # accepted drafts per step -> number of steps (prefill excluded)

    def to_dict(self) -> dict:
        return asdict(self)


def summarize(method: str, steps: list[StepTrace], seconds: float) -> RunSummary:
    """Aggregate a run's step traces into its summary."""
    tokens = sum(len(s.emitted) for s in steps)
    forwards = len(steps)
    hist = Counter(len(s.accepted) for s in steps if not s.prefill)
    return RunSummary(
        method=method,
        tokens=tokens,
        forwards=forwards,
        tau=tokens / forwards if forwards else 0.0,
        seconds=seconds,
        tokens_per_s=tokens / seconds if seconds > 0 else 0.0,
        accept_hist=dict(sorted(hist.items())),
    )

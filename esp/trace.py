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
LENS_TOP = 5  # tokens kept per layer of the Mask Lens and per row of the verifier's eye


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
    # The verifier's view of this draft (recorded with the lens on, for fed nodes): its rank (1 = the target's
    # own choice) and probability in the distribution the verifier decided from at its parent's row.
    target_rank: int | None = None
    target_p: float | None = None


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
class LensTrace:
    """The raw logit lens of one mask a step fed at the node where its accepted path ends: each layer's
    hidden state read through the model's final norm and LM head (the last layer is the model's own logits,
    which ESP drafts from). The mask sits at `position` and drafts the token at `position + 1`."""

    j: int  # mask index (1-based)
    position: int
    tokens: list[list[int]]  # per layer (0 = embeddings, last = the model's output), the LENS_TOP best ids
    probs: list[list[float]]  # their probabilities, in the same order
    texts: dict[int, str]  # the text of every id in `tokens`


@dataclass
class LensReal:
    """A mask's lens against the token that really came at the position it drafted (resolved once that token
    is emitted, usually by the next step, so it arrives on a later step's trace, like AlignmentTrace)."""

    source_step: int  # the step that fed the mask (its LensTrace is on that step's trace)
    j: int
    token: int  # the token emitted at the mask's position + 1
    text: str
    accepted: bool  # the step after source_step accepted at least j drafts
    prob: list[float]  # per layer, the lens probability of `token`
    rank: list[int]  # per layer, its rank (1 = the lens's top-1)


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
    ema: dict[str, float] | None = None  # ESP mask state: norm, cos_init (the hybrid: on steps that fed masks)
    alignment: list[AlignmentTrace] = field(default_factory=list)
    prefill: bool = False
    # Budgeted drafters only (bc=auto or a hybrid): how this step's width was chosen. Keys:
    #   budget ("auto" or the fixed cap), rows (block width fed), cap (most rows allowed),
    #   expected_tokens (1 + sum of the chosen nodes' P + value of the masks fed, P scaled by reliability:
    #   accepted drafts over the sum of their P so far; the hybrid under bc=auto: this call's, shrunk towards the
    #   drafter's), reliability,
    #   predicted_s (t(rows) from the curve), measured_s (this forward, LM head included),
    #   curve {"q": [...], "t": [...]} (seconds per forward of q rows, as corrected so far).
    cost: dict | None = None
    # Per emitted token, the best esp.bench.verdict.TOP_K of the row that chose it: [id1, logit1, id2, logit2, ...].
    top2: list[list] = field(default_factory=list)
    # With the lens on (Decoder(lens=True)): per emitted token, the best LENS_TOP of the distribution the
    # verifier decided from at that row ([id1, p1, id2, p2, ...]: softmax of the logits when greedy, the
    # tempered and truncated distribution it sampled from otherwise), the Mask Lens of the masks fed at the
    # last accepted node, and the lens of earlier masks resolved against the tokens that came.
    eye: list[list] = field(default_factory=list)
    lens: list[LensTrace] = field(default_factory=list)
    lens_real: list[LensReal] = field(default_factory=list)

    def to_dict(self) -> dict:
        """A plain dict (JSON-ready)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "StepTrace":
        """The inverse of `to_dict` (for stored or exported traces)."""
        d = dict(d)
        d["nodes"] = [NodeTrace(**n) for n in d["nodes"]]
        d["alignment"] = [AlignmentTrace(**a) for a in d.get("alignment", [])]
        d["lens"] = [LensTrace(**{**a, "texts": {int(k): v for k, v in a["texts"].items()}}) for a in d.get("lens", [])]
        d["lens_real"] = [LensReal(**a) for a in d.get("lens_real", [])]
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
    # The run's acceptance under the names and meaning of vLLM's per-request metrics (`acceptance`).
    speculative_decoding: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def acceptance(steps: list[StepTrace]) -> dict:
    """Per-request acceptance as vLLM reports it (`metrics.speculative_decoding`, with
    `--per-request-spec-decode-metrics`), so figures from here and from vLLM sit side by side. A verification
    step is a step after the prefill that fed at least one draft token (vLLM omits steps with none; tau counts
    every forward, the prefill and plain steps included); a draft token is a fed tree node (a chain method's
    node per drafted token, a tree method's every node, so its rate is lower for the same tokens); a step's
    draft length is its tree's depth, the most it could accept, and `num_spec_tokens` the deepest seen."""
    spec = [s for s in steps if not s.prefill and any(n.row is not None for n in s.nodes[1:])]
    by_depth: dict[str, list[int]] = {}
    for s in spec:
        d = len(s.shape)
        by_depth.setdefault(str(d), [0] * (d + 1))[len(s.accepted)] += 1
    return _acceptance_of(by_depth, sum(n.row is not None for s in spec for n in s.nodes[1:]))


def pooled_acceptance(parts: list[dict]) -> dict:
    """`acceptance` of several requests together (a bench's questions): their steps pooled."""
    by_depth: dict[str, list[int]] = {}
    for part in parts:
        for d, counts in part["acceptance_histogram_by_draft_length"].items():
            mine = by_depth.setdefault(d, [0] * len(counts))
            for a, c in enumerate(counts):
                mine[a] += c
    return _acceptance_of(by_depth, sum(part["num_draft_tokens"] for part in parts))


def _acceptance_of(by_depth: dict[str, list[int]], drafted: int) -> dict:
    """vLLM's fields from the steps counted by draft length and accepted drafts, and the draft tokens fed."""
    deepest = max(map(int, by_depth), default=0)
    hist = [sum(c[j] for c in by_depth.values() if j < len(c)) for j in range(deepest + 1)]
    steps, accepted = sum(hist), sum(j * n for j, n in enumerate(hist))
    return {"mean_acceptance_length": 1 + accepted / steps if steps else 1.0,
            "draft_acceptance_rate": accepted / drafted if drafted else 0.0,
            "acceptance_histogram": hist, "acceptance_histogram_by_draft_length": dict(sorted(by_depth.items(), key=lambda kv: int(kv[0]))),
            "num_spec_steps": steps, "num_accepted_draft_tokens": accepted, "num_draft_tokens": drafted,
            "num_spec_tokens": deepest}


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
        speculative_decoding=acceptance(steps),
    )

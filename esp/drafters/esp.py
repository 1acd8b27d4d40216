"""ESP: the frozen model drafts its own future from soft mask tokens (Embedding-Space Probing)."""
from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch

from esp.drafters.alignment import AlignmentTracker
from esp.errors import ESPError
from esp.decoding.tree import DraftTree, dynamic_tree, static_tree
from esp.trace import ESP
from esp.decoding.drafter import Context, Drafter, Notes, Proposal, StepResult

# The paper's static shapes per (BC, k).
PAPER_SHAPES = {
    (60, 1): [29], (60, 2): [15, 4], (60, 3): [7, 5, 3],
    (30, 1): [14], (30, 2): [7, 2],
    (10, 1): [4], (10, 2): [2, 1],
}
INITS = ("mean", "sample", "lastk")
TREES = ("static", "dynamic")


def default_shape(bc: int, k: int) -> list[int]:
    """The paper's shape where it gives one, else N = BC/(k+1) - 1 nodes weighted (k-i+1)^2 by depth."""
    if (bc, k) in PAPER_SHAPES:
        return list(PAPER_SHAPES[(bc, k)])
    n = bc // (k + 1) - 1
    w = [(k - i) ** 2 for i in range(k)]
    shape = [max(1, n * x // sum(w)) for x in w]
    shape[0] += n - sum(shape)
    return shape


@dataclass(frozen=True)
class ESPConfig:
    """ESP's knobs; `shape` overrides the static tree (its block size then sets the budget)."""

    k: int = 2
    bc: int = 30
    lam: float = 0.1
    tree: str = "static"
    init: str = "mean"
    shape: tuple[int, ...] | None = None

    def __post_init__(self):
        if not (isinstance(self.k, int) and 1 <= self.k <= 4):
            raise ESPError(f"k (mask tokens) must be an integer from 1 to 4, not {self.k}.")
        if not 0 <= self.lam <= 1:
            raise ESPError(f"lambda (EMA rate) must be in [0, 1], not {self.lam}.")
        if self.tree not in TREES:
            raise ESPError(f"tree must be 'static' or 'dynamic', not {self.tree!r}.")
        if self.init not in INITS:
            raise ESPError(f"mask init must be one of {', '.join(INITS)}, not {self.init!r}.")
        least = (self.k + 1) ** 2
        if self.shape is None and self.bc < least:
            raise ESPError(
                f"BC={self.bc} is too small for k={self.k}: one node per depth already needs "
                f"(k+1)^2 = {least} tokens; raise BC or lower k."
            )
        if self.shape is not None and (len(self.shape) != self.k or min(self.shape) < 1):
            raise ESPError(f"a static shape needs k={self.k} positive widths, not {list(self.shape)}.")

    @property
    def static_shape(self) -> list[int]:
        return list(self.shape) if self.shape else default_shape(self.bc, self.k)

    @property
    def n_nodes(self) -> int:
        """Draft nodes per step (root excluded)."""
        if self.tree == "dynamic" and self.shape is None:
            return self.bc // (self.k + 1) - 1
        return sum(self.static_shape)


class MaskEmbedding:
    """ESP's soft mask tokens m (k, H): initialised from the prompt, moved towards every emitted token."""

    def __init__(self, k: int, lam: float, init: str = "mean"):
        self.k, self.lam, self.init = k, lam, init
        self.m: torch.Tensor | None = None
        self.m0: torch.Tensor | None = None

    def start(self, ctx: Context) -> None:
        """Initialise from the prompt, then catch up on output already committed (a resumed run)."""
        e = ctx.lm.embed(ctx.tokens[: ctx.n_prompt])
        acc = torch.float64 if e.dtype == torch.float64 else torch.float32
        e = e.to(acc)
        k = self.k
        if self.init == "mean":
            m = e.mean(0).expand(k, -1)
        elif self.init == "lastk":
            m = e[-k:] if len(e) >= k else torch.cat([e[:1].expand(k - len(e), -1), e])
        else:
            mu, sigma = _table_stats(ctx.lm)
            g = torch.Generator().manual_seed(ctx.sampling.seed)
            m = mu + sigma * torch.randn(k, mu.numel(), generator=g, dtype=torch.float64).to(mu)
        self.m = m.to(acc).clone()
        self.m0 = self.m.clone()
        self.deferred: list[int] = []
        self.update(ctx.lm, ctx.tokens[ctx.n_prompt :])

    def update(self, lm, tokens: list[int]) -> None:
        """m <- m + lambda (e(x) - m) for each emitted token x, in order (deferred ones first). One in-place lerp
        per token: a step emits a few tokens, and a lerp is one kernel where the closed form takes six."""
        tokens = self.deferred + list(tokens)
        self.deferred = []
        if not tokens:
            return
        for e in lm.embed(tokens).to(self.m.dtype):
            self.m.lerp_(e, self.lam)

    def defer(self, tokens: list[int]) -> None:
        """Tokens for the next `update` to apply first, in order: the same m then, without a device call per step
        while nothing reads m (a backed-off hybrid's plain steps)."""
        self.deferred += tokens

    def embeds(self, dtype: torch.dtype) -> torch.Tensor:
        return self.m.to(dtype)

    def summary(self) -> torch.Tensor:
        """m's mean norm and mean cosine to its start, on the device (for a caller that reads it together
        with other values)."""
        return torch.stack([self.m.norm(dim=-1).mean(), torch.cosine_similarity(self.m, self.m0, dim=-1).mean()])

    @staticmethod
    def named(summary: list[float]) -> dict[str, float]:
        """What the trace shows of m, from `summary()`'s two values: its norm and how far it has turned."""
        return {"norm": summary[0], "cos_init": summary[1]}

    def state(self) -> dict[str, float]:
        return self.named(self.summary().tolist())  # one read


class ESPDrafter(Drafter):
    """Mask tokens m (initialised from the prompt, EMA-updated) drafts the next tree from the masks of
    the last accepted node."""

    name = "esp"
    source = ESP

    def __init__(self, config: ESPConfig = ESPConfig()):
        self.cfg = config
        self.mask = MaskEmbedding(config.k, config.lam, config.init)
        self.dists: torch.Tensor | None = None
        self.align: AlignmentTracker | None = None

    def describe(self) -> str:
        c = self.cfg
        tree = f"dynamic N={c.n_nodes}" if c.tree == "dynamic" else f"static {c.static_shape}"
        return f"esp k={c.k} bc={c.bc} {tree} lam={c.lam} init={c.init}"

    def start(self, ctx: Context) -> None:
        self.mask.start(ctx)
        self.dists = None
        self.align = None

    def propose(self, ctx: Context) -> Proposal:
        root = ctx.tokens[-1]
        if self.dists is None:
            tree = DraftTree.root_only(root)
        elif self.cfg.tree == "static":
            tree = static_tree(root, self.dists, self.cfg.static_shape)
        else:
            tree = dynamic_tree(root, self.dists, self.cfg.n_nodes)
        return Proposal(tree=tree, k=self.cfg.k, mask_embeds=self.mask.embeds(ctx.lm.dtype))

    def observe(self, ctx: Context, res: StepResult) -> Notes:
        last = res.path[-1]
        rows = res.layout.mask_rows(last)
        self.dists = torch.softmax(res.logits(rows, ctx.lm), dim=-1)
        notes = Notes()
        if ctx.align and res.forward.layers is not None:
            notes.alignment = self._align(ctx, res, rows)
        self.mask.update(ctx.lm, res.emitted)
        notes.ema = self.mask.state()
        return notes

    def _align(self, ctx: Context, res: StepResult, mask_rows: list[int]) -> list:
        states = torch.stack(res.forward.layers)  # (L+1, B, H)
        depths = res.proposal.tree.depths
        if self.align is None:
            before = res.forward.prefix_layers
            prompt = states[:, :1] if before is None else torch.cat([torch.stack(before), states[:, :1]], 1)
            self.align = AlignmentTracker(_robust_mean(prompt))
        else:
            self.align.label(ctx.step - 1, len(res.path) - 1)
        self.align.add_real([res.root_pos + depths[i] for i in res.path], states[:, res.path])
        d = depths[res.path[-1]]
        self.align.add_masks(ctx.step, [res.root_pos + d + j for j in range(1, self.cfg.k + 1)], states[:, mask_rows])
        return self.align.resolve()


def _robust_mean(states: torch.Tensor) -> torch.Tensor:
    """Per-layer mean over tokens (L+1, T, H) -> (L+1, H), leaving out attention-sink rows.

    The first token's residual norm is ~100x the others' in middle layers (SmolLM2: 25000 vs 150), so a
    plain mean would be that one token and centring would not remove the shared component.
    """
    norms = states.norm(dim=-1, keepdim=True)
    keep = (norms <= 5 * norms.median(dim=1, keepdim=True).values).to(states.dtype)
    return (states * keep).sum(1) / keep.sum(1).clamp_min(1)


# Read-only data derived from a model's weights, computed once per model object (weakly held, so that
# a model freed and another made at its address never meet a stale entry).
_STATS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _table_stats(lm) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-dimension mean and std of the (scaled) input embedding table."""
    if lm not in _STATS:
        w = lm.model.get_input_embeddings().weight.detach().double()
        scale = lm.embed([0]).double()[0].norm() / w[0].norm().clamp_min(1e-12)
        _STATS[lm] = (w.mean(0) * scale, w.std(0) * scale)
    return _STATS[lm]

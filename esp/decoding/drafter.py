"""The one decoder interface: a drafter proposes a block, the engine verifies and commits it.

One step's records, all keyword-only: the engine hands the drafter a `Context` (and, in a batch with a budget,
the row's `Budget`); `propose` returns a `Proposal`, whose `plan` carries whatever the drafter decided for this
step; the engine feeds it, verifies and commits, and hands the drafter a `StepResult` holding that proposal (so
the plan comes back), the verifier's decisions and the `Forward`'s outputs; `observe` learns from it and returns
the `Notes` for the step's trace. A drafter keeps across steps only what it learns, never the step in flight.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

import numpy as np
import torch

from esp.decoding.layout import Extra, Layout
from esp.decoding.timer import Phases
from esp.decoding.tree import DraftTree
from esp.models.lm import LM
from esp.sampling import Sampling


@dataclass(kw_only=True)
class Proposal:
    """What a drafter wants fed this step: a tree off the root, ESP masks, extra rows."""

    tree: DraftTree
    k: int = 0  # mask tokens attached to every masked node
    mask_embeds: torch.Tensor | None = None  # (k, H): input embedding of mask j, shared by all nodes
    extra: Extra | None = None
    masked: tuple[int, ...] | None = None  # nodes that carry the k masks (None: every node, as in ESP)
    # One LM-head call over every block row instead of the node rows only: on a CPU the head's weights
    # (a vocabulary by hidden matrix) are read once per call, so a few extra rows cost less than a second call.
    head_all: bool = False
    plan: Any = None  # the drafter's own record of this step, handed back in StepResult.proposal


@dataclass(kw_only=True)
class Offer:
    """A budgeted drafter's offer to a batch budget (`esp.budget.batch.Budgeted`): the most expected tokens a
    block of at most r rows would give, r = 0..cap, and the draft it grew to say so (handed back in its
    `Budget`, so that `propose` does not grow it again)."""

    tokens: np.ndarray
    draft: Any = None


@dataclass(kw_only=True)
class Budget:
    """What a batch budget gave one row for a step: at most `rows` block rows, and the row's offer, if it asked."""

    rows: int
    offer: Offer | None = None


@dataclass(kw_only=True)
class Context:
    """The decoding state a drafter may read."""

    lm: LM
    tokens: list[int]  # prompt + output so far; tokens[-1] is this step's root
    n_prompt: int
    sampling: Sampling
    step: int = 0
    align: bool = False  # collect per-layer alignment (ESP)
    batched: bool = False  # decoded in a batch: a batch budget may set the step's width (Drafter.batch_planner)
    budget: Budget | None = None  # this step's, when a batch budget set it; None: the drafter chooses its block


@dataclass(kw_only=True)
class Forward:
    """What the step's forward computed over the block (the rows before the root, at a prefill, left out)."""

    hidden: torch.Tensor  # (B, H) post-norm hidden states of the block rows (root first)
    layers: tuple[torch.Tensor, ...] | None = None  # per layer (B, H), when alignment or the lens is on
    prefix_layers: tuple[torch.Tensor, ...] | None = None  # prefill only: layers of the prompt rows before the root
    block_logits: torch.Tensor | None = None  # (B, V) logits of every block row, when the proposal asked (head_all)
    # Block rows whose logits the step has read already, and those logits: with the Mask Lens on, the masks at the
    # path's end (its output layer), which a drafter would otherwise read with a call of its own.
    read: tuple[list[int], torch.Tensor] | None = None
    seconds: float = 0.0  # the block's forward and its LM-head call (node rows, or every row under head_all)
    clock: Phases | None = None  # the step's phase timer: a drafter's LM-head call counts as model time
    # (rows, seconds) of forwards measured by now, for drafters that time them (Drafter.times_forward): this
    # step's on a CPU or with step timings, the previous step's on CUDA (read without blocking); not prefills.
    timed: list[tuple[int, float]] = field(default_factory=list)


@dataclass(kw_only=True)
class StepResult:
    """What the step's forward and verification produced, for the drafter to learn from."""

    proposal: Proposal  # as the drafter returned it (its `plan` included)
    layout: Layout
    root_pos: int
    node_logits: torch.Tensor  # (N+1, V) target logits at root and nodes
    path: list[int]  # accepted nodes, root first
    bonus: int
    # The target's token after each fed node (i: node i), chosen by the verifier's own rule
    # (esp.decoding.verify.Choices): what every candidate child of that node is right or wrong against.
    choices: Sequence[int]
    emitted: list[int]
    forward: Forward
    # The verifier's read, per fed node: [ids..., logits...] of its best logits (esp.decoding.verify.Verified.rows).
    ranked: list[list[float]] | None = None

    def logits(self, rows: list[int], lm: LM) -> torch.Tensor:
        """Target logits at block rows `rows`: from the step's own head call when it covered them."""
        f = self.forward
        if f.block_logits is not None:
            return f.block_logits[rows]
        if f.read is not None and f.read[0] == rows:
            return f.read[1]
        if f.clock is None:
            return lm.head(f.hidden[rows])
        with f.clock.within("forward"):
            return lm.head(f.hidden[rows])


@dataclass(kw_only=True)
class Notes:
    """What a drafter adds to the step's trace."""

    ema: dict[str, float] | None = None
    alignment: list = field(default_factory=list)
    cost: dict | None = None  # budgeted drafters: how the step's width was chosen (see StepTrace.cost)


class Drafter:
    """Drafts nothing: plain autoregressive decoding through the same machinery."""

    name = "ar"
    source: str | None = None  # what every drafted node's trace names as its source (esp.trace.SOURCES)
    # True for a drafter that learns from its forwards' measured time (a cost curve): the decoder then
    # fills Forward.timed even when step timings are off, without blocking the device.
    times_forward: bool = False

    def start(self, ctx: Context) -> None:
        """Reset for a new prompt (ctx.tokens is the prompt)."""

    def propose(self, ctx: Context) -> Proposal:
        """This step's block (at most `ctx.budget.rows` rows when a batch budget set the width)."""
        return Proposal(tree=DraftTree.root_only(ctx.tokens[-1]))

    def observe(self, ctx: Context, res: StepResult) -> Notes:
        """Learn from the verified step; return what goes into its trace."""
        return Notes()

    def batch_planner(self) -> "BatchPlanner | None":
        """What picks one block width for a batch of drafters like this one (each row's `propose` then reads
        its `ctx.budget`); None: every row proposes its own block, as it would alone (and a caller may give the
        batch a planner that only pads, `esp.methods.build_batch`)."""
        return None

    def describe(self) -> str:
        return self.name


class BatchPlanner(Protocol):
    """The widths of a batch's forwards: a batch forward pads each row's block to the widest, so widths are
    chosen for the batch as a whole (esp.budget.batch: BatchWidth for bc=auto, BatchPadding otherwise)."""

    def plan(self, drafters: list[Drafter], ctxs: list[Context], refill: bool = False) -> list[Budget] | None:
        """Each row's budget this step, in row order (None: each drafter chooses its own block). `refill`: prompts
        wait to take the place of a row that ends (else the batch lasts as long as its slowest row)."""

    def rows(self, batch: int, q: int) -> int:
        """Rows per sequence to feed when the widest block has q: q, or more where a wider forward costs less."""

    def observe(self, width: int | None, fed: int, tokens: list[int], seconds: float, timed: list) -> None:
        """Book the step: the width chosen, the rows per sequence fed, the tokens each row emitted (row order),
        its wall seconds, and the (rows, seconds) of the forwards timed by now."""

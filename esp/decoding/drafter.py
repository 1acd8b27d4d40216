"""The one decoder interface: a drafter proposes a block, the engine verifies and commits it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch

from esp.decoding.layout import Extra, Layout
from esp.models.lm import LM
from esp.sampling import Sampling
from esp.decoding.timer import Phases
from esp.decoding.tree import DraftTree


@dataclass
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


@dataclass
class Context:
    """The decoding state a drafter may read."""

    lm: LM
    tokens: list[int]  # prompt + output so far; tokens[-1] is this step's root
    n_prompt: int
    sampling: Sampling
    step: int
    align: bool = False  # collect per-layer alignment (ESP)
    batched: bool = False  # decoded in a batch: a batch budget may set the step's width (Drafter.offer)


@dataclass
class StepResult:
    """What the step's forward and verification produced, for the drafter to learn from."""

    proposal: Proposal
    layout: Layout
    hidden: torch.Tensor  # (B, H) post-norm hidden states of the block rows (root first)
    layers: tuple[torch.Tensor, ...] | None  # per layer (B, H), when alignment is on
    node_logits: torch.Tensor  # (N+1, V) target logits at root and nodes
    path: list[int]  # accepted nodes, root first
    bonus: int
    root_pos: int
    emitted: list[int]
    prefix_layers: tuple[torch.Tensor, ...] | None = None  # prefill only: layers of the prompt rows before the root
    forward_s: float = 0.0  # seconds of the block's forward and its LM-head call (node rows, or every row under head_all)
    block_logits: torch.Tensor | None = None  # (B, V) logits of every block row, when the proposal asked
    clock: Phases | None = None  # the step's phase timer: a drafter's LM-head call counts as model time
    # (rows, seconds) of forwards measured by now, for drafters that time them (Drafter.times_forward): this
    # step's on a CPU or with step timings, the previous step's on CUDA (read without blocking); not prefills.
    timed: list[tuple[int, float]] = field(default_factory=list)

    def logits(self, rows: list[int], lm: LM) -> torch.Tensor:
        """Target logits at block rows `rows`: from the step's own head call when it covered them."""
        if self.block_logits is not None:
            return self.block_logits[rows]
        if self.clock is None:
            return lm.head(self.hidden[rows])
        with self.clock.within("forward"):
            return lm.head(self.hidden[rows])


@dataclass
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
    # fills StepResult.timed even when step timings are off, without blocking the device.
    times_forward: bool = False

    def start(self, ctx: Context) -> None:
        """Reset for a new prompt (ctx.tokens is the prompt)."""

    def propose(self, ctx: Context) -> Proposal:
        return Proposal(DraftTree.root_only(ctx.tokens[-1]))

    def observe(self, ctx: Context, res: StepResult) -> Notes:
        """Learn from the verified step; return what goes into its trace."""
        return Notes()

    def batch_planner(self) -> "BatchPlanner | None":
        """What picks one block width for a batch of drafters like this one (each row's `propose` then takes
        `rows`, the width it may fill); None: every row proposes its own block, as it would alone (and a
        caller may give the batch a planner that only pads, `esp.methods.build_batch`)."""
        return None

    def describe(self) -> str:
        return self.name


class BatchPlanner(Protocol):
    """The widths of a batch's forwards: a batch forward pads each row's block to the widest, so widths are
    chosen for the batch as a whole (esp.budget.width: BatchWidth for bc=auto, BatchPadding otherwise)."""

    def width(self, drafters: list[Drafter], ctxs: list[Context]) -> int | None:
        """Rows per sequence this step (None: each drafter chooses its own)."""

    def rows(self, batch: int, q: int) -> int:
        """Rows per sequence to feed when the widest block has q: q, or more where a wider forward costs less."""

    def observe(self, width: int | None, fed: int, tokens: int, seconds: float, timed: list) -> None:
        """Book the step: the width chosen, the rows per sequence fed, the tokens all rows emitted, its wall
        seconds, and the (rows, seconds) of the forwards timed by now."""

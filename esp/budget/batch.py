"""Batch budgets: what sets the widths of a batch's forwards (`esp.decoding.drafter.BatchPlanner`).

A batch forward pads every row's block to the widest, so the width is the batch's, not a row's. A budget sees its
rows through the drafter interface only: `BatchPadding` works with any drafter; `BatchWidth` with drafters that
are `Budgeted` (they offer what each width would bring and own a cost curve). A new budget is a new class here
that implements `plan`, `rows` and `observe`, given to `esp.decoding.batch.BatchDecoder(planner=...)` or
returned by a drafter's `batch_planner()`.
"""
from __future__ import annotations

from collections import Counter
from typing import Protocol, runtime_checkable

import numpy as np

from esp.budget.cost import EXPLORE_N, CostCurve, curve_for, padded
from esp.budget.width import Backoff
from esp.decoding.drafter import Budget, Context, Drafter, Offer


@runtime_checkable
class Budgeted(Protocol):
    """A drafter a batch budget can size (the hybrid, and `esp:bc=auto` / `stand:bc=auto`, which are hybrids)."""

    curve: CostCurve  # the drafter's forward cost curve, seconds per forward of q rows

    def offer(self, ctx: Context) -> Offer:
        """Grow this step's draft and say what a block of at most r rows would bring, r = 0..its cap; its
        `propose` then reads the width and this offer from `ctx.budget`."""


class BatchPadding:
    """A batch of drafters that each propose their own block. A batch forward pads every row's block to the
    widest, q rows per sequence; it pads further, to q' rows, where the machine's measured curve says B q' rows
    cost less than B q (`padded`: some CPUs' BLAS runs 2-3 rows slower than 4-8, so a batch whose rows fell from
    4 to 3 is best fed 6 there; a static batch whose rows end early falls to such widths). The curve is the
    machine's prior (`curve_for`), learned from the batch's own forwards; a width is padded only once it is measured,
    to a measured one or to one the curve's exploration price says may cost less (then measured too), so a plain
    step is fed as batched greedy decoding feeds it until a wider forward is measured, or hoped, to cost less. A
    width is hoped for at most EXPLORE_N forwards of its exact rows: the curve is piecewise linear between its knots
    and a kernel's cliff at one row count is not (on AVX2 kernels 9 rows cost twice 8 or 12, and the hope at 9 rows,
    between two cheap knots, stayed until its samples had moved both: ten 9-row steps in a 96-token batch)."""

    def __init__(self):
        self.curve: CostCurve | None = None
        self.tried: Counter[int] = Counter()  # forwards measured at each exact row count

    def plan(self, drafters: list[Drafter], ctxs: list[Context], refill: bool = False) -> list[Budget] | None:
        """None: each row proposes its own block."""
        if self.curve is None:
            self.curve = curve_for(ctxs[0].lm)
        return None

    def rows(self, batch: int, q: int) -> int:
        """Rows per sequence to feed when the widest block has q rows: q, or more where that costs measurably less."""
        top = 2 * q + 2
        at = batch * np.arange(1, top + 1)
        trusted = self.curve.trusted(batch * top)[at]
        if not trusted[q - 1]:  # q rows not measured yet: nothing to pad from (the first steps at a batch size)
            return q
        curve = self.curve
        hoped = np.where([self.tried[r] < EXPLORE_N for r in at], curve.table(batch * top, explore=True)[at], np.inf)
        return int(padded(curve.table(batch * top)[at], trusted, hoped)[q - 1])

    def observe(self, width: int | None, fed: int, tokens: list[int], seconds: float, timed: list) -> None:
        """Book a step that chose `width` rows per sequence (None at the prefill) and fed `fed`, its rows emitting
        `tokens` in `seconds`; `timed`: the (rows, seconds) of its forwards measured by now."""
        for rows, secs in timed:
            self.curve.observe(rows, secs)
            self.tried[rows] += 1


class BatchWidth(BatchPadding):
    """`bc=auto` over a batch: one width Q for every row, since a batch forward pads each row's block to the
    widest. Each row offers the most expected tokens it can add at every width (`Budgeted.offer`); Q maximises the
    batch's expected tokens per second, the rows' offers at Q (below) / t(B Q) (t at the width Q is fed as, padded), on
    the rows' measured curve, and beats plain rows (Q = 1, what batched greedy decoding feeds) only by
    `margin`. A `Backoff` books the batch's drafted steps against its plain ones (per row, as below), so
    where drafting does not pay at this batch size the run falls back to one row per sequence, at a bounded
    cost of finding out. Offers cost host time (every row grows its candidates), so after a step whose best
    width was one row the next offers wait 1, 2, 4, ... up to REST_MAX plain steps: a batch where nothing
    pays asks O(log n) times. The back-off's per-call loss cap (`Backoff.affordable`, bound in its docstring)
    admits a width only while the batch's net loss against its plain steps, per row, stays within eps per step
    plus L0: with B rows, t1 is the batch's plain step and w(Q) = t(B Q) / t(B) - 1, so the bound is the one-row
    bound at every B. The curve is the batch's own, a copy of its first row's prior learned from every
    forward of the batch, since rows come and go (`BatchDecoder`'s batch_size).

    What a step is worth depends on what a row's early end buys. With prompts waiting (`refill`), its place goes
    to the next prompt, so the batch's tokens count, summed over rows. Without, the batch lasts as long as its
    slowest row and a row that races ahead (one copying its prompt) only leaves early, so a step is worth B times
    its least-served row's tokens: offers and the back-off's books both count that (a batch of eight with one
    copying row drafted 20 rows a sequence on the sum, and ran 6% below plain rows)."""

    REST_MAX = 16

    def __init__(self, margin: float = 0.1):
        super().__init__()
        self.margin = margin
        self.backoff = Backoff()
        self.batch = 0  # rows decoding now: a plain step's time depends on it
        self.rest = self.left = 0  # plain steps to wait after a one-row choice, and still to wait now
        self.refill = False  # prompts wait for a row's place (the step's worth is summed over rows)

    def plan(self, drafters: list[Budgeted], ctxs: list[Context], refill: bool = False) -> list[Budget] | None:
        """One width for every row; None at the prefill (each row feeds its prompt and its own block). A plain
        step's rows (width 1, nothing offered) learn nothing, so the batch runs at plain decoding's cost."""
        self.refill = refill
        if self.curve is None:  # the batch's own copy: rows come and go, the machine stays
            self.curve = drafters[0].curve.copy()
        if ctxs[0].step == 0:
            return None
        b = len(drafters)
        if b != self.batch:  # rows left or joined: plain steps cost something else now
            was, t1 = self.batch, self.backoff.t1
            # Scaled by the curve until the next plain step is measured, rather than forgotten: with t1 unknown,
            # a drafted step's loss would be the curve's prediction alone, blind to the offers' host time.
            self.backoff.t1 = None if t1 is None or not was else t1 * (
                self.curve.predict(b * self.rows(b, 1)) / self.curve.predict(was * self.rows(was, 1)))
            self.batch, self.backoff.n1 = b, 0
        if not self.backoff.drafting or self.left or not self.backoff.may_draft(*self._seconds(b, self.REST_MAX)):
            self.left = max(self.left - 1, 0)
            return [Budget(rows=1) for _ in drafters]
        offers = [d.offer(c) for d, c in zip(drafters, ctxs)]
        width = self.width([o.tokens for o in offers])
        self.rest = 0 if width > 1 else min(max(2 * self.rest, 1), self.REST_MAX)
        self.left = self.rest
        return [Budget(rows=width, offer=o) for o in offers]

    def width(self, offers: list[np.ndarray]) -> int:
        """The rows per sequence that maximise the batch's expected tokens per second, given each row's offer."""
        top = min(o.size for o in offers) - 1
        rows = np.array([o[1 : top + 1] for o in offers])
        expected = rows.sum(axis=0) if self.refill else len(offers) * rows.min(axis=0)
        score = expected / self.backoff.affordable(*self._seconds(len(offers), top))[1:]
        score[0] *= 1 + self.margin
        return int(score.argmax()) + 1

    def _seconds(self, b: int, top: int) -> tuple[np.ndarray, np.ndarray]:
        """The batch's forward time at Q rows per sequence as it is fed (padded), Q = 0..top (index 0 unused): as the
        width choice reads it (discounted for exploration), and as the loss cap does (the curve's own estimate)."""
        at = b * np.arange(1, top + 1)
        seconds = self.curve.table(b * top, explore=True)[at]
        fed = padded(seconds, self.curve.trusted(b * top)[at], seconds) - 1
        own = self.curve.table(b * top)[at]
        return tuple(np.concatenate([[np.inf], x[fed]]) for x in (seconds, own))

    def observe(self, width: int | None, fed: int, tokens: list[int], seconds: float, timed: list) -> None:
        """Book a decoding step of `width` rows per sequence (fed as `fed`) whose rows emitted `tokens` in
        `seconds`: the curve learns from `timed`, the back-off from the step (per row: the mean, or with no prompt
        waiting the least-served row's)."""
        super().observe(width, fed, tokens, seconds, timed)
        if width is None:
            return
        b, curve = self.batch, self.curve
        hint = seconds * curve.predict(b * self.rows(b, 1)) / curve.predict(b * fed)
        self.backoff.observe(width, sum(tokens) / b if self.refill else min(tokens), seconds, hint)

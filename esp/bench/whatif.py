"""What-if: re-run one stored step from the same committed prefix with another drafter or settings.

The decoder resumes from committed output (`Decoder.stream(ids, n_prompt=...)`). It is fed the committed
text minus its last token, which is the stored step's root: the resumed prefill emits that token again
(losslessly, as its bonus) and the second trace is then the alternative step, with the same root at the
same position. Stateful drafters (STAND's table, LADE's pool, ESP's EMA, calibrators) rebuild their state
from the text, not from the stored run's history.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from esp.decoding.drafter import Context, Drafter, Notes, Proposal, StepResult
from esp.decoding.engine import Decoder
from esp.errors import ESPError
from esp.models.lm import LM
from esp.sampling import Sampling
from esp.trace import StepTrace
from esp.decoding.tree import DraftTree
from esp.bench.verdict import NEAR_TIE, classify, dtype_name


class _NoTreeAtResume(Drafter):
    """`inner`, except that its first proposal (the resumed prefill) drafts no tree: some drafters (PLD,
    STAND) would otherwise draft from the text at once and the prefill would emit more than the stored
    root. Masks and extra rows are kept, so ESP's masks still give the next step's drafts."""

    def __init__(self, inner: Drafter):
        self.inner, self.name, self.source = inner, inner.name, inner.source
        self.first = True

    def start(self, ctx: Context) -> None:
        self.first = True
        self.inner.start(ctx)

    def propose(self, ctx: Context) -> Proposal:
        prop = self.inner.propose(ctx)
        if self.first:
            self.first = False
            masked = None if prop.masked is None else tuple(n for n in prop.masked if n == 0)  # the root's masks
            prop = replace(prop, tree=DraftTree.root_only(ctx.tokens[-1]), masked=masked)
        return prop

    def observe(self, ctx: Context, res: StepResult) -> Notes:
        return self.inner.observe(ctx, res)

    def describe(self) -> str:
        return self.inner.describe()


def whatif_step(lm: LM, drafter: Drafter, prompt_ids: Sequence[int], steps: Sequence[StepTrace], i: int,
                sampling: Sampling = Sampling(), max_new_tokens: int = 128, layouts: str = "efficient",
                align: bool = False) -> StepTrace:
    """The trace of stored step `i` (>= 1) re-run with `drafter`, numbered `i`; `max_new_tokens` is the
    stored run's limit, so the alternative is cut where the original would have been."""
    if not 1 <= i < len(steps):
        raise ESPError(f"What-if needs a decoding step from 1 to {len(steps) - 1}, not {i} (step 0 is the prefill).")
    committed = list(prompt_ids) + [t for s in steps[:i] for t in s.emitted]
    ids = committed[:-1]
    already = len(ids) - len(prompt_ids)  # output tokens fed as committed text
    room = max_new_tokens - already  # the re-emitted root, then what step i may still emit
    if room < 2:
        raise ESPError(f"Step {i} was cut by the run's limit of {max_new_tokens} new tokens: nothing to re-run.")
    decoder = Decoder(lm, _NoTreeAtResume(drafter), sampling, room, layouts, align=align)
    stream = decoder.stream(ids, n_prompt=len(prompt_ids))
    try:
        resumed = next(stream)  # emits the stored root again: a root-only tree's bonus is the target's token
        alt = next(stream, None)
    finally:
        stream.close()
    if alt is None:
        raise ESPError(f"Step {i} cannot be re-run: the text ended at its root.")
    if resumed.emitted != [steps[i].root]:
        raise ESPError(f"Step {i} cannot be re-run from the same root: {_root_mismatch(lm, steps[i], steps[i - 1], resumed)}")
    return replace(alt, step=i)


def _root_mismatch(lm: LM, step: StepTrace, before: StepTrace, resumed: StepTrace) -> str:
    """Why the replay's root differs from the stored one, in esp.bench.verdict's words: a rounding near-tie that
    a reduced-precision replay may flip, or a real difference."""
    stored = before.top2[-1:] or None  # the stored root was the previous step's last emitted token
    v = classify([step.root], stored, resumed.emitted[:1], resumed.top2[:1] or None, dtype_name(lm.dtype))
    if v.kind == NEAR_TIE:
        return (f"the replay chose another token there, a near-tie in {dtype_name(lm.dtype)} "
                f"({v.gap:.1f} rounding units) that the replay's different batch shape flipped.")
    return f"the replay chose another token there ({v.reason}); the stored trace is from another model or settings."

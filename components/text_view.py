"""The generated text as HighlightedText pairs, each token labelled by how it came."""
from __future__ import annotations

from typing import Sequence

from esp.trace import ACCEPTED, ROOT, StepTrace

from . import palette
from . import sources as src
from .common import BONUS as BONUS_KIND, CORRECTION as CORRECTION_KIND, accepted_nodes, as_steps, own_kind
from .focus import focus_node

# The model's own token of a step, named as the field names it (components.common.own_kind): a correction
# after a rejected draft, a bonus after every draft was accepted, plain where nothing was drafted.
CORRECTION = "correction ✗ (model's own token after a rejected draft)"
BONUS = "bonus ✓ (model's own token after every draft was accepted)"
OWN = "model's own token (nothing drafted)"
DRAFT, EARLIER = "accepted draft", "earlier text"
FOCUS = "focused node"
# One label (and colour) per draft source; DRAFT is for traces that name none (older files).
BY_SOURCE = {s: f"draft · {src.NAMES[s]}" for s in src.SYMBOLS}
AGREED = f"draft · {src.AGREED}"
DRAFT_LABELS = (DRAFT, AGREED, *BY_SOURCE.values())
MODEL_LABELS = (CORRECTION, BONUS, OWN)
OWN_LABELS = {CORRECTION_KIND: CORRECTION, BONUS_KIND: BONUS}
# Colours from components/palette.py: a draft by its source (as in the tree and the attention pattern), the
# model's own token by the verdict that ended the walk; labels are the second cue (legend and hover).
COLOR_MAP = {DRAFT: palette.SOURCES["esp"], **{BY_SOURCE[s]: palette.SOURCES[s] for s in BY_SOURCE},
             AGREED: palette.AGREED, CORRECTION: palette.CORRECTION, BONUS: palette.BONUS, OWN: palette.NEUTRAL,
             EARLIER: palette.NEUTRAL, FOCUS: palette.FOCUS}
# Beyond this many tokens the view shows the newest ones and one summary of the rest, so the payload
# sent on every streamed update stays bounded whatever the run length.
MAX_TOKENS = 300


def draft_label(sources: Sequence[str]) -> str:
    if not sources:
        return DRAFT
    return AGREED if len(sources) > 1 else BY_SOURCE.get(sources[0], DRAFT)


def own_label(step: StepTrace) -> str:
    """The label of the step's own token: CORRECTION, BONUS or OWN."""
    return OWN_LABELS.get(own_kind(step), OWN)


def token_sources(steps: Sequence[StepTrace | dict], upto: int | None = None,
                  limit: int | None = MAX_TOKENS, focus: int | None = None) -> list[tuple[str, str]]:
    """(token text, label) for every token emitted by steps 0..upto: a step's first len(accepted)
    emitted tokens are accepted drafts (labelled by their source), the one after them is the model's own
    token (a correction, a bonus, or plain where nothing was drafted). Past `limit` tokens, the oldest are
    folded into one EARLIER entry. With `focus` (a node index of step `upto`), that node's token is labelled
    FOCUS when it is in the text (an accepted draft, or the root: the token emitted just before the step)."""
    steps = as_steps(steps)
    upto = len(steps) - 1 if upto is None else upto
    pairs = []
    for s in steps[: upto + 1]:
        path, own = accepted_nodes(s), own_label(s)
        for i, text in enumerate(s.emitted_text):
            pairs.append((text, draft_label(path[i].sources) if i < len(path) else own))
    at = focus_index(steps[upto], focus, len(pairs) - len(steps[upto].emitted_text)) if steps else None
    if at is not None:
        pairs[at] = (pairs[at][0], FOCUS)
    if limit is None or len(pairs) <= limit:
        return pairs
    old = pairs[: len(pairs) - limit]
    drafts = sum(label in DRAFT_LABELS for _, label in old)
    note = f"[… {len(old)} earlier tokens, {drafts} of them accepted drafts …] "
    return [(note, EARLIER)] + pairs[-limit:]


def focus_index(step: StepTrace, focus: int | None, start: int) -> int | None:
    """Where node `focus` of `step` sits in the text, given that the step's first token is at `start`;
    None when it is not in the text (rejected, pruned, cut at the end, or the prompt's last token)."""
    node = focus_node(step, focus)
    if node is None:
        return None
    if node.status == ROOT:
        return start - 1 if start > 0 else None
    if node.status == ACCEPTED and node.depth <= len(step.emitted_text):
        return start + node.depth - 1
    return None


def token_origin(steps: Sequence[StepTrace | dict], upto: int, index: int,
                 limit: int | None = MAX_TOKENS) -> tuple[int, int] | None:
    """Where entry `index` of token_sources(steps, upto, limit) came from: (step, place among that step's
    emitted tokens); None for the summary of earlier tokens, or past the text."""
    counts = [len(s.emitted_text) for s in as_steps(steps[: upto + 1])]
    total = sum(counts)
    if limit is not None and total > limit:  # token_sources' first entry is then the summary
        if index == 0:
            return None
        index += total - limit - 1
    if not 0 <= index < total:
        return None
    for step, n in enumerate(counts):
        if index < n:
            return step, index
        index -= n
    return None

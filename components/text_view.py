"""The generated text as HighlightedText pairs, each token labelled by how it came."""
from __future__ import annotations

from typing import Sequence

from esp.trace import ACCEPTED, ROOT, StepTrace

from . import sources as src
from .common import BONUS_COLOR, STATUS_COLORS, accepted_nodes, as_steps
from .focus import FOCUS_COLOR, focus_node

DRAFT, BONUS, EARLIER = "accepted draft", "bonus (model's own token)", "earlier text"
FOCUS = "focused node"
# One label (and colour) per draft source; DRAFT is for traces that name none (older files).
BY_SOURCE = {s: f"draft · {src.NAMES[s]}" for s in src.SYMBOLS}
AGREED = f"draft · {src.AGREED}"
DRAFT_LABELS = (DRAFT, AGREED, *BY_SOURCE.values())
COLOR_MAP = {DRAFT: STATUS_COLORS["accepted"], BONUS: BONUS_COLOR, EARLIER: "#e4e4e4",
             BY_SOURCE["esp"]: STATUS_COLORS["accepted"], BY_SOURCE["lookup"]: "#e0a030",
             BY_SOURCE["table"]: "#2fa5b8", BY_SOURCE["pool"]: "#c0609a", AGREED: "#8a9a2a",
             FOCUS: FOCUS_COLOR}
# Beyond this many tokens the view shows the newest ones and one summary of the rest, so the payload
# sent on every streamed update stays bounded whatever the run length.
MAX_TOKENS = 300


def draft_label(sources: Sequence[str]) -> str:
    if not sources:
        return DRAFT
    return AGREED if len(sources) > 1 else BY_SOURCE.get(sources[0], DRAFT)


def token_sources(steps: Sequence[StepTrace | dict], upto: int | None = None,
                  limit: int | None = MAX_TOKENS, focus: int | None = None) -> list[tuple[str, str]]:
    """(token text, label) for every token emitted by steps 0..upto: a step's first len(accepted)
    emitted tokens are accepted drafts (labelled by their source), the one after them is the target's
    bonus token. Past `limit` tokens, the oldest are folded into one EARLIER entry. With `focus` (a node
    index of step `upto`), that node's token is labelled FOCUS when it is in the text (an accepted draft,
    or the root: the token emitted just before the step)."""
    steps = as_steps(steps)
    upto = len(steps) - 1 if upto is None else upto
    pairs = []
    for s in steps[: upto + 1]:
        path = accepted_nodes(s)
        for i, text in enumerate(s.emitted_text):
            pairs.append((text, draft_label(path[i].sources) if i < len(path) else BONUS))
    at = focus_index(steps[upto], focus, len(pairs) - len(steps[upto].emitted_text)) if steps else None
    if at is not None:
        pairs[at] = (pairs[at][0], FOCUS)
    if limit is None or len(pairs) <= limit:
        return pairs
    old = pairs[: len(pairs) - limit]
    drafts = sum(label not in (BONUS, FOCUS) for _, label in old)
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

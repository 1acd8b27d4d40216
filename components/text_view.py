"""The generated text as HighlightedText pairs, each token labelled by how it came."""
from __future__ import annotations

from typing import Sequence

from esp.trace import ACCEPTED, StepTrace

from . import sources as src
from .common import BONUS_COLOR, STATUS_COLORS, as_steps

DRAFT, BONUS, EARLIER = "accepted draft", "bonus (model's own token)", "earlier text"
# One label (and colour) per draft source; DRAFT is for traces that name none (older files).
BY_SOURCE = {s: f"draft · {src.NAMES[s]}" for s in src.SYMBOLS}
AGREED = f"draft · {src.AGREED}"
DRAFT_LABELS = (DRAFT, AGREED, *BY_SOURCE.values())
COLOR_MAP = {DRAFT: STATUS_COLORS["accepted"], BONUS: BONUS_COLOR, EARLIER: "#e4e4e4",
             BY_SOURCE["esp"]: STATUS_COLORS["accepted"], BY_SOURCE["lookup"]: "#e0a030",
             BY_SOURCE["table"]: "#2fa5b8", BY_SOURCE["pool"]: "#c0609a", AGREED: "#8a9a2a"}
# Beyond this many tokens the view shows the newest ones and one summary of the rest, so the payload
# sent on every streamed update stays bounded whatever the run length.
MAX_TOKENS = 300


def draft_label(sources: Sequence[str]) -> str:
    if not sources:
        return DRAFT
    return AGREED if len(sources) > 1 else BY_SOURCE.get(sources[0], DRAFT)


def token_sources(steps: Sequence[StepTrace | dict], upto: int | None = None,
                  limit: int | None = MAX_TOKENS) -> list[tuple[str, str]]:
    """(token text, label) for every token emitted by steps 0..upto: a step's first len(accepted)
    emitted tokens are accepted drafts (labelled by their source), the one after them is the target's
    bonus token. Past `limit` tokens, the oldest are folded into one EARLIER entry."""
    steps = as_steps(steps)
    upto = len(steps) - 1 if upto is None else upto
    pairs = []
    for s in steps[: upto + 1]:
        path = sorted((n for n in s.nodes if n.status == ACCEPTED), key=lambda n: n.depth)
        for i, text in enumerate(s.emitted_text):
            pairs.append((text, draft_label(path[i].sources) if i < len(path) else BONUS))
    if limit is None or len(pairs) <= limit:
        return pairs
    old = pairs[: len(pairs) - limit]
    drafts = sum(label != BONUS for _, label in old)
    note = f"[… {len(old)} earlier tokens, {drafts} of them accepted drafts …] "
    return [(note, EARLIER)] + pairs[-limit:]

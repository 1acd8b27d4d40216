"""The generated text as HighlightedText pairs, each token labelled by how it came."""
from __future__ import annotations

from typing import Sequence

from esp.trace import StepTrace

from .common import BONUS_COLOR, STATUS_COLORS, as_steps

DRAFT, BONUS = "accepted draft", "bonus (model's own token)"
COLOR_MAP = {DRAFT: STATUS_COLORS["accepted"], BONUS: BONUS_COLOR}


def token_sources(steps: Sequence[StepTrace | dict], upto: int | None = None) -> list[tuple[str, str]]:
    """(token text, label) for every token emitted by steps 0..upto: a step's first len(accepted)
    emitted tokens are accepted drafts, the one after them is the target's bonus token."""
    steps = as_steps(steps)
    upto = len(steps) - 1 if upto is None else upto
    return [
        (text, DRAFT if i < len(s.accepted) else BONUS)
        for s in steps[: upto + 1]
        for i, text in enumerate(s.emitted_text)
    ]

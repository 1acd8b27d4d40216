"""Where a drafted token came from (NodeTrace.sources): one mark, tag and label per source, shared by
the tree, the mask and the text views so that one legend reads for all three."""
from __future__ import annotations

from typing import Sequence

from esp.trace import ESP, LOOKUP, POOL, TABLE

# Marker symbol in the tree, letter tag in the mask's row names, words in legends and the text view.
SYMBOLS = {ESP: "circle", LOOKUP: "diamond", TABLE: "triangle-up", POOL: "star-square"}
TAGS = {ESP: "E", LOOKUP: "L", TABLE: "T", POOL: "P"}
NAMES = {ESP: "ESP mask", LOOKUP: "lookup (copied from prompt/output)", TABLE: "logit table",
         POOL: "lookahead pool"}
AGREED = "several sources agreed"
AGREED_SYMBOL = "star"


def symbol(sources: Sequence[str]) -> str:
    """The tree marker for a node proposed by `sources` (several agreeing sources get a star)."""
    if len(sources) > 1:
        return AGREED_SYMBOL
    return SYMBOLS.get(sources[0], "circle") if sources else "circle"


def tag(sources: Sequence[str]) -> str:
    """Short letters for the mask's row names, e.g. 'E' or 'E+L'; '' when unknown."""
    return "+".join(TAGS.get(s, "?") for s in sources)


def describe(sources: Sequence[str]) -> str:
    """Plain words for hovers and the text view, e.g. 'ESP mask + lookup (copied ...)'."""
    return " + ".join(NAMES.get(s, s) for s in sources) if sources else "unknown source"


def legend_line() -> str:
    """One line explaining every mark, for captions."""
    marks = {ESP: "●", LOOKUP: "◆", TABLE: "▲", POOL: "■"}
    return (" · ".join(f"{marks[s]} {TAGS[s]} = {NAMES[s]}" for s in SYMBOLS)
            + f" · ★ = {AGREED}")

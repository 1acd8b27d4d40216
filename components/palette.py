"""The page's one palette: Okabe & Ito's (2008) colours, chosen to stay apart for the common colour-vision
deficiencies, each given one meaning across every figure.

Two sets carry meaning and never share a colour: where a draft came from (SOURCES: the text, the tree's node
outlines and the attention pattern's row names) and what verification made of it (VERDICTS: the tree, the
alignment, the Mask Lens, the verifier's eye). The model's own token of a step is coloured like the verdict
that ended the walk: a *correction* (after a rejected draft) in the rejection's vermillion, a *bonus* (after
every draft was accepted) in the acceptance's green, so a colour says what happened at that position. Colour
never works alone: every figure adds a second cue (a glyph, a dash, a hatch or a label), and
tests/test_palette.py holds every pair that one view shows together apart under deuteranopia and protanopia.
Neutral tones (grey with alpha, components.common) are backgrounds and de-emphasis, not categories.
"""
from __future__ import annotations

from esp.trace import ESP, LOOKUP, POOL, TABLE

OKABE_ITO = {"orange": "#E69F00", "sky blue": "#56B4E9", "bluish green": "#009E73", "yellow": "#F0E442",
             "blue": "#0072B2", "vermillion": "#D55E00", "reddish purple": "#CC79A7"}

# Where a draft came from.
SOURCES = {ESP: OKABE_ITO["blue"], LOOKUP: OKABE_ITO["orange"], TABLE: OKABE_ITO["sky blue"],
           POOL: OKABE_ITO["reddish purple"]}
AGREED = OKABE_ITO["yellow"]  # several sources proposed the same token

# What verification made of a draft, and the model's own token after it.
ACCEPTED, REJECTED = OKABE_ITO["bluish green"], OKABE_ITO["vermillion"]
CORRECTION, BONUS = REJECTED, ACCEPTED
# Glyphs that say the same as the verdict colours (labels, hovers, text bars).
ACCEPT_MARK, REJECT_MARK = "✓", "✗"

# Two roles outside both sets, each far from every colour above under either deficiency: the root (the token
# emitted last, drawn as a square) and the focused node's outline in every view.
ROOT = "#404040"
FOCUS = "#c0007f"
# The text's tokens that no draft won (plain decoding's, the prefill's) and its folded earlier tokens.
NEUTRAL = "#c0c0c0"

# Sequential scale for probabilities (the Mask Lens): cividis, designed to read the same with a colour-vision
# deficiency and in greyscale; low = dark blue, high = yellow.
PROBABILITY_SCALE = "Cividis"

# Figures whose categories are quantities, not verdicts (the timing phases, the comparison's two measures):
# the same Okabe-Ito colours in a fixed order, always with a hatch or a label as well.
SERIES = (OKABE_ITO["orange"], OKABE_ITO["sky blue"], OKABE_ITO["blue"], OKABE_ITO["bluish green"],
          OKABE_ITO["reddish purple"], OKABE_ITO["yellow"])
HATCHES = ("/", "\\", "x", "-", "|", ".")

# The colours each view shows side by side (what tests/test_palette.py holds apart).
TOGETHER = {
    "text": (*SOURCES.values(), AGREED, CORRECTION, BONUS, FOCUS, NEUTRAL),
    "tree": (ACCEPTED, REJECTED, ROOT, FOCUS, *SOURCES.values(), AGREED),
    "attention": (ACCEPTED, *SOURCES.values(), AGREED, FOCUS),
    "verdicts": (ACCEPTED, REJECTED, FOCUS, ROOT),
    "series": SERIES,
}


def rgba(hex_color: str, alpha: float) -> str:
    """'#RRGGBB' as an rgba() string with the given opacity (bands, washes)."""
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"

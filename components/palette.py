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

# The focused node's outline in every view: a deep pink, far from every colour above under either deficiency.
FOCUS = "#c0007f"
# The same pink, lighter, where an outline in it sits on a dark page (3:1 against it, as non-text must be).
FOCUS_DARK = "#ff6ec7"
# Neutral tones (mid-grey with alpha: they read on a light page and a dark one) carry no category; their
# shape or label says what they are: the root (a square), tokens no draft won (plain decoding's, the
# prefill's: labelled in the text), the verifier's choices nobody drafted, cells whose value is not known yet.
ROOT = "rgba(128,128,128,0.95)"
NEUTRAL = "rgba(128,128,128,0.5)"

# Sequential scale for the Mask Lens (probabilities, layers): cividis, designed to read the same with a
# colour-vision deficiency and in greyscale; low = dark blue, high = yellow. Drawn at SHADE opacity under text
# in the page's own colour, so that the text reads on every cell on a light page and a dark one.
PROBABILITY_SCALE = "Cividis"
SHADE = 0.6

# Figures whose categories are quantities, not verdicts (the timing phases, the comparison's two measures):
# the same Okabe-Ito colours in a fixed order, always with a hatch or a label as well.
SERIES = (OKABE_ITO["orange"], OKABE_ITO["sky blue"], OKABE_ITO["blue"], OKABE_ITO["bluish green"],
          OKABE_ITO["reddish purple"], OKABE_ITO["yellow"])
HATCHES = ("/", "\\", "x", "-", "|", ".")

# The categorical colours each view shows side by side (what tests/test_palette.py holds apart).
TOGETHER = {
    "text": (*SOURCES.values(), AGREED, CORRECTION, BONUS, FOCUS),
    "tree": (ACCEPTED, REJECTED, FOCUS, *SOURCES.values(), AGREED),
    "attention": (ACCEPTED, *SOURCES.values(), AGREED, FOCUS),
    "verdicts": (ACCEPTED, REJECTED, FOCUS),
    "series": SERIES,
}


def rgba(hex_color: str, alpha: float) -> str:
    """'#RRGGBB' as an rgba() string with the given opacity (bands, washes)."""
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"

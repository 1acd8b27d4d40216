"""The page's categorical colours stay apart for readers with the common colour-vision deficiencies: every pair
a view shows together differs by at least THRESHOLD in CAM02-UCS (colorspacious) with normal vision and under a
full deuteranopia and protanopia simulation; and every figure takes its colours from components/palette.py."""
from __future__ import annotations

import itertools
import re
from pathlib import Path

import numpy as np
import pytest

from components import palette

colorspacious = pytest.importorskip("colorspacious")

ROOT = Path(__file__).resolve().parents[1]
# CAM02-UCS distance below which two colours are taken as hard to tell apart (about 10-12 is where palette
# tools start to warn; one just-noticeable difference is about 1).
THRESHOLD = 12.0
VISIONS = ("deuteranomaly", "protanomaly")


def _rgb(hex_color: str) -> np.ndarray:
    return np.array([int(hex_color[i : i + 2], 16) for i in (1, 3, 5)]) / 255


def seen(hex_color: str, deficiency: str | None) -> np.ndarray:
    """The colour as a reader with `deficiency` (full severity; None = normal vision) sees it, in sRGB."""
    rgb = _rgb(hex_color)
    if deficiency is None:
        return rgb
    space = {"name": "sRGB1+CVD", "cvd_type": deficiency, "severity": 100}
    return np.clip(colorspacious.cspace_convert(rgb, space, "sRGB1"), 0, 1)


def distance(a: str, b: str, deficiency: str | None) -> float:
    return float(colorspacious.deltaE(seen(a, deficiency), seen(b, deficiency), input_space="sRGB1"))


PAIRS = sorted({(view, *sorted(pair)) for view, colours in palette.TOGETHER.items()
                for pair in itertools.combinations(set(colours), 2)})


@pytest.mark.parametrize("view,a,b", PAIRS, ids=[f"{v}:{a}-{b}" for v, a, b in PAIRS])
def test_every_pair_shown_together_stays_apart(view, a, b):
    for deficiency in (None, *VISIONS):
        d = distance(a, b, deficiency)
        assert d >= THRESHOLD, f"{view}: {a} and {b} are {d:.1f} apart ({deficiency or 'normal vision'})"


def test_the_threshold_is_not_toothless():
    """The old page's red and green (accepted / rejected) fail the same check under deuteranopia."""
    assert distance("#2e9d57", "#d9544f", None) >= THRESHOLD
    assert distance("#2e9d57", "#d9544f", "deuteranomaly") < THRESHOLD


def test_sources_and_verdicts_never_share_a_colour():
    sources = {*palette.SOURCES.values(), palette.AGREED}
    assert len(sources) == len(palette.SOURCES) + 1
    assert not sources & {palette.ACCEPTED, palette.REJECTED, palette.FOCUS}
    for neutral in (palette.ROOT, palette.NEUTRAL):  # no category: grey with alpha, named by shape or label
        assert re.fullmatch(r"rgba\((\d+),\1,\1,0\.\d+\)", neutral), neutral
    assert {palette.CORRECTION, palette.BONUS} == {palette.REJECTED, palette.ACCEPTED}  # the verdict they follow


def test_figures_take_their_colours_from_the_palette():
    """No hex colour is written in a figure module but the palette's own (the lecture's page colours and the
    theme's text colours are page styling, not categories)."""
    allowed = {"palette.py", "lecture.py"}
    found = {}
    for path in (ROOT / "components").glob("*.py"):
        if path.name in allowed:
            continue
        text = path.read_text()
        hexes = set(re.findall(r"#[0-9a-fA-F]{6}\b", text)) - {"#222222", "#e8e8e8"}  # common.THEMES
        if hexes:
            found[path.name] = sorted(hexes)
    assert not found, found

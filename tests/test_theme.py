"""Figures read on a light page and on a dark one: clear backgrounds, no white and no opaque grey anywhere
in a figure, and apply_theme colours text for pages without the app's CSS."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from components.align_plot import align_figure
from components.common import THEMES, apply_theme, message_figure
from components.compare_view import compare_figure, compare_rows
from components.cost_view import cost_figure
from components.export import read_trace_json
from components.mask_plot import mask_figure
from components.size_view import size_figure
from components.stats import accept_hist_figure, run_summary, timing_figure
from components.tree_plot import tree_figure
from esp.trace import RunSummary

ROOT = Path(__file__).resolve().parents[1]
HEX = re.compile(r"^#([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$")
RGB = re.compile(r"^rgba?\((\d+),\s*(\d+),\s*(\d+)(?:,\s*([\d.]+))?\)$")


def figures():
    meta, steps = read_trace_json(ROOT / "assets" / "trace_masks.json")
    i = next(s.step for s in steps if s.accepted)
    summary = run_summary(steps, i)
    rows = compare_rows([{"label": "ar", "summary": RunSummary("ar", 10, 10, 1.0, 1.0, 10.0, {}), "tokens": [1], "top2": []},
                         {"label": "esp", "summary": RunSummary("esp", 10, 5, 2.0, 0.8, 12.5, {1: 4}), "tokens": [1],
                          "top2": []}])
    return {"tree": tree_figure(steps[i], focus=1), "prefill tree": tree_figure(steps[0]),
            "mask": mask_figure(steps[i], focus=1), "prefill mask": mask_figure(steps[0]),
            "align": align_figure(steps, i, focus=1), "cost": cost_figure(steps, i, meta["curve"]),
            "hist": accept_hist_figure(summary, 1), "timing": timing_figure(steps, i),
            "compare": compare_figure(rows), "size": size_figure(), "message": message_figure("t", "note")}


def colours(node, path=""):
    """Every (path, value) whose key names a colour, anywhere in a figure's JSON."""
    if isinstance(node, dict):
        for k, v in node.items():
            if "color" in k.lower() and isinstance(v, str):
                yield f"{path}.{k}", v
            elif "color" in k.lower() and isinstance(v, list):
                yield from ((f"{path}.{k}", c) for c in v if isinstance(c, str))
            elif k == "colorscale" and isinstance(v, list):
                yield from ((f"{path}.colorscale", c[1]) for c in v)
            else:
                yield from colours(v, f"{path}.{k}")
    elif isinstance(node, list):
        for j, v in enumerate(node):
            yield from colours(v, f"{path}[{j}]")


def opaque_neutral(value: str) -> bool:
    """White, or an opaque grey (r = g = b): it would show as a light or dark blotch on one of the themes."""
    v = value.strip().lower()
    if v in ("white", "black", "grey", "gray", "lightgrey", "lightgray", "darkgrey", "darkgray"):
        return True
    if HEX.match(v):
        h = v[1:] if len(v) == 7 else "".join(c * 2 for c in v[1:])
        return h[0:2] == h[2:4] == h[4:6]
    m = RGB.match(v)
    if m:
        r, g, b, a = m.groups()
        return r == g == b and (a is None or float(a) >= 0.99)
    return False


@pytest.fixture(scope="module")
def figs():
    return figures()


def test_backgrounds_are_clear(figs):
    for name, fig in figs.items():
        layout = fig.to_plotly_json()["layout"]
        for key in ("paper_bgcolor", "plot_bgcolor"):
            assert RGB.match(layout[key]) and RGB.match(layout[key]).group(4) == "0", (name, key, layout[key])


def test_no_white_or_opaque_grey_in_any_figure(figs):
    for name, fig in figs.items():
        bad = [(p, c) for p, c in colours(fig.to_plotly_json()) if opaque_neutral(c)]
        assert not bad, (name, bad)


def test_the_check_catches_what_it_should():
    assert all(opaque_neutral(c) for c in ("white", "#fff", "#F1F1F1", "#333", "rgb(200, 200, 200)"))
    assert not any(opaque_neutral(c) for c in ("#2e9d57", "rgba(128,128,128,0.5)", "rgba(0,0,0,0)"))


def test_apply_theme(figs):
    dark = apply_theme(tree_figure(read_trace_json(ROOT / "assets" / "trace_masks.json")[1][2]), "dark")
    assert dark.layout.font.color == THEMES["dark"]
    assert apply_theme(message_figure("t", "n"), "light").layout.font.color == THEMES["light"]
    with pytest.raises(ValueError, match="theme must be one of light, dark"):
        apply_theme(message_figure("t", "n"), "sepia")

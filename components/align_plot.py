"""Per-layer cosine alignment of mask states with the real future tokens, accepted vs rejected."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from esp.trace import AlignmentTrace, StepTrace

from . import palette
from .common import as_steps, base_layout, figure, message_figure, two_panels
from .focus import mask_records

GROUPS = {"accepted": palette.ACCEPTED, "rejected": palette.REJECTED}
# The second cue beside the colour: accepted lines solid with round marks, rejected dashed with crosses.
DASHES = {"accepted": "solid", "rejected": "dash"}
SYMBOLS = {"accepted": "circle", "rejected": "x"}
NO_ALIGNMENT = "No alignment yet: ESP records it once a mask's position is filled."


def layer_stats(records: Sequence[AlignmentTrace], raw: bool = False) -> dict[str, dict]:
    """Per group (accepted / rejected): per-layer mean, mean - std, mean + std, and the record count."""
    out = {}
    for group in GROUPS:
        rows = [r.cos_raw if raw else r.cos for r in records if r.accepted == (group == "accepted")]
        if rows:
            a = np.asarray(rows, dtype=float)
            mean, std = a.mean(0), a.std(0)
            out[group] = {"mean": mean, "lo": mean - std, "hi": mean + std, "n": len(rows)}
    return out


def align_figure(steps: Sequence[StepTrace | dict], upto: int | None = None, raw: bool = False,
                 height: int = 340, focus: int | None = None) -> go.Figure:
    """Two panels: the records resolved at step `upto`, and all records of steps 0..upto. With `focus` (a
    node index of step `upto`), that node's masks' own curves are drawn thick on the left panel (only the
    node where the walk stopped has them: its masks draft the next step)."""
    steps = as_steps(steps)
    upto = len(steps) - 1 if upto is None else upto
    run = [r for s in steps[: upto + 1] for r in s.alignment]
    focused = mask_records(steps, upto, focus) if focus is not None else []
    if not run and not focused:
        return message_figure(_title(raw), NO_ALIGNMENT, height)
    data = step_bands(steps[upto].alignment, raw) + _bands("2", run, raw, legend=True)
    data += [_focus_line(r, raw, focus) for r in focused]
    return figure(data, _layout(raw, height, (f"this step ({upto})", f"run so far (steps 0-{upto})")))


def align_run_figure(steps: Sequence[StepTrace | dict], raw: bool = False, height: int = 340) -> go.Figure:
    """The player's alignment: every record of the run on the right panel; the left one, "this step", is the
    shown step's (step_bands and focus_lines of its frame, which the player draws there)."""
    steps = as_steps(steps)
    run = [r for s in steps for r in s.alignment]
    if not run:
        return message_figure(_title(raw), NO_ALIGNMENT, height)
    return figure(_bands("2", run, raw, legend=True),
                  _layout(raw, height, ("this step", f"the run (steps 0-{len(steps) - 1})")))


def step_bands(records: Sequence[AlignmentTrace], raw: bool = False) -> list[dict]:
    """The left panel's bands: mean and ±1 std per group of `records` (a step's own)."""
    return _bands("", records, raw, legend=False)


def focus_lines(steps: Sequence[StepTrace | dict], upto: int, focus: int, raw: bool = False) -> list[dict]:
    """Node `focus` of step `upto`: its masks' own curves, for the left panel (none unless it is where the
    walk stopped and later steps resolved its masks)."""
    return [_focus_line(r, raw, focus) for r in mask_records(steps, upto, focus)]


def _title(raw: bool) -> str:
    return "Mask-to-future alignment (cosine per layer" + (", raw)" if raw else ", mean-centred)")


def _layout(raw: bool, height: int, titles: tuple[str, str]) -> dict:
    layout = base_layout(_title(raw), height, **two_panels(titles))
    layout["margin"]["t"] = 60
    axis_title = {"text": "layer (0 = embeddings)", "font": {"size": 10}}
    layout["xaxis"]["title"] = layout["xaxis2"]["title"] = axis_title
    layout["yaxis"]["title"] = {"text": "cosine"}
    layout["yaxis2"]["matches"] = "y"
    return layout


def _bands(axis: str, records: Sequence[AlignmentTrace], raw: bool, legend: bool) -> list[dict]:
    return [t for group, st in layer_stats(records, raw).items() for t in _band(axis, group, st, legend)]


def _band(axis: str, group: str, st: dict, legend: bool) -> list[dict]:
    """Mean line with a ±1 std band: the upper edge (no line), then the lower edge filled up to it."""
    color = GROUPS[group]
    layers = list(range(len(st["mean"])))
    common = {"type": "scatter", "x": layers, "mode": "lines", "xaxis": f"x{axis}", "yaxis": f"y{axis}",
              "legendgroup": group}
    return [
        {**common, "y": st["hi"].tolist(), "line": {"width": 0}, "hoverinfo": "skip", "showlegend": False,
         "name": f"{group} +1 std"},
        {**common, "y": st["lo"].tolist(), "line": {"width": 0}, "fill": "tonexty",
         "fillcolor": palette.rgba(color, 0.18), "hoverinfo": "skip", "showlegend": False, "name": f"{group} -1 std"},
        {**common, "y": st["mean"].tolist(), "line": {"color": color, "width": 2, "dash": DASHES[group]},
         "mode": "lines+markers", "marker": {"symbol": SYMBOLS[group], "size": 5, "color": color},
         "showlegend": legend, "name": f"{group} (n={st['n']})",
         "hovertemplate": f"{group} layer %{{x}}: %{{y:.3f}}<extra></extra>"},
    ]


def _focus_line(r: AlignmentTrace, raw: bool, node: int) -> dict:
    """One focused mask's own cosine per layer, thick, coloured by whether its draft was accepted."""
    group = "accepted" if r.accepted else "rejected"
    ys = r.cos_raw if raw else r.cos
    return {"type": "scatter", "x": list(range(len(ys))), "y": list(ys), "mode": "lines",
            "name": f"node {node} mask {r.j} ({group})",
            "line": {"color": GROUPS[group], "width": 5, "dash": DASHES[group]},
            "hovertemplate": f"node {node} mask {r.j}, layer %{{x}}: %{{y:.3f}}<extra>{group}</extra>"}


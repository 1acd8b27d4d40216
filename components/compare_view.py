"""Side-by-side numbers for one prompt decoded by several methods (autoregressive first)."""
from __future__ import annotations

import plotly.graph_objects as go

from esp.trace import RunSummary

from .common import base_layout, figure, message_figure, two_panels

COLUMNS = ["method", "tokens", "forwards", "τ", "tokens/s", "speed-up vs ar", "same text as ar"]


def compare_rows(results: list[tuple[str, RunSummary, str]]) -> list[list]:
    """Table rows from (label, summary, text) triples; speed-up is tokens/s over the 'ar' run's."""
    base = next(((s, t) for _, s, t in results if s.method == "ar"), None)
    rows = []
    for label, s, text in results:
        speedup = s.tokens_per_s / base[0].tokens_per_s if base and base[0].tokens_per_s else float("nan")
        same = "—" if base is None else "yes" if text == base[1] else "no"
        rows.append([label, s.tokens, s.forwards, round(s.tau, 3), round(s.tokens_per_s, 2), round(speedup, 2), same])
    return rows


def compare_figure(rows: list[list], height: int = 300) -> go.Figure:
    """Bars of tau and speed-up per method, with the break-even line at 1."""
    title = "τ and speed-up per method"
    if not rows:
        return message_figure(title, "Run a comparison to fill this chart.", height)
    names = [r[0] for r in rows]
    data = [
        {"type": "bar", "x": names, "y": [r[3] for r in rows], "marker": {"color": "#2e9d57"}, "name": "τ"},
        {"type": "bar", "x": names, "y": [r[5] for r in rows], "marker": {"color": "#3b6fb6"},
         "name": "speed-up", "xaxis": "x2", "yaxis": "y2"},
    ]
    even = [{"type": "line", "x0": 0, "x1": 1, "y0": 1, "y1": 1, "xref": f"x{a} domain", "yref": f"y{a}",
             "line": {"color": "#999", "dash": "dot"}} for a in ("", "2")]
    layout = base_layout(title, height, showlegend=False, shapes=even,
                         **two_panels(("τ (tokens per forward)", "speed-up vs ar (tokens/s)")))
    layout["margin"]["t"] = 60
    layout["xaxis"]["tickangle"] = layout["xaxis2"]["tickangle"] = -30  # long method labels stay whole
    return figure(data, layout)

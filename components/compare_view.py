"""Side-by-side numbers for one prompt decoded by several methods (autoregressive first)."""
from __future__ import annotations

import plotly.graph_objects as go

from esp.bench.verdict import classify, label

from . import palette
from .common import INK, base_layout, figure, message_figure, two_panels

COLUMNS = ["method", "tokens", "forwards", "τ", "tokens/s", "speed-up vs ar", "lossless vs ar"]


def compare_rows(results: list[dict], dtype: str = "float32") -> list[list]:
    """Table rows from each method's {"label", "summary" (RunSummary), "tokens", "top2"}: speed-up is
    tokens/s over the 'ar' run's, and the last column the verdict against ar in the run's dtype
    (esp.bench.verdict: exact, a near-tie flip at rounding level, or FAILED)."""
    base = next((r for r in results if r["summary"].method == "ar"), None)
    rows = []
    for r in results:
        s, ar = r["summary"], base and base["summary"]
        speedup = s.tokens_per_s / ar.tokens_per_s if ar and ar.tokens_per_s else float("nan")
        verdict = ("—" if base is None else "baseline" if r is base
                   else label(classify(base["tokens"], base["top2"], r["tokens"], r["top2"], dtype)))
        rows.append([r["label"], s.tokens, s.forwards, round(s.tau, 3), round(s.tokens_per_s, 2), round(speedup, 2),
                     verdict])
    return rows


def compare_figure(rows: list[list], height: int | None = None) -> go.Figure:
    """Horizontal bars of tau and speed-up per method (names on the left axis, where long method labels
    stay whole), with the break-even line at 1."""
    title = "τ and speed-up per method"
    if not rows:
        return message_figure(title, "Run a comparison to fill this chart.", height or 300)
    names = [r[0] for r in rows]
    data = [
        {"type": "bar", "orientation": "h", "y": names, "x": [r[3] for r in rows], "marker": {"color": palette.SERIES[2]},
         "name": "τ", "hovertemplate": "%{y}: τ %{x}<extra></extra>"},
        {"type": "bar", "orientation": "h", "y": names, "x": [r[5] for r in rows], "marker": {"color": palette.SERIES[0]},
         "name": "speed-up", "xaxis": "x2", "yaxis": "y2", "hovertemplate": "%{y}: %{x}× ar<extra></extra>"},
    ]
    even = [{"type": "line", "x0": 1, "x1": 1, "y0": 0, "y1": 1, "xref": f"x{a}", "yref": f"y{a} domain",
             "line": {"color": INK, "dash": "dot"}} for a in ("", "2")]
    layout = base_layout(title, height or 80 + 34 * len(rows), showlegend=False, shapes=even,
                         **two_panels(("τ (tokens per forward)", "speed-up vs ar (tokens/s)")))
    layout["margin"]["t"] = 60
    layout["yaxis"]["autorange"] = "reversed"  # 'ar' on top, as in the table
    layout["yaxis2"].update(matches="y", showticklabels=False)
    return figure(data, layout)

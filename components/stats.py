"""Run statistics from traces: tau, speed, forwards saved, acceptance histogram, timing breakdown."""
from __future__ import annotations

from typing import Sequence

import plotly.graph_objects as go

from esp.trace import RunSummary, StepTrace, summarize

from . import palette
from .common import FAINT, INK, as_steps, base_layout, figure, message_figure

# Engine phases in the order they run (StepTrace.timings keys; "total" is their sum); each with a colour and a
# hatch, so that the stack reads without colour too.
PHASES = ("draft", "mask", "forward", "verify", "commit", "trace")
CURRENT = INK  # the shown step's bar in the histogram (the others are FAINT), labelled "this step"
# Steps drawn as bars: at ~400 bars in a half-width panel they blur into a moire.
WINDOW = 120


def run_summary(steps: Sequence[StepTrace | dict], upto: int | None = None) -> RunSummary:
    """The engine's summary over steps 0..upto, timed by the engine's own per-step totals."""
    steps = as_steps(steps)
    done = steps[: (len(steps) if upto is None else upto + 1)]
    method = done[0].method if done else "?"
    return summarize(method, done, sum(s.timings.get("total", 0.0) for s in done))


def stats_cells(summary: RunSummary) -> list[tuple[str, str]]:
    """The headline numbers as (heading, value) pairs (numbers only: no text from a trace)."""
    saved = summary.tokens - summary.forwards  # plain decoding needs one forward per token
    return [("tokens", str(summary.tokens)), ("forwards", str(summary.forwards)),
            ("τ (tokens/forward)", f"{summary.tau:.2f}"), ("tokens/s", f"{summary.tokens_per_s:.1f}"),
            ("forwards saved", str(saved))]


def stats_markdown(summary: RunSummary) -> str:
    """The headline numbers as a one-row Markdown table."""
    cells = stats_cells(summary)
    return (f"| {' | '.join(h for h, _ in cells)} |\n|{'---:|' * len(cells)}\n"
            f"| {' | '.join(v for _, v in cells)} |")


def stats_html(summary: RunSummary) -> str:
    """The headline numbers as a one-row HTML table (the player's; its cells are numbers and fixed words)."""
    cells = stats_cells(summary)
    return ("<table><thead><tr>" + "".join(f"<th>{h}</th>" for h, _ in cells) + "</tr></thead><tbody><tr>"
            + "".join(f"<td>{v}</td>" for _, v in cells) + "</tr></tbody></table>")


def accept_hist_figure(summary: RunSummary, current: int | None = None, height: int = 260) -> go.Figure:
    """Steps per accepted-draft count (prefill excluded); the current step's bar highlighted."""
    title = "Accepted drafts per step"
    if not summary.accept_hist:
        return message_figure(title, "No decoding step yet.", height)
    xs = list(range(max(summary.accept_hist) + 1))
    bar = {"type": "bar", "x": xs, "y": [summary.accept_hist.get(x, 0) for x in xs], "name": "steps",
           "marker": {"color": [CURRENT if x == current else FAINT for x in xs]},
           "text": ["this step" if x == current else "" for x in xs], "textposition": "outside", "cliponaxis": False,
           "hovertemplate": "%{y} steps accepted %{x}<extra></extra>"}
    layout = base_layout(title, height, xaxis={"title": {"text": "accepted drafts"}, "dtick": 1},
                         yaxis={"title": {"text": "steps"}})
    return figure([bar], layout)


def timing_figure(steps: Sequence[StepTrace | dict], current: int | None = None, height: int = 300,
                  window: int = WINDOW) -> go.Figure:
    """Stacked per-step engine time by phase, in milliseconds, for the last `window` steps up to `current`
    (older steps are summarised in the title, so bars stay readable and the payload bounded); the y range
    fits the decoding steps, and a taller prefill bar is clipped with its total written on it."""
    steps = as_steps(steps)
    title = "Engine time per step (ms)"
    if not steps:
        return message_figure(title, "No step yet.", height)
    current = len(steps) - 1 if current is None else current
    start = max(0, current + 1 - window)
    shown, older = steps[start : current + 1], steps[:start]
    xs = [s.step for s in shown]
    bars = [{"type": "bar", "x": xs, "y": [1000 * s.timings.get(p, 0.0) for s in shown], "name": p,
             "marker": {"color": c, "pattern": {"shape": h, "fgcolor": INK, "size": 6, "solidity": 0.2}},
             "hovertemplate": f"{p}: %{{y:.1f}} ms<extra>step %{{x}}</extra>"}
            for p, c, h in zip(PHASES, palette.SERIES, palette.HATCHES)]
    mark = {"type": "line", "x0": current, "x1": current, "y0": 0, "y1": 1, "xref": "x", "yref": "paper",
            "line": {"color": INK, "width": 1, "dash": "dot"}}
    totals = [1000 * s.timings.get("total", 0.0) for s in shown if not s.prefill]
    top = 1.15 * max(totals) if totals else None
    notes = [{"x": s.step, "y": top, "text": f"prefill {1000 * s.timings.get('total', 0.0):.0f} ms ↑",
              "showarrow": False, "yanchor": "top", "font": {"size": 9}}
             for s in shown if s.prefill and top and 1000 * s.timings.get("total", 0.0) > top]
    if older:
        title += f" · steps {start}-{current}; steps 0-{start - 1}: mean {_mean_ms(older):.0f} ms"
    layout = base_layout(title, height, barmode="stack", bargap=0.15, shapes=[mark], annotations=notes,
                         xaxis={"title": {"text": "step"}},
                         yaxis={"range": [0, top]} if top else {})
    return figure(bars, layout)


def _mean_ms(steps: list[StepTrace]) -> float:
    return 1000 * sum(s.timings.get("total", 0.0) for s in steps) / len(steps)

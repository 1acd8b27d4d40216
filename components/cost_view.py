"""What a step costs: the machine's t(q)/t(1) curve as the break-even line, each step's width and tokens
on it beside its oracle width (the fewest rows that emit the same tokens, esp.bench.oracle), and the run's
tokens and time per step, both in units of one single-token forward."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from esp.bench.oracle import oracle_width
from esp.trace import StepTrace

from . import palette
from .common import FAINT, INK, as_steps, base_layout, figure, md_text, message_figure, plot_text, two_panels
from .stats import WINDOW

Curve = dict  # {"q": [rows...], "t": [seconds per forward...]}
# Tokens (emitted, at the oracle width, per step) and cost (time, expected tokens) in the palette's series
# colours; the break-even line is neutral and dashed: no verdict colour means anything here.
TOKENS, TIME = palette.SERIES[2], palette.SERIES[0]
PREFILL_NOTE = "Step 0 is the prefill: it feeds the whole prompt and drafts nothing, so it has no draft cost to weigh."


def step_width(step: StepTrace) -> int:
    """Rows the step's forward fed (the cost record's count for budgeted drafters)."""
    return int(step.cost["rows"]) if step.cost else len(step.positions)


def step_curve(step: StepTrace, machine: Curve | None) -> Curve | None:
    """The curve that priced this step: its own cost record's, else the machine's."""
    return step.cost["curve"] if step.cost and step.cost.get("curve") else machine


def ratio(curve: Curve, q: float) -> float:
    """t(q)/t(1), linearly interpolated on the curve (clamped at its ends)."""
    qs, ts = np.asarray(curve["q"], float), np.asarray(curve["t"], float)
    order = np.argsort(qs)
    qs, ts = qs[order], ts[order]
    return float(np.interp(q, qs, ts) / np.interp(1, qs, ts))


def where(device: str | None) -> str:
    """'this T4' for the device a run measured ('CPU', 'T4', 'H200'), or a phrase for an unknown one."""
    return f"this {md_text(device)}" if device else "the machine that recorded this run"


def cost_figure(steps: Sequence[StepTrace | dict], upto: int | None = None, machine: Curve | None = None,
                height: int = 340, device: str | None = None) -> go.Figure:
    """Left: break-even line t(q)/t(1) over block width q, the run's steps (grey) and this step (emitted
    and expected tokens). Right: per step, tokens emitted (bars) and time in single-token forwards (line).
    `device` names the device the curve was measured on, in the title."""
    steps = as_steps(steps)
    upto = len(steps) - 1 if upto is None else upto
    step = steps[upto]
    curve = step_curve(step, machine)
    if curve is None or not curve.get("q"):
        return message_figure(_title(device), "No cost curve for this run's machine.", height)
    if step.prefill:
        return message_figure(_title(device), PREFILL_NOTE, height)
    # The prefill prices the prompt, not a draft; like the timing view, only the last WINDOW steps are drawn.
    run = [s for s in steps[max(0, upto + 1 - WINDOW) : upto + 1] if not s.prefill]
    marks = [m for m in step_marks(step, f"step {upto}") if m["x"]]
    return _figure(curve, run, marks, height, device)


def cost_run_figure(steps: Sequence[StepTrace | dict], machine: Curve | None = None, height: int = 340,
                    device: str | None = None) -> go.Figure:
    """The player's cost view: cost_figure over every decoding step of the run, its MARKS traces empty (the
    player's cursor fills them with mark_points of the shown step)."""
    steps = as_steps(steps)
    curve = step_curve(steps[-1], machine)
    if curve is None or not curve.get("q"):
        return message_figure(_title(device), "No cost curve for this run's machine.", height)
    run = [s for s in steps if not s.prefill]
    if not run:
        return message_figure(_title(device), PREFILL_NOTE, height)
    return _figure(curve, run, step_marks(None, "shown step"), height, device)


# The shown step's marks on the left panel, after the break-even line and the run's steps: emitted, oracle width
# and expected tokens (the last only where the step's cost record has it).
MARKS = (2, 3, 4)


def mark_points(step: StepTrace | None) -> list[list[list]]:
    """[xs, ys] of each of the MARKS for `step`: one point each, or none (no step, the prefill, nothing expected)."""
    if step is None or step.prefill:
        return [[[], []] for _ in MARKS]
    width, tokens = step_width(step), len(step.emitted)
    expected = step.cost.get("expected_tokens") if step.cost else None
    return [[[width], [tokens]], [[oracle_width(step)], [tokens]],
            [[width], [expected]] if expected is not None else [[], []]]


def step_marks(step: StepTrace | None, name: str) -> list[dict]:
    """The MARKS traces of `step` (see mark_points), named after it."""
    (ex, ey), (ox, oy), (px, py) = mark_points(step)
    return [
        {"type": "scatter", "x": ex, "y": ey, "mode": "markers", "name": f"{name}: emitted",
         "marker": {"color": TOKENS, "size": 14, "symbol": "circle"},
         "hovertemplate": "this step: %{x} rows, %{y} tokens emitted<extra></extra>"},
        {"type": "scatter", "x": ox, "y": oy, "mode": "markers", "name": "oracle width",
         "marker": {"color": TOKENS, "size": 14, "symbol": "square-open"},
         "hovertemplate": "the same tokens from %{x} rows: the root, the accepted path and the masks on its "
                          "end<extra></extra>"},
        {"type": "scatter", "x": px, "y": py, "mode": "markers", "name": "expected",
         "marker": {"color": TIME, "size": 12, "symbol": "diamond-open"},
         "hovertemplate": "expected %{y:.2f} tokens<extra></extra>"},
    ]


def _title(device: str | None) -> str:
    return f"What a step costs{' on this ' + plot_text(device) if device else ''} (in single-token forwards)"


def _figure(curve: Curve, run: list[StepTrace], marks: list[dict], height: int, device: str | None) -> go.Figure:
    """Break-even line, `run`'s steps in grey, `marks`, then per step of `run` its tokens and time."""
    qs = sorted(set(list(curve["q"]) + [1]))
    t1 = float(np.interp(1, curve["q"], curve["t"]))
    data = [
        {"type": "scatter", "x": qs, "y": [ratio(curve, q) for q in qs], "mode": "lines+markers",
         "name": "break-even: t(q)/t(1)", "line": {"color": INK, "dash": "dash"},
         "hovertemplate": "a %{x}-row forward costs %{y:.2f} one-row forwards<extra></extra>"},
        {"type": "scatter", "x": [step_width(s) for s in run], "y": [len(s.emitted) for s in run], "mode": "markers",
         "name": "steps so far", "marker": {"color": FAINT, "size": 6},
         "hovertemplate": "%{x} rows, %{y} tokens<extra></extra>"},
        *marks,
    ]
    xs = [s.step for s in run]
    data += [
        {"type": "bar", "x": xs, "y": [len(s.emitted) for s in run], "name": "tokens per step",
         "marker": {"color": palette.rgba(TOKENS, 0.55)}, "xaxis": "x2", "yaxis": "y2",
         "hovertemplate": "step %{x}: %{y} tokens<extra></extra>"},
        {"type": "scatter", "x": xs, "y": [s.timings.get("total", 0.0) / t1 for s in run], "mode": "lines+markers",
         "name": "time / t(1)", "line": {"color": TIME}, "marker": {"symbol": "diamond", "size": 5},
         "xaxis": "x2", "yaxis": "y2",
         "hovertemplate": "step %{x}: %{y:.2f}× a one-row forward<extra></extra>"},
    ]
    layout = base_layout(_title(device), height,
                         **two_panels(("tokens per step vs block width", "per step: tokens vs time")))
    layout["margin"]["t"] = 60
    layout["xaxis"]["title"] = {"text": "rows fed, q", "font": {"size": 10}}  # fits half of a phone's panel
    layout["xaxis2"]["title"] = {"text": "step", "font": {"size": 10}}
    layout["yaxis"]["title"] = {"text": "tokens (or cost)", "font": {"size": 10}}
    layout["yaxis2"]["rangemode"] = layout["yaxis"]["rangemode"] = "tozero"
    return figure(data, layout)


def cost_sentences(steps: Sequence[StepTrace | dict], upto: int | None = None, machine: Curve | None = None,
                   device: str | None = None) -> str:
    """Two plain sentences with the numbers of the device the run measured ('CPU', 'T4', ...; None when
    unknown): why this step won or lost, and how wide trees fare there against a GPU or a CPU."""
    steps = as_steps(steps)
    upto = len(steps) - 1 if upto is None else upto
    step = steps[upto]
    curve = step_curve(step, machine)
    if curve is None or not curve.get("q"):
        return "No cost curve is known for the machine that recorded this run."
    if step.prefill:
        return PREFILL_NOTE
    width, tokens = step_width(step), len(step.emitted)
    r = ratio(curve, width)
    widest = max(curve["q"])
    wide = ratio(curve, widest)
    verdict = "won" if tokens > r else "lost"
    here = where(device)
    first = (f"On {here} a forward of {width} rows costs {r:.1f}× a one-token forward, so step {upto} had to "
             f"emit more than {r:.1f} tokens to beat plain decoding; it emitted {tokens} and {verdict}. ")
    best = oracle_width(step)
    first += (f"Feeding only what it kept (the root, the accepted path and the masks on its end) would have taken "
              f"{best} row{'s' if best > 1 else ''}, {ratio(curve, best):.1f}× a one-token forward. ")
    if device and device != "CPU":
        return first + (f"On {here} even {widest} rows cost {wide:.1f}× a one-token forward: a GPU forward is "
                        "bound by reading the weights, so wide trees cost little and every accepted draft is profit.")
    return first + (f"On a GPU a forward is bound by reading the weights, so even {widest} rows cost about one "
                    f"token's forward and every accepted draft is profit, while on {here} {widest} rows cost "
                    f"{wide:.1f}× as much, so wide trees lose unless they accept long runs.")

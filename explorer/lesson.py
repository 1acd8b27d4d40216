"""The lesson's handlers (issue 17): a link that opens a shipped trace at a step and tab, the controls set
from an opened trace's own settings, Play / Pause, and the guided tour. None of them needs a model."""
from __future__ import annotations

import logging

import gradio as gr

from components.settings import KNOBS
from components.tour import load_tour
from esp import methods
from esp.errors import ESPError

from .calls import SHIPPED, TRACES, open_shipped, show_step, whole
from .requests import LIMITS, SPEED as SPEED_FIELD, STEP, Text, guard
from .session import Session
from .views import VIEWS, refusal, refusal_line

log = logging.getLogger("esp.app")
# The page's tabs by id (app.py): a link's `tab=` and a tour stop's view name one of them.
TABS = ("run", "whatif", "open", "size", "compare", "export")
# The tab holding a view a tour stop may name; every other view is on the Run tab.
VIEW_TABS = {"whatif-tab": "whatif", "open-tab": "open", "size-plot": "size"}
FIRST = next(iter(TRACES.values())).stem  # what the page opens when its link names no trace
SPEED = SPEED_FIELD.default  # steps per second, by default
SPEEDS = (SPEED_FIELD.low, SPEED_FIELD.high)  # slowest and fastest playback
# What a click on the tree sends ("node:time", from the page's script); the node is then checked as a focus.
CLICK = Text("node click", 40)
SHOWN = 2 + len(VIEWS)  # outputs of a re-rendered step: status, scrubber, *VIEWS
PLAY, PAUSE = "▶ Play", "⏸ Pause"
TOUR = load_tour()
# The controls a trace's settings fill in, in the order of trace_controls' outputs (after the trace name).
CONTROLS = ("method", *KNOBS, "mode", "temperature", "top_p", "seed", "max_new", "layouts", "model")


# ---------------------------------------------------------------- a link's state

def open_link(session: Session | None, request: gr.Request | None = None) -> tuple:
    """Open what the page's link asks for (`?trace=NAME&step=N&tab=T`, a shipped trace by file stem;
    without one, the first shipped trace at its last step). A bad value is clamped or dropped and said in
    the status line, once. Outputs: (status, scrubber, *VIEWS, session, tabs)."""
    query = dict(request.query_params) if request is not None else {}
    problems = []
    name = query.get("trace") or FIRST
    if name not in SHIPPED:
        problems.append(f"no shipped trace {name!r} (shipped: {', '.join(SHIPPED)})")
        name = FIRST
    raw = query.get("step")
    step = whole(raw)
    if raw is not None and step is None:
        problems.append(f"step {raw!r} is not a number")
    tab = query.get("tab") or "run"
    if tab not in TABS:
        problems.append(f"no tab {tab!r} (tabs: {', '.join(TABS)})")
        tab = "run"
    out = open_shipped(name, session, step)
    shown = out[-1]
    if isinstance(shown, Session) and step is not None and not 0 <= step < len(shown.steps):
        problems.append(f"{name} has steps 0-{len(shown.steps) - 1}, not {step}")
    if not problems:
        return (*out, gr.Tabs(selected=tab))
    message = "This link was partly wrong: " + "; ".join(problems) + "."  # quotes the link: shown as text
    log.info("link clamped: %s", message)
    return (f"{refusal_line(message)} · {out[0]}", *out[1:], gr.Tabs(selected=tab))


def trace_controls(session: Session | None) -> tuple:
    """The shown trace's name in a link ('' when it is not a shipped one) and its method and settings for
    the controls (CONTROLS order), so that the controls describe the run on screen; a setting the trace
    does not record is left as it is."""
    skip = tuple(gr.skip() for _ in CONTROLS)
    if session is None or not session.steps:
        return ("", *skip)
    meta = session.meta
    try:
        name, knobs = methods.parse(str(meta.get("spec") or session.steps[0].method))
    except ESPError:
        return (meta.get("shipped", ""), *skip)
    sampling = meta.get("sampling") or {}
    greedy = not sampling.get("temperature")
    values = {"method": name, **knobs, "mode": "greedy" if greedy else "sampling",
              "temperature": None if greedy else sampling.get("temperature"),
              "top_p": None if greedy else sampling.get("top_p"), "seed": sampling.get("seed"),
              "max_new": meta.get("max_new_tokens"), "layouts": meta.get("layouts"),
              "model": meta.get("model_name") if meta.get("model_name") in LIMITS.models else None}
    return (meta.get("shipped", ""), *(gr.skip() if values.get(c) is None else values[c] for c in CONTROLS))


@guard("focus", SHOWN, i=STEP, click=CLICK)
def clicked(session: Session | None, i: int | None, click: str) -> tuple:
    """A click on the tree ("node:time", from the page's script): the step re-rendered with that node in
    focus, as if chosen in the Focus box. Outputs: status, scrubber, *VIEWS."""
    node = click.partition(":")[0].strip()
    return show_step(session, i, int(node) if node.isdecimal() else None)


# ---------------------------------------------------------------- playback

def period(speed: float) -> float:
    """Seconds between steps at `speed` steps per second (a checked SPEED_FIELD value)."""
    return 1.0 / speed


def _stopped() -> tuple:
    return False, gr.Timer(active=False), gr.Button(value=PLAY)


@guard("play", 3 + SHOWN, status_at=3, speed=SPEED_FIELD, i=STEP)
def play(playing: bool, speed: float, session: Session | None, i: int | None) -> tuple:
    """Play / Pause. Play from the last step starts again at step 0. Outputs: (playing, timer, button,
    status, scrubber, *VIEWS)."""
    skip = tuple(gr.skip() for _ in range(SHOWN))
    if playing:
        return (*_stopped(), *skip)
    if session is None or not session.steps:
        return (*_stopped(), *refusal("Nothing to play yet: run a prompt or open a trace first.",
                                      SHOWN, "play"))
    at_end = (i or 0) >= len(session.steps) - 1
    return (True, gr.Timer(value=period(speed), active=True), gr.Button(value=PAUSE),
            *(show_step(session, 0) if at_end else skip))


@guard("play", 3 + SHOWN, i=STEP)
def tick(session: Session | None, i: int | None) -> tuple:
    """One playback step: the next stored step; at the last one playback stops and the button resets.
    Outputs: (status, scrubber, *VIEWS, playing, timer, button)."""
    if session is None or not session.steps:
        return (*(gr.skip() for _ in range(SHOWN)), *_stopped())
    nxt = min((i or 0) + 1, len(session.steps) - 1)
    shown = show_step(session, nxt)
    if nxt >= len(session.steps) - 1:
        return (*shown, *_stopped())
    return (*shown, gr.skip(), gr.skip(), gr.skip())


@guard("speed", None, speed=SPEED_FIELD)
def set_speed(speed: float) -> gr.Timer:
    """A new speed takes effect at once (while paused too: the next Play uses it)."""
    return gr.Timer(value=period(speed))


# ---------------------------------------------------------------- the tour

def tour_move(delta: int | None):
    """The tour's buttons: Tour (delta None: the first stop), Next (+1) and Back (-1) from stop n."""
    def move(n: float | None, session: Session | None) -> tuple:
        return tour_stop(0 if delta is None else whole(n, 0) + delta, session)
    return move


def tour_stop(n: float | None, session: Session | None) -> tuple:
    """Open tour stop n (0-based, clamped): its trace at its step and the tab holding its view. Outputs:
    (panel, text, stop number, view id, tabs, status, scrubber, *VIEWS, session); the page's script then
    spotlights the view."""
    n = min(max(whole(n, 0), 0), len(TOUR) - 1)
    stop = TOUR[n]
    text = f"**Tour · stop {n + 1} of {len(TOUR)}.** {stop.text}"
    return (gr.Column(visible=True), text, n, stop.view, gr.Tabs(selected=VIEW_TABS.get(stop.view, "run")),
            *open_shipped(stop.trace, session, stop.step))

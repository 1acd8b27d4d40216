"""The lesson's handlers (issues 17 and 37): a link that opens a shipped trace at a step and tab or carries a
run's recipe, the controls set from the run on screen, a click on a token, a node or a row that focuses it
in every view, Play / Pause, and the guided tour. None of them needs a model."""
from __future__ import annotations

import logging
from typing import Any

import gradio as gr

from components.common import accepted_nodes, md_text, show_ws, walk_end
from components.settings import KNOBS
from components.text_view import MAX_TOKENS, token_origin
from components.tour import load_tour
from esp import methods
from esp.errors import ESPError

from . import recipe as links
from .calls import OPENING, SHIPPED, open_shipped, show_step, stored_step, whole
from .requests import DTYPE, SPEED as SPEED_FIELD, STEP, Number, Text, guard
from .session import Session
from .views import VIEWS, refusal, refusal_line

log = logging.getLogger("esp.app")
# The page's tabs by id (app.py): a link's `tab=` and a tour stop's view name one of them.
TABS = ("run", "whatif", "open", "size", "compare", "export")
# The tab holding a view a tour stop may name; every other view is on the Run tab.
VIEW_TABS = {"whatif-tab": "whatif", "open-tab": "open", "size-plot": "size"}
FIRST = OPENING  # what the page opens when its link names no trace
SPEED = SPEED_FIELD.default  # steps per second, by default
SPEEDS = (SPEED_FIELD.low, SPEED_FIELD.high)  # slowest and fastest playback
# What a click in a figure sends ("kind:n:time", from the page's script): a `node` of the tree (or the node
# whose masks a Mask Lens cell shows), a block `row` of the attention figure, a `token` of the generated text
# by its index in the whole text (the commitment strip); n is then checked against the shown step.
CLICK = Text("click", 40)
CLICKS = ("node", "row", "token")
# A token of the generated text, by its place in the text view (gr.SelectData.index).
TOKEN = Number("token", 0, 10**6, whole=True)
SHOWN = 2 + len(VIEWS)  # outputs of a re-rendered step: status, scrubber, *VIEWS
PLAY, PAUSE = "▶ Play", "⏸ Pause"
TOUR = load_tour()
# The controls the run on screen fills in, in the order of shown_controls' outputs (after its link and note).
CONTROLS = ("prompt", "method", *KNOBS, "mode", "temperature", "top_p", "seed", "max_new", "layouts", "model", "dtype")


# ---------------------------------------------------------------- a link's state

def open_link(session: Session | None, request: gr.Request | None = None) -> tuple:
    """Open what the page's link asks for: a run's recipe (explorer.recipe: the controls are filled and the
    status says to press Run; nothing is decoded), or a shipped trace by file stem (`?trace=NAME&step=N`;
    without one, OPENING at its last step), and the tab (`tab=T`). A bad trace, step or tab is clamped or
    dropped, a bad recipe refused whole, and said in the status line, once. Outputs: (status, scrubber,
    *VIEWS, session, tabs, link), `link` being the recipe to fill the controls with (explorer.recipe.Recipe
    as a dict, and the step to show once it has run), or None."""
    params = request.query_params if request is not None else {}
    query = dict(params)
    repeated = tuple(k for k in query if len(getattr(params, "getlist", lambda _: [])(k)) > 1)
    problems, refused = [], None
    tab = query.get("tab") or "run"
    if tab not in TABS:
        problems.append(f"no tab {tab!r} (tabs: {', '.join(TABS)})")
        tab = "run"
    if links.is_recipe(query):
        try:
            recipe, step = links.from_query(query, repeated)
        except ESPError as e:  # nothing of it is used: the page opens as if the link named no run
            refused, query = f"This link was refused: {e}", {}
        else:
            return _recipe_opened(recipe, step, problems, tab)
    name = query.get("trace") or FIRST
    if name not in SHIPPED:
        problems.append(f"no shipped trace {name!r} (shipped: {', '.join(SHIPPED)})")
        name = FIRST
    raw = query.get("step")
    step = whole(raw)
    if raw is not None and step is None:
        problems.append(f"step {raw!r} is not a number")
    out = open_shipped(name, session, step)
    shown = out[-1]
    if isinstance(shown, Session) and step is not None and not 0 <= step < len(shown.steps):
        problems.append(f"{name} has steps 0-{len(shown.steps) - 1}, not {step}")
    message = _problems(problems, refused)
    if not message:
        return (*out, gr.Tabs(selected=tab), None)
    log.info("link clamped: %s", message)
    return (f"{refusal_line(message)} · {out[0]}", *out[1:], gr.Tabs(selected=tab), None)


def _problems(problems: list[str], refused: str | None = None) -> str:
    """One sentence or two on what was wrong with a link ("" when nothing was); it quotes the link, so it is
    shown as text (refusal_line)."""
    partly = f"This link was partly wrong: {'; '.join(problems)}." if problems else ""
    return " ".join(m for m in (refused, partly) if m)


def _recipe_opened(recipe: links.Recipe, step: int | None, problems: list[str], tab: str) -> tuple:
    """open_link's answer to a good recipe: the controls will show it, the views wait for Run."""
    at = "" if step is None else f" (it then opens at step {step})"
    s = recipe.settings
    what = f"{s.method} · {s.describe()}" if s.method == "esp" else s.describe()  # the others name themselves
    said = (f"This link holds a run's recipe ({md_text(what)}, on {md_text(recipe.model)}): "
            f"press **Run** to reproduce this run{at}.")
    if problems:
        said = f"{refusal_line(_problems(problems))} · {said}"
    skip = tuple(gr.skip() for _ in range(SHOWN - 1))
    return (said, *skip, gr.skip(), gr.Tabs(selected=tab), {"recipe": recipe.to_dict(), "step": step})


def shown_controls(session: Session | None, link: dict | None = None) -> tuple:
    """The link of the run on screen and why there is none (explorer.recipe.link_of), then its prompt,
    method and settings for the controls (CONTROLS order), so that the controls describe the run on screen;
    with no run on screen, the recipe a link carried (`link`, from open_link). A setting the run does not
    record is left as it is."""
    skip = tuple(gr.skip() for _ in CONTROLS)
    if session is not None and session.steps:
        query, note = links.link_of(session.meta)
        values = _run_values(session.meta)
    elif link:
        recipe = links.Recipe.from_dict(link["recipe"])
        query, note, values = recipe.query(), "", _recipe_values(recipe)
    else:
        return ("", "", *skip)
    return (query, md_text(note), *(gr.skip() if values.get(c) is None else values[c] for c in CONTROLS))


def _recipe_values(recipe: links.Recipe) -> dict[str, Any]:
    """The controls' values for a recipe: what its link carries."""
    values = recipe.values()
    return {**values, "model": links.offered_model(values["model"])}


def _run_values(meta: dict) -> dict[str, Any]:
    """The controls' values for a run's meta: its recipe when it was made on the page, else what the trace
    records (a shipped or uploaded one)."""
    if "recipe" in meta:
        return _recipe_values(links.Recipe.from_dict(meta["recipe"]))
    try:
        name, knobs = methods.parse(str(meta.get("spec") or meta.get("method") or ""))
    except ESPError:
        return {"prompt": meta.get("prompt")}
    sampling = meta.get("sampling") or {}
    greedy = not sampling.get("temperature")
    try:
        dtype = DTYPE.parse(meta.get("dtype") or DTYPE.default)
    except ESPError:  # recorded in a dtype this server does not offer
        dtype = DTYPE.default
    return {"prompt": meta.get("prompt"), "method": name, **knobs, "mode": "greedy" if greedy else "sampling",
            "temperature": None if greedy else sampling.get("temperature"),
            "top_p": None if greedy else sampling.get("top_p"), "seed": sampling.get("seed"),
            "max_new": meta.get("max_new_tokens"), "layouts": meta.get("layouts"),
            "model": links.offered_model(meta.get("model_name")), "dtype": dtype}


def run_started() -> tuple[str, str]:
    """While a run streams, it has no link yet: (link, note)."""
    return "", links.RUNNING


def after_run(session: Session | None, link: dict | None) -> tuple:
    """After a Run: the link of the run on screen (and why there is none); when that run is the one a link
    carried, the step the link named. Outputs: (link, note, link state, status, scrubber, *VIEWS)."""
    query, note = links.link_of(session.meta) if session is not None and session.steps else ("", "")
    shown = tuple(gr.skip() for _ in range(SHOWN))
    if link and query and link.get("step") is not None:
        if links.Recipe.from_dict(link["recipe"]).query() == query:
            shown = show_step(session, min(link["step"], len(session.steps) - 1))
            link = None  # once: a later run of the same recipe ends at its last step, as any run does
    return (query, md_text(note), link, *shown)


# ---------------------------------------------------------------- a click focuses

@guard("focus", SHOWN, i=STEP, click=CLICK)
def clicked(session: Session | None, i: int | None, click: str) -> tuple:
    """A click in a figure ("kind:n:time", from the page's script): `node` n of the tree, block `row` n of the
    attention figure (a node's row, or one of its masks' rows: that node), both on the shown step, or `token`
    n of the whole text (token_focus). The node is focused in every view, as if chosen in the Focus box.
    Outputs: status, scrubber, *VIEWS."""
    i = stored_step(session, i, "focus")
    kind, _, rest = click.partition(":")
    n = rest.partition(":")[0].strip()
    if kind not in CLICKS or not n.isdecimal() or len(n) > 9:
        raise ESPError(f"A click names a {', a '.join(CLICKS)} and its number, not {click[:20]!r}.")
    if kind == "token":
        return token_focus(session, i, int(n), limit=None)
    node = int(n) if kind == "node" else row_node(session.steps[i], int(n))
    return show_step(session, i, node)


def row_node(step, row: int) -> int | None:
    """The node whose block row is `row`, or whose mask it is ("mask R.j" rows belong to the node fed in
    row R); None for another row (the root's lookahead, a row past the block)."""
    labels = step.row_labels
    if not 0 <= row < len(labels):
        return None
    owner = row
    if labels[row].startswith("mask "):
        head = labels[row][5:].partition(".")[0]
        owner = int(head) if head.isdecimal() else None
    return next((n.index for n in step.nodes if n.row is not None and n.row == owner), None)


@guard("focus", SHOWN, i=STEP)
def token_clicked(session: Session | None, i: int | None, evt: gr.SelectData) -> tuple:
    """A click (or Enter) on a token of the text view (gr.SelectData.index: its place in the view of steps
    0..i): token_focus. Outputs: status, scrubber, *VIEWS."""
    return token_focus(session, stored_step(session, i, "focus"), TOKEN.parse(getattr(evt, "index", None)))


def token_focus(session: Session, i: int, index: int, limit: int | None = MAX_TOKENS) -> tuple:
    """Token `index` of the text of steps 0..i as the text view shows it (with `limit`: components.text_view)
    or whole (None): the step that emitted it, with its node in focus: an accepted draft's own node, or for
    the model's own token the node where verification stopped, whose row chose it."""
    at = token_origin(session.steps, i, index, limit)
    if at is None:
        raise ESPError(f"Entry {index} of the text up to step {i} is not a token (a long text's first entry sums "
                       "up the earlier ones).")
    s, position = at
    step = session.steps[s]
    path = accepted_nodes(step)
    node = path[position] if position < len(path) else walk_end(step)
    out = show_step(session, s, node.index)
    token = md_text(repr(show_ws(step.emitted_text[position])))
    how = (f"an accepted draft of step {s}" if position < len(path) else
           f"the model's own token of step {s}, chosen at node {node.index}'s row")
    note = VIEWS.index("focus_note") + 2
    if not isinstance(out[note], str):  # a refusal: its line says why
        return out
    return (*out[:note], f"Token {token} is {how}. {out[note]}", *out[note + 1:])


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

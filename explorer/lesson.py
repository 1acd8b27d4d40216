"""The lesson's handlers (issues 17 and 37): a link that opens a shipped trace at a step and tab or carries a
run's recipe, the controls set from the run on screen, and the guided tour. None of them needs a model. Play,
the keys and a click that focuses a node are the page's player's (components/lecture.py): no request."""
from __future__ import annotations

import logging
from typing import Any

import gradio as gr

from components.common import md_text
from components.settings import KNOBS
from components.tour import load_tour
from esp import methods
from esp.errors import ESPError

from . import recipe as links
from . import room
from .calls import OPENING, SHIPPED, open_shipped, whole
from .requests import DTYPE
from .session import Session
from .views import payload, refusal_line

log = logging.getLogger("esp.app")
# The page's tabs by id (app.py): a link's `tab=` and a tour stop's view name one of them.
TABS = ("run", "whatif", "open", "size", "compare", "export")
# The tab holding a view a tour stop may name; every other view is on the Run tab.
VIEW_TABS = {"whatif-tab": "whatif", "open-tab": "open", "size-plot": "size"}
FIRST = OPENING  # what the page opens when its link names no trace
TOUR = load_tour()
# The controls the run on screen fills in, in the order of shown_controls' outputs (after its link and note).
CONTROLS = ("prompt", "method", *KNOBS, "mode", "temperature", "top_p", "seed", "max_new", "layouts", "model", "dtype")


# ---------------------------------------------------------------- a link's state

def open_link(session: Session | None, request: gr.Request | None = None) -> tuple:
    """Open what the page's link asks for: a run's recipe (explorer.recipe: the controls are filled and the
    status says to press Run; nothing is decoded), or a shipped trace by file stem (`?trace=NAME&step=N`;
    without one, OPENING at its last step), and the tab (`tab=T`). A bad trace, step or tab is clamped or
    dropped, a bad recipe refused whole, and said in the status line, once. Outputs: (status, player, session,
    tabs, link), `link` being the recipe to fill the controls with (explorer.recipe.Recipe
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


def open_page(session: Session | None, request: gr.Request | None = None) -> tuple:
    """The page as it opens: open_link, then the room a link names (explorer.room.join: the room's run replaces
    the link's), then the controls showing the run on screen (shown_controls). Outputs: (status, player, session,
    tabs, link, *room controls, *shown_controls' outputs)."""
    status, player, held, tabs, link = open_link(session, request)
    session = held if isinstance(held, Session) else session
    joined = room.join(session, request)
    status, player, held = (j if not _skipped(j) else o for j, o in zip(joined[:3], (status, player, held)))
    session = held if isinstance(held, Session) else session
    return (status, player, held, tabs, link, *joined[3:], *shown_controls(session, link))


def _skipped(output: Any) -> bool:
    return isinstance(output, dict) and output == gr.skip()


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
    return (said, gr.skip(), gr.skip(), gr.Tabs(selected=tab), {"recipe": recipe.to_dict(), "step": step})


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
    carried, the player shows the step the link named. Outputs: (link, note, link state, player)."""
    query, note = links.link_of(session.meta) if session is not None and session.steps else ("", "")
    shown = gr.skip()
    if link and query and link.get("step") is not None:
        if links.Recipe.from_dict(link["recipe"]).query() == query:
            shown = payload(show=min(link["step"], len(session.steps) - 1))
            link = None  # once: a later run of the same recipe ends at its last step, as any run does
    return (query, md_text(note), link, shown)


# ---------------------------------------------------------------- the tour

def tour_move(delta: int | None):
    """The tour's buttons: Tour (delta None: the first stop), Next (+1) and Back (-1) from stop n."""
    def move(n: float | None, session: Session | None) -> tuple:
        return tour_stop(0 if delta is None else whole(n, 0) + delta, session)
    return move


def tour_stop(n: float | None, session: Session | None) -> tuple:
    """Open tour stop n (0-based, clamped): its trace at its step and the tab holding its view. Outputs:
    (panel, text, stop number, view id, tabs, status, player, session); the page's script then spotlights the
    view."""
    n = min(max(whole(n, 0), 0), len(TOUR) - 1)
    stop = TOUR[n]
    text = f"**Tour · stop {n + 1} of {len(TOUR)}.** {stop.text}"
    return (gr.Column(visible=True), text, n, stop.view, gr.Tabs(selected=VIEW_TABS.get(stop.view, "run")),
            *open_shipped(stop.trace, session, stop.step))

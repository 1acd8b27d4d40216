"""Shared bits of the view layer: trace normalisation, status colours, visible whitespace, and the
escaping helpers through which every text from a link, a trace or a prompt reaches the page."""
from __future__ import annotations

import re
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterable, Iterator

import plotly.graph_objects as go

from esp.trace import ACCEPTED, PRUNED, REJECTED, ROOT, NodeTrace, StepTrace

from . import palette

# Neutral tones are mid-grey with alpha, never an opaque grey or white: they read on a light page and on a
# dark one alike, so a figure needs no rebuild when the page switches theme (docs/app_guide.md, "Theme").
# Secondary text and reference lines: dark enough for 4.5:1 on a light page (WCAG AA for small text); on a dark
# one the page's CSS writes figure text in its own colour (assets/app.css, components/lecture.py PLAYER_CSS).
INK = "rgba(100,100,100,0.95)"
FAINT = "rgba(128,128,128,0.5)"  # edges, pruned nodes, earlier steps
GRID = "rgba(128,128,128,0.22)"  # axis grid and zero lines
WASH = "rgba(128,128,128,0.12)"  # blocked cells of the mask
CLEAR = "rgba(0,0,0,0)"  # paper and plot: the page's own background shows through
# One colour per node status (components/palette.py); a pruned node is a hollow grey mark.
STATUS_COLORS = {ROOT: palette.ROOT, ACCEPTED: palette.ACCEPTED, REJECTED: palette.REJECTED, PRUNED: FAINT}
FONT = dict(family="Inter, Helvetica, Arial, sans-serif", size=12)
# Replaces Plotly's default template, which paints white grids, light bar outlines and a blue-grey plot
# area (and adds ~8 KB to every figure sent); only the defaults the figures rely on are kept.
TEMPLATE = {"layout": {"hovermode": "closest", "hoverlabel": {"align": "left"}},
            "data": {"heatmap": [{"type": "heatmap", "colorbar": {"outlinewidth": 0, "ticks": ""}}]}}
# Text colour per page theme, for figures drawn outside the page's CSS (apply_theme); on the page,
# assets/app.css makes figure text follow the theme.
THEMES = {"light": "#222222", "dark": "#e8e8e8"}

# BPE tokens often start with or are whitespace; show it so " the" and "the" differ on screen.
_WS = str.maketrans({" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"})


# Markdown: the characters that open inline markup backslash-escaped, the three HTML ones as entities, line
# breaks as spaces (one line stays one line); `_` only where it could open or close emphasis (never inside a
# word, so 'trace_copy' reads as it is), and autolinks broken ('http\\://', 'www\\.', '\\@').
_MD = {ord(c): "\\" + c for c in "\\`*[]|~$@"} | {ord("&"): "&amp;", ord("<"): "&lt;", ord(">"): "&gt;",
                                                ord("\n"): " ", ord("\r"): " "}
_MD_RE = re.compile(r"(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])|:(?=//)|(?<=www)\.", re.IGNORECASE)
# A toast (gr.Warning, gr.Error) is HTML on the page and plain text to an API caller: only a `<` that opens a
# tag (a letter, `/`, `!` or `?` after it) and an `&` that opens a character reference differ between the two.
_TOAST_RE = re.compile(r"<(?=[A-Za-z/!?])|&(?=[#A-Za-z0-9])")
_TOAST = {"<": "‹", "&": "＆"}
# Plotly renders a subset of HTML (<b>, <a href>, <span style>, <br>) in titles, tick labels, text and hovers.
_PLOT = {ord("&"): "&amp;", ord("<"): "&lt;", ord(">"): "&gt;"}


def md_text(value: object) -> str:
    """`value` as literal text inside Gradio Markdown: a `<b>`, a `**` or a link from a link, a trace or a
    prompt shows as those characters. Inline code spans need none of this (their content is literal)."""
    return _MD_RE.sub(lambda m: "\\" + m.group(), str(value).translate(_MD))


def toast_text(value: object) -> str:
    """`value` as the plain sentence a toast shows: the same characters on the page, which renders a toast's
    message as HTML, and through gradio_client, which hands it over as it is. What could open a tag or a
    character reference becomes a look-alike (‹b›, ＆lt;); everything else, quotes included, stays."""
    return _TOAST_RE.sub(lambda m: _TOAST[m.group()], str(value))


def plot_text(value: object) -> str:
    """`value` as literal text in a Plotly string (title, tick label, marker text, hover data)."""
    return str(value).translate(_PLOT)


def show_ws(text: str) -> str:
    """The token text with whitespace made visible (an empty token shows as ∅)."""
    return text.translate(_WS) if text else "∅"


def as_step(step: StepTrace | dict) -> StepTrace:
    """A StepTrace from either a live trace or its JSON dict (as stored by the export)."""
    return step if isinstance(step, StepTrace) else StepTrace.from_dict(step)


def as_steps(steps: Iterable[StepTrace | dict]) -> list[StepTrace]:
    return [as_step(s) for s in steps]


def accepted_nodes(step: StepTrace) -> list[NodeTrace]:
    """The step's accepted drafts in path order (root excluded)."""
    return sorted((n for n in step.nodes if n.status == ACCEPTED), key=lambda n: n.depth)


def walk_end(step: StepTrace) -> NodeTrace:
    """Where verification stopped: the last accepted node, or the root when none was accepted. Its
    children are the rejected alternatives, its masks drafted the next step."""
    path = accepted_nodes(step)
    return path[-1] if path else step.nodes[0]


# The model's own token of a step, by what came before it (own_kind).
CORRECTION, BONUS, OWN = "correction", "bonus", "own"


def own_kind(step: StepTrace) -> str:
    """What the model's own token of `step` (the one after its accepted drafts) is called, in the field's
    words (vLLM; Leviathan et al.): CORRECTION when a draft below the walk's end was rejected, BONUS when
    drafts were checked and none below the end was rejected, OWN when nothing was drafted (the prefill,
    plain decoding)."""
    end = walk_end(step)
    if any(n.parent == end.index and n.status == REJECTED for n in step.nodes):
        return CORRECTION
    return BONUS if end.status == ACCEPTED else OWN


_PLAIN = ContextVar("plain_figures", default=False)


def figure(data: list[dict], layout: dict) -> go.Figure | dict:
    """A Plotly figure from plain trace/layout dicts, skipping Plotly's per-property validation (inside
    `plain_figures`: those dicts as they are, {"data", "layout"}).

    Validation costs 20-60 ms per figure, as much as a whole engine step on a CPU; the builders'
    output is validated once in the tests instead (tests/test_components.py)."""
    if _PLAIN.get():
        return {"data": data, "layout": layout}
    return go.Figure({"data": data, "layout": layout}, _validate=False)


@contextmanager
def plain_figures() -> Iterator[None]:
    """Within it (or a function it decorates), the figure builders give each figure as its plain data and layout,
    what Plotly.js draws, and no go.Figure: the player's frames need no more, and Plotly's object model (a deep
    copy of every trace) was two thirds of their cost on the server, beside a live run's decode."""
    token = _PLAIN.set(True)
    try:
        yield
    finally:
        _PLAIN.reset(token)


def base_layout(title: str, height: int, **extra) -> dict:
    """Common styling: compact margins, a clear background (the page's shows through), neutral grids, a small
    title, the legend right of the plot area.

    The legend sits outside the data (Plotly widens the right margin for it) so it never covers points or
    axis titles; `automargin` on the axes keeps tick labels and titles whole at any width."""
    layout = {
        "title": {"text": title, "font": {"size": 14}, "x": 0.01, "xanchor": "left"},
        "height": height, "margin": {"l": 10, "r": 10, "t": 40, "b": 10}, "font": FONT,
        "paper_bgcolor": CLEAR, "plot_bgcolor": CLEAR, "template": TEMPLATE,
        "legend": {"x": 1.02, "xanchor": "left", "y": 1, "yanchor": "top", "font": {"size": 10}},
    }
    layout.update(extra)
    for key in [k for k in layout if k.startswith(("xaxis", "yaxis"))] or ["xaxis", "yaxis"]:
        axis = layout.setdefault(key, {})
        axis.setdefault("automargin", True)
        axis.setdefault("gridcolor", GRID)
        axis.setdefault("zerolinecolor", GRID)
    return layout


def two_panels(titles: tuple[str, str], gap: float = 0.06) -> dict:
    """Layout keys for two side-by-side panels (axes x/y and x2/y2) with their titles; a cheap
    stand-in for make_subplots, which costs ~50 ms per call."""
    half = (1 - gap) / 2
    notes = [{"text": t, "x": x, "y": 1.0, "xref": "paper", "yref": "paper", "xanchor": "center",
              "yanchor": "bottom", "showarrow": False, "font": {"size": 12}}
             for t, x in zip(titles, (half / 2, 1 - half / 2))]
    return {"xaxis": {"domain": [0, half], "anchor": "y"}, "xaxis2": {"domain": [1 - half, 1], "anchor": "y2"},
            "yaxis": {"anchor": "x"}, "yaxis2": {"anchor": "x2"}, "annotations": notes}



def message_figure(title: str, text: str, height: int = 320) -> go.Figure:
    """An empty figure carrying one centred note (no data for this view)."""
    note = {"text": text, "x": 0.5, "y": 0.5, "xref": "paper", "yref": "paper", "showarrow": False,
            "font": {"size": 13, "color": INK}}
    hidden = {"visible": False}
    return figure([], base_layout(title, height, annotations=[note], xaxis=hidden, yaxis=hidden))


def apply_theme(fig: go.Figure, theme: str) -> go.Figure:
    """`fig` with its text coloured for a light or dark page (for exports and pages without app.css)."""
    if theme not in THEMES:
        raise ValueError(f"theme must be one of {', '.join(THEMES)}, not {theme!r}.")
    fig.layout.font.color = THEMES[theme]
    return fig

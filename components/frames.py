"""The player's data (components/lecture.py PLAYER_JS plays it on the page, in the lecture file and in the notebook
widget): per step a frame, the views that are that step's own, built once when the step is known; per run the
views of the whole run, drawn once and marked at the shown step by the player's cursor (what each frame carries
for it, and each view's `cursor` says how).

Nothing a trace carries becomes markup or script in the player: a text is Plotly text (escaped by the figure
builders: components.common.plot_text), escaped HTML made here (markdown_html, stats_html), or plain text that
the player writes with textContent (the tokens and the Focus box's labels).
"""
from __future__ import annotations

import html
import json
import re
from typing import Mapping, Sequence

import plotly.graph_objects as go
from plotly.io.json import to_json_plotly

from esp.trace import StepTrace

from .align_plot import align_run_figure, focus_lines, step_bands
from .common import FAINT, accepted_nodes, as_steps, md_text, plain_figures, show_ws, walk_end
from .cost_view import MARKS, cost_run_figure, cost_sentences, mark_points
from .eye_view import decided_row, eye_figure, eye_rows
from .focus import focus_choices, focus_note, mask_rows
from .lens_view import WRAP, commit_figure, has_lens, lens_figure, rank_figure, strip_start
from .mask_plot import mask_figure
from .palette import FOCUS
from .stats import CURRENT, WINDOW, accept_hist_figure, run_summary, stats_html, timing_figure
from .step_words import step_words
from .text_view import COLOR_MAP, draft_label, focus_index, own_label
from .tree_plot import tree_figure

# The text view's labels (its legend and colours), by their index in a frame's tokens.
LABELS = list(COLOR_MAP)
# Each view's box height in pixels: the player draws every figure at its box's height, so that nothing around a
# view moves when its data arrives or changes (a run streaming, a longer text, a grid with more layers).
HEIGHTS = {"tree": 420, "mask": 420, "eye": 300, "lens": 560, "cost": 340, "align": 340, "lens_rank": 340,
           "commit": 420, "hist": 260, "timing": 300}
# The step words' Markdown: code spans, backslash escapes (components.common.md_text), **bold**, entities.
_MD_TOKEN = re.compile(r"`([^`]*)`|\\([!-/:-@\[-`{-~])|(\*\*)|(&(?:amp|lt|gt);)")


def markdown_html(text: str) -> str:
    """The step words' Markdown (**bold**, `code` spans, backslash escapes, entities) as HTML; every other
    character is escaped."""
    out, bold, pos = [], False, 0
    for m in _MD_TOKEN.finditer(text):
        code, char, star, entity = m.groups()
        out.append(html.escape(text[pos : m.start()], quote=False))
        if code is not None:
            out.append(f"<code>{html.escape(code, quote=False)}</code>")
        elif char is not None:
            out.append(html.escape(char, quote=False))
        elif star:
            out.append("</b>" if bold else "<b>")
            bold = not bold
        else:
            out.append(entity)
        pos = m.end()
    out.append(html.escape(text[pos:], quote=False))
    return "".join(out) + ("</b>" if bold else "")


def figure_json(fig: go.Figure | Mapping) -> dict:
    """The figure (a go.Figure, or its plain data and layout: components.common.plain_figures) as plain JSON for
    the player. (`pio.to_json` deep-copies both and packs arrays as base64 first: a third of a live step's cost on
    the server, beside the decode.)"""
    spec = fig if isinstance(fig, Mapping) else {"data": fig._data, "layout": fig._layout}
    return json.loads(to_json_plotly(spec))


@plain_figures()
def step_frame(steps: Sequence[StepTrace], i: int, meta: Mapping, eye: bool = True, lens: bool = True) -> dict:
    """Step i's frame, from steps 0..len(steps)-1 as known now (the Mask Lens grid and the focused masks' curves
    use later steps: `amended` brings them up to date). `eye`, `lens`: whether the run records the verifier's
    eye and the Mask Lens (else those views are None, and the player says so in one line)."""
    s = steps[i]
    end = walk_end(s)
    curve, device = meta.get("curve"), meta.get("device")
    return {
        "step": s.step, "tree": figure_json(tree_figure(s)), "mask": figure_json(mask_figure(s)),
        "shift": 1 if s.prefill else 0,  # the prefill's summary row comes before the block's rows
        "eye": [figure_json(f) for f in (eye_rows(s, meta) or [eye_figure(s, meta)])] if eye else None,
        "words": markdown_html(step_words(s, meta)), "stats": stats_html(run_summary(steps, i)),
        "cost_note": markdown_html(cost_sentences(steps, i, curve, device=device)),
        "tokens": _tokens(s), "nodes": [_node(s, n, label) for n, (label, _) in zip(s.nodes, focus_choices(s))],
        "end": end.index,
        "bands": step_bands(s.alignment),
        "cursor": {"marks": mark_points(s), "accepted": None if s.prefill else len(s.accepted)},
        **amended(steps, i, lens),
    }


@plain_figures()
def amended(steps: Sequence[StepTrace], i: int, lens: bool = True) -> dict:
    """The keys of step i's frame that later steps change: its Mask Lens grid (the real tokens at its masks'
    positions) and its masks' own alignment curves (for a focus on the node where its walk stopped)."""
    return {"lens": figure_json(lens_figure(steps, i)) if lens else None,
            "focus_bands": focus_lines(steps, i, walk_end(steps[i]).index)}


def _tokens(step: StepTrace) -> list[list]:
    """The step's emitted tokens: [text, label (index in LABELS), node, note] each: its node is the accepted
    draft it was, or for the model's own token the node where the walk stopped, whose row chose it; the note
    says so (escaped HTML)."""
    path, own, end = accepted_nodes(step), own_label(step), walk_end(step)
    out = []
    for p, text in enumerate(step.emitted_text):
        if p < len(path):
            label, node, how = draft_label(path[p].sources), path[p], f"an accepted draft of step {step.step}"
        else:
            label, node = own, end
            how = f"the model's own token of step {step.step}, chosen at node {end.index}'s row"
        note = markdown_html(f"Token {md_text(repr(show_ws(text)))} is {how}.")
        out.append([text, LABELS.index(label), node.index, note])
    return out


def _node(step: StepTrace, node, label: str) -> list:
    """[Focus box `label`, note (escaped HTML), block rows to outline (its own, then its masks'), eye row that
    decided it (or None), place in the step's text (-1: the token before the step, the root's; None: not in the
    text)] for one node: what the player needs to focus it in every view."""
    rows = [node.row, *mask_rows(step, node.index)] if node.row is not None else []
    at = focus_index(step, node.index, 1)  # with the step's text starting at 1, the root's token is at 0
    return [label, markdown_html(focus_note(step, node.index)), rows, decided_row(step, node),
            None if at is None else at - 1]


@plain_figures()
def run_views(steps: Sequence[StepTrace], meta: Mapping) -> dict:
    """The views of the whole run, each {"figure", "cursor"}: how the player marks the shown step on it (None:
    it does not), with what the shown step's frame carries (its `cursor`, `bands`, `focus_bands`, `tokens`).
    cursor keys: `line`, a dotted line at the step's number on these axes; `window`, the range of that axis kept
    to `size` steps around it when the run is longer; `marks`, traces given the frame's cursor marks; `bar`, the
    bar at the frame's accepted count coloured `on`, the others `off`; `bands`, the frame's own alignment curves
    drawn on the left panel; `cells`, the step's tokens outlined on the commitment strip."""
    steps = as_steps(steps)
    curve, device = meta.get("curve"), meta.get("device")
    decoding = [s.step for s in steps if not s.prefill] or [0]
    tokens = sum(len(s.emitted_text) for s in steps)
    views = {
        "cost": (cost_run_figure(steps, curve, device=device),
                 {"marks": list(MARKS), "line": {"xref": "x2", "yref": "y2 domain"},
                  "window": {"axis": "xaxis2", "size": WINDOW, "lo": decoding[0], "hi": decoding[-1]}}),
        "timing": (timing_figure(steps, window=len(steps)),
                   {"line": {"xref": "x", "yref": "paper"},
                    "window": {"axis": "xaxis", "size": WINDOW, "lo": steps[0].step, "hi": steps[-1].step}}),
        "hist": (accept_hist_figure(run_summary(steps)), {"bar": {"on": CURRENT, "off": FAINT, "text": "this step"}}),
        "align": (align_run_figure(steps), {"bands": True}),
        "lens_rank": (rank_figure(steps), None),
        "commit": (commit_figure(steps), {"cells": {"first": strip_start(tokens), "wrap": WRAP}}),
    }
    return {key: {"figure": figure_json(fig), "cursor": cursor} for key, (fig, cursor) in views.items()}


def step_frames(steps: Sequence[StepTrace | dict], meta: Mapping) -> list[dict]:
    """Every step's frame (step_frame) of a whole run."""
    steps = as_steps(steps)
    eye, lens = any(s.eye for s in steps), has_lens(steps)
    return [step_frame(steps, i, meta, eye, lens) for i in range(len(steps))]


def run_data(steps: Sequence[StepTrace | dict], meta: Mapping) -> dict:
    """A whole run as the player takes it: every step's frame, the run's views, and the text view's legend and the
    focus colour (the app's own constants)."""
    steps = as_steps(steps)
    return {"frames": step_frames(steps, meta), "views": run_views(steps, meta), **STYLE}


# The text view's legend ([label, colour], in LABELS order) and the focus outline's colour.
STYLE = {"legend": [[label, COLOR_MAP[label]] for label in LABELS], "focus_color": FOCUS}


class Feed:
    """A run that grows while the player shows it (a live run): what to send after each batch of new steps. Each
    step's frame is built once; an earlier step is sent again only for the keys its later steps changed."""

    def __init__(self) -> None:
        self.sent = 0  # the steps whose frames the player has

    def update(self, steps: Sequence[StepTrace], meta: Mapping, views: bool) -> dict:
        """{"frames": {"index": frame, or the keys `amended` makes}, "count": steps known, "views": the run's views
        when `views`}."""
        eye, lens = any(s.eye for s in steps), has_lens(steps)
        new = range(self.sent, len(steps))
        frames = {str(i): step_frame(steps, i, meta, eye, lens) for i in new}  # JSON's keys are text
        index = {s.step: k for k, s in enumerate(steps)}
        touched = {r.source_step for i in new for r in (*steps[i].lens_real, *steps[i].alignment)}
        frames.update({str(k): amended(steps, k, lens) for k in sorted(index[t] for t in touched if t in index)
                       if k < self.sent})
        self.sent = len(steps)
        delta = {"frames": frames, "count": len(steps)}
        if views:
            delta["views"] = run_views(steps, meta)
        return delta


def message(value: str | Mapping) -> Mapping:
    """A message to the player as a dict: an API caller receives each as a JSON string (explorer.views.sends_json)."""
    return json.loads(value) if isinstance(value, str) else value


def held(messages: Sequence[str | Mapping]) -> list[dict]:
    """The frames a player holds after the server's `messages` in order (what its feed does with them): a reset
    starts over; a frame's keys sent again replace its old ones. For readers of the API (the tests, a class's run)."""
    frames: list[dict] = []
    for m in map(message, messages):
        if m.get("reset"):
            frames = []
        items = enumerate(m["frames"]) if isinstance(m.get("frames"), list) else (m.get("frames") or {}).items()
        for key, frame in items:
            i = int(key)
            if i == len(frames):
                frames.append(frame)
            else:
                frames[i] = {**frames[i], **frame}
    return frames

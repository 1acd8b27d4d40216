"""A stored step's views and the status line (main process only: figures never cross a process)."""
from __future__ import annotations

import logging
from typing import Literal

import gradio as gr

from components.align_plot import align_figure
from components.common import md_text, toast_text
from components.cost_view import cost_figure, cost_sentences
from components.eye_view import eye_figure
from components.focus import focus_choices, focus_node, focus_note
from components.lens_view import commit_figure, lens_figure, rank_figure
from components.mask_plot import mask_figure
from components.stats import accept_hist_figure, run_summary, stats_markdown, timing_figure
from components.step_words import step_words
from components.text_view import token_sources
from components.tree_plot import tree_figure

from .session import Session

log = logging.getLogger("esp.app")
# Output order of every per-step render; the run's last output tuple therefore holds text + figures.
# New views go last, so that the outputs of the first ones keep their places in the API.
# "words": the step in words; "focus": the Focus box (its choices are the step's nodes); "focus_note";
# "mask" is the attention pattern; "eye": the verifier's eye; "lens", "commit", "lens_rank": the Mask Lens.
VIEWS = ("text", "tree", "mask", "align", "stats", "hist", "timing", "cost", "cost_note", "words", "focus",
         "focus_note", "eye", "lens", "commit", "lens_rank")
# The views that change most per step: sent at every streamed update (the others less often).
FAST_VIEWS = ("text", "tree", "mask", "stats", "cost_note", "words", "focus", "focus_note", "eye", "lens")


def render(session: Session, i: int, views: tuple[str, ...] = VIEWS, focus: int | None = None) -> tuple:
    """The per-step views for step i of the stored run, in VIEWS order; views not in `views` are
    gr.skip() (left as they are on the page). `focus`: a node of step i outlined in the tree, the attention
    pattern, the text and the alignment, and the row of the verifier's eye that decided it (ignored when the
    step has no such node; the note says so)."""
    steps = session.steps
    step = steps[i]
    focus = None if focus is None else int(focus)
    shown = focus if focus_node(step, focus) is not None else None
    curve, device = session.meta.get("curve"), session.meta.get("device")
    summary = run_summary(steps, i) if {"stats", "hist"} & set(views) else None
    build = {
        "text": lambda: token_sources(steps, i, focus=shown),
        "tree": lambda: tree_figure(step, focus=shown),
        "mask": lambda: mask_figure(step, focus=shown),
        "align": lambda: align_figure(steps, i, focus=shown),
        "stats": lambda: stats_markdown(summary),
        "hist": lambda: accept_hist_figure(summary, None if step.prefill else len(step.accepted)),
        "timing": lambda: timing_figure(steps, i),
        "cost": lambda: cost_figure(steps, i, curve, device=device),
        "cost_note": lambda: cost_sentences(steps, i, curve, device=device),
        "words": lambda: step_words(step, session.meta),
        "focus": lambda: gr.update(choices=focus_choices(step), value=shown),
        "focus_note": lambda: focus_note(step, focus),
        "eye": lambda: eye_figure(step, session.meta, focus=shown),
        "lens": lambda: lens_figure(steps, i),
        "commit": lambda: commit_figure(steps, i),
        "lens_rank": lambda: rank_figure(steps, i),
    }
    return tuple(build[v]() if v in views else gr.skip() for v in VIEWS)


def status(session: Session, i: int, state: str = "done") -> str:
    """The status line for step i: 'done', 'running', 'stopping', 'stopped' (by Stop), 'timeout' (the
    GPU call's time ran out) or 'aborted: <why>' (the GPU worker ended without a word)."""
    s = run_summary(session.steps, i)
    last = len(session.steps) - 1
    n = f"**Stopped after {last + 1} steps"
    kind, _, why = state.partition(": ")
    where = {"done": f"**Done** · step {i} of {last}",
             "running": f"**Decoding** · step {i}",
             "stopping": f"**Stopping…** · step {i}",
             "stopped": f"{n}** ({session.steps_after_stop()} after the click) · step {i} of {last}",
             "timeout": f"{n}: this GPU call's time ran out** · step {i} of {last}",
             "aborted": f"{n}: the GPU worker ended ({why})** · step {i} of {last}"}[kind]
    source = f" · recorded: {md_text(session.meta['opened'])}" if session.meta.get("opened") else ""
    return f"{where} · {s.tokens} tokens · τ {s.tau:.2f} · {md_text(session.meta['settings'])}{source}"


def refusal_line(message: str, medium: Literal["markdown", "toast"] = "markdown") -> str:
    """A refusal's one line as its medium shows it; every refusal the server sends is made here. The message
    may quote what the visitor sent. "markdown" (a status line, a note): escaped, so that markup, links and
    formulas read as text (md_text). "toast" (gr.Warning, gr.Error, a refused queue join): the plain
    sentence, which the page renders as HTML and gradio_client hands to an API caller as it is, with only what
    could open a tag or a character reference replaced by a look-alike (toast_text), so both read the same."""
    return f"⚠️ {md_text(message) if medium == 'markdown' else toast_text(message)}"


def refuse(message: str, where: str) -> str:
    """A user error: one log line (no traceback) and one toast; returns the status line to show."""
    log.info("refused %s: %s", where, message)
    gr.Warning(refusal_line(message, "toast"))
    return refusal_line(message)


def refusal(message: str, outputs: int, where: str) -> tuple:
    """`refuse`, as an output tuple whose first output is the status; every other output keeps its value."""
    return (refuse(message, where), *(gr.skip() for _ in range(outputs - 1)))


def refusal_error(message: str, where: str | None = None) -> gr.Error:
    """`refuse` for an event with no status output (Export, the speed box, a request Gradio refuses before any
    handler): a gr.Error to raise, which the page shows as a toast and gradio_client raises as AppError, with
    the line and no traceback in the log."""
    if where is not None:
        log.info("refused %s: %s", where, message)
    return gr.Error(refusal_line(message, "toast"), print_exception=False)

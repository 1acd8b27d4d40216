"""What the page shows of a run: the data its player takes (components/lecture.py PLAYER_JS, fed by
assets/explorer.js from the hidden #player-data) and the status line. Main process only: figures never cross a
process."""
from __future__ import annotations

import functools
import inspect
import itertools
import logging
from typing import Callable, Literal, Mapping, Sequence

import gradio as gr
import orjson

from components.common import md_text, toast_text
from components.frames import run_data
from components.stats import run_summary
from components.story_player import story_run
from esp.trace import StepTrace

from .session import Session

log = logging.getLogger("esp.app")
_SEQ = itertools.count(1)
# What the story offers once told on the page: play the run, or open the dashboard at the prompt box.
ACTIONS = ("play", "prompt")


def player_data(steps: Sequence[StepTrace], meta: Mapping) -> dict:
    """A whole run as the page's player takes it: its frames and views (components.frames.run_data), and the
    story of its step, predict mode's data and the figures' text equivalents (components.story_player)."""
    return {**run_data(steps, meta), **story_run(steps, meta, ACTIONS)}


def sends_json(fn: Callable, at: int) -> Callable:
    """`fn`, a handler (or a generator of outputs) whose output `at` is a message to the player (a dict), answering
    with each message as one JSON string, to the page and to an API caller. As a dict, Gradio would walk it for
    files, diff it against the last one and encode its nested frames, and a client undo all of it, on every update
    of a run. (Not the player box's `postprocess`: the first gr.skip() to the box, e.g. after every Run, makes the
    session a fresh copy of the box, without it.)"""
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def stream(*args, **kwargs):
            outputs = fn(*args, **kwargs)
            try:
                for out in outputs:
                    yield _json_at(out, at)
            finally:
                outputs.close()  # a run ends (its row leaves the batch) when its page stops listening
        return stream

    @functools.wraps(fn)
    def call(*args, **kwargs):
        return _json_at(fn(*args, **kwargs), at)
    return call


def _json_at(out: tuple, at: int) -> tuple:
    message = out[at]
    if not isinstance(message, dict) or "__type__" in message:  # gr.skip() and gr.update() stay updates
        return out
    text = orjson.dumps(message, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY).decode()
    return (*out[:at], text, *out[at + 1:])


def payload(**keys) -> dict:
    """One message to the page's player (its feed: reset, frames, views, show, live, ...), numbered, so that the
    page takes two equal messages as two (the player ignores the number)."""
    return {"seq": next(_SEQ), **keys}


def opened(session: Session, i: int | None = None, data: dict | None = None) -> dict:
    """The session's whole run for the player, which then shows step i (default: the last); `data`: the run's
    player_data when it is already made (a shipped trace's, a room's)."""
    last = len(session.steps) - 1
    return payload(reset=True, **(data or player_data(session.steps, session.meta)), show=last if i is None else i)


def status(session: Session, state: str = "done") -> str:
    """The status line of the session's run: 'done', 'running' or 'stopping' (with its newest step), 'stopped'
    (by Stop), 'timeout' (the GPU call's time ran out) or 'aborted: <why>' (the GPU worker ended without a
    word); the step on screen is the player's to say."""
    s = run_summary(session.steps)
    last = len(session.steps) - 1
    n = f"**Stopped after {last + 1} steps"
    kind, _, why = state.partition(": ")
    where = {"done": f"**Done** · {last + 1} steps",
             "running": f"**Decoding** · step {last}",
             "stopping": f"**Stopping…** · step {last}",
             "stopped": f"{n}** ({session.steps_after_stop()} after the click)",
             "timeout": f"{n}: this GPU call's time ran out**",
             "aborted": f"{n}: the GPU worker ended ({why})**"}[kind]
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

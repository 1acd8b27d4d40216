"""The shared batch (issue 48): the page's runs that wait for the same model and dtype decode together, one forward
per step for all of them (esp.decoding.batch.LiveBatch), each row verified, committed and traced on its own with
every view it records alone (the attention pattern, the alignment, the Mask Lens, the verifier's eye), so that a
row's tokens and traces are what that prompt gives alone.

`updates` is what `explorer.calls.generate` iterates in place of `explorer.worker.run_steps`, with the same updates
({"meta"}, then {"step", "clock"} per step, then {"end"}, or {"error"}; a row's "step" is its StepTrace, not the
dict a worker process sends), and, while the run waits for the model,
{"wait": status line} whenever its place or estimate changes (explorer.line). One thread, started with the first
run, decodes the batch: a row joins between two steps (its prefill a forward of its own), and leaves after the step
in which it ended, its Stop was pressed or its page went away, the other rows going on. A run the batch engine
cannot share (a method whose batch needs one budget for all rows, `bc=auto`), and every run under ZeroGPU, where a
run is a GPU call in a worker process of its own that no batch can cross into, waits for the model alone and runs
through `run_steps` as before.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import ContextManager, Iterator

from components.settings import RunSettings
from esp.decoding.batch import LiveBatch
from esp.decoding.engine import Decoder, Run
from esp.trace import StepTrace

from . import gpu
from .gpu import MARGIN_S
from .line import LINE, Line, Ticket
from .requests import LIMITS
from .session import StopToken
from .worker import error_data, setup_call, run_steps

log = logging.getLogger("esp.app")
WAIT_POLL_S = 0.5  # how often a waiting run checks its place (and its Stop)
IDLE_S = 5.0  # the batch thread's longest sleep while a row waits for a run alone to end


@dataclass(eq=False)
class Row:
    """One run in the batch: what to decode, its stop token, where its updates go, and its state."""

    model: str
    ids: list[int]
    settings: RunSettings
    token: StopToken
    seconds: float | None
    updates: "queue.SimpleQueue[dict]" = field(default_factory=queue.SimpleQueue)
    ticket: Ticket | None = None
    gone: bool = False  # its page stopped listening
    run: Run | None = None
    started: float = 0.0


def shares_batch(settings: RunSettings) -> bool:
    """Whether a run with `settings` can take a row of the shared batch: locally (not under ZeroGPU), with a
    drafter that proposes its own block (a `bc=auto` budget sets one width for a whole batch of its own)."""
    return gpu.mode() == "local" and settings.drafter().batch_planner() is None


class SharedBatch:
    """The thread that decodes the line's rows together (one batch at a time: one model and dtype)."""

    def __init__(self, line: Line = LINE, rows: int = LIMITS.batch_rows):
        self.line = line
        self.rows = rows
        line.capacity = rows
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = threading.Event()

    def start(self) -> None:
        """Start the batch's thread unless it runs (it ends once no run waits for a row: `_end_idle`); call it after the
        run's ticket has joined the line, so that a thread ending meanwhile sees the ticket or is started again."""
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="esp-batch", daemon=True)
                self._thread.start()

    def close(self) -> None:
        """End the thread once its batch has emptied (the server's batch lives as long as the server)."""
        self._closed.set()
        with self.line.cond:
            self.line.cond.notify_all()
        if self._thread is not None:
            self._thread.join(IDLE_S + 1)

    def _loop(self) -> None:
        while not self._closed.is_set():
            if self.line.wait_rows(IDLE_S, self._closed.is_set):
                try:
                    self._decode()
                except Exception:  # noqa: BLE001 - a bug: its rows heard it (_decode); the thread goes on
                    log.exception("the shared batch failed")
            if self._end_idle():
                return

    def _end_idle(self) -> bool:
        """Let the thread end once no row runs or waits (the next run starts another: `start`), so that its OpenMP
        pool goes with it (explorer.own_thread says why an idle pool costs the other threads' forwards)."""
        with self._lock:
            if self.line.wants_rows():
                return False
            self._thread = None
            return True

    def _decode(self) -> None:
        """One batch, until its last row has gone: waiting rows join between steps, ended ones leave."""
        live: dict[int, Row] = {}  # id(run) -> its row
        batch: LiveBatch | None = None
        try:
            while True:
                key = next(iter(live.values())).ticket.key if live else None
                joining = [r for r in map(self._open, self.line.take_rows(key, self.rows - len(live))) if r]
                if joining:
                    batch = batch or LiveBatch(joining[0].run.dec.lm)
                    live.update((id(r.run), r) for r in joining)
                    self._send(batch.join([r.run for r in joining]), live)
                elif live:
                    self._send(batch.step(), live)
                self._let_go(batch, live)
                if not live:
                    return
        except Exception as e:  # noqa: BLE001 - every row of the failed batch hears it, then the line goes on
            for row in live.values():
                row.updates.put(error_data(e))
                self.line.done(row.ticket)
            raise

    def _open(self, ticket: Ticket) -> Row | None:
        """The admitted ticket's row, its run ready to join and its meta sent; None (its error sent, its turn
        given back) when it cannot start."""
        row: Row = ticket.payload
        try:
            lm, meta = setup_call(row.model, row.settings.dtype)
            s = row.settings
            row.run = Run(Decoder(lm, s.drafter(), s.sampling(), s.max_new_tokens, s.layouts, align=True, lens=True),
                          row.ids, batched=True)
        except Exception as e:  # noqa: BLE001 - a refused prompt, or a model that will not load: this row only
            row.updates.put(error_data(e))
            self.line.done(ticket)
            return None
        row.started = time.monotonic()
        row.updates.put({"meta": meta})
        return row

    @staticmethod
    def _send(steps: Iterator[tuple[Run, StepTrace]], live: dict[int, Row]) -> None:
        for run, trace in steps:
            live[id(run)].updates.put({"trace": trace, "clock": time.monotonic()})

    def _let_go(self, batch: LiveBatch | None, live: dict[int, Row]) -> None:
        """End the rows that are done, stopped, out of time or no longer listened to; the others go on."""
        gone = []
        for key, row in list(live.items()):
            end = _end(row)
            if end is None:
                continue
            row.updates.put({"end": end})
            gone.append(row.run)
            del live[key]
            self.line.done(row.ticket)
        if batch is not None and gone:
            batch.drop(gone)


def _end(row: Row) -> str | None:
    """How a row's run ends after this step ('done', 'stopped', 'timeout'; 'stopped' too when its page went
    away), or None while it goes on."""
    if row.run.done:
        return "done"
    if row.gone or row.token.is_set():
        return "stopped"
    if row.seconds is not None and time.monotonic() - row.started > row.seconds - MARGIN_S:
        return "timeout"
    return None


SHARED = SharedBatch()


def alone(who: tuple[str, str]) -> ContextManager[None]:
    """A turn with the model to itself for (visitor, unit) `who`, once its place in the line has come (Compare,
    What-if): the shared batch has emptied first, and takes no row meanwhile."""
    return SHARED.line.turn_alone(Ticket(*who))


def updates(model: str, ids: list[int], settings: RunSettings, token: StopToken, seconds: float | None = None,
            who: tuple[str, str] = ("local", "calls:local")) -> Iterator[dict]:
    """A run's updates as `run_steps` gives them, after its turn in the model's line (its place told as
    {"wait": status line}): a row of the shared batch where it can be one, else the model alone through
    `run_steps`. `who`: the run's (visitor, unit) for the line's fair order (explorer.line.identity). Closing the
    iterator lets its row go."""
    shared = SHARED
    line = shared.line
    row = Row(model, ids, settings, token, seconds)
    together = shares_batch(settings)
    row.ticket = Ticket(*who, key=(model, settings.dtype) if together else None, payload=row)
    line.join(row.ticket)
    if together:
        shared.start()
    try:
        first = yield from _wait(row, line, together)
        if first is not None:
            yield from _relay(first, row)
        elif not together and row.ticket.admitted is not None:
            try:
                yield from run_steps(model, ids, settings, token, seconds=seconds)
            finally:
                line.done(row.ticket)
    finally:
        row.gone = True
        line.leave(row.ticket)


def _wait(row: Row, line: Line, together: bool) -> Iterator[dict]:
    """Wait for the row's turn, telling its place when it changes; returns a row's first update once the batch
    has it (None for a run alone, whose turn has come, or a run stopped while it waited)."""
    told, poll = None, 0.0  # the first look does not wait: a run that must wait is told so at once
    while True:
        if together:
            try:
                return row.updates.get(block=poll > 0, timeout=poll or None)
            except queue.Empty:
                pass
        elif line.wait_alone(row.ticket, poll):
            return None
        poll = WAIT_POLL_S
        if row.ticket.admitted is None:
            if row.token.is_set():
                yield {"error": "Stopped while waiting for the model: nothing ran."}
                return None
            said = line.waiting_line(row.ticket)
            if said is not None and said != told:
                told = said
                yield {"wait": said}


def _relay(first: dict, row: Row) -> Iterator[dict]:
    """`first` and the row's next updates until its end or error, each step as the dict `run_steps` sends."""
    update = first
    while True:
        if "trace" in update:
            yield {"step": update["trace"], "clock": update["clock"]}  # in this process: the trace itself
        else:
            yield update
            if "end" in update or "error" in update:
                return
        update = row.updates.get()

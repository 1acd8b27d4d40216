"""The model's waiting line (issue 48): every run that needs the model waits here for its turn, in the fair order
of explorer.fair (in turn across visitors, and across the sessions or signed-in users behind each), told its place
and an estimate from the run times measured here.

Two kinds of turn. A run the shared batch can take (explorer.batch) takes a row of the batch decoding now as soon
as one is free; a run that needs the model to itself (Compare, What-if, a method the batch engine cannot share,
every run under ZeroGPU) waits until it is first in line and the batch has emptied. Nobody overtakes: rows are
admitted from the head of the line only, and stop at the first ticket that cannot join, so a run waiting to be
alone is not starved by rows arriving after it.

The door (explorer.door) still decides who may join the queue at all (one run per session, each visitor's
ceilings) and orders the runs Gradio holds back beyond the line's size; inside, this line takes over the order in
which the model is served, with a FairOrder of its own that counts a turn when a run gets the model.
"""
from __future__ import annotations

import math
import statistics
import threading
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterator

from .door import signed_in, unit_of, visitor_of
from .fair import FairOrder

RECENT = 20  # run times remembered per kind of turn, for the estimates
ROW, ALONE = "row", "alone"


@dataclass(eq=False)
class Ticket:
    """One run's place in the line. `key`: the batch it can join, (model, dtype), or None to be alone."""

    visitor: str
    unit: str
    key: Hashable | None = None
    payload: Any = None  # what the batch needs to decode it (explorer.batch)
    joined: float = field(default_factory=time.monotonic)
    admitted: float | None = None  # when it got the model (monotonic)

    @property
    def kind(self) -> str:
        return ALONE if self.key is None else ROW


def identity(request: Any, trusted: tuple[str, ...]) -> tuple[str, str]:
    """(visitor, unit) of a handler's gr.Request, as the door counts them (explorer.door.Caller); a direct call
    with no request is the server's own ('local', one unit)."""
    if request is None:
        return "local", "calls:local"
    raw = getattr(request, "request", None)  # gr.Request wraps the connection's own request, which the door reads
    raw = request if raw is None else raw
    who = visitor_of(raw, trusted)
    return who, unit_of(who, getattr(request, "session_hash", None), signed_in(raw, getattr(request, "username", None)))


class Line:
    """The tickets waiting for the model, the batch rows and the alone run holding it, and the run times measured."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.fair = FairOrder()
        self.cond = threading.Condition()
        self.waiting: list[Ticket] = []
        self.rows: list[Ticket] = []  # admitted to the batch and not yet done
        self.alone: Ticket | None = None
        self.capacity = 1  # rows the batch takes at once (explorer.batch sets it)
        self.times: dict[str, deque[float]] = {ROW: deque(maxlen=RECENT), ALONE: deque(maxlen=RECENT)}

    # ------------------------------------------------------------------ joining and leaving

    def join(self, ticket: Ticket) -> None:
        with self.cond:
            ticket.joined = self.clock()
            self.waiting.append(ticket)
            self.cond.notify_all()

    def leave(self, ticket: Ticket) -> None:
        """`ticket` is no longer waiting (it gave up); a row that has the model leaves through `done`."""
        with self.cond:
            if ticket in self.waiting:
                self.waiting.remove(ticket)
                self.cond.notify_all()

    def done(self, ticket: Ticket) -> None:
        """`ticket`'s run ended (or was let go): its time is booked and its place goes to the next."""
        with self.cond:
            if ticket in self.rows:
                self.rows.remove(ticket)
            elif self.alone is ticket:
                self.alone = None
            else:
                return
            if ticket.admitted is not None:
                self.times[ticket.kind].append(self.clock() - ticket.admitted)
            self.cond.notify_all()

    # ------------------------------------------------------------------ turns

    def order(self) -> list[Ticket]:
        """The waiting tickets in the order they get the model (explorer.fair); call with `cond` held."""
        return self.fair.order(self.waiting, lambda t: (t.visitor, t.unit, t.joined))

    def _admit(self, ticket: Ticket) -> None:
        self.waiting.remove(ticket)
        ticket.admitted = self.clock()
        self.fair.served(ticket.visitor, ticket.unit)

    def take_rows(self, key: Hashable | None, room: int) -> list[Ticket]:
        """Up to `room` tickets from the head of the line that can join a batch of `key` (None: no batch runs,
        so the head's key starts one), admitted as rows; none while a run has the model alone. Called by the batch
        between its steps."""
        with self.cond:
            out: list[Ticket] = []
            if self.alone is not None:
                return out
            for ticket in self.order():
                if len(out) >= room or ticket.key is None or (key is not None and ticket.key != key):
                    break
                key = ticket.key
                self._admit(ticket)
                out.append(ticket)
            self.rows += out
            return out

    def wait_rows(self, timeout: float, closed: Callable[[], bool] = lambda: False) -> bool:
        """Block the batch until a row may be admitted, `timeout` passes or `closed()` (checked when the line is
        notified); True when a row may be admitted."""
        with self.cond:
            return self.cond.wait_for(lambda: closed() or self._row_ready(), timeout) and not closed()

    def wants_rows(self) -> bool:
        """Whether a batch row is running or waiting to (a ticket with a key), admitted yet or not."""
        with self.cond:
            return bool(self.rows) or any(t.key is not None for t in self.waiting)

    def _row_ready(self) -> bool:
        if self.alone is not None or not self.waiting:
            return False
        head = self.order()[0]
        return head.key is not None and (not self.rows or head.key == self.rows[0].key)

    def wait_alone(self, ticket: Ticket, timeout: float) -> bool:
        """Wait up to `timeout` seconds for `ticket` (joined) to be first in line with the batch empty and nobody
        else alone; True once it holds the model alone (then `done` gives it back)."""
        with self.cond:
            if not self.cond.wait_for(lambda: self._first_and_free(ticket), timeout):
                return False
            self._admit(ticket)
            self.alone = ticket
            return True

    @contextmanager
    def turn_alone(self, ticket: Ticket) -> Iterator[None]:
        """Hold the model alone for the block, once `ticket`'s turn has come."""
        self.join(ticket)
        try:
            while not self.wait_alone(ticket, 60.0):
                pass
        except BaseException:
            self.leave(ticket)
            raise
        try:
            yield
        finally:
            self.done(ticket)

    def _first_and_free(self, ticket: Ticket) -> bool:
        return self.alone is None and not self.rows and self.order()[0] is ticket

    # ------------------------------------------------------------------ what a waiting visitor is told

    def place(self, ticket: Ticket) -> tuple[int, int] | None:
        """(place, of): `ticket`'s place in the line (1: next) among all waiting; None once it has the model."""
        with self.cond:
            if ticket not in self.waiting:
                return None
            order = self.order()
            return order.index(ticket) + 1, len(order)

    def typical(self, kind: str) -> float | None:
        """The median time of the last runs of `kind` (from getting the model to the end); None before any."""
        with self.cond:
            return statistics.median(self.times[kind]) if self.times[kind] else None

    def estimate(self, ticket: Ticket) -> float | None:
        """Seconds until `ticket` gets the model, from the measured run times: a row ahead of it takes a row's
        time over the batch's width (rows run together and end in turn), a run alone ahead first waits for the
        batch to empty, then takes a run alone's time; a row waits for a free row, a run alone for the batch to
        empty. None while a kind of run it waits for has not been measured."""
        with self.cond:
            if ticket not in self.waiting:
                return 0.0
            order = self.order()
            ahead = order[: order.index(ticket)]
            width = max(1, self.capacity)
            if (ticket.kind == ROW and self.alone is None and all(t.kind == ROW for t in ahead)
                    and len(self.rows) + len(ahead) < width):
                return 0.0  # a free row is there for it: it joins between two steps
            row, alone = self.typical(ROW), self.typical(ALONE)
            if ((self.rows or ticket.kind == ROW or any(t.kind == ROW for t in ahead)) and row is None) or (
                    (self.alone is not None or any(t.kind == ALONE for t in ahead)) and alone is None):
                return None
            now = self.clock()
            left = [max(0.0, row - (now - t.admitted)) for t in self.rows]
            drain = max(left, default=0.0)
            wait = max(0.0, alone - (now - self.alone.admitted)) if self.alone is not None else 0.0
            for t in ahead:
                if t.kind == ALONE:
                    wait, drain = wait + drain + alone, 0.0
                else:
                    wait += row / width
            if ticket.kind == ALONE:
                return wait + drain
            return wait + (min(left) if len(self.rows) >= width else 0.0)

    def waiting_line(self, ticket: Ticket) -> str | None:
        """The status line of a waiting run (one line): its place, and when it should start; None once it runs."""
        where = self.place(ticket)
        if where is None:
            return None
        place, of = where
        eta = self.estimate(ticket)
        typical = self.typical(ticket.kind)
        when = ("no run has ended here yet to estimate from" if eta is None else
                "starting now" if eta < 1 else f"starts in about {_seconds(eta)}")
        took = f" (runs here take about {_seconds(typical)})" if typical is not None else ""
        first = "next in line" if place == 1 else f"{_ordinal(place)} in line"
        return f"**Waiting for the model** · {first} of {of} · {when}{took}"


def _seconds(s: float) -> str:
    return f"{max(1, math.ceil(s))} s" if s < 90 else f"{math.ceil(s / 60)} min"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


LINE = Line()  # the server's one line in front of its model

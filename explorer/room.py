"""A teacher's lesson room (issue 38): one link puts a class on the same recorded run, each page following the
presenter's step when it chooses to, and free to scrub on its own otherwise.

The presenter (the page that starts the room) shares the recorded run it shows: a shipped trace, a file it
opened, a recipe link's run or its own finished run. The room keeps that run (the steps are shared, never
copied or changed) and the presenter's step. It lives in this process's memory only: no accounts, nothing
stored, and it ends with the server, when its presenter ends it, or LIMITS.room_ttl_s after it opened; at most
LIMITS.rooms at once, LIMITS.visitor_rooms per visitor (address). Its id is 128 random bits; the right to move
it is the presenter page's own session state (`Pass`, in a gr.State the server holds), never anything a page
sends, and a link's room id is checked like every other value.

Both pages tick once a second (`tick`, outside the queue: a dictionary lookup): the presenter's tells the room
its step; a follower's is told the presenter's step when it shows another, and its player (which holds the
room's run, sent once) moves there without another request. Scrubbing, Play, Run or opening a trace stop the
following (assets/explorer.js, app.py).
"""
from __future__ import annotations

import logging
import math
import re
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import gradio as gr

from components.limits import Limits
from esp.errors import ESPError
from esp.trace import StepTrace

from .calls import OPENED, whole
from .door import visitor_of
from .requests import LIMITS, Text
from .session import Session
from .views import opened, payload, player_data, refusal, refusal_line, status

log = logging.getLogger("esp.app")
ROOM_ID = re.compile(r"[A-Za-z0-9_-]{22}")  # secrets.token_urlsafe(16): 128 random bits
ROOM = Text("room", 64)
FOLLOW_S = 1.0  # how often a page in a room tells its step (the presenter's) or asks for it (a follower's)
# The room controls' outputs, in `controls` order: membership, room id (the page builds the link from it),
# note, End button, link box, Follow box, the room's timer.
CONTROLS = 7


@dataclass
class Room:
    """One lesson: the presenter's recorded run and step, who opened it and when it ends (monotonic)."""

    id: str
    steps: list[StepTrace]
    meta: dict[str, Any]
    visitor: str
    ends: float
    step: int = 0
    data: dict | None = None  # the run for the player (explorer.views.player_data), made at the first join
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def player_data(self) -> dict:
        """The room's run as its followers' players take it, made once however many join."""
        with self.lock:
            if self.data is None:
                self.data = player_data(self.steps, self.meta)
            return self.data


@dataclass(frozen=True)
class Pass:
    """A page's membership of a room, kept in its session state: the room's id, and whether it presents."""

    room: str
    presenter: bool = False


class Rooms:
    """The server's rooms, in memory, bounded in number, per visitor and in lifetime."""

    def __init__(self, limits: Limits, clock: Callable[[], float] = time.monotonic):
        self.limits = limits
        self.clock = clock
        self._rooms: dict[str, Room] = {}
        self._lock = threading.Lock()  # handlers run in worker threads

    def open(self, steps: list[StepTrace], meta: dict[str, Any], visitor: str, step: int) -> Room:
        """A new room on `steps` at `step`, opened by `visitor`; ESPError (one line) when a bound is reached."""
        with self._lock:
            now = self._sweep()
            theirs = [r for r in self._rooms.values() if r.visitor == visitor]
            if len(theirs) >= self.limits.visitor_rooms:
                raise ESPError(f"Your network (one address) already has {self.limits.visitor_rooms} lesson rooms open, "
                               f"the most one address may have: end one, or try again in {_minutes(theirs, now)} "
                               "min, when the first ends.")
            if len(self._rooms) >= self.limits.rooms:
                raise ESPError(f"This server already holds {self.limits.rooms} lesson rooms, the most it keeps: try "
                               f"again in {_minutes(self._rooms.values(), now)} min, when the first ends.")
            room = Room(secrets.token_urlsafe(16), steps, meta, visitor, now + self.limits.room_ttl_s, step)
            self._rooms[room.id] = room
            return room

    def get(self, room_id: str) -> Room | None:
        with self._lock:
            self._sweep()
            return self._rooms.get(room_id)

    def end(self, room_id: str) -> None:
        with self._lock:
            self._rooms.pop(room_id, None)

    def __len__(self) -> int:
        with self._lock:
            self._sweep()
            return len(self._rooms)

    def _sweep(self) -> float:
        """Drop the rooms past their end (under the lock); returns now."""
        now = self.clock()
        for key in [k for k, r in self._rooms.items() if r.ends <= now]:
            del self._rooms[key]
        return now


def _minutes(rooms, now: float) -> int:
    return max(1, math.ceil((min(r.ends for r in rooms) - now) / 60))


ROOMS = Rooms(LIMITS)


def gone(room_id: str) -> str:
    """Why a room cannot be reached (one sentence)."""
    hours = LIMITS.room_ttl_s / 3600
    return (f"The lesson room {room_id!r} is not open on this server: it has ended (a room ends when its presenter "
            f"ends it, {hours:g} h after it opened, or when the server restarts). Ask for a new link.")


# ---------------------------------------------------------------- the presenter

def _controls(membership: Pass | None, note: str, room_id: str = "") -> tuple:
    """The room controls (CONTROLS order) for a page that presents, follows or is in no room."""
    presenter = membership is not None and membership.presenter
    follower = membership is not None and not membership.presenter
    return (membership, room_id if presenter else "", note, gr.Button(visible=presenter),
            gr.Textbox(visible=presenter), gr.Checkbox(visible=follower, value=True),
            gr.Timer(FOLLOW_S, active=membership is not None))


def start(session: Session | None, membership: Pass | None, i: Any, request: gr.Request) -> tuple:
    """Start a room on the run this page shows, at the shown step `i`; this page presents it (a room it
    presented before ends). Outputs: the room controls."""
    try:
        if session is None or not session.steps:
            raise ESPError("Nothing to teach from yet: open a recorded run (or run a prompt), then start a room.")
        if session.running:
            raise ESPError("A run is streaming: wait for it to end (or stop it), then start a room.")
        if membership is not None and membership.presenter:
            ROOMS.end(membership.room)
        step = min(max(whole(i, 0), 0), len(session.steps) - 1)
        room = ROOMS.open(session.steps, dict(session.meta), visitor_of(request, LIMITS.trusted_proxies), step)
    except ESPError as e:
        out = refusal(str(e), 1, "room")
        return (gr.skip(), gr.skip(), out[0], *(gr.skip() for _ in range(CONTROLS - 3)))
    log.info("lesson room opened (%d open)", len(ROOMS))
    hours = LIMITS.room_ttl_s / 3600
    note = (f"**Your lesson room is open.** Send the class link below: each page that opens it shows this run and "
            f"follows your step until its student scrubs. It ends when you press *End the room*, {hours:g} h from "
            "now, or when the server restarts.")
    return _controls(Pass(room.id, presenter=True), note, room.id)


def end(membership: Pass | None) -> tuple:
    """End the room this page presents (nothing for a follower). Outputs: the room controls."""
    if membership is None or not membership.presenter:
        return tuple(gr.skip() for _ in range(CONTROLS))
    ROOMS.end(membership.room)
    return _controls(None, "The lesson room has ended: its link no longer opens it.")


def present(membership: Pass | None, session: Session | None, i: Any) -> None:
    """The presenter's page shows step `i` (any way it got there): the room's step follows, while the page
    shows the room's run."""
    if membership is None or not membership.presenter or session is None:
        return
    room, step = ROOMS.get(membership.room), whole(i)
    if room is not None and step is not None and session.steps is room.steps:
        room.step = min(max(step, 0), len(room.steps) - 1)


# ---------------------------------------------------------------- the class

def join(session: Session | None, request: gr.Request | None = None) -> tuple:
    """Open the room the page's link names (`?room=ID`), at the presenter's step, following it; a link without
    one changes nothing. Outputs: (status, player, session, *room controls)."""
    raw = dict(request.query_params).get("room") if request is not None else None
    if raw is None:
        return tuple(gr.skip() for _ in range(OPENED + CONTROLS))
    try:
        room_id = ROOM.parse(raw)
        if not ROOM_ID.fullmatch(room_id):
            raise ESPError(f"This link's room {room_id!r} is not a room id of this server: check the link.")
        room = ROOMS.get(room_id)
        if room is None:
            raise ESPError(gone(room_id))
        session = session or Session()
        if session.running:
            raise ESPError("A run is streaming in this page: stop it, then open the room's link again.")
    except ESPError as e:
        out = refusal(str(e), OPENED, "room")
        return (*out, *(gr.skip() for _ in range(CONTROLS)))
    session.load(room.steps, dict(room.meta))
    note = ("**Lesson room** · this page shows the presenter's run. Keep *Follow the presenter* ticked to follow "
            "their step; scrub to explore on your own (that stops the following), and tick it to come back.")
    return status(session), _followed(session, room), session, *_controls(Pass(room.id), note)


def tick(membership: Pass | None, following: Any, i: Any, session: Session | None) -> tuple:
    """A page's tick in its room (outside the queue), `i` the step its player shows. The presenter's tells the
    room its step; a follower's, while it follows, gets the presenter's step when it shows another (its player
    moves there: the room's run is on the page already), or the room's run again when the page opened another
    since. Once the room has ended: a note, and the timer stopped. Outputs: (player, note, timer)."""
    skip = (gr.skip(), gr.skip(), gr.skip())
    if membership is None:
        return skip
    if membership.presenter:
        present(membership, session, i)
        return skip
    room = ROOMS.get(membership.room)
    if room is None:
        return gr.skip(), refusal_line(gone(membership.room)), gr.Timer(active=False)
    if following is not True:
        return skip
    session = session or Session()
    if session.steps is not room.steps:
        if session.running:
            return gr.skip(), refusal_line("A run is streaming in this page: stop it to follow the presenter "
                                           "again."), gr.skip()
        session.load(room.steps, dict(room.meta))
        return _followed(session, room), gr.skip(), gr.skip()
    if whole(i) == room.step:
        return skip
    return payload(show=room.step, room=True), gr.skip(), gr.skip()


def _followed(session: Session, room: Room) -> dict:
    """The room's run for a follower's player, at the presenter's step (`room`: a move the page did not make)."""
    return {**opened(session, room.step, room.player_data()), "room": True}

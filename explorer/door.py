"""Who may join the queue (issues 31, 38): the limits per session and per visitor, the fair order of the runs,
and Stop's way past a full queue.

The door stands in front of the queue's `push`, which every queued request passes (the page's events,
gradio_client, plain HTTP), and refuses, with one line naming the limit and when to try again, before
anything is queued:
- a run (the model's events: Run, Compare, What-if) from a unit that already has one queued or running; the
  unit is the browser session, or the user where the Space knows who is signed in (Hugging Face sign-in, or
  Gradio's own login: `signed_in`), or, for calls naming no session, the visitor's sessionless calls together;
- a view (any other event: scrub, Play, Focus, opening a trace, export) from a session that already has
  LIMITS.session_renders of them queued or running;
- and, as ceilings against abuse sized for a class behind one school address: a visitor's
  LIMITS.visitor_runs runs queued or running, LIMITS.visitor_waiting requests of any kind waiting, and
  LIMITS.visitor_sessions sessions open (a page's unload closes its session; one with no queued request for
  LIMITS.session_idle_s stops counting until its next one; a call naming no session is none).
Gradio's own bound on the whole queue is checked here too, with Gradio's answer, so that Stop (concurrency id
FREE) passes it: Stop only sets the caller's own session's stop token, so it is never refused and never waits.

The model serves its runs in turn across visitors and their units (explorer.fair), not first come, first
served: Gradio takes the first waiting event of a concurrency group, so the door puts the fair one first, by
reordering the model's group of Gradio's queue whenever the model is free to take the next (the queue's
`get_events`) and when a run joins (then every waiting run is told its new place and Gradio's estimate).
The views have concurrency groups of their own (app.RENDER), so they never wait behind the model.

A visitor is an address: the connection's, or, when that is a trusted proxy's (LIMITS.trusted_proxies), the
address X-Forwarded-For names (the entry the nearest untrusted hop wrote: a caller can prepend entries, not
replace the proxy's). IPv6 addresses count by their /64 network (one host holds a whole /64). The server's own
machine (a loopback address) is limited like any visitor unless LIMITS.local_unlimited (ESP_APP_LOCAL_UNLIMITED=1:
the test suite, a local load test).
"""
from __future__ import annotations

import ipaddress
import logging
import math
import threading
import time
import weakref
from typing import Any, Callable, Iterable, Iterator, NamedTuple

import gradio as gr
from fastapi import HTTPException

from components.limits import Limits

from .fair import FairOrder
from .views import refusal_line

log = logging.getLogger("esp.app")
RUNS = "model"  # the concurrency id of the runs counted per visitor (app._wire_model_calls)
FREE = "stop"  # the concurrency id of the events that always pass and never wait (Stop)
TOO_MANY = 429  # the HTTP status of a visitor's refusal ("Too Many Requests"); its body holds the line
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class Caller(NamedTuple):
    """Who sent a request: its visitor (address), the unit its runs count for (unit_of: the signed-in user,
    else the session) and its page (unit_of without the user: the session its views count for)."""

    visitor: str
    unit: str
    page: str


def _address(text: str) -> Address | None:
    """An address as a header or a connection writes it ('1.2.3.4', '1.2.3.4:80', '[::1]:80'); None if none."""
    text = text.strip()
    if text.startswith("[") and "]" in text:
        text = text[1:text.index("]")]
    elif text.count(":") == 1:
        text = text.partition(":")[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def visitor(peer: str | None, forwarded: Iterable[str], trusted: tuple[str, ...]) -> str:
    """The visitor a request comes from: the address `peer` (the connection's), or, when that is one of the
    `trusted` proxies' networks, the last X-Forwarded-For entry (`forwarded`: the header's values) that is not
    itself a trusted proxy. IPv6 as its /64 network; text that is no address as it is, cut to 64 characters."""
    networks = [ipaddress.ip_network(n) for n in trusted]

    def is_proxy(a: Address | None) -> bool:
        return a is not None and any(a in n for n in networks)

    address = _address(peer or "")
    if is_proxy(address):
        hops = [h for value in forwarded for h in value.split(",") if h.strip()]
        for hop in reversed(hops):
            address = _address(hop)
            if not is_proxy(address):
                if address is None:
                    return hop.strip()[:64]
                break
    if address is None:
        return (peer or "unknown")[:64]
    if address.version == 6 and not address.is_loopback:
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(address)


def visitor_of(request: Any, trusted: tuple[str, ...]) -> str:
    """The visitor a request (Starlette's, or a gr.Request) comes from, as `visitor` reads it."""
    client = getattr(request, "client", None)
    headers = getattr(request, "headers", None)
    forwarded = headers.getlist("x-forwarded-for") if headers is not None else []
    return visitor(client.host if client else None, forwarded, trusted)


def is_local(who: str) -> bool:
    """True for the server's own machine (a loopback address)."""
    address = _address(who)
    return address is not None and address.is_loopback


class Door:
    """The checks in front of one app's queue (`install`), the sessions each visitor has open, and the fair
    order of the model's queue."""

    def __init__(self, limits: Limits, clock: Callable[[], float] = time.monotonic):
        self.limits = limits
        self.clock = clock
        self.fair = FairOrder()
        self._sessions: dict[str, dict[str, float]] = {}  # visitor -> {session hash: last request (monotonic)}
        self._lock = threading.Lock()  # `unload` runs in a worker thread; `push` in the event loop
        self._queue: Any = None
        self._max_size: int | None = None
        self._callers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # event -> Caller

    def install(self, demo: Any) -> None:
        """Put the door in front of `demo`'s queue (after demo.queue(...)), taking over its size check and
        the order in which the model's group is served."""
        queue = self._queue = demo._queue
        self._max_size, queue.max_size = queue.max_size, None  # checked in `push`, where Stop is let past it
        original_push, original_get = queue.push, queue.get_events

        async def push(body, request, username):
            fn = demo.fns.get(body.fn_index) if isinstance(body.fn_index, int) else None
            if fn is not None:
                refused = self.check(fn.concurrency_id, body.session_hash, request, username)
                if refused is not None:
                    return refused
            answer = await original_push(body, request, username)
            if fn is not None and fn.concurrency_id == RUNS and answer[0]:
                self._reorder()
                queue.broadcast_estimations(RUNS)  # a place may have changed: each waiting run hears its own
            return answer

        def get_events():  # in the event loop, under the queue's lock: nothing joins meanwhile
            group = queue.event_queue_per_concurrency_id.get(RUNS)
            if group is not None and group.queue and (
                    group.concurrency_limit is None or group.current_concurrency < group.concurrency_limit):
                self._reorder()  # only when the model is free: the loop asks every few milliseconds
            picked = original_get()
            if picked and picked[2] == RUNS:
                for event in picked[0]:
                    self.fair.served(*self.caller(event)[:2])
            return picked

        push.door = self  # what is installed, for whoever inspects the queue
        queue.push, queue.get_events = push, get_events

    def _reorder(self) -> None:
        """The model's waiting runs in their fair order (explorer.fair), in place: Gradio takes the first."""
        waiting = self._queue.event_queue_per_concurrency_id[RUNS].queue
        waiting[:] = self.fair.order(list(waiting), lambda e: (*self.caller(e)[:2], e.enqueue_time))

    def caller(self, event: Any) -> Caller:
        """Who sent a queued or running event (its address read once per event)."""
        if event not in self._callers:
            who = self.visitor_of(event.request)
            # Gradio names a call that sent no session by the event's own id.
            session = None if event.session_hash == event._id else event.session_hash
            user = signed_in(event.request, event.username)
            self._callers[event] = Caller(who, unit_of(who, session, user), unit_of(who, session))
        return self._callers[event]

    def check(self, kind: str | None, session: str | None, request: Any, username: str | None = None) -> tuple | None:
        """None when a request of concurrency id `kind` from `session` (signed in as `username`, if at all)
        may join; else Gradio's full-queue answer (a tuple push returns), or an HTTPException with one line.
        Runs in the event loop, with no await, so that no other request joins between the counting and the
        queueing."""
        if kind == FREE:
            return None
        waiting = len(self._queue)
        if self._max_size is not None and waiting >= self._max_size:
            return False, f"Queue is full. Max size is {self._max_size} and size is {waiting}.", "queue_full"
        who = self.visitor_of(request)
        if self.limits.local_unlimited and is_local(who):
            return None
        username = signed_in(request, username)
        limit, unit, page = self.limits, unit_of(who, session, username), unit_of(who, session)
        events = [(e, running, self.caller(e)) for e, running in self._events()]
        mine = [(e, running, c) for e, running, c in events if c.visitor == who]
        runs = [c for e, _, c in mine if e.fn.concurrency_id == RUNS]
        if kind == RUNS:
            if any(e.fn.concurrency_id == RUNS and c.unit == unit for e, _, c in events):  # a user, from anywhere
                held = f"You (signed in as {username}) already have" if username else "This page already has"
                self._refuse(who, f"{held} a run queued or running on this server: wait for it to end (or press "
                                  "Stop), then run again.")
            if len(runs) >= limit.visitor_runs:
                self._refuse(who, f"Your network (one address) already has {limit.visitor_runs} runs queued or "
                                  "running on this server, the most one address may have: try again when one of "
                                  f"them has ended{self._run_time()}.")
        else:
            drawing = sum(e.fn.concurrency_id not in (RUNS, FREE) and c.page == page for e, _, c in mine)
            if drawing >= limit.session_renders:
                self._refuse(who, f"This page already has {limit.session_renders} views being drawn: try again in "
                                  "a moment, when they are on screen.")
        if sum(not running for _, running, _ in mine) >= limit.visitor_waiting:
            self._refuse(who, f"Your network (one address) already has {limit.visitor_waiting} requests waiting in "
                              "this server's queue, the most one address may have: try again when some of them "
                              f"have been answered{self._run_time()}.")
        self._seen(who, session)
        return None

    def _run_time(self) -> str:
        """', a run here takes about N s' from Gradio's mean time of the runs it finished; '' before any."""
        times = [(t.count, t.avg_time) for fn, t in list(self._queue.process_time_per_fn.items())
                 if fn.concurrency_id == RUNS and t.count]
        if not times:
            return ""
        mean = sum(n * avg for n, avg in times) / sum(n for n, _ in times)
        return f" (a run here takes about {max(1, round(mean))} s)"

    def _seen(self, who: str, session: str | None) -> None:
        """Count `session` as open for `who` (refused when it would be one too many). A plain HTTP call that
        names no session is not counted: it has no page to come back to, and counting each would lock a caller
        following the API page's curl example out after a few calls."""
        if session is None:
            return
        now, idle, most = self.clock(), self.limits.session_idle_s, self.limits.visitor_sessions
        with self._lock:
            for sessions in self._sessions.values():
                for key in [k for k, t in sessions.items() if now - t > idle]:
                    del sessions[key]
            sessions = self._sessions.setdefault(who, {})
            if session not in sessions and len(sessions) >= most:
                minutes = max(1, math.ceil((min(sessions.values()) + idle - now) / 60))
                self._refuse(who, f"Your network (one address) already has {most} pages open on this server, the "
                                  f"most one address may have: close a page, or try again in {minutes} min, when "
                                  "one left idle stops counting.")
            sessions[session] = now
            for key in [k for k, s in self._sessions.items() if not s]:
                del self._sessions[key]

    def unload(self, request: gr.Request) -> None:
        """The app's unload handler (a page, or a gradio_client Client, closed its session): that session no
        longer counts for its visitor."""
        with self._lock:
            for sessions in self._sessions.values():
                sessions.pop(getattr(request, "session_hash", None), None)

    def sessions_of(self, who: str) -> int:
        with self._lock:
            return len(self._sessions.get(who, {}))

    def visitor_of(self, request: Any) -> str:
        return visitor_of(request, self.limits.trusted_proxies)

    def _events(self) -> Iterator[tuple[Any, bool]]:
        """(event, running) for every request waiting in the queue or running."""
        for event_queue in list(self._queue.event_queue_per_concurrency_id.values()):
            yield from ((e, False) for e in list(event_queue.queue))
        for job in list(self._queue.active_jobs):
            yield from ((e, True) for e in job or ())

    @staticmethod
    def _refuse(who: str, message: str) -> None:
        log.info("refused a request from %s: %s", who, message)
        raise HTTPException(status_code=TOO_MANY, detail=refusal_line(message, "toast"))


def signed_in(request: Any, username: str | None = None) -> str | None:
    """The user a request is signed in as: Gradio's own login (`username`, as the queue passes it), else Hugging
    Face sign-in (a Space with `hf_oauth`: the name in the OAuth session, which Gradio keeps in a signed cookie
    and drops once expired); None when nobody is."""
    if username:
        return username
    scope = getattr(request, "scope", None)
    session = scope.get("session") if isinstance(scope, dict) else None
    info = session.get("oauth_info") if isinstance(session, dict) else None
    if not isinstance(info, dict) or (info.get("expires_at") or math.inf) < time.time():
        return None
    name = (info.get("userinfo") or {}).get("preferred_username")
    return str(name) if name else None


def unit_of(who: str, session: str | None, username: str | None = None) -> str:
    """The unit a visitor's request counts for: its signed-in user, else its session, else (a call naming no
    session) the visitor's sessionless calls together."""
    if username:
        return f"user:{username}"
    return f"session:{session}" if session else f"calls:{who}"


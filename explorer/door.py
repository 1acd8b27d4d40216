"""Who may join the queue (issue 31): the per-visitor limits, and Stop's way past a full queue.

Gradio's queue bounds the requests waiting in it all together (LIMITS.queue_size), so one caller opening many
sessions could fill it, and every other visitor would get "busy". The door stands in front of the queue's
`push`, which every queued request passes (the page's events, gradio_client, plain HTTP), and refuses, with
one line and before anything is queued, a request from a visitor who already has
- LIMITS.visitor_runs runs (the model's events: Run, Compare, What-if) queued or running,
- LIMITS.visitor_waiting requests of any kind waiting in the queue (its share of it), or
- LIMITS.visitor_sessions sessions open, when the request opens one more (a page's unload closes its session;
  one idle for SESSION_TTL_S, whose state Gradio then drops, no longer counts; a call naming no session is
  none).
Gradio's own bound on the whole queue is checked here too, with Gradio's answer, so that Stop (concurrency id
FREE) passes it: Stop only sets the caller's own session's stop token, so it is never refused and never waits.

A visitor is an address: the connection's, or, when that is a trusted proxy's (LIMITS.trusted_proxies), the
address X-Forwarded-For names (the entry the nearest untrusted hop wrote: a caller can prepend entries, not
replace the proxy's). IPv6 addresses count by their /64 network (one host holds a whole /64). The server's own
machine (a loopback address) is limited like any visitor unless LIMITS.local_unlimited (ESP_APP_LOCAL_UNLIMITED=1:
the test suite, a local load test).
"""
from __future__ import annotations

import ipaddress
import logging
import threading
import time
from typing import Any, Iterable, Iterator

import gradio as gr
from fastapi import HTTPException

from components.limits import Limits

from .views import refusal_line

log = logging.getLogger("esp.app")
RUNS = "model"  # the concurrency id of the runs counted per visitor (app._wire_model_calls)
FREE = "stop"  # the concurrency id of the events that always pass and never wait (Stop)
TOO_MANY = 429  # the HTTP status of a visitor's refusal ("Too Many Requests"); its body holds the line
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


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


def is_local(who: str) -> bool:
    """True for the server's own machine (a loopback address)."""
    address = _address(who)
    return address is not None and address.is_loopback


class Door:
    """The per-visitor checks in front of one app's queue (`install`), and the sessions each visitor has open."""

    def __init__(self, limits: Limits, session_ttl_s: float):
        self.limits = limits
        self.session_ttl_s = session_ttl_s
        self._sessions: dict[str, dict[str, float]] = {}  # visitor -> {session hash: last request (monotonic)}
        self._lock = threading.Lock()  # `unload` runs in a worker thread; `push` in the event loop
        self._queue: Any = None
        self._max_size: int | None = None

    def install(self, demo: Any) -> None:
        """Put the door in front of `demo`'s queue (after demo.queue(...)), taking over its size check."""
        queue = self._queue = demo._queue
        self._max_size, queue.max_size = queue.max_size, None  # checked in `push`, where Stop is let past it
        original = queue.push

        async def push(body, request, username):
            fn = demo.fns.get(body.fn_index) if isinstance(body.fn_index, int) else None
            if fn is not None:
                refused = self.check(fn.concurrency_id, body.session_hash, request)
                if refused is not None:
                    return refused
            return await original(body, request, username)

        push.door = self  # what is installed, for whoever inspects the queue
        queue.push = push

    def check(self, kind: str | None, session: str | None, request: Any) -> tuple | None:
        """None when a request of concurrency id `kind` from `session` may join; else Gradio's full-queue answer
        (a tuple push returns), or an HTTPException with the visitor's one line. Runs in the event loop, with
        no await, so that no other request joins between the counting and the queueing."""
        if kind == FREE:
            return None
        waiting = len(self._queue)
        if self._max_size is not None and waiting >= self._max_size:
            return False, f"Queue is full. Max size is {self._max_size} and size is {waiting}.", "queue_full"
        who = self.visitor_of(request)
        if self.limits.local_unlimited and is_local(who):
            return None
        limit = self.limits
        events = list(self._events())
        mine = [(e, running) for e, running in events if self.visitor_of(e.request) == who]
        if kind == RUNS and sum(e.fn.concurrency_id == RUNS for e, _ in mine) >= limit.visitor_runs:
            self._refuse(who, f"You already have {limit.visitor_runs} runs queued or running on this server: "
                              "wait for one to end or stop it.")
        if sum(not running for _, running in mine) >= limit.visitor_waiting:
            self._refuse(who, f"You already have {limit.visitor_waiting} requests waiting in this server's queue: "
                              "wait for one to be answered.")
        self._seen(who, session)
        return None

    def _seen(self, who: str, session: str | None) -> None:
        """Count `session` as open for `who` (refused when it would be one too many). A plain HTTP call that
        names no session is not counted: it has no page to come back to, and counting each would lock a caller
        following the API page's curl example out after a few calls."""
        if session is None:
            return
        now = time.monotonic()
        with self._lock:
            for sessions in self._sessions.values():
                for key in [k for k, t in sessions.items() if now - t > self.session_ttl_s]:
                    del sessions[key]
            sessions = self._sessions.setdefault(who, {})
            if session not in sessions and len(sessions) >= self.limits.visitor_sessions:
                self._refuse(who, f"You already have {self.limits.visitor_sessions} sessions open on this server: "
                                  "close a page (an idle one closes after an hour) and try again.")
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
        client = getattr(request, "client", None)
        headers = getattr(request, "headers", None)
        forwarded = headers.getlist("x-forwarded-for") if headers is not None else []
        return visitor(client.host if client else None, forwarded, self.limits.trusted_proxies)

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


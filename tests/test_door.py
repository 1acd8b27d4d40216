"""Issues 31 and 38: the door in front of the queue (explorer/door.py) and the fair order of the runs
(explorer/fair.py). Who a visitor is (the forwarded address only from a trusted proxy); against a stand-in of
Gradio's queue: one run per session (per user when signed in), the views' own limit per session, the
per-address ceilings (the session one past it refused in one line), idle sessions no longer counting, and the
model's queue served in turn; through gradio_client against an in-process launch: one caller with 40 sessions
gets no more turns than five addresses with one each, a closed session frees its place, and Stop through the
API ends the caller's own run within one step while the queue is full, and never another session's run.
tests/test_class.py has a class of 30 behind one address against a `python app.py` server."""
from __future__ import annotations

import dataclasses
import inspect
import itertools
import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Iterator

import gradio as gr
import httpx
import pytest
from fastapi import HTTPException
from gradio_client import Client
from gradio_client.utils import QueueError, Status

from app_server import Paced, Replay, gpu_mode
from components.limits import Limits
from esp.errors import ESPError
from explorer.door import FREE, RUNS, Door, is_local, signed_in, visitor
from explorer.fair import FairOrder

PROMPT = "Count from 1 to 10."
TINY = dict(k=2, bc=30, lam=0.1, max_new_tokens=4)
LONG = {**TINY, "max_new_tokens": 400}  # held until stopped: far longer than any test waits for it
COUNTING = "Count from 1 to 1000, separated by commas."  # an answer that does not end before 400 tokens


# ---------------------------------------------------------------- who the visitor is

PROXY = ("10.0.0.0/8",)


@pytest.mark.parametrize("peer, forwarded, trusted, who", [
    ("203.0.113.7", [], (), "203.0.113.7"),  # no proxy: the connection's address
    ("203.0.113.7", ["198.51.100.1"], (), "203.0.113.7"),  # a header from anyone but a trusted proxy is ignored
    ("203.0.113.7", ["198.51.100.1"], PROXY, "203.0.113.7"),  # ... and from an address outside its networks
    ("10.16.3.80", ["198.51.100.1"], PROXY, "198.51.100.1"),  # the Space's proxy names the visitor
    ("10.16.3.80", ["127.0.0.1, 1.2.3.4, 198.51.100.1"], PROXY, "198.51.100.1"),  # prepended entries: no effect
    ("10.16.3.80", ["198.51.100.1, 10.9.9.9"], PROXY, "198.51.100.1"),  # a chain of trusted proxies
    ("10.16.3.80", ["198.51.100.1", "10.9.9.9"], PROXY, "198.51.100.1"),  # the header sent twice
    ("10.16.3.80", ["198.51.100.1:5555"], PROXY, "198.51.100.1"),  # with a port
    ("10.16.3.80", [], PROXY, "10.16.3.80"),  # the proxy's own request
    ("10.16.3.80", ["2001:db8:1:2:3:4:5:6"], PROXY, "2001:db8:1:2::/64"),  # IPv6 by its /64
    ("10.16.3.80", ["[2001:db8:1:2::9]:443"], PROXY, "2001:db8:1:2::/64"),
    ("10.16.3.80", ["not-an-address"], PROXY, "not-an-address"),  # what the proxy wrote, as it is
    ("::1", [], (), "::1"),
])
def test_the_visitor_is_the_forwarded_address_only_behind_a_trusted_proxy(peer, forwarded, trusted, who):
    assert visitor(peer, forwarded, trusted) == who


def test_only_the_servers_own_machine_is_local():
    assert is_local("127.0.0.1") and is_local("::1")
    assert not is_local("10.16.3.80") and not is_local("2001:db8:1:2::/64") and not is_local("unknown")


def test_the_trusted_proxies_come_from_the_environment_in_one_line():
    assert Limits.from_env({}).trusted_proxies == ()
    assert Limits.from_env({"SPACE_ID": "me/esp"}).trusted_proxies == ("10.0.0.0/8",)
    assert Limits.from_env({"SPACE_ID": "me/esp", "ESP_APP_TRUSTED_PROXIES": ""}).trusted_proxies == ()
    assert Limits.from_env({"ESP_APP_TRUSTED_PROXIES": "127.0.0.1, 10.1.0.0/16,::1"}).trusted_proxies == \
        ("127.0.0.1/32", "10.1.0.0/16", "::1/128")
    with pytest.raises(ESPError, match=r"^ESP_APP_TRUSTED_PROXIES: 'a.b' is not an address or a network\.$"):
        Limits.from_env({"ESP_APP_TRUSTED_PROXIES": "10.0.0.1,a.b"})
    assert Limits.from_env({"ESP_APP_VISITOR_RUNS": "3"}).visitor_runs == 3
    assert Limits.from_env({"ESP_APP_SESSION_RENDERS": "2", "ESP_APP_SESSION_IDLE_S": "60"}).session_idle_s == 60
    with pytest.raises(ESPError, match="^ESP_APP_VISITOR_SESSIONS must be at least 1, not 0.$"):
        Limits.from_env({"ESP_APP_VISITOR_SESSIONS": "0"})


def test_the_limits_hold_a_class_behind_one_address():
    """Sized for a class behind one school address: at least 60 sessions, each with its run queued, and a
    queue that holds them all with their views besides."""
    limits = Limits()
    assert limits.visitor_sessions >= 60 and limits.visitor_runs >= limits.visitor_sessions
    assert limits.visitor_waiting >= limits.visitor_sessions + limits.session_renders
    assert limits.queue_size >= limits.visitor_waiting and limits.held_runs >= limits.visitor_sessions


# ---------------------------------------------------------------- against a stand-in of Gradio's queue

class FakeEvent:
    """What the door reads of one of Gradio's queued events."""

    def __init__(self, kind: str, address: str, session: str | None, username: str | None = None):
        self._id = uuid.uuid4().hex
        self.fn = SimpleNamespace(concurrency_id=kind)
        self.request = request(address)
        self.session_hash = session or self._id  # Gradio names a call that sent no session by its event's id
        self.username = username
        self.enqueue_time = next(CLOCK)


CLOCK = itertools.count()


class FakeQueue:
    """What the door reads and calls of Gradio's queue: the events waiting per concurrency id, the running
    jobs, the mean run times, and Gradio's way of taking the next event (the first of a group with room)."""

    def __init__(self, max_size: int):
        self.event_queue_per_concurrency_id = {
            kind: SimpleNamespace(queue=[], concurrency_limit=limit, current_concurrency=0)
            for kind, limit in ((RUNS, 1), ("views", 2))}
        self.active_jobs = [None, None]
        self.max_size = max_size
        self.process_time_per_fn = {}
        self.broadcasts = []

    async def push(self, body, request, username):  # the door's checks come first, then Gradio's push
        return True, "event", "success"

    def get_events(self):
        group = self.event_queue_per_concurrency_id[RUNS]
        if group.queue and group.current_concurrency < group.concurrency_limit:
            return [group.queue.pop(0)], False, RUNS
        return None

    def broadcast_estimations(self, kind):
        self.broadcasts.append(kind)

    def __len__(self):
        return sum(len(q.queue) for q in self.event_queue_per_concurrency_id.values())


def request(address: str, hf_user: str | None = None, expires_at: float | None = None) -> SimpleNamespace:
    """What the door reads of a request from `address` through a trusted proxy, signed in with Hugging Face
    as `hf_user` (its OAuth session, as Gradio keeps it) if given."""
    session = {"oauth_info": {"userinfo": {"preferred_username": hf_user}, "expires_at": expires_at}} if hf_user else {}
    return SimpleNamespace(client=SimpleNamespace(host="127.0.0.1"), scope={"session": session},
                           headers=SimpleNamespace(getlist=lambda name: [address]))


def gate(max_size: int = Limits.queue_size, **limits) -> Door:
    """A door (trusting loopback to name the visitor) on a FakeQueue of `max_size`, with `limits` changed."""
    door = Door(Limits(trusted_proxies=("127.0.0.1/32",), **limits), clock=lambda: door.now)
    door.now = 0.0
    door.install(SimpleNamespace(_queue=FakeQueue(max_size), fns={}))
    return door


@pytest.fixture
def door():
    return gate()


def refused(door, kind: str, session: str | None, address: str, username: str | None = None) -> str | None:
    try:
        answer = door.check(kind, session, request(address), username)
    except HTTPException as e:
        assert e.status_code == 429
        return e.detail
    return answer and answer[1]


def waiting(door, kind: str, address: str, session: str | None, username: str | None = None) -> FakeEvent:
    """An event of `kind` queued (after the door let it in)."""
    assert refused(door, kind, session, address, username) is None
    event = FakeEvent(kind, address, session, username)
    door._queue.event_queue_per_concurrency_id[kind].queue.append(event)
    return event


def running(door, event: FakeEvent) -> None:
    queue = door._queue
    queue.event_queue_per_concurrency_id[event.fn.concurrency_id].queue.remove(event)
    queue.active_jobs[queue.active_jobs.index(None)] = [event]


SCHOOL, HOME = "198.51.100.1", "203.0.113.1"
ONE_RUN = ("⚠️ This page already has a run queued or running on this server: wait for it to end (or press Stop), "
           "then run again.")


def test_an_idle_queue_looks_for_work_every_10_ms_not_every_1():
    """Gradio's queue looks for a request to start every millisecond while it has none (a fifth of a core on an
    idle server, measured; a thread waking a thousand times a second beside a run's decode): app.queued makes it
    QUEUE_POLL_S, through the attribute Gradio's loop reads."""
    import app

    assert "self.sleep_when_free" in inspect.getsource(gr.queueing.Queue.start_processing)
    with gr.Blocks() as demo:
        gr.Markdown("a page")
    assert app.queued(demo)._queue.sleep_when_free == app.QUEUE_POLL_S == 0.01


def test_each_session_has_one_run_queued_or_running_and_stop_always_passes(door):
    running(door, waiting(door, RUNS, SCHOOL, "s1"))  # its run holds the model
    assert refused(door, RUNS, "s1", SCHOOL) == ONE_RUN
    second = waiting(door, RUNS, SCHOOL, "s2")  # another session behind the same address: its run is queued
    assert refused(door, RUNS, "s2", SCHOOL) == ONE_RUN  # ... and it too has one
    assert refused(door, FREE, "s1", SCHOOL) is None  # Stop passes every limit
    assert refused(door, "views", "s1", SCHOOL) is None  # a view of the running session's joins
    running(door, waiting(door, RUNS, HOME, "t1"))  # so does another address's run
    assert refused(door, RUNS, "t1", HOME) == ONE_RUN
    # Calls naming no session are one unit per address.
    waiting(door, RUNS, HOME, None)
    assert refused(door, RUNS, None, HOME) == ONE_RUN
    assert second in door._queue.event_queue_per_concurrency_id[RUNS].queue


def test_a_signed_in_user_is_the_unit_in_place_of_the_session(door):
    waiting(door, RUNS, SCHOOL, "s1", username="ada")
    assert refused(door, RUNS, "s2", SCHOOL, username="ada") == (  # her second tab: the same user
        "⚠️ You (signed in as ada) already have a run queued or running on this server: wait for it to end (or "
        "press Stop), then run again.")
    assert refused(door, RUNS, "s2", HOME, username="ada") is not None  # from another address too
    waiting(door, RUNS, SCHOOL, "s3", username="alan")  # another user behind the same address
    waiting(door, RUNS, SCHOOL, "s4")  # and a session with nobody signed in


def test_hugging_face_sign_in_names_the_user():
    assert signed_in(request(SCHOOL, hf_user="grace", expires_at=time.time() + 60)) == "grace"
    assert signed_in(request(SCHOOL, hf_user="grace", expires_at=time.time() - 1)) is None  # expired: nobody
    assert signed_in(request(SCHOOL)) is None and signed_in(SimpleNamespace()) is None
    assert signed_in(request(SCHOOL, hf_user="grace"), "ada") == "ada"  # Gradio's own login first
    door = gate()
    event = FakeEvent(RUNS, SCHOOL, "s1")
    event.request = request(SCHOOL, hf_user="grace")
    door._queue.event_queue_per_concurrency_id[RUNS].queue.append(event)  # her run waits, sent from one tab
    try:  # her other tab, from another address
        door.check(RUNS, "s9", request(HOME, hf_user="grace"))
    except HTTPException as e:
        assert e.detail.startswith("⚠️ You (signed in as grace) already have a run queued or running")
    else:
        pytest.fail("a second run of a signed-in user was let in")


def test_a_session_draws_at_most_its_own_views_at_once(door):
    limit = door.limits.session_renders
    for _ in range(limit):
        waiting(door, "views", SCHOOL, "s1")
    assert refused(door, "views", "s1", SCHOOL) == (
        f"⚠️ This page already has {limit} views being drawn: try again in a moment, when they are on screen.")
    assert refused(door, "views", "s2", SCHOOL) is None  # the student beside it draws its own
    assert refused(door, RUNS, "s1", SCHOOL) is None  # its run is another limit
    assert refused(door, FREE, "s1", SCHOOL) is None


def test_the_per_address_ceilings_refuse_in_one_line_naming_the_limit():
    door = gate(max_size=16, visitor_runs=3, visitor_waiting=5)
    for n in range(3):
        waiting(door, RUNS, SCHOOL, f"s{n}")
    assert refused(door, RUNS, "s3", SCHOOL) == (
        "⚠️ Your network (one address) already has 3 runs queued or running on this server, the most one address "
        "may have: try again when one of them has ended.")
    waiting(door, RUNS, HOME, "t0")  # another address is not held back
    waiting(door, "views", SCHOOL, "s4")
    waiting(door, "views", SCHOOL, "s5")  # 5 of the school's requests wait: its share of the queue
    assert refused(door, "views", "s6", SCHOOL) == (
        "⚠️ Your network (one address) already has 5 requests waiting in this server's queue, the most one address "
        "may have: try again when some of them have been answered.")
    # Once runs have finished, the refusal says how long one takes.
    generate = type("Generate", (), {"concurrency_id": RUNS})  # a model event's BlockFunction, as a key
    door._queue.process_time_per_fn = {generate: SimpleNamespace(count=4, avg_time=12.4)}
    assert refused(door, RUNS, "s9", SCHOOL).endswith("has ended (a run here takes about 12 s).")
    # Gradio's bound on the whole queue, with Gradio's answer; Stop passes it.
    door._queue.event_queue_per_concurrency_id["views"].queue += [FakeEvent("views", "192.0.2.9", "x")] * 10
    assert refused(door, "views", "t1", HOME) == "Queue is full. Max size is 16 and size is 16."
    assert refused(door, FREE, "t1", HOME) is None


def test_the_session_one_past_the_ceiling_is_refused_with_one_line_and_a_closed_one_frees_its_place(door):
    most = door.limits.visitor_sessions
    for n in range(most):
        assert refused(door, "views", f"s{n}", SCHOOL) is None
    assert refused(door, "views", f"s{most}", SCHOOL) == (
        f"⚠️ Your network (one address) already has {most} pages open on this server, the most one address may "
        f"have: close a page, or try again in {door.limits.session_idle_s // 60} min, when one left idle stops "
        "counting.")
    assert refused(door, RUNS, f"s{most}", SCHOOL) is not None  # a run opens no session either
    assert refused(door, "views", "s0", SCHOOL) is None  # an open session goes on
    assert refused(door, "views", None, SCHOOL) is None  # a call that names no session is none
    assert refused(door, "views", "t0", HOME) is None  # another visitor opens its own
    door.unload(SimpleNamespace(session_hash="s3"))
    assert refused(door, "views", f"s{most}", SCHOOL) is None and door.sessions_of(SCHOOL) == most


def test_sessions_idle_past_the_limit_stop_counting():
    door = gate(visitor_sessions=2, session_idle_s=600)
    assert refused(door, "views", "a", SCHOOL) is None
    door.now = 500.0
    assert refused(door, "views", "b", SCHOOL) is None
    assert refused(door, "views", "c", SCHOOL).endswith("try again in 2 min, when one left idle stops counting.")
    door.now = 601.0  # "a" has sent nothing for 601 s: it no longer holds a place
    assert refused(door, "views", "c", SCHOOL) is None
    assert refused(door, "views", "a", SCHOOL) is not None  # back, it is one too many until another idles


def test_the_servers_own_machine_is_a_visitor_unless_the_operator_lifts_its_limits(door):
    """A local probe with two loopback addresses sees what a Space's visitors see; ESP_APP_LOCAL_UNLIMITED=1
    (the suite, a local load test) lifts the per-visitor limits for loopback callers only."""
    most = door.limits.visitor_sessions
    for n in range(most):
        assert refused(door, "views", f"l{n}", "127.0.0.1") is None
    assert refused(door, "views", "lx", "127.0.0.1").startswith(f"⚠️ Your network (one address) already has {most}")
    assert refused(door, "views", "m0", "127.0.0.2") is None  # another loopback address is another visitor
    door.limits = dataclasses.replace(door.limits, local_unlimited=True)
    assert refused(door, "views", "lx", "127.0.0.1") is None
    assert refused(door, "views", "x", "198.51.100.9") is None
    assert Limits.from_env({"ESP_APP_LOCAL_UNLIMITED": "1"}).local_unlimited and not Limits.from_env({}).local_unlimited


# ---------------------------------------------------------------- recorded runs never wait for the model

@pytest.mark.app
def test_only_the_runs_wait_for_the_model_and_whatifs_stored_side_is_drawn_without_it():
    """Every event of the page but Run, Compare and What-if (opening a trace, scrubbing, Play, Focus, a room's
    step, What-if's stored side...) has a concurrency group other than the model's, so none waits behind a run."""
    import app
    from explorer import calls
    from explorer.calls import open_shipped
    from explorer.session import Session

    demo = app.build_app()
    assert {fn.name for fn in demo.fns.values() if fn.concurrency_id == RUNS} == {"generate", "compare", "whatif"}
    stored = [fn for fn in demo.fns.values() if fn.name == "whatif_stored"]
    assert len(stored) == 1 and stored[0].concurrency_id == app.RENDER["concurrency_id"]
    session = open_shipped("trace_masks", Session())[-1]
    figure = calls.whatif_stored(3, session)
    assert figure.layout.title.text == calls.tree_figure(session.steps[3]).layout.title.text
    assert calls.whatif_stored("x", session) == gr.skip() and calls.whatif_stored(3, Session()) == gr.skip()


# ---------------------------------------------------------------- the fair order

def served_order(door, runs: int) -> list[FakeEvent]:
    """The next `runs` runs the model takes, each finishing before the next (Gradio's loop, through the door)."""
    queue, out = door._queue, []
    for _ in range(runs):
        picked = queue.get_events()
        assert picked is not None
        out.append(picked[0][0])
    return out


def test_a_class_behind_one_address_is_served_one_student_after_another(door):
    students = [waiting(door, RUNS, SCHOOL, f"s{n}") for n in range(30)]
    assert served_order(door, 30) == students


def test_a_caller_with_many_sessions_gets_no_more_turns_than_an_address_with_one():
    door = gate(visitor_runs=64, visitor_waiting=64)
    caller = [waiting(door, RUNS, SCHOOL, f"c{n}") for n in range(40)]
    first = served_order(door, 1)
    others = [waiting(door, RUNS, f"203.0.113.{n}", f"o{n}") for n in range(5)]  # they join after the caller
    assert first + served_order(door, 7) == [caller[0], *others, caller[1], caller[2]]
    # A visitor that comes back is next if it was served longer ago than the caller: one run each per round.
    again = waiting(door, RUNS, "203.0.113.0", "o0")
    assert served_order(door, 3) == [again, caller[3], caller[4]]


def test_the_fair_order_is_round_robin_across_visitors_and_their_units():
    fair = FairOrder()
    runs = [("a", "a1"), ("a", "a1"), ("a", "a2"), ("b", "b1"), ("c", "c1"), ("a", "a3")]
    items = [(who, unit, float(n)) for n, (who, unit) in enumerate(runs)]
    order = fair.order(items, lambda x: x)
    assert [x[:2] for x in order] == [("a", "a1"), ("b", "b1"), ("c", "c1"), ("a", "a2"), ("a", "a3"), ("a", "a1")]
    fair.served("a", "a1")  # a was served: b and c come first; within a, a1 waits behind a2 and a3
    assert [x[:2] for x in fair.order(items, lambda x: x)] == [
        ("b", "b1"), ("c", "c1"), ("a", "a2"), ("a", "a3"), ("a", "a1"), ("a", "a1")]


# ---------------------------------------------------------------- through a live server

@contextmanager
def launched(monkeypatch, engine=Paced, **limits) -> Iterator:
    """The app on a free port with LIMITS changed by `limits` and `engine` in place of the decoder; yields the
    launched demo. The model takes one run at a time, alone (a line of one: Gradio's queue holds the others, in
    the door's order), so that `engine` decodes every run (a paced or replayed run cannot share a batch)."""
    import app
    from explorer import batch, worker

    monkeypatch.setattr(app, "LIMITS", dataclasses.replace(app.LIMITS, **{"line_size": 1, **limits}))
    monkeypatch.setattr(worker, "Decoder", engine)
    monkeypatch.setattr(batch, "shares_batch", lambda settings: False)
    with gpu_mode("local"):
        demo = app.queued(app.build_app())
        demo.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True, **app.launch_options())
        try:
            yield demo
        finally:
            demo.close()


def client(demo, address: str) -> Client:
    """A gradio_client Client whose requests come from `address` (the server is reached from this machine,
    which uvicorn, Gradio's server, trusts to name the visitor in X-Forwarded-For)."""
    return Client(demo.local_url, verbose=False, headers={"X-Forwarded-For": address})


def started(job, timeout: float = 120) -> None:
    """Wait until `job`'s run has streamed its first update (it holds the model)."""
    deadline = time.monotonic() + timeout
    while not job.outputs() and time.monotonic() < deadline:
        assert not job.done(), job.exception()
        time.sleep(0.05)
    assert job.outputs(), "the run never started"


def queued(job, timeout: float = 30) -> None:
    """Wait until the server has `job` in its queue (or running)."""
    deadline = time.monotonic() + timeout
    while job.status().code not in (Status.IN_QUEUE, Status.PROCESSING) and time.monotonic() < deadline:
        assert not job.done(), job.exception()
        time.sleep(0.05)


def refusal_of(job) -> str:
    """The one line a refused join answered (the body of its HTTP 429); fails if the request was queued."""
    with pytest.raises(httpx.HTTPStatusError) as e:
        job.result(timeout=60)
    assert e.value.response.status_code == 429
    return e.value.response.json()["detail"]


def start_order(jobs: dict, until, timeout: float = 120) -> list:
    """The keys of `jobs` in the order their runs started (the server said so), watched until `until` has."""
    seen: list = []
    deadline = time.monotonic() + timeout
    while until not in seen and time.monotonic() < deadline:
        for key, job in jobs.items():
            if key not in seen and (job.outputs() or job.status().code in (Status.PROCESSING, Status.FINISHED)):
                seen.append(key)
        time.sleep(0.02)
    assert until in seen, f"{until} never started; started: {seen}"
    return seen


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.app
def test_a_caller_with_40_sessions_gets_no_more_turns_than_5_addresses_with_one_each(lm, monkeypatch):
    monkeypatch.setattr(Replay, "pace_s", 0.5)  # the first run (the whole recording) outlasts 44 joins
    with launched(monkeypatch, engine=Replay) as demo:
        with ThreadPoolExecutor(8) as pool:
            caller = list(pool.map(lambda _: client(demo, "198.51.100.7"), range(40)))
            others = list(pool.map(lambda n: client(demo, f"203.0.113.{n}"), range(5)))
        jobs = {("caller", 0): caller[0].submit(prompt=PROMPT, api_name="/generate", **{**TINY, "max_new_tokens": 400})}
        started(jobs["caller", 0])  # the model is busy with the caller's first run (the whole recording)
        assert refusal_of(caller[0].submit(prompt=PROMPT, api_name="/generate", **TINY)) == ONE_RUN
        for n, c in enumerate(caller[1:], 1):  # every other session of the caller has its run queued
            jobs["caller", n] = c.submit(prompt=PROMPT, api_name="/generate", **TINY)
            queued(jobs["caller", n])
        for n, c in enumerate(others):  # then the five others join, behind all of them
            jobs["other", n] = c.submit(prompt=PROMPT, api_name="/generate", **TINY)
            queued(jobs["other", n])
        # Each waiting run is told its place in the fair order: the five first, the caller's after them.
        deadline = time.monotonic() + 30
        while [jobs["other", n].status().rank for n in range(5)] != list(range(5)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [jobs["other", n].status().rank for n in range(5)] == list(range(5))
        assert jobs["caller", 1].status().rank == 5
        caller[0].predict(api_name="/stop")
        order = start_order(jobs, ("caller", 3))
        # Once runs have finished here, a waiting run is told an estimate besides its place.
        later = jobs["caller", 30].status()
        assert later.code == Status.IN_QUEUE and later.rank > 0 and later.eta and later.eta > 0
        assert order[:4] == [("caller", 0), ("other", 0), ("other", 1), ("other", 2)]
        assert order.index(("other", 4)) < order.index(("caller", 3)), order  # the bar: every one of them first
        assert all(jobs[key].result(timeout=120)[0].startswith("**Done**") for key in order[1:7])
        close_all(caller + others)


def close_all(clients: list[Client]) -> None:
    """Close the clients at once (each close waits up to a second for its heartbeat to end)."""
    with ThreadPoolExecutor(len(clients)) as pool:
        list(pool.map(Client.close, clients))


@pytest.mark.model
@pytest.mark.app
def test_a_closed_session_frees_its_place(lm, monkeypatch):
    with launched(monkeypatch, visitor_sessions=2) as demo:
        a, b, c = (client(demo, "198.51.100.8") for _ in range(3))
        for x in (a, b):
            assert x.predict(0, api_name="/show_step")[0].startswith("⚠️ Nothing to show yet")
        assert refusal_of(c.submit(0, api_name="/show_step")).startswith(
            "⚠️ Your network (one address) already has 2 pages open on this server, the most one address may have: "
            "close a page, or try again in ")
        assert client(demo, "203.0.113.10").predict(0, api_name="/show_step")[0].startswith("⚠️ Nothing")
        a.close()  # its heartbeat ends: the server unloads the session
        deadline = time.monotonic() + 30
        while demo._queue.push.door.sessions_of("198.51.100.8") > 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert c.predict(0, api_name="/show_step")[0].startswith("⚠️ Nothing to show yet")


@pytest.mark.model
@pytest.mark.app
def test_stop_through_the_client_ends_its_own_run_within_one_step_while_the_queue_is_full(lm, monkeypatch):
    with launched(monkeypatch, queue_size=2) as demo:
        holder = client(demo, "198.51.100.20")
        run = holder.submit(prompt=COUNTING, api_name="/generate", **LONG)
        started(run)
        waiting = [client(demo, f"203.0.113.{20 + n}") for n in range(2)]
        queued = [w.submit(prompt=PROMPT, api_name="/generate", **TINY) for w in waiting]
        deadline = time.monotonic() + 30
        while len(demo._queue) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(QueueError, match="^Queue is full! Please try again.$"):
            client(demo, "203.0.113.30").predict(prompt=PROMPT, api_name="/generate", **TINY)
        # Another session's Stop (a waiting caller's, then one with no run at all) leaves this run going.
        waiting[0].predict(api_name="/stop")
        client(demo, "203.0.113.31").predict(api_name="/stop")
        seen = len(run.outputs())
        deadline = time.monotonic() + 120
        while len(run.outputs()) < seen + 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not run.done() and "Decoding" in run.outputs()[-1][0]
        holder.predict(api_name="/stop")  # through the full queue
        final = run.result(timeout=120)[0]
        steps, after = map(int, re.search(r"Stopped after (\d+) steps\*\* \((\d+) after the click\)", final).groups())
        assert after <= 1 and steps < LONG["max_new_tokens"]
        assert all(q.result(timeout=120)[0].startswith("**Done**") for q in queued)  # the queue moved on


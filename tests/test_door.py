"""Issue 31: the door in front of the queue (explorer/door.py). Who a visitor is (the forwarded address only
from a trusted proxy), and, through gradio_client against an in-process launch on the embedded model: one
address opening 20 sessions holds no more than its share while a second address still gets its run; a
visitor's sessions are bounded and a closed one frees its place; Stop through the API ends the caller's own
run within one step while the queue is full, and never another session's run."""
from __future__ import annotations

import dataclasses
import re
import time
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Iterator

import httpx
import pytest
from fastapi import HTTPException
from gradio_client import Client
from gradio_client.utils import QueueError, Status

from app_server import gpu_mode
from components.limits import Limits
from esp.decoding.engine import Decoder
from esp.errors import ESPError
from explorer.door import FREE, RUNS, Door, is_local, visitor

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
    with pytest.raises(ESPError, match="^ESP_APP_VISITOR_SESSIONS must be at least 1, not 0.$"):
        Limits.from_env({"ESP_APP_VISITOR_SESSIONS": "0"})


class FakeQueue:
    """What the door reads of Gradio's queue: the events waiting per concurrency id, and the running jobs."""

    def __init__(self):
        self.event_queue_per_concurrency_id = {RUNS: SimpleNamespace(queue=[]), "views": SimpleNamespace(queue=[])}
        self.active_jobs = [None, None]
        self.max_size = 16

    async def push(self, body, request, username):  # the door's checks come first, then Gradio's push
        return True, "event", "success"

    def __len__(self):
        return sum(len(q.queue) for q in self.event_queue_per_concurrency_id.values())


def request(address: str) -> SimpleNamespace:
    return SimpleNamespace(client=SimpleNamespace(host="127.0.0.1"),
                           headers=SimpleNamespace(getlist=lambda name: [address]))


@pytest.fixture
def door():
    gate = Door(Limits(trusted_proxies=("127.0.0.1/32",)), session_ttl_s=3600)
    gate.install(SimpleNamespace(_queue=FakeQueue(), fns={}))
    return gate


def event(kind: str, address: str) -> SimpleNamespace:
    return SimpleNamespace(fn=SimpleNamespace(concurrency_id=kind), request=request(address))


def refused(door, kind: str, session: str | None, address: str) -> str | None:
    try:
        answer = door.check(kind, session, request(address))
    except HTTPException as e:
        assert e.status_code == 429
        return e.detail
    return answer and answer[1]


def test_the_door_counts_runs_the_queue_share_and_sessions_per_visitor(door):
    queue = door._queue
    queue.active_jobs[0] = [event(RUNS, "198.51.100.1")]  # its run holds the model
    queue.event_queue_per_concurrency_id[RUNS].queue.append(event(RUNS, "198.51.100.1"))  # its second waits
    assert refused(door, RUNS, "s3", "198.51.100.1") == (
        "⚠️ You already have 2 runs queued or running on this server: wait for one to end or stop it.")
    assert refused(door, RUNS, "t1", "203.0.113.1") is None  # another visitor's run joins
    assert refused(door, "views", "s1", "198.51.100.1") is None  # a render of the first visitor's joins too
    queue.event_queue_per_concurrency_id["views"].queue += [event("views", "198.51.100.1")] * 3
    assert refused(door, "views", "s1", "198.51.100.1") == (  # 4 of its requests wait: its share
        "⚠️ You already have 4 requests waiting in this server's queue: wait for one to be answered.")
    assert refused(door, FREE, "s1", "198.51.100.1") is None  # Stop passes every limit
    assert refused(door, RUNS, "local", "127.0.0.1") is None  # the server's own machine: a visitor of its own
    assert refused(door, "views", "local", "127.0.0.2") is None
    queue.event_queue_per_concurrency_id["views"].queue += [event("views", "203.0.113.2")] * 12  # 16 waiting
    assert refused(door, "views", "t1", "203.0.113.1") == "Queue is full. Max size is 16 and size is 16."
    assert refused(door, FREE, "t1", "203.0.113.1") is None  # Stop passes the full queue


def test_a_visitor_opens_at_most_its_sessions_and_a_closed_one_frees_its_place(door):
    for n in range(8):
        assert refused(door, "views", f"s{n}", "198.51.100.1") is None
    assert refused(door, "views", "s8", "198.51.100.1").startswith("⚠️ You already have 8 sessions open")
    assert refused(door, "views", "s0", "198.51.100.1") is None  # an open session goes on
    assert refused(door, "views", None, "198.51.100.1") is None  # a call that names no session is none
    assert refused(door, "views", "t0", "203.0.113.1") is None  # another visitor opens its own
    door.unload(SimpleNamespace(session_hash="s3"))
    assert refused(door, "views", "s8", "198.51.100.1") is None and door.sessions_of("198.51.100.1") == 8


# ---------------------------------------------------------------- through a live server

@contextmanager
def launched(monkeypatch, **limits) -> Iterator:
    """The app on a free port with LIMITS changed by `limits`; yields the launched demo."""
    import app
    from explorer import worker

    monkeypatch.setattr(app, "LIMITS", dataclasses.replace(app.LIMITS, **limits))
    monkeypatch.setattr(worker, "Decoder", Paced)
    with gpu_mode("local"):
        demo = app.queued(app.build_app())
        demo.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True, **app.launch_options())
        try:
            yield demo
        finally:
            demo.close()


class Paced(Decoder):
    """The engine with a pause after each step, as long as the tokens it emitted, so that a LONG run holds the
    model for minutes whatever the machine's speed and the drafts' length (a fast run once finished it while
    the test still counted the hog's refusals). Stop is read between steps, so it still ends within one."""

    def stream(self, ids):
        for step in super().stream(ids):
            yield step
            time.sleep(PACE_S * max(len(step.emitted), 1))


PACE_S = 0.25  # per emitted token: a LONG run of 400 tokens takes at least 100 s


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


@pytest.mark.model
@pytest.mark.app
def test_one_address_with_20_sessions_holds_its_share_and_a_second_address_gets_its_run(lm, monkeypatch):
    with launched(monkeypatch) as demo:
        import app

        limits = app.LIMITS
        hog = [client(demo, "198.51.100.7") for _ in range(20)]
        first = hog[0].submit(prompt=COUNTING, api_name="/generate", **LONG)
        started(first)  # the model is busy with the hog's first run
        second = hog[1].submit(prompt=PROMPT, api_name="/generate", **TINY)  # its second: queued
        queued(second)  # submit returns before the join reaches the server: count it only once it has
        lines = [refusal_of(c.submit(prompt=PROMPT, api_name="/generate", **TINY)) for c in hog[2:]]
        assert set(lines) == {f"⚠️ You already have {limits.visitor_runs} runs queued or running on this server: "
                              "wait for one to end or stop it."}
        assert len(demo._queue) <= limits.visitor_waiting  # nothing else of the hog's was queued
        # Its other sessions are bounded too: each is a session of its own, and beyond its share none opens.
        answered = [c for c in hog[2:] if _answered(c, limits.visitor_sessions)]  # one at a time
        assert answered == hog[2:limits.visitor_sessions]  # the two sessions with a run count too
        # The second address is served as before: its run is queued, not refused, and finishes.
        other = client(demo, "203.0.113.9")
        theirs = other.submit(prompt=PROMPT, api_name="/generate", **TINY)
        queued(theirs)
        hog[0].predict(api_name="/stop")
        assert first.result(timeout=120)[0].startswith("**Stopped after")
        assert second.result(timeout=120)[0].startswith("**Done**")
        assert theirs.result(timeout=120)[0].startswith("**Done**")
        for c in hog:
            c.close()


def _answered(c: Client, sessions: int) -> bool:
    """True when a /show_step from `c` was answered by the app; False when the door refused its session."""
    try:
        return c.predict(0, api_name="/show_step")[0].startswith("⚠️ Nothing to show yet")  # a session with no run
    except httpx.HTTPStatusError as e:
        assert e.response.status_code == 429 and e.response.json()["detail"].startswith(
            f"⚠️ You already have {sessions} sessions open on this server")
        return False


@pytest.mark.model
@pytest.mark.app
def test_a_closed_session_frees_its_place(lm, monkeypatch):
    with launched(monkeypatch, visitor_sessions=2) as demo:
        a, b, c = (client(demo, "198.51.100.8") for _ in range(3))
        for x in (a, b):
            assert x.predict(0, api_name="/show_step")[0].startswith("⚠️ Nothing to show yet")
        assert refusal_of(c.submit(0, api_name="/show_step")) == (
            "⚠️ You already have 2 sessions open on this server: close a page (an idle one closes after an hour) "
            "and try again.")
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


def test_the_servers_own_machine_is_a_visitor_unless_the_operator_lifts_its_limits(door):
    """A local probe with two loopback addresses sees what a Space's visitors see; ESP_APP_LOCAL_UNLIMITED=1
    (the suite, a local load test) lifts the per-visitor limits for loopback callers only."""
    for n in range(8):
        assert refused(door, "views", f"l{n}", "127.0.0.1") is None
    assert refused(door, "views", "l8", "127.0.0.1").startswith("⚠️ You already have 8 sessions open")
    assert refused(door, "views", "m0", "127.0.0.2") is None  # another loopback address is another visitor
    door.limits = dataclasses.replace(door.limits, local_unlimited=True)
    assert refused(door, "views", "l8", "127.0.0.1") is None
    assert refused(door, "views", "x8", "198.51.100.9") is None
    assert Limits.from_env({"ESP_APP_LOCAL_UNLIMITED": "1"}).local_unlimited and not Limits.from_env({}).local_unlimited

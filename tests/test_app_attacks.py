"""What an outside caller would try, against an in-process launch on the embedded model: issue 21's probes
through gradio_client and plain HTTP (NaN and Infinity, which gradio_client cannot send; the page's
private events, which it cannot call), a few property tests through the client, and the queue's "busy"
answer. Each request is answered by a run or one ⚠️ line, nothing escapes as Gradio's bare "Error", no
traceback reaches the log, and the server keeps serving. tests/test_requests.py covers the same ground
with many more cases, calling the handlers directly."""
from __future__ import annotations

import dataclasses
import json
import time
import uuid

import httpx
import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError
from gradio_client.utils import QueueError, Status
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app_server import gpu_mode, serve
from components.frames import message
from conftest import plain

pytestmark = [pytest.mark.model, pytest.mark.app]

PROMPT = "Count from 1 to 5."
TINY = dict(k=2, bc=30, lam=0.1, max_new_tokens=4)
# The values of /generate's inputs in order, as plain HTTP sends them (NaN and Infinity are JavaScript's
# literals, which Python's JSON parser, and so the server, reads).
RAW_GENERATE = ['"hi"', "2", "30", "0.1", '"embedded"', '"mean"', '"static"', '"greedy"', "0.7", "0.95", "0", "4",
                '"efficient"', '"esp"', '"float32"']


@pytest.fixture(scope="module")
def server(lm):
    with serve("local") as url:
        yield url


@pytest.fixture(scope="module")
def client(server):
    c = Client(server, verbose=False)
    c.predict(prompt=PROMPT, api_name="/generate", **TINY)  # a stored run, so that step requests have one
    return c


def refused(line) -> bool:
    return isinstance(line, str) and line.startswith("⚠️ ") and "\n" not in line


def answer(client: Client, api: str, **kwargs) -> str:
    """The status line /api answered with, or the one line of its gr.Error (Export has no status)."""
    try:
        out = client.predict(api_name=api, **kwargs)
    except AppError as e:
        return str(e)
    return out[0] if isinstance(out, (list, tuple)) else out


def still_serving(client: Client) -> None:
    """The server answers this session from its stored run (a render, no model call: a run after each probe
    cost the suite a second each; test_a_run_still_decodes_after_every_probe runs one after all of them)."""
    status = client.predict(0, api_name="/show_step")[0]
    assert isinstance(status, str) and status and not status.startswith("⚠️"), status


def test_a_run_still_decodes_after_every_probe(client):
    """Runs after the probes above (pytest keeps a file's order)."""
    assert client.predict(prompt=PROMPT, api_name="/generate", **TINY)[0].startswith("**Done**")


@pytest.mark.parametrize("api, request_, says", [
    ("/generate", dict(prompt="hi", **{**TINY, "bc": 121}), "BC must be at most 120, not 121."),
    ("/generate", dict(prompt="hi", **{**TINY, "bc": 1000}), "BC must be at most 120, not 1000."),
    ("/compare", dict(prompt="hi", **{**TINY, "bc": 1000}), "BC must be at most 120, not 1000."),
    ("/whatif", dict(step=1, **{**TINY, "bc": 1000}), "BC must be at most 120, not 1000."),
    ("/generate", dict(prompt="hi", **{**TINY, "k": 1}, method="hybrid", init="mean:top=100000:draft=100000"),
     "Unknown mask init 'mean:top=100000:draft=100000'"),
    ("/generate", dict(prompt="hi", **TINY, method="tr", tree="small:start=hot:matrix=zero"),
     "Unknown tree 'small:start=hot:matrix=zero'"),
    ("/generate", dict(prompt="hi", **{**TINY, "k": "abc"}), "k must be a number, not 'abc'."),
    ("/generate", dict(prompt="hi", **TINY, temperature="hot"), "temperature must be a number, not 'hot'."),
    ("/compare", dict(prompt="hi", **{**TINY, "max_new_tokens": 512}), "Compare decodes"),
    ("/show_step", dict(i="x"), "step must be a number, not 'x'."),
    ("/show_step", dict(i=999), "This run has steps 0-"),
    ("/show_step", dict(i=10**6), "step must be at most 100000, not 1000000."),
    ("/export", dict(i="x"), "step must be a number, not 'x'."),
    ("/generate", dict(prompt="hi", **TINY, method="<b>esp</b>"), "Unknown method '<b>esp</b>'"),
])
def test_probes_are_refused_in_one_line_and_the_server_keeps_serving(client, capfd, api, request_, says):
    line = answer(client, api, **request_)
    assert refused(line) and says in plain(line) and "<b>" not in line, line
    assert "Traceback" not in capfd.readouterr().err
    still_serving(client)


def raw_call(url: str, api: str, body: str) -> tuple[str, list]:
    """POST `body` to /gradio_api/call/<api> as plain HTTP; (last SSE event, its data)."""
    event_id = httpx.post(f"{url}gradio_api/call/{api}", content=body,
                          headers={"content-type": "application/json"}).json()["event_id"]
    lines = httpx.get(f"{url}gradio_api/call/{api}/{event_id}", timeout=120).text.strip().splitlines()
    return lines[-2].removeprefix("event: "), json.loads(lines[-1].removeprefix("data: "))


@pytest.mark.parametrize("at, value, says", [(1, "NaN", "k must be a finite number, not nan."),
                                             (2, "Infinity", "BC must be a finite number, not inf."),
                                             (3, "-Infinity", "λ must be a finite number, not -inf."),
                                             (10, "1e400", "seed must be a finite number, not inf."),
                                             (1, "[]", "k must be a number, not []."),
                                             (4, "{}", "does not offer the model {}")])
def test_plain_http_non_finite_numbers_are_refused_in_one_line(server, client, capfd, at, value, says):
    data = list(RAW_GENERATE)
    data[at] = value
    event, out = raw_call(server, "generate", '{"data": [' + ", ".join(data) + "]}")
    assert event == "complete" and refused(out[0]) and says in plain(out[0]), out[0]
    assert "Traceback" not in capfd.readouterr().err
    still_serving(client)


@pytest.mark.parametrize("count", [0, 1, len(RAW_GENERATE) - 1])
def test_plain_http_with_too_few_values_is_refused_in_one_line(server, client, capfd, count):
    event, out = raw_call(server, "generate", '{"data": [' + ", ".join(RAW_GENERATE[:count]) + "]}")
    assert event == "error" and out["error"] == f"⚠️ This request sends {count} values; this event takes {len(RAW_GENERATE)}."
    assert "Traceback" not in capfd.readouterr().err
    still_serving(client)


def private_event(url: str, name: str, data: list) -> list:
    """Call the page's event `name` (api_visibility private: gradio_client cannot) the way the page does:
    join the queue by its fn_index, then read the session's event stream; its output data."""
    fn = next(d["id"] for d in httpx.get(f"{url}config").json()["dependencies"] if d.get("api_name") == name)
    session = uuid.uuid4().hex
    httpx.post(f"{url}gradio_api/queue/join", json={"data": data, "fn_index": fn, "session_hash": session,
                                                     "event_data": None, "trigger_id": None}).raise_for_status()
    with httpx.stream("GET", f"{url}gradio_api/queue/data", params={"session_hash": session}, timeout=60) as s:
        for line in s.iter_lines():
            msg = json.loads(line.removeprefix("data: ")) if line.startswith("data: ") else {}
            if msg.get("msg") == "process_completed":
                assert msg["success"], msg
                return msg["output"]["data"]
    raise AssertionError("no answer")


@pytest.mark.parametrize("name, data, at, says", [
    ("open_shipped", ["../app", None], 0, "No recorded trace called '../app'."),
    ("check_settings", [2, 1000, 0.1, "mean", "static", "greedy", 0.7, 0.95, 0, 4, "efficient", "esp", "float32"], 0,
     "BC must be at most 120, not 1000."),
])
def test_private_events_check_their_values_too(server, client, capfd, name, data, at, says):
    line = private_event(server, name, data)[at]
    assert refused(line) and says in plain(line) and "<b>" not in line, line
    assert "Traceback" not in capfd.readouterr().err
    still_serving(client)


JSONABLE = st.one_of(st.none(), st.booleans(), st.integers(-10**30, 10**30), st.floats(allow_nan=False, allow_infinity=False),
                     st.text(max_size=20), st.lists(st.integers(), max_size=2),
                     st.sampled_from(["<b>x</b>", "[a](javascript:alert(1))", "static:shape=1-1"]))
THROUGH_CLIENT = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@THROUGH_CLIENT
@given(st.one_of(st.integers(-3, 30), JSONABLE))
def test_show_step_through_the_client_answers_anything(client, i):
    out = client.predict(i, api_name="/show_step")
    done = out[0].startswith("**Done** · ")
    shown = message(out[1]) if done else None
    assert (done and list(shown["frames"]) == [str(shown["show"])]) or refused(out[0])


@THROUGH_CLIENT
@given(st.sampled_from(["k", "bc", "lam", "temperature", "top_p", "seed", "max_new_tokens", "init", "tree", "mode",
                        "layouts", "method", "model"]), JSONABLE)
def test_generate_through_the_client_answers_anything(client, name, value):
    out = client.predict(prompt=PROMPT, api_name="/generate", **{**TINY, name: value})
    assert out[0].startswith("**Done**") or refused(out[0]), out[0]


def test_a_full_queue_answers_busy_in_one_line(lm, monkeypatch):
    import app

    # One run inside the server at a time (the model's line holds LIMITS.line_size), so that the second waits in
    # Gradio's queue of one and the third finds it full.
    monkeypatch.setattr(app, "LIMITS", dataclasses.replace(app.LIMITS, queue_size=1, line_size=1))
    with gpu_mode("local"):
        demo = app.queued(app.build_app())
        demo.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
        try:
            holder, waiter, third = (Client(demo.local_url, verbose=False) for _ in range(3))
            long = holder.submit(prompt=PROMPT, api_name="/generate", **{**TINY, "max_new_tokens": 200})
            next(iter(long))  # the model is busy with it
            waiting = waiter.submit(prompt=PROMPT, api_name="/generate", **TINY)
            deadline = time.monotonic() + 30
            while waiting.status().code not in (Status.IN_QUEUE, Status.PROCESSING) and time.monotonic() < deadline:
                time.sleep(0.05)
            with pytest.raises(QueueError, match="^Queue is full! Please try again.$"):
                third.predict(prompt=PROMPT, api_name="/generate", **TINY)
            long.cancel()  # (Stop would pass the full queue too: tests/test_door.py)
            assert waiting.result()[0].startswith("**Done**")  # the queue moves on
        finally:
            demo.close()


def test_the_sessions_kept_are_bounded(lm, monkeypatch):
    import app

    monkeypatch.setattr(app, "LIMITS", dataclasses.replace(app.LIMITS, max_sessions=3))
    with gpu_mode("local"):
        demo = app.queued(app.build_app())
        demo.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True, **app.launch_options())
        try:
            clients = [Client(demo.local_url, verbose=False) for _ in range(6)]
            for c in clients:
                assert c.predict(0, api_name="/show_step")[0].startswith("⚠️ Nothing to show yet")
            assert len(demo.state_holder.session_data) == 3  # six sessions came; the oldest three were let go
            assert clients[-1].predict(0, api_name="/show_step")[0].startswith("⚠️")  # and it still serves
        finally:
            demo.close()

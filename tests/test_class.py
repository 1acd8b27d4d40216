"""Issue 38's class: thirty students behind one school address (NAT) against the app as `python app.py` serves
it, with a Space's limits (ESP_APP_LOCAL_UNLIMITED unset; the school's address named by X-Forwarded-For from
a trusted proxy, as on a Space). Runs decode with the replaying engine (tests/app_server.py `Replay`: a
recorded run's steps, paced), so that the test is about the door, not the machine's speed. Every session
opens; every session's Run is queued (none refused) and served, one student after another in the order they
pressed it (a replayed run cannot share a batch: each has the model alone, in the line's turn, told its place
meanwhile), and what it was sent holds every step of its run, so that its page scrubs them all without asking
the server (issue 46); thirty pages in a real browser, from that one address, are all served and all scrub,
with no request to the server."""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from gradio_client import Client
from gradio_client.utils import Status

from components.frames import held as merged

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow
SCHOOL = "198.51.100.50"
STUDENTS = 30
TINY = dict(k=2, bc=30, lam=0.1, max_new_tokens=4)
START_S = 180  # hang guard: the server's start (import, model load)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`python tests/app_server.py` (app.main with the replaying engine) in its own process and folder."""
    folder = tmp_path_factory.mktemp("class")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("ESP_APP_LOCAL_UNLIMITED", "ESP_EMULATE_ZEROGPU")}
    env.update(PORT=str(port), ESP_APP_TRUSTED_PROXIES="127.0.0.1", ESP_TEST_PACE_S="0.1",
               GRADIO_ANALYTICS_ENABLED="False", PYTHONPATH=str(ROOT))
    log = folder / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "app_server.py")], cwd=folder, env=env,
                                stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + START_S
    try:
        while True:
            assert proc.poll() is None, f"the server ended:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"the server did not start:\n{log.read_text()[-3000:]}"
            try:
                if httpx.get(url, timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def student(url: str) -> Client:
    return Client(url, verbose=False, headers={"X-Forwarded-For": SCHOOL})


def queued(job, timeout: float = 60) -> None:
    """Wait until the server has `job` in its queue or running; a refused join fails here."""
    deadline = time.monotonic() + timeout
    while job.status().code not in (Status.IN_QUEUE, Status.PROCESSING, Status.FINISHED):
        assert not job.done(), f"refused: {job.exception()}"
        assert time.monotonic() < deadline, "never queued"
        time.sleep(0.02)


def served(job) -> bool:
    """Whether `job`'s run has had the model: an update that is not its place in the line (explorer.line)."""
    return any(not str(out[0]).startswith("**Waiting for the model**") for out in job.outputs())


def test_a_class_of_30_behind_one_address_opens_runs_in_turn_and_scrubs(server):
    with ThreadPoolExecutor(8) as pool:
        students = list(pool.map(lambda _: student(server), range(STUDENTS)))
        # Every session opens: its first request (a scrub, with no run yet) is answered, not refused.
        opened = list(pool.map(lambda c: c.predict(0, api_name="/show_step")[0], students))
    assert all(line.startswith("⚠️ Nothing to show yet") for line in opened), set(opened)
    # Every student presses Run, one after another: each run is queued, none refused.
    jobs = []
    for n, c in enumerate(students):
        jobs.append(c.submit(prompt=f"Count from 1 to {n + 5}.", api_name="/generate", **TINY))
        queued(jobs[-1])
    order, deadline = [], time.monotonic() + 300
    while len(order) < STUDENTS and time.monotonic() < deadline:
        for n, job in enumerate(jobs):
            if n not in order and (served(job) or job.status().code == Status.FINISHED):
                order.append(n)
        time.sleep(0.01)
    assert order == list(range(STUDENTS))  # served in turn: in the order the students pressed Run
    finals = [job.result(timeout=300)[0] for job in jobs]
    assert all(line.startswith("**Done**") for line in finals), finals
    for job, final in zip(jobs, finals):  # each page was sent every step of its run, once: it scrubs them all
        frames = merged([o[1] for o in job.outputs()])
        assert len(frames) == int(re.search(r"(\d+) steps", final).group(1)) >= 2
        assert all(f["tree"] and f["mask"] for f in frames)
    with ThreadPoolExecutor(STUDENTS) as closing:  # each close waits up to a second for its heartbeat to end
        list(closing.map(Client.close, students))


CHROMIUM = "/usr/bin/chromium"
PAGES = STUDENTS
HANG_MS = 120_000


@pytest.mark.browser
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed")
def test_thirty_pages_behind_one_address_are_served_and_scrub_with_no_request(server, browser):
    """Each page opens the teacher's link to a recorded run at its step (every one served, none refused); then
    each student scrubs it (keys and the slider's buttons), and no page sends the server anything meanwhile."""
    from playwright.sync_api import expect

    title = "#tree-plot .gtitle"
    contexts, pages = [], []
    for _ in range(PAGES):
        context = browser.new_context(viewport={"width": 1280, "height": 900},
                                      extra_http_headers={"X-Forwarded-For": SCHOOL})
        contexts.append(context)
        page = context.new_page()
        page.goto(server + "?trace=trace_masks&step=3")
        pages.append(page)
    sent: list[str] = []
    for page in pages:
        expect(page.locator(title)).to_contain_text("step 3", timeout=HANG_MS)
        expect(page.locator("#status")).to_contain_text("recorded: trace_masks.json")
    for page in pages:  # every page has settled: from now on, nothing goes to the server
        page.on("request", lambda r: sent.append(r.url) if "/gradio_api/" in r.url else None)
    for n, page in enumerate(pages):
        page.evaluate("document.activeElement?.blur()")
        page.keyboard.press("ArrowRight")
        expect(page.locator(title)).to_contain_text("step 4", timeout=HANG_MS)
        page.locator("#next").click()
        expect(page.locator(title)).to_contain_text("step 5", timeout=HANG_MS)
        page.locator("#prev").click()
        expect(page.locator(title)).to_contain_text("step 4", timeout=HANG_MS)
        assert "step=4" in page.evaluate("location.search"), n  # the address follows, in the page
    assert sent == []
    for context in contexts:
        context.close()

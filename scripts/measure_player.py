"""Measure the page's player in a real browser against `python app.py` (issue 46; not a test: the figures go in
docs/history.md, the behaviour is tests/test_browser_player.py's).

    PYTHONPATH=tests python -m scripts.measure_player            # every measure
    PYTHONPATH=tests python -m scripts.measure_player keys play  # some of them: keys, play, stop, lecture

The stop measure sets the controls with the browser tests' helpers (tests/test_browser.py): hence the tests folder
on PYTHONPATH.

It serves `python app.py` in a subprocess on a free port (the embedded model warms in the background first), then
drives Debian's chromium at 1440 x 900:

- keys: the opening run (trace_qwen15) opened at step 1 by its link; 8 presses of the right arrow, each timed until
  the tree's title names the next step; the requests to the server's API meanwhile.
- play: Play at the default pace for 3 s (steps moved), and at 8 steps a second (steps moved, and what the page says).
- stop: a BC=60, 512-token run on the embedded model; after a few seconds of decoding, Stop's ordinary click (the
  time Playwright needs to click it: visible, enabled, not moving), "Stopping" and "Stopped" after the click, and the
  steps finished after it.
- lecture: the lecture file of the same run, opened from disk; 8 presses of the right arrow, timed as above.
"""
from __future__ import annotations

import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
VIEWPORT = {"width": 1440, "height": 900}
TITLE = "#tree-plot .gtitle"
PRESSES = 8
STORY = "Write a long story about a robot who learns to paint."
MEASURES = ("keys", "play", "stop", "lecture")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app(log: Path) -> tuple[subprocess.Popen, str]:
    """`python app.py` on a free port; returns once the page answers and the model is warm."""
    import httpx

    port = free_port()
    env = {**os.environ, "PORT": str(port), "GRADIO_ANALYTICS_ENABLED": "False"}
    out = open(log, "wb")
    proc = subprocess.Popen([sys.executable, str(ROOT / "app.py")], cwd=ROOT, env=env, stdout=out,
                            stderr=subprocess.STDOUT)
    url, deadline = f"http://127.0.0.1:{port}/", time.monotonic() + 600
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            if httpx.get(url, timeout=5).status_code == 200 and "ready" in log.read_text():
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.terminate()
    raise SystemExit(f"the app did not start:\n{log.read_text()[-3000:]}")


def step_of(title: str) -> int | None:
    m = re.search(r"step (\d+)", title or "")
    return int(m.group(1)) if m else None


def press_times(page, selector: str = TITLE, presses: int = PRESSES) -> list[float]:
    """Seconds from each right-arrow press until `selector`'s text names the next step (timed in the page, so
    that the automation's own round trips are not counted)."""
    times = []
    for _ in range(presses):
        page.evaluate("document.activeElement?.blur()")
        start = step_of(page.locator(selector).first.text_content())
        seconds = page.evaluate("""([sel, want]) => new Promise((done) => {
            const t0 = performance.now();
            const seen = () => ((document.querySelector(sel) || {}).textContent || '');
            const check = () => {
                if (new RegExp('step ' + want + '\\\\b').test(seen())) return done((performance.now() - t0) / 1000);
                if (performance.now() - t0 > 30000) return done(-1);
                requestAnimationFrame(check);
            };
            document.body.dispatchEvent(new KeyboardEvent('keydown', {key: 'ArrowRight', bubbles: true, cancelable: true}));
            check();
        })""", [selector, start + 1])
        times.append(seconds)
    return times


def api_requests(page) -> list[str]:
    """A list that collects every request the page makes to the server's API from now on."""
    seen: list[str] = []
    page.on("request", lambda r: seen.append(r.url) if "/gradio_api/" in r.url else None)
    return seen


def measure_keys(browser, url: str) -> dict:
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(url + "?trace=trace_qwen15&step=1")
    page.wait_for_function(f"() => /step 1\\b/.test(document.querySelector('{TITLE}')?.textContent || '')",
                           timeout=120_000)
    page.wait_for_timeout(3000)  # the page settles (the controls fill in, the other views draw)
    seen = api_requests(page)
    times = press_times(page)
    n = len(seen)
    page.close()
    return {"times": times, "requests": n}


def steps_played(page, seconds: float = 3.0) -> tuple[int, str]:
    """Steps moved in `seconds` of Play from step 1, and what the pace note says meanwhile."""
    first = step_of(page.locator(TITLE).first.text_content())
    page.locator("#play").click()
    page.wait_for_timeout(seconds * 1000)
    moved = step_of(page.locator(TITLE).first.text_content()) - first
    said = page.locator("#pace").first.inner_text()  # empty while Play holds its pace
    page.locator("#play").click()  # pause
    return moved, said


def measure_play(browser, url: str) -> dict:
    page = browser.new_page(viewport=VIEWPORT)
    out = {}
    for speed in (None, 8):
        page.goto(url + "?trace=trace_qwen15&step=1")
        page.wait_for_function(f"() => /step 1\\b/.test(document.querySelector('{TITLE}')?.textContent || '')",
                               timeout=120_000)
        page.wait_for_timeout(3000)
        if speed:
            box = page.locator("#speed input").first
            box.fill(str(speed))
            box.press("Enter")
            page.wait_for_timeout(500)
        out[speed or "default"] = steps_played(page)
    page.close()
    return out


def measure_stop(browser, url: str) -> dict:
    from test_browser import choose, settings

    page = browser.new_page(viewport=VIEWPORT)
    page.goto(url)
    page.wait_for_function(f"() => /step/.test(document.querySelector('{TITLE}')?.textContent || '')",
                           timeout=120_000)
    page.wait_for_timeout(3000)
    choose(page, "model", "embedded")
    page.locator("#prompt textarea").fill(STORY)
    settings(page, 2, 60, 512)
    status = page.locator("#status")
    page.locator("#run").click()
    page.wait_for_function("() => /Decoding/.test(document.querySelector('#status').innerText)", timeout=120_000)
    page.wait_for_timeout(8000)  # well into the run
    at_click = status.inner_text()
    t0 = time.monotonic()
    try:
        page.locator("#stop").click(timeout=15_000)  # an ordinary click: waits for visible, enabled, stable
    except Exception as e:  # noqa: BLE001 - a click that never lands is the finding
        return {"click_s": None, "error": str(e).splitlines()[0], "at_click": at_click}
    click_s = time.monotonic() - t0
    page.wait_for_function("() => /Stopp/.test(document.querySelector('#status').innerText)", timeout=60_000)
    stopping_s = time.monotonic() - t0
    page.wait_for_function("() => /Stopped after/.test(document.querySelector('#status').innerText)", timeout=120_000)
    stopped_s = time.monotonic() - t0
    final = status.inner_text()
    page.close()
    after = re.search(r"\((\d+) after the click\)", final)
    return {"click_s": click_s, "stopping_s": stopping_s, "stopped_s": stopped_s, "at_click": at_click.split(" · ")[1],
            "final": final.split(" · ")[0], "after": int(after.group(1)) if after else None}


def measure_lecture(browser) -> dict:
    from components.export import read_trace_json
    from components.lecture import write_lecture

    meta, steps = read_trace_json(ROOT / "assets" / "trace_qwen15.json")
    with tempfile.TemporaryDirectory() as folder:
        path = write_lecture(steps, meta, Path(folder) / "lecture.html")
        page = browser.new_page(viewport=VIEWPORT)
        page.goto(path.as_uri())
        selector = "[data-figure=tree] .gtitle"
        # It opens on the story's step (components/story.py), wherever that is; the presses go on from there.
        page.wait_for_function(f"() => /step \\d+/.test(document.querySelector('{selector}')?.textContent || '')",
                               timeout=120_000)
        page.wait_for_timeout(1500)
        times = press_times(page, selector)
        page.close()
    return {"times": times}


def median_line(times: list[float]) -> str:
    seen = [t for t in times if t >= 0]
    return (f"median {statistics.median(seen):.3f} s, max {max(seen):.3f} s" if seen else "never") + \
        f" ({', '.join(f'{t:.2f}' for t in times)})"


def main(which: list[str]) -> None:
    from playwright.sync_api import sync_playwright

    which = which or list(MEASURES)
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as folder, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        if "lecture" in which:
            print(f"lecture file, right arrow x{PRESSES}: {median_line(measure_lecture(browser)['times'])}")
        if set(which) & {"keys", "play", "stop"}:
            proc, url = start_app(Path(folder) / "app.log")
            try:
                if "keys" in which:
                    r = measure_keys(browser, url)
                    print(f"page, right arrow x{PRESSES} from step 1: {median_line(r['times'])}; "
                          f"{r['requests']} API requests meanwhile")
                if "play" in which:
                    for speed, (moved, said) in measure_play(browser, url).items():
                        print(f"Play at {speed} steps/s: {moved} steps in 3 s; the pace note says {said!r}")
                if "stop" in which:
                    print(f"Stop during a BC=60, 512-token run: {measure_stop(browser, url)}")
            finally:
                proc.terminate()
                proc.wait(30)
        browser.close()


if __name__ == "__main__":
    main(sys.argv[1:])

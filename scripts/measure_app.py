"""Measure the app's UI latency on this machine (not a test; the findings are in docs/history.md).

    PYTHONPATH=tests python -m scripts.measure_app          # all three
    PYTHONPATH=tests python -m scripts.measure_app stop     # only 3.

It drives the page with the browser tests' helpers (tests/app_server.py, tests/test_browser.py), which import each
other by plain name: hence the tests folder on PYTHONPATH.

1. Run -> first step on screen: a real browser (Debian chromium) presses Run on a warm app and waits
   until the first step's mask figure is drawn.
2. Per-step view cost vs engine time at BC=60: for every step of a k=2, BC=60 run, the time to build the step's
   frame for the page's player (components.frames.Feed, as a run's updates build it, amendments of earlier steps
   included) and serialise it as Gradio sends it, against that step's engine time.
3. Responsiveness and Stop (issues 10, 15): a 512-token run at k=1, BC=60 in a real browser; every ~2 s a
   script in the page is timed, then Stop is clicked and the times until the status says "Stopping…" and
   "Stopped after N steps" are measured; a new short Run must then finish. ESP_EMULATE_ZEROGPU=1 measures
   the same with the GPU calls in forked workers.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time

from components.frames import Feed
from esp.decoding.engine import Decoder
from esp.methods import build
from esp.models.loader import load

PROMPT = "Translate to French: \"The weather is nice today, so we are going to the park after lunch.\""


def first_step_latency(runs: int = 3) -> list[float]:
    from playwright.sync_api import expect, sync_playwright

    from app_server import serve
    from test_browser import ARGS, CHROMIUM

    out = []
    with serve() as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        page.goto(url)
        page.locator("#prompt textarea").fill(PROMPT)
        page.get_by_text("Decoding", exact=True).click()
        box = page.locator("#max-new input[type=number]")
        box.fill("6")
        box.press("Enter")
        # A MutationObserver stamps the moment the first step's mask title is drawn (polling could miss
        # it when the next step replaces it quickly); the click itself is issued from the page too.
        watch = """() => new Promise(done => {
            const t0 = performance.now();
            const seen = () => (document.querySelector('#mask-plot .gtitle') || {}).textContent || '';
            const obs = new MutationObserver(() => {
                if (seen().includes('step 0 ')) { obs.disconnect(); done((performance.now() - t0) / 1000); }
            });
            obs.observe(document.querySelector('#mask-plot'), {subtree: true, childList: true, characterData: true});
            setTimeout(() => { obs.disconnect(); done(-1); }, 90000);  // never hang: -1 = not seen
            document.querySelector('#run').click();
        })"""
        for _ in range(runs + 1):  # the first run warms the engine and the browser's Plotly
            out.append(page.evaluate(watch))
            expect(page.locator("#status")).to_contain_text("Done", timeout=120_000)
        browser.close()
    return out[1:]


def view_cost(bc: int = 60, tokens: int = 12) -> list[tuple[float, float]]:
    """(view seconds, engine seconds) per decoding step of a k=2 run at BC=`bc`."""
    lm = load()
    decoder = Decoder(lm, build(f"esp:k=2:bc={bc}"), max_new_tokens=tokens, align=True, lens=True)
    steps, meta, feed = [], {"settings": f"k=2, BC={bc}"}, Feed()
    pairs = []
    for step in decoder.stream(lm.chat_ids(PROMPT)):
        steps.append(step)
        t0 = time.perf_counter()
        json.dumps(feed.update(steps, meta, views=False))
        if not step.prefill:
            pairs.append((time.perf_counter() - t0, step.timings["total"]))
    return pairs


def responsiveness(probe_for_s: float = 30.0) -> dict:
    """Probe times (s) during a 512-token k=1 BC=60 run, Stop -> "Stopped after" (s), and a new Run."""
    from playwright.sync_api import expect, sync_playwright

    from app_server import serve
    from test_browser import ARGS, CHROMIUM, choose, probe_s, settings

    with serve() as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 1100})
        page.goto(url)
        page.locator("#prompt textarea").fill("Write a long story about a robot who learns to paint.")
        choose(page, "method", "esp")  # the page opens with the shipped run's method (the hybrid)
        settings(page, 1, 60, 512)
        status = page.locator("#status")
        page.locator("#run").click()
        expect(status).to_contain_text("Decoding", timeout=120_000)
        probes, start = [], time.monotonic()
        while time.monotonic() - start < probe_for_s:
            time.sleep(2.0)
            probes.append(probe_s(page))
        step_at_click = status.inner_text()
        clicked = time.monotonic()
        page.locator("#stop").click()
        expect(status).to_contain_text("Stopp", timeout=60_000)  # "Stopping…", written by the page itself
        answer_s = time.monotonic() - clicked
        expect(status).to_contain_text("Stopped after", timeout=60_000)
        stop_s = time.monotonic() - clicked
        stopped = status.inner_text()
        settings(page, 1, 60, 8)
        page.locator("#run").click()
        expect(status).to_contain_text("Done", timeout=120_000)
        browser.close()
    return {"probes": probes, "answer_s": answer_s, "stop_s": stop_s, "at_click": step_at_click, "stopped": stopped}


def main() -> None:
    load()
    if sys.argv[1:] == ["stop"]:
        r = responsiveness()
        print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
        print(f"page probes during the run (s): {', '.join(f'{x:.3f}' for x in r['probes'])}; max {max(r['probes']):.3f}")
        print(f"status at the click: {r['at_click']!r}")
        print(f"Stop -> 'Stopping…' in {r['answer_s']:.2f} s, status {r['stopped'].split(' · ')[0]!r} in "
              f"{r['stop_s']:.2f} s; a new Run then finished")
        return
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    pairs = view_cost()
    ratios = [v / e for v, e in pairs]
    print(f"BC=60 steps: {len(pairs)}; frame build+serialise median {1000 * statistics.median(v for v, _ in pairs):.1f} ms, "
          f"max {1000 * max(v for v, _ in pairs):.1f} ms; engine step median {1000 * statistics.median(e for _, e in pairs):.0f} ms; "
          f"ratio median {statistics.median(ratios):.1%}, max {max(ratios):.1%}")
    lat = first_step_latency()
    seen = [x for x in lat if x >= 0]
    print("Run -> first step on screen (s): " + ", ".join(f"{x:.2f}" if x >= 0 else "not seen" for x in lat)
          + (f"; median {statistics.median(seen):.2f}" if seen else ""))


if __name__ == "__main__":
    main()

"""Measure the app's UI latency on this machine (not a test; numbers go to docs/app_perf.md).

    python scripts/measure_app.py

1. Run -> first step on screen: a real browser (Debian chromium) presses Run on a warm app and waits
   until the first step's mask figure is drawn.
2. Per-step view cost vs engine time at BC=60: for every step of a k=2, BC=60 run, the time to build
   all views (app.render) and serialise them as Gradio sends them, against that step's engine time.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import gradio as gr  # noqa: E402
import plotly.graph_objects as go  # noqa: E402

import app  # noqa: E402
from esp.engine import Decoder  # noqa: E402
from esp.methods import build  # noqa: E402
from esp.models import load  # noqa: E402

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
    decoder = Decoder(lm, build(f"esp:k=2:bc={bc}"), max_new_tokens=tokens, align=True)
    session = app.Session(meta={"settings": f"k=2, BC={bc}"})
    plot, text = gr.Plot(), gr.HighlightedText()
    pairs = []
    for step in decoder.stream(lm.chat_ids(PROMPT)):
        session.steps.append(step)
        i = len(session.steps) - 1
        t0 = time.perf_counter()
        views = app.render(session, i)
        payload = [plot.postprocess(v).model_dump() if isinstance(v, go.Figure) else v for v in views[1:]]
        json.dumps([text.postprocess(views[0]).model_dump(), payload, app._status(session, i, False)])
        if not step.prefill:
            pairs.append((time.perf_counter() - t0, step.timings["total"]))
    return pairs


def main() -> None:
    load()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    pairs = view_cost()
    ratios = [v / e for v, e in pairs]
    print(f"BC=60 steps: {len(pairs)}; view build+serialise median {1000 * statistics.median(v for v, _ in pairs):.1f} ms, "
          f"max {1000 * max(v for v, _ in pairs):.1f} ms; engine step median {1000 * statistics.median(e for _, e in pairs):.0f} ms; "
          f"ratio median {statistics.median(ratios):.1%}, max {max(ratios):.1%}")
    lat = first_step_latency()
    seen = [x for x in lat if x >= 0]
    print("Run -> first step on screen (s): " + ", ".join(f"{x:.2f}" if x >= 0 else "not seen" for x in lat)
          + (f"; median {statistics.median(seen):.2f}" if seen else ""))


if __name__ == "__main__":
    main()

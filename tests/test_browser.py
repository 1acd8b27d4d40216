"""A real browser (Debian's chromium through Playwright): set controls, run, scrub, stop, refuse, what-if
and compare, with the app's GPU calls in-process and under the ZeroGPU emulation (marker `zerogpu`).
No assert here is a wall-clock limit: a slow machine only waits longer (timeouts are hang guards).

Screenshots go to a temporary folder; `make screenshot` (scripts/screenshot.py) refreshes docs/screenshot.png.
"""
from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from app_server import MODES, in_process_only, serve

CHROMIUM = "/usr/bin/chromium"
pytestmark = [pytest.mark.browser, pytest.mark.app, pytest.mark.model,
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed")]
ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
HANG_MS = 60_000  # the page has hung if a trivial script or an expected update takes longer than this


@pytest.fixture(scope="module", params=MODES)
def page(lm, request):
    sync_api = pytest.importorskip("playwright.sync_api")
    expect = sync_api.expect
    from explorer.calls import OPENING

    with serve(request.param) as url, sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 1100})
        page.goto(url)
        # Every test starts from a loaded page: a recorded run is on screen as soon as it opens, no model involved;
        # its story on the first screen, the dashboard one click away (issue 47).
        expect(page.locator("#story")).to_be_visible(timeout=HANG_MS)
        page.locator("#dashboard").click()
        expect(page.locator("#status")).to_contain_text(f"recorded: {OPENING}.json", timeout=HANG_MS)
        choose(page, "model", "embedded")  # the opened run filled in its own model, too big for these runs
        yield page
        browser.close()


def set_number(page, elem_id: str, value: int) -> None:
    """Type into a slider's or number's box and press Enter."""
    box = page.locator(f"#{elem_id} input[type=number]")
    box.fill(str(value))
    box.press("Enter")


def choose(page, elem_id: str, value: str) -> None:
    """Pick `value` in a dropdown."""
    page.locator(f"#{elem_id} input").click()
    page.get_by_role("option", name=value, exact=True).click()


def settings(page, k: int, bc: int, max_new: int) -> None:
    set_number(page, "k", k)
    set_number(page, "bc", bc)
    accordion = page.get_by_text("Decoding", exact=True)
    if not page.locator("#max-new").is_visible():
        accordion.click()  # open the accordion holding max new tokens
    set_number(page, "max-new", max_new)


def run_to_done(page, timeout: int = 3 * HANG_MS) -> None:
    """Press Run and wait for this run's "Done" (the status said "Done" before, for the shown run, and keeps
    saying it until the run's first update)."""
    shown = "() => document.querySelector('#status [data-testid=markdown]').innerText"  # not the progress overlay
    before = page.evaluate(shown)
    page.locator("#run").click()
    page.wait_for_function(f"(before) => {{ const t = ({shown})(); return t !== before && t.includes('Done'); }}",
                           arg=before, timeout=timeout)


def last_step(page) -> int:
    """The last step of the run on screen, from the status line ("**Done** · N steps")."""
    return int(re.search(r"(\d+) steps", page.locator("#status").inner_text()).group(1)) - 1


def drawn(page, selector: str) -> None:
    """Scroll the player's view `selector` into view (the player draws a view once it is on screen) and wait
    until it is drawn."""
    page.locator(selector).scroll_into_view_if_needed()
    page.wait_for_function(f"() => document.querySelector('{selector} .js-plotly-plot')?._fullLayout", timeout=HANG_MS)


def probe_s(page) -> float:
    """Seconds for the page's main thread to answer a trivial script (scripts/measure_app.py reports them;
    the tests only require an answer, within the hang guard)."""
    t0 = time.monotonic()
    page.wait_for_function("() => true", timeout=HANG_MS)
    return time.monotonic() - t0


def test_run_scrub_and_go_to_step(page, tmp_path):
    from playwright.sync_api import expect

    expect(page.locator("#tree-plot .gtitle")).to_contain_text("step")
    expect(page.locator("#method input")).to_have_value("esp")  # the controls show the recorded run's method
    page.locator("#prompt textarea").fill("Count from 1 to 10, separated by commas.")
    choose(page, "method", "esp")
    settings(page, 2, 24, 14)
    expect(page.locator("#settings-note")).to_contain_text("BC=24", timeout=HANG_MS)  # the live settings check
    run_to_done(page)
    last = last_step(page)
    assert last >= 3

    tree_title = page.locator("#tree-plot .gtitle")
    prefix_tick = page.locator("#mask-plot .xtick text").first
    expect(tree_title).to_contain_text(f"step {last}")
    before = (tree_title.text_content(), prefix_tick.text_content())
    for back in (1, 2):  # one click at a time: each move reads the slider the previous one set
        page.locator("#prev").click()
        expect(tree_title).to_contain_text(f"step {last - back}", timeout=HANG_MS)
    expect(page.locator("#mask-plot .gtitle")).to_contain_text(f"step {last - 2}")
    after = (tree_title.text_content(), prefix_tick.text_content())
    assert after[0] != before[0] and after[1] != before[1]  # the prefix column shrank with the step
    expect(page.locator("#step-label")).to_have_text(f"Step {last - 2} of {last}")

    set_number(page, "goto", 0)  # the Go-to-step box answers Enter
    expect(page.locator("#mask-plot .gtitle")).to_contain_text("step 0 (prefill)", timeout=HANG_MS)
    expect(page.locator("#mask-plot .ytick text").filter(has_text="prompt (")).to_have_count(1)

    shot = tmp_path / "run.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 50_000


def test_refused_input_keeps_the_views(page):
    from playwright.sync_api import expect

    tree_title = page.locator("#tree-plot .gtitle")
    expect(tree_title).to_contain_text("step")
    shown = tree_title.text_content()
    page.locator("#prompt textarea").fill("")
    page.locator("#run").click()
    expect(page.locator("#status")).to_contain_text("prompt is empty", timeout=HANG_MS)
    expect(tree_title).to_have_text(shown)  # the previous run's figures stay on screen
    assert page.locator("#tree-plot .error, #mask-plot .error").count() == 0


def test_stop_ends_the_run_within_one_step_and_the_page_stays_responsive(page):
    """A wide, long run (k=2, BC=60, 512 tokens): nothing moves under the controls while its updates arrive (Stop's
    box is where it was at every update), the page answers, and Stop's ordinary click (which waits for the button
    to hold still) ends the run within one step of it, saying so at once."""
    from playwright.sync_api import expect

    page.locator("#prompt textarea").fill("Write a long story about a robot who learns to paint.")
    choose(page, "method", "esp")  # not the opened trace's hybrid, whose copies can finish 300 tokens before the click
    settings(page, 2, 60, 512)
    page.locator("#stop").scroll_into_view_if_needed()
    page.locator("#run").click()
    status = page.locator("#status")
    expect(status).to_contain_text("Decoding", timeout=HANG_MS)
    page.evaluate("""() => {  // Stop's box (where a visitor's click goes) at every update of the status
        window.stopBoxes = [];
        const box = () => { const r = document.querySelector('#stop').getBoundingClientRect();
                            return [r.x, r.y, r.width, r.height].join(','); };
        new MutationObserver(() => window.stopBoxes.push(box())).observe(document.querySelector('#status'),
            {subtree: true, childList: true, characterData: true});
    }""")
    for _ in range(3):  # the page answers scripts while steps run (each probe raises if it hangs)
        probe_s(page)
        page.wait_for_timeout(500)
    page.wait_for_function("() => window.stopBoxes.length >= 3", timeout=HANG_MS)
    boxes = page.evaluate("window.stopBoxes")
    assert len(set(boxes)) == 1, boxes  # no layout shift under the controls while the run streams
    page.locator("#stop").click()
    expect(status).to_contain_text("Stopp", timeout=HANG_MS)  # "Stopping…" at once, then "Stopped after"
    expect(status).to_contain_text("Stopped after", timeout=HANG_MS)
    n, after = map(int, re.search(r"Stopped after (\d+) steps \((\d+) after the click\)", status.inner_text()).groups())
    assert after <= 1 and n < 512  # at most the step in progress at the click finished after it
    page.locator("#tree-plot").scroll_into_view_if_needed()
    expect(page.locator("#tree-plot .gtitle")).to_contain_text(f"step {n - 1}")  # the last finished step
    settings(page, 1, 60, 6)
    run_to_done(page, HANG_MS)  # a new run afterwards works


COPY = "Fix the typo in this sentence and write it again: The cat sat on teh mat and looked at the birds in the garden."


def test_method_selector_cost_view_whatif_and_open_trace(page, tmp_path, request):
    from playwright.sync_api import expect

    in_process_only(request, "page", "tests/test_zerogpu.py (what-if, an opened trace)")

    status = page.locator("#status")
    page.locator("#prompt textarea").fill(COPY)
    settings(page, 1, 30, 24)
    choose(page, "method", "pld")
    expect(page.locator("#k")).to_contain_text("pld does not use k")  # knobs that do not apply say why
    assert page.locator("#k input[type=number]").is_disabled()
    run_to_done(page)
    expect(status).to_contain_text("pld")
    page.locator("#prev").click()  # a copying step in the middle of the run
    expect(page.locator("#tree-plot .legendtext").filter(has_text="source: lookup")).to_have_count(1)
    drawn(page, "#cost-plot")
    expect(page.locator("#cost-plot .gtitle")).to_contain_text("What a step costs")
    expect(page.locator("#cost-note")).to_contain_text("one-token forward")

    choose(page, "method", "esp")
    page.get_by_role("tab", name="What-if").click()
    page.locator("#whatif").click()
    expect(page.locator("#whatif-note")).to_contain_text("what-if", timeout=2 * HANG_MS)
    expect(page.locator("#whatif-alt .gtitle")).to_contain_text("Draft tree")
    expect(page.locator("#whatif-orig .gtitle")).to_contain_text("Draft tree")

    page.get_by_role("tab", name="Compare").click()
    page.locator("#compare").click()
    from esp.methods import REGISTRY

    n = len(REGISTRY)  # one GPU call per method, each shown as it finishes
    expect(page.locator("#compare-status")).to_contain_text(f"Finished {n}/{n} methods on this CPU", timeout=n * HANG_MS)
    table = page.locator("#compare-table").inner_text()
    assert "baseline" in table and table.count("exact") == n - 1 and "FAILED" not in table, table

    page.get_by_role("tab", name="Open a trace").click()
    page.locator("#shipped label").filter(has_text="ESP masks").click()
    expect(status).to_contain_text("recorded: trace_masks.json", timeout=HANG_MS)
    page.get_by_role("tab", name="Run").click()
    page.locator("#mask-plot").scroll_into_view_if_needed()
    expect(page.locator("#mask-plot .gtitle")).to_contain_text("Attention pattern · step")
    page.screenshot(path=str(tmp_path / "features.png"), full_page=True)


PLOTS = ("#tree-plot", "#mask-plot", "#cost-plot", "#align-plot", "#hist-plot", "#timing-plot")


def _box(page, selector: str) -> dict:
    return page.locator(selector).first.bounding_box()


def _inside(inner: dict, outer: dict, slack: float = 1.0) -> bool:
    return (inner["x"] >= outer["x"] - slack and inner["y"] >= outer["y"] - slack
            and inner["x"] + inner["width"] <= outer["x"] + outer["width"] + slack
            and inner["y"] + inner["height"] <= outer["y"] + outer["height"] + slack)


def _overlap(a: dict, b: dict) -> bool:
    return not (a["x"] + a["width"] <= b["x"] or b["x"] + b["width"] <= a["x"]
                or a["y"] + a["height"] <= b["y"] or b["y"] + b["height"] <= a["y"])


@pytest.mark.parametrize("width", [1280, 390])
def test_panels_and_axis_labels_fit_at_desktop_and_phone_width(page, width):
    from playwright.sync_api import expect

    page.set_viewport_size({"width": width, "height": 1000})
    page.get_by_role("tab", name="Run").click()
    expect(page.locator("#tree-plot .gtitle")).to_contain_text("step", timeout=HANG_MS)
    for plot in PLOTS:  # each drawn once it is on screen
        drawn(page, plot)
    page.wait_for_timeout(500)  # Plotly redraws on resize
    boxes = {p: _box(page, f"{p} .main-svg") for p in PLOTS}
    for a in PLOTS:
        assert boxes[a]["x"] >= -1 and boxes[a]["x"] + boxes[a]["width"] <= width + 1, (a, boxes[a])
        for b in PLOTS:
            if a < b:
                assert not _overlap(boxes[a], boxes[b]), (a, b)
        for label in page.locator(f"{a} .xtitle, {a} .ytitle, {a} .g-xtitle text, {a} .legendtext").all():
            box = label.bounding_box()
            if box:
                assert _inside(box, boxes[a]), (a, label.text_content())  # whole, not cut at the edge
    page.set_viewport_size({"width": 1280, "height": 1100})

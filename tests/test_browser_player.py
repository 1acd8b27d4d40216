"""Issue 46 in a real browser: the page's step views are one player (components/lecture.py PLAYER_JS) holding every
step it was sent. Keys, the buttons, Go to step, Play, clicks on the tree, the text and the Focus box are drawn
with no request to the server; a slow device plays slower and says so; the lecture file and the notebook widget
draw the frames the page draws; a crafted trace's text stays text in the player. One server, in-process; no model
is ever loaded. Timeouts are hang guards, never a measure (scripts/measure_player.py measures)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from app_server import serve

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
pytestmark = [pytest.mark.browser, pytest.mark.app,
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed")]
HANG_MS = 60_000
TITLE = "#tree-plot .gtitle"
# What a figure drawn in the player holds, as the page's Plotly has it (its own `uid`s left out).
DRAWN = ("(sel) => { const p = document.querySelector(sel); return JSON.stringify({data: p.data.map(({uid, ...t}) => t), "
         "title: p.layout.title.text}); }")


@pytest.fixture(scope="module")
def url(loads):
    with serve("local") as address:
        yield address.rstrip("/") + "/"
    assert not loads, "a model was loaded"


@pytest.fixture
def fresh(browser, url):
    """fresh(query): a page of its own at url + query, once the player shows a step."""
    contexts = []

    def open_page(query: str, step: int):
        from playwright.sync_api import expect

        context = browser.new_context(viewport={"width": 1440, "height": 900})
        contexts.append(context)
        page = context.new_page()
        page.goto(url + query)
        expect(page.locator(TITLE)).to_contain_text(names_step(step), timeout=HANG_MS)
        return page

    yield open_page
    for context in contexts:
        context.close()


def names_step(n: int) -> re.Pattern:
    """The tree's title naming step n ("Draft tree · step n · ...", or "... step 0" at the prefill)."""
    return re.compile(rf"step {n}(\D|$)")


def requests_to_the_server(page) -> list[str]:
    """Every request the page makes to the server's API from now on."""
    sent: list[str] = []
    page.on("request", lambda r: sent.append(r.url) if "/gradio_api/" in r.url else None)
    return sent


def key(page, name: str) -> None:
    page.evaluate("document.activeElement?.blur()")
    page.keyboard.press(name)


def test_the_arrow_key_moves_one_step_each_press_with_no_request_to_the_server(fresh):
    from playwright.sync_api import expect

    page = fresh("?trace=trace_qwen15&step=1", 1)
    sent = requests_to_the_server(page)
    for n in range(2, 10):
        key(page, "ArrowRight")
        expect(page.locator(TITLE)).to_contain_text(names_step(n), timeout=HANG_MS)  # the title names the step
        expect(page.locator("#step-label")).to_have_text(f"Step {n} of 29")
    page.wait_for_function("() => location.search.includes('step=9')", timeout=HANG_MS)  # the address follows
    key(page, "ArrowLeft")
    expect(page.locator(TITLE)).to_contain_text(names_step(8), timeout=HANG_MS)
    assert sent == []


def test_buttons_go_to_step_clicks_and_focus_ask_nothing_of_the_server(fresh):
    from playwright.sync_api import expect

    page = fresh("?trace=trace_masks&step=13", 13)
    sent = requests_to_the_server(page)
    page.locator("#prev").click()
    expect(page.locator(TITLE)).to_contain_text(names_step(12), timeout=HANG_MS)
    box = page.locator("#goto input[type=number]")
    box.fill("20")
    box.press("Enter")
    expect(page.locator(TITLE)).to_contain_text(names_step(20), timeout=HANG_MS)
    page.locator("#scrub input[type=range]").fill("13")  # the slider
    expect(page.locator(TITLE)).to_contain_text(names_step(13), timeout=HANG_MS)
    page.locator("#focus select").select_option("1")
    expect(page.locator("#focus-note")).to_contain_text("Node 1 ", timeout=HANG_MS)
    page.wait_for_function("() => (document.querySelector('#tree-plot .js-plotly-plot').data || [])"
                           ".some((t) => (t.name || '').startsWith('focus: node 1'))", timeout=HANG_MS)
    page.locator("#text-view .token").first.click()  # the prefill's token: to step 0, its root in focus
    expect(page.locator(TITLE)).to_contain_text(names_step(0), timeout=HANG_MS)
    expect(page.locator("#focus-note")).to_contain_text("is the model's own token of step 0")
    page.locator("#play").click()
    expect(page.locator(TITLE)).to_contain_text(names_step(1), timeout=HANG_MS)
    page.locator("#play").click()
    assert sent == []


def test_play_on_a_slow_device_plays_slower_and_says_so(fresh):
    """Steps are never skipped: at a pace the device cannot draw, Play goes on slower, and its row says so."""
    from playwright.sync_api import expect

    page = fresh("?trace=trace_qwen15&step=1", 1)
    sent = requests_to_the_server(page)
    cdp = page.context.new_cdp_session(page)
    cdp.send("Emulation.setCPUThrottlingRate", {"rate": 12})  # a far slower device than this one
    try:
        speed = page.locator("#speed input")
        speed.fill("10")
        speed.press("Enter")
        page.locator("#play").click()
        expect(page.locator("#pace")).to_contain_text("playing slower", timeout=HANG_MS)
        shown = int(page.locator("#scrub input[type=range]").input_value())
        page.wait_for_function(f"() => Number(document.querySelector('#scrub input[type=range]').value) > {shown}",
                               timeout=HANG_MS)  # and still playing, every step
    finally:
        cdp.send("Emulation.setCPUThrottlingRate", {"rate": 1})
    page.locator("#play").click()
    expect(page.locator("#pace")).to_have_text("", timeout=HANG_MS)
    assert sent == []


def test_the_lecture_file_and_the_widget_draw_the_frames_the_page_draws(fresh, tmp_path):
    from playwright.sync_api import expect

    from components.export import read_trace_json
    from components.lecture import write_lecture
    from components.notebook import runs_of, widget_state, write_export

    trace = ROOT / "assets" / "trace_copy.json"
    page = fresh("?trace=trace_copy&step=2", 2)
    on_page = {view: page.evaluate(DRAWN, f"#{view}-plot .js-plotly-plot") for view in ("tree", "mask")}
    meta, steps = read_trace_json(trace)
    homes = {"lecture": write_lecture(steps, meta, tmp_path / "lecture.html"),
             "widget": write_export(widget_state(runs_of(trace)), tmp_path / "widget.html")}
    for home, path in homes.items():
        other = page.context.new_page()
        other.set_viewport_size({"width": 1440, "height": 900})
        other.goto(path.as_uri())
        label = other.locator("#step-label").first
        expect(label).to_have_text("Step 0 of 4", timeout=HANG_MS)
        for _ in range(2):
            other.locator("#next").first.click()
        expect(label).to_have_text("Step 2 of 4")
        for view in ("tree", "mask"):
            sel = f"[data-figure={view}].js-plotly-plot"
            other.wait_for_function(f"() => /step 2 /.test(document.querySelector('{sel}')?.layout?.title?.text)",
                                    timeout=HANG_MS)
            assert json.loads(other.evaluate(DRAWN, sel)) == json.loads(on_page[view]), (home, view)
        other.close()


def test_a_crafted_traces_text_stays_text_in_the_player(fresh, tmp_path):
    from playwright.sync_api import expect

    token = "<img/src=x/onerror=window.pwned=1><b>tok</b>"
    data = json.loads((ROOT / "assets" / "trace_copy.json").read_text())
    for step in data["steps"]:
        step["nodes"][0]["text"] = token
        step["emitted_text"] = [token] * len(step["emitted"])
    path = tmp_path / "crafted.json"
    path.write_text(json.dumps(data))
    page = fresh("?trace=trace_masks&step=3", 3)
    page.get_by_role("tab", name="Open a trace").click()
    page.locator("#trace-file input[type=file]").set_input_files(str(path))
    expect(page.locator("#status")).to_contain_text("recorded: crafted.json", timeout=HANG_MS)
    page.get_by_role("tab", name="Run").click()
    text = page.locator("#text-view [data-role=text]")
    expect(text).to_contain_text(token, timeout=HANG_MS)  # the characters, as written
    page.locator("#focus select").select_option("0")
    expect(page.locator("#focus-note")).to_contain_text(f"'{token}'", timeout=HANG_MS)
    assert token in page.locator("#focus select option").nth(1).text_content()
    assert page.locator("#views img, #text-view b, #focus-note b:has-text('tok')").count() == 0
    assert page.evaluate("window.pwned") is None

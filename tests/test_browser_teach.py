"""The lesson in a real browser (issue 17): a link that opens a step, playback, presenter keys, the tour,
linked focus, the step in words, present mode and the lecture export; one server, in-process, and no model
is ever loaded (every load is recorded and must stay empty). No assert is a wall-clock limit: playback is
checked by what it does (it moves on by itself, holds when paused, stops at the end), and timeouts are hang
guards. All of it is the page's player's (tests/test_browser_player.py: no request to the server).
"""
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
ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
HANG_MS = 60_000
MASKS = json.loads((ROOT / "assets" / "trace_masks.json").read_text())
LAST = len(MASKS["steps"]) - 1


@pytest.fixture(scope="module")
def site(loads):
    sync_api = pytest.importorskip("playwright.sync_api")
    with serve("local") as url, sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        context = browser.new_context(viewport={"width": 1280, "height": 1000})
        page = context.new_page()
        yield url, page
        browser.close()
    assert not loads, "a model was loaded"


@pytest.fixture
def page(site, loads):
    yield site[1]
    assert not loads, "a model was loaded"


def open_url(site, query: str):
    url, page = site
    page.goto(url.rstrip("/") + "/" + query)
    page.wait_for_function("() => window.espExplorer !== undefined", timeout=HANG_MS)
    return page


def key(page, name: str) -> None:
    """Press a key with the page itself focused (no text box, no button)."""
    page.evaluate("document.activeElement?.blur()")
    page.keyboard.press(name)


def step_shown(page) -> int:
    return int(float(page.locator("#scrub input[type=range]").input_value()))


def expect_step(page, n: int) -> None:
    from playwright.sync_api import expect

    expect(page.locator("#tree-plot .gtitle")).to_contain_text(f"step {n}", timeout=HANG_MS)
    expect(page.locator("#scrub input[type=range]")).to_have_value(str(n), timeout=HANG_MS)


def test_link_opens_a_step_with_its_settings_and_follows_the_step(site, page):
    from playwright.sync_api import expect

    open_url(site, "?trace=trace_masks&step=7")
    expect_step(page, 7)
    expect(page.locator("#tour-offer")).to_contain_text("Press Tour")  # a first visit is offered the tour
    expect(page.locator("#goto input")).to_have_value("7")
    expect(page.locator("#status")).to_contain_text("recorded: trace_masks.json")
    expect(page.locator("#method input")).to_have_value("esp")  # the trace's own settings, not the defaults
    expect(page.locator("#k input[type=number]")).to_have_value("2")
    words = page.locator("#step-words")
    expect(words).to_contain_text("Step 7")
    before = words.inner_text()

    key(page, "ArrowRight")  # presenter keys: Right = next step
    expect_step(page, 8)
    accepted = len(MASKS["steps"][8]["accepted"])
    expect(words).to_contain_text("Step 8")
    assert words.inner_text() != before
    assert re.search(rf"Accepted: {accepted} drafts?", words.inner_text()), words.inner_text()
    page.wait_for_function("() => location.search.includes('step=8')", timeout=HANG_MS)
    assert "trace=trace_masks" in page.evaluate("location.search")

    page.locator("#prompt textarea").press("ArrowLeft")  # typed in a text box: the key stays the box's
    page.wait_for_timeout(500)
    assert step_shown(page) == 8
    key(page, "PageUp")
    expect_step(page, 7)
    assert step_shown(page) == 7


def test_bad_link_is_clamped_in_one_status_line(site, page):
    from playwright.sync_api import expect

    open_url(site, "?trace=trace_masks&step=999&tab=nowhere")
    expect_step(page, LAST)
    expect(page.locator("#tour-offer")).to_have_text("")  # once: the browser remembers
    status = page.locator("#status")
    expect(status).to_contain_text("steps 0-24, not 999")
    assert "no tab 'nowhere'" in status.inner_text() and "\n" not in status.inner_text().strip()
    assert "Traceback" not in page.content()


def test_play_moves_on_by_itself_pauses_and_stops_at_the_end(site, page):
    from playwright.sync_api import expect

    open_url(site, "?trace=trace_masks&step=1")
    expect_step(page, 1)
    play = page.locator("#play")
    play.click()
    expect(play).to_contain_text("Pause", timeout=HANG_MS)
    past = "(n) => Number(document.querySelector('#scrub input[type=range]').value) > n"
    page.wait_for_function(past, arg=1, timeout=HANG_MS)
    page.wait_for_function(past, arg=step_shown(page), timeout=HANG_MS)  # and on again, with no click
    play.click()  # pause: the step stays
    expect(play).to_contain_text("Play", timeout=HANG_MS)
    paused = step_shown(page)
    page.wait_for_timeout(1500)
    assert step_shown(page) in (paused, paused + 1)  # at most a tick already on its way

    speed = page.locator("#speed input")
    speed.fill("10")
    speed.press("Enter")
    key(page, " ")  # Space = play
    expect(play).to_contain_text("Pause", timeout=HANG_MS)
    expect(play).to_contain_text("Play", timeout=HANG_MS)  # the last step stops playback
    expect_step(page, LAST)


def test_space_on_a_focused_button_only_plays(site, page):
    from playwright.sync_api import expect

    open_url(site, "?trace=trace_masks&step=3")
    expect_step(page, 3)
    page.locator("#tour").focus()
    page.keyboard.press(" ")  # plays, and the focused Tour button is not clicked as well
    play = page.locator("#play")
    expect(play).to_contain_text("Pause", timeout=HANG_MS)
    page.keyboard.press(" ")
    expect(play).to_contain_text("Play", timeout=HANG_MS)
    page.wait_for_timeout(1000)  # a click on Tour would have opened the tour by now
    expect(page.locator("#tour-panel")).to_be_hidden()


def test_tour_walks_its_stops_with_one_spotlight(site, page):
    from playwright.sync_api import expect

    from components.story import story_step
    from components.tour import load_tour

    from explorer.calls import OPENING

    stops = load_tour()
    told = story_step(json.loads((ROOT / "assets" / f"{OPENING}.json").read_text())["steps"])
    open_url(site, "")  # the opening ESP run, at its story's step, with its own settings
    expect(page.locator("#method input")).to_have_value("esp", timeout=HANG_MS)
    expect(page.locator("#k input[type=number]")).to_have_value("2")
    expect(page.locator("#story-title")).to_contain_text(f"Step {told}", timeout=HANG_MS)
    page.locator("#tour").click()  # the tour walks the whole page: the dashboard opens
    expect(page.locator("#controls")).to_be_visible(timeout=HANG_MS)
    text = page.locator("#tour-text")
    expect(text).to_contain_text(f"stop 1 of {len(stops)}", timeout=HANG_MS)
    for n in range(2, 5):
        page.locator("#tour-next").click()
        expect(text).to_contain_text(f"stop {n} of {len(stops)}", timeout=HANG_MS)
    fourth = stops[3]
    expect(page.locator("#scrub input[type=range]")).to_have_value(str(fourth.step), timeout=HANG_MS)
    # The stop's text comes with the server's answer and its spotlight a moment after it (app.SPOTLIGHT_JS): wait for
    # the stop's own view to be lit, then it must be the only one.
    expect(page.locator(f"#{fourth.view}.esp-spotlight")).to_have_count(1, timeout=HANG_MS)
    expect(page.locator(".esp-spotlight")).to_have_count(1)
    page.wait_for_function("() => location.search.includes('trace=')", timeout=HANG_MS)
    page.locator("#tour-back").click()
    expect(text).to_contain_text(f"stop 3 of {len(stops)}", timeout=HANG_MS)
    expect(page.locator(f"#{stops[2].view}.esp-spotlight")).to_have_count(1, timeout=HANG_MS)
    page.locator("#tour-end").click()
    expect(page.locator("#tour-panel")).to_be_hidden(timeout=HANG_MS)
    expect(page.locator(".esp-spotlight")).to_have_count(0)


def test_focus_outlines_the_node_across_views(site, page):
    from playwright.sync_api import expect

    open_url(site, "?trace=trace_masks&step=13")
    expect_step(page, 13)
    shapes = "() => (document.querySelector('#mask-plot .js-plotly-plot')?.layout.shapes || []).length"
    before = page.evaluate(shapes)
    page.locator("#focus select").select_option("1")  # node 1: the first draft
    expect(page.locator("#focus-note")).to_contain_text("Node 1", timeout=HANG_MS)
    page.wait_for_function(f"() => ({shapes})() > {before}", timeout=HANG_MS)
    page.locator("#next").click()  # a new step resets the focus
    expect_step(page, 14)
    expect(page.locator("#focus-note")).to_have_text("", timeout=HANG_MS)

    root = page.locator("#tree-plot .scatterlayer .points path").first  # a click on the tree focuses too
    root.scroll_into_view_if_needed()
    box = root.bounding_box()
    page.evaluate("() => { document.querySelector('#tree-plot .js-plotly-plot')._hoverdata = null; }")
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_function("() => (document.querySelector('#tree-plot .js-plotly-plot')._hoverdata || []).length > 0",
                           timeout=HANG_MS)  # Plotly has the node under the mouse (a busy machine hovers late)
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    expect(page.locator("#focus-note")).to_contain_text("Node ", timeout=HANG_MS)


def test_present_mode_theme_size_view_and_lecture_export(site, page):
    from playwright.sync_api import expect

    open_url(site, "?trace=trace_qwen05&step=2&tab=size&present=1")
    expect(page.locator("#size-plot .gtitle")).to_contain_text("model size", timeout=HANG_MS)
    expect(page.locator("#controls")).to_be_hidden()
    assert page.evaluate("document.body.classList.contains('esp-present')")
    dark = page.evaluate("document.body.classList.contains('dark')")
    page.locator("#theme").click()
    assert page.evaluate("document.body.classList.contains('dark')") != dark

    open_url(site, "?trace=trace_copy&tab=export")
    page.locator("#export").click()
    expect(page.locator("#export-files")).to_contain_text("esp-lecture-", timeout=HANG_MS)

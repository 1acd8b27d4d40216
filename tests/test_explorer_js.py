"""assets/explorer.js on a bare page with the element ids it expects (the app's wiring is tested in
tests/test_browser.py): presenter keys, keys typed in a text box, URL state, present mode, spotlight, theme."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed")]
PAGE = """<!doctype html><html><body>
<div id="controls"><textarea id="prompt"></textarea></div>
<button id="prev" onclick="count('prev')">prev</button><button id="next" onclick="count('next')">next</button>
<button id="play" onclick="count('play')">play</button>
<div id="tree-plot">tree</div><div id="mask-plot">mask</div>
<script>window.clicks = {prev: 0, next: 0, play: 0}; function count(b) { window.clicks[b] += 1; }</script>
<script>SCRIPT</script></body></html>"""


def open_page(browser, tmp_path, query: str = ""):
    path = tmp_path / "page.html"
    path.write_text(PAGE.replace("SCRIPT", (ROOT / "assets" / "explorer.js").read_text()))
    page = browser.new_page()
    page.goto(path.as_uri() + query)
    page.wait_for_function("() => document.getElementById('controls-toggle') !== null")
    return page


def test_keys_click_the_step_buttons_but_not_in_a_text_box(browser, tmp_path):
    page = open_page(browser, tmp_path)
    for key in ("ArrowRight", "PageDown", "ArrowLeft", "PageUp", " "):
        page.locator("body").press(key)
    assert page.evaluate("window.clicks") == {"prev": 2, "next": 2, "play": 1}
    page.locator("#prompt").press("ArrowRight")
    page.locator("#prompt").type("a b")
    assert page.evaluate("window.clicks") == {"prev": 2, "next": 2, "play": 1}
    assert page.locator("#prompt").input_value() == "a b"


def test_url_state_spotlight_theme_present(browser, tmp_path):
    page = open_page(browser, tmp_path, "?present=1&x=1")
    assert page.evaluate("document.body.classList.contains('esp-present')")
    page.evaluate("espExplorer.setState({step: 7, tab: 'run', trace: 'trace_masks'})")
    assert page.evaluate("location.search") == "?present=1&x=1&step=7&tab=run&trace=trace_masks"
    page.evaluate("espExplorer.setState({step: 9, tab: null})")
    assert page.evaluate("location.search") == "?present=1&x=1&step=9&trace=trace_masks"
    assert page.evaluate("espExplorer.spotlight('tree-plot')")
    assert page.evaluate("espExplorer.spotlight('mask-plot')")
    assert page.evaluate("[...document.querySelectorAll('.esp-spotlight')].map(e => e.id)") == ["mask-plot"]
    assert not page.evaluate("espExplorer.spotlight('nowhere')")
    assert page.evaluate("document.querySelectorAll('.esp-spotlight').length") == 0
    assert page.evaluate("espExplorer.toggleTheme()") == "dark"
    assert page.evaluate("document.body.classList.contains('dark')")
    assert page.evaluate("[espExplorer.firstVisit(), espExplorer.firstVisit()]") == [True, False]
    page.locator("#controls-toggle").click()
    assert page.evaluate("document.getElementById('controls').hasAttribute('data-shown')")
    assert page.locator("#controls-toggle").get_attribute("aria-expanded") == "true"


def test_the_address_names_the_run_on_screen_or_no_run_and_no_step(browser, tmp_path):
    from explorer.recipe import RUN_KEYS

    page = open_page(browser, tmp_path, "?present=1&trace=trace_copy&step=3")
    keys = re.search(r"const RUN_KEYS = (\[.*?\]);", (ROOT / "assets" / "explorer.js").read_text(), re.S)
    assert json.loads(keys.group(1)) == list(RUN_KEYS)  # the same keys as the server's
    page.evaluate("espExplorer.linked = true; espExplorer.showStep(5)")
    assert page.evaluate("location.search") == "?present=1&trace=trace_copy&step=3"  # no run told yet: untouched
    page.evaluate("espExplorer.setRun('prompt=Count+to+3&model=embedded&k=2')")
    assert page.evaluate("location.search") == "?present=1&prompt=Count+to+3&model=embedded&k=2&step=5"
    page.evaluate("espExplorer.showStep(7)")
    assert page.evaluate("location.search").endswith("&k=2&step=7")
    page.evaluate("espExplorer.setRun('trace=trace_masks')")  # another run: the recipe's keys go
    assert page.evaluate("location.search") == "?present=1&trace=trace_masks&step=7"
    page.evaluate("espExplorer.setRun('')")  # a run with no link: no run and no step in the address
    assert page.evaluate("location.search") == "?present=1"
    page.evaluate("espExplorer.showStep(2)")
    assert page.evaluate("location.search") == "?present=1"
    assert page.evaluate("espExplorer.copyLink()") is None  # nothing copied: the note says why


def test_a_key_a_focused_part_used_is_not_a_step(browser, tmp_path):
    page = open_page(browser, tmp_path)
    page.evaluate("""document.getElementById('tree-plot').addEventListener('keydown', (e) => e.preventDefault())""")
    page.locator("#tree-plot").press("ArrowRight")  # used there (as the tree's own keys use it)
    assert page.evaluate("window.clicks") == {"prev": 0, "next": 0, "play": 0}
    assert page.locator("#tree-plot").get_attribute("tabindex") == "0"  # Tab reaches the tree

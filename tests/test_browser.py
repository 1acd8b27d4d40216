"""A real browser (Debian's chromium through Playwright): set sliders, run, scrub back, screenshot."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed")
SCREENSHOT = Path(__file__).resolve().parents[1] / "docs" / "screenshot.png"
ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def page(lm):
    sync_api = pytest.importorskip("playwright.sync_api")
    from app_server import serve

    with serve() as url, sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        page.goto(url)
        yield page
        browser.close()


def _set_slider(page, elem_id: str, value: int) -> None:
    box = page.locator(f"#{elem_id} input[type=number]")
    box.fill(str(value))
    box.press("Enter")


def test_run_scrub_and_screenshot(page):
    from playwright.sync_api import expect

    page.locator("#prompt textarea").fill("Count from 1 to 10, separated by commas.")
    _set_slider(page, "k", 2)
    _set_slider(page, "bc", 24)
    page.get_by_text("Decoding", exact=True).click()  # open the accordion holding max new tokens
    _set_slider(page, "max-new", 14)
    expect(page.locator("#status")).to_contain_text("BC=24", timeout=10_000)  # the live settings check
    page.locator("#run").click()
    status = page.locator("#status")
    expect(status).to_contain_text("Done", timeout=180_000)
    last = int(re.search(r"step (\d+) of (\d+)", status.inner_text()).group(2))
    assert last >= 3

    tree_title = page.locator("#tree-plot .gtitle")
    prefix_tick = page.locator("#mask-plot .xtick text").first
    expect(tree_title).to_contain_text(f"step {last}")
    before = (tree_title.text_content(), prefix_tick.text_content(), page.locator("#tree-plot .point").count())
    for back in (1, 2):  # one click at a time: each move reads the slider the previous one set
        page.locator("#prev").click()
        expect(tree_title).to_contain_text(f"step {last - back}", timeout=30_000)
    expect(page.locator("#mask-plot .gtitle")).to_contain_text(f"step {last - 2}")
    after = (tree_title.text_content(), prefix_tick.text_content(), page.locator("#tree-plot .point").count())
    assert after[0] != before[0] and after[1] != before[1]  # the prefix column shrank with the step
    expect(status).to_contain_text(f"step {last - 2} of {last}")

    SCREENSHOT.parent.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOT), full_page=True)
    assert SCREENSHOT.stat().st_size > 50_000

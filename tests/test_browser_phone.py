"""The phone's first screen (issue 31) in a real browser (Debian's chromium through Playwright), at a phone's
390 x 844 viewport: the status line and the draft tree come first, above the step controls and the settings,
which stay one tap away; at a desktop's width the controls stay beside the views. No model is needed (the page
opens on a shipped trace); timeouts are hang guards, never assertions."""
from __future__ import annotations

from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
pytestmark = [pytest.mark.browser, pytest.mark.app,
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed")]
HANG_MS = 60_000
PHONE = {"width": 390, "height": 844}


def opened(served, viewport: dict):
    """A new page at `viewport`, once the shipped trace's tree is drawn, scrolled to the top."""
    url, chromium = served
    page = chromium.new_page(viewport=viewport)
    page.goto(url)
    page.wait_for_selector("#tree-plot .main-svg", timeout=HANG_MS)
    page.locator("#dashboard").click()  # the first screen tells a story (tests/test_browser_story.py); the dashboard
    page.wait_for_function("() => document.getElementById('controls-toggle')", timeout=HANG_MS)
    page.wait_for_timeout(500)  # Plotly sizes its figures to the column
    page.evaluate("window.scrollTo(0, 0)")
    return page


def top(page, selector: str) -> float:
    """Where `selector` starts, in pixels from the top of the page (it is scrolled to the top)."""
    return page.locator(selector).first.bounding_box()["y"]


def test_on_a_phone_the_tree_starts_within_the_first_screen_above_the_controls(served):
    from playwright.sync_api import expect

    page = opened(served, PHONE)
    tree = top(page, "#tree-plot .main-svg")
    assert 0 <= tree < PHONE["height"], tree  # the draft tree's figure starts on the first screen
    assert top(page, "#status") < tree < top(page, "#scrub-row") < top(page, "#play-row") < top(page, "#mask-plot")
    # The settings are one tap away: their button is on the first screen, above the tree; they open below it.
    toggle = page.locator("#controls-toggle")
    assert top(page, "#controls-toggle") < tree
    expect(page.locator("#controls")).to_be_hidden()
    toggle.click()
    expect(page.locator("#run")).to_be_visible(timeout=HANG_MS)
    assert top(page, "#controls-toggle") < top(page, "#prompt") < top(page, "#tree-plot .main-svg")
    toggle.click()
    expect(page.locator("#controls")).to_be_hidden(timeout=HANG_MS)
    page.close()


def test_at_a_desktop_width_the_controls_stay_beside_the_views(served):
    page = opened(served, {"width": 1280, "height": 1000})
    from playwright.sync_api import expect

    expect(page.locator("#controls-toggle")).to_be_hidden()
    controls, tree = page.locator("#controls").bounding_box(), page.locator("#tree-plot").bounding_box()
    assert controls["x"] + controls["width"] <= tree["x"]  # the controls' column on the left
    assert top(page, "#status") < top(page, "#tree-plot .main-svg") < top(page, "#scrub-row")
    assert top(page, "#tree-plot") == pytest.approx(top(page, "#mask-plot"), abs=2)  # tree and mask side by side
    page.close()

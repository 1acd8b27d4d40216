"""The page everyone can read (issue 47): axe-core (axe-playwright-python) finds no serious or critical violation
on the page as it opens, light and dark, in a real browser (Debian's chromium through Playwright). No model is
needed: the page opens on a shipped trace. Timeouts are hang guards, never assertions."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from components import palette

CHROMIUM = "/usr/bin/chromium"
pytestmark = [pytest.mark.browser, pytest.mark.app,
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed")]
ROOT = Path(__file__).resolve().parents[1]
HANG_MS = 60_000


def serious(page) -> list[tuple[str, list]]:
    from axe_playwright_python.sync_playwright import Axe

    return [(v["id"], [n["target"] for n in v["nodes"]]) for v in Axe().run(page).response["violations"]
            if v["impact"] in ("serious", "critical")]


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_axe_finds_no_serious_violation_on_the_page_as_it_opens_and_with_the_dashboard_open(served, theme):
    """The first screen (the opening run's story), then every phase of the story, then the whole dashboard."""
    url, chromium = served
    page = chromium.new_page(viewport={"width": 1440, "height": 900})
    page.goto(f"{url}?__theme={theme}")
    page.wait_for_selector("#tree-plot .main-svg", timeout=HANG_MS)
    page.wait_for_selector("#story-text:not(:empty)", timeout=HANG_MS)
    assert page.evaluate("document.body.classList.contains('dark')") == (theme == "dark")
    found = {"first screen": serious(page)}
    while page.locator("#story-next").get_attribute("aria-disabled") != "true":
        page.locator("#story-next").click()
    found["last phase"] = serious(page)
    page.locator("#dashboard").click()
    page.wait_for_selector("#controls", state="visible", timeout=HANG_MS)
    page.wait_for_selector("#text-view .token", timeout=HANG_MS)
    found["dashboard"] = serious(page)
    page.locator("#predict").click()
    page.wait_for_selector("#guess-tree .guess-node", timeout=HANG_MS)
    found["guessing"] = serious(page)
    assert found == {"first screen": [], "last phase": [], "dashboard": [], "guessing": []}
    page.close()


def _luminance(rgb: tuple[float, float, float]) -> float:
    c = [x / 255 for x in rgb]
    c = [x / 12.92 if x <= 0.04045 else ((x + 0.055) / 1.055) ** 2.4 for x in c]
    return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2]


def _contrast(a: float, b: float) -> float:
    return (max(a, b) + 0.05) / (min(a, b) + 0.05)


def test_the_dark_text_views_light_colour_is_the_palettes_agreed_yellow():
    """In dark mode the text view's tokens are written in the page's light text on their label colours, and in
    black on the one light enough to need it, found by the colour the player writes in each token's inline style:
    each pair keeps 4.5:1 on the colour at half opacity over Gradio's dark block background (neutral-800)."""
    css = (ROOT / "assets" / "app.css").read_text()
    hex_rgb = lambda h: tuple(int(h[i : i + 2], 16) for i in (1, 3, 5))  # noqa: E731
    assert set(re.findall(r'\[style\*="(#[0-9A-Fa-f]{6})" i\]', css)) == {palette.AGREED}  # the player's text
    background = hex_rgb("#1f2937")
    for color in {c for c in palette.TOGETHER["text"] if c.startswith("#")}:
        washed = _luminance(tuple((x + y) / 2 for x, y in zip(hex_rgb(color), background)))
        text = 0.0 if color == palette.AGREED else 1.0  # black on the yellow, white on the rest
        assert _contrast(washed, text) >= 4.5, color


def test_the_figures_secondary_text_reads_on_a_light_page():
    """Notes and secondary labels in figures (components.common.INK, drawn over the page's white) keep 4.5:1;
    on a dark page the CSS writes all figure text in the page's own colour instead."""
    from components.common import INK
    from components.lecture import PLAYER_CSS

    r, g, b, a = (float(x) for x in re.findall(r"[\d.]+", INK))
    over_white = tuple(a * c + (1 - a) * 255 for c in (r, g, b))
    assert _contrast(_luminance(over_white), 1.0) >= 4.5
    assert ".dark .js-plotly-plot .main-svg text { fill: var(--body-text-color) !important; }" in \
        (ROOT / "assets" / "app.css").read_text()
    assert ".esp-player.dark .main-svg text { fill:" in PLAYER_CSS


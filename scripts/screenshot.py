"""Refresh docs/screenshot.png (the README's picture): the page with no model call on its first run
(explorer.calls.OPENING: ESP alone on Qwen2.5-Coder-1.5B, recorded with the Mask Lens) at step STEP, from the
top of the page down to the Mask Lens, so the picture shows the tree, the attention pattern, the verifier's eye,
the alignment and the lens grid filled.

    make screenshot        # or: python scripts/screenshot.py [OUT.png]

Needs Debian's chromium (/usr/bin/chromium); no model is loaded; the tests never write docs/.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

WIDTH = 1280
# A step whose masks' tokens have come (the last step's have not, so its grid is unshaded), mid-run so the run-so-far
# charts hold most masks: mask 1 turns to ' atmosphere', the token that came, from layer 26 on.
STEP = 16
DRAWN = ("#tree-plot", "#mask-plot", "#eye-plot", "#align-plot", "#lens-plot", "#lens-rank-plot", "#commit-plot")


def main(out: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    from app_server import serve
    from explorer.calls import OPENING
    from test_browser import ARGS, CHROMIUM

    with serve() as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": WIDTH, "height": 1000})
        page.goto(f"{url.rstrip('/')}/?trace={OPENING}&step={STEP}")
        expect(page.locator("#status")).to_contain_text(f"recorded: {OPENING}.json", timeout=120_000)
        for view in DRAWN:  # each figure drawn with data, not a note (the player draws a view once it is on screen)
            page.locator(view).scroll_into_view_if_needed()
            page.wait_for_function(f"() => (document.querySelector('{view} .js-plotly-plot')?.data || []).length > 0",
                                   timeout=60_000)
        page.evaluate("window.scrollTo(0, 0)")
        page.wait_for_timeout(2_000)  # let the figures finish drawing (no pending overlay)
        lens = page.locator("#mask-lens").bounding_box()
        bottom = page.evaluate("window.scrollY") + lens["y"] + lens["height"]
        page.screenshot(path=str(out), full_page=True, clip={"x": 0, "y": 0, "width": WIDTH, "height": bottom})
        browser.close()
    print(f"{out}: {out.stat().st_size // 1024} KB ({OPENING}, step {STEP})")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "screenshot.png")

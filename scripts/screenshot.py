"""Refresh docs/screenshot.png (the README's picture): the hybrid (or PLD, before the hybrid exists) on a
prompt that copies from its input, so the tree shows its draft sources and the cost view is filled.

    make screenshot        # or: python scripts/screenshot.py [OUT.png]

Needs Debian's chromium (/usr/bin/chromium) and the embedded model; the tests never write docs/.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from esp import methods  # noqa: E402

PROMPT = ("Fix the typo in this sentence and write it again: The cat sat on teh mat and looked at the birds "
          "in the garden.")


def main(out: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    from app_server import serve
    from test_browser import ARGS, CHROMIUM, choose, settings

    method = "hybrid" if "hybrid" in methods.available() else "pld"
    with serve() as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.goto(url)
        page.locator("#prompt textarea").fill(PROMPT)
        settings(page, 1, 30, 40)  # before the method: knobs it does not take are disabled
        choose(page, "method", method)
        page.locator("#run").click()
        expect(page.locator("#status")).to_contain_text("Done", timeout=300_000)
        expect(page.locator("#cost-plot .gtitle")).to_contain_text("cost", timeout=30_000)
        page.wait_for_timeout(2_000)  # let the last update's figures finish drawing (no pending overlay)
        page.screenshot(path=str(out), full_page=True)
        browser.close()
    print(f"{out}: {out.stat().st_size // 1024} KB ({method})")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "screenshot.png")

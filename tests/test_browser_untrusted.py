"""Text stays text in a real browser (Debian's chromium through Playwright; issue 21): markup in a link and in
an opened trace shows as its characters on the page, and a lecture exported from a crafted trace, opened from
disk with the network off, runs no injected script while the player still plays. No model is loaded.
No assert is a wall-clock limit (timeouts are hang guards)."""
from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import quote

import pytest

from app_server import serve

CHROMIUM = "/usr/bin/chromium"
pytestmark = [pytest.mark.browser, pytest.mark.app,
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed")]
HANG_MS = 60_000
ROOT = Path(__file__).resolve().parents[1]
SCRIPT = "</script><script>window.pwned=1</script><img src=x onerror=window.pwned=2>"
TOKEN = "<b>tok</b>"
SETTINGS = "<b>bold</b> [click](http://evil.example) $$x^2$$"


def crafted(path: Path, token: str = TOKEN) -> Path:
    """trace_copy with markup in its settings line, device, token texts and prompt."""
    data = json.loads((ROOT / "assets" / "trace_copy.json").read_text())
    data["meta"].update(settings=SETTINGS, device="<i>dev</i>", prompt="{{frames}} <script>window.pwned=3</script>")
    for step in data["steps"]:
        step["nodes"][0]["text"] = token
        step["emitted_text"] = [token] * len(step["emitted"])
    path.write_text(json.dumps(data))
    return path


@pytest.fixture(scope="module")
def site():
    with serve("local") as url:
        yield url


def _status(page):
    return page.locator("#status [data-testid=markdown]")


def test_markup_in_a_link_and_in_an_opened_trace_shows_as_text(browser, site, tmp_path):
    from playwright.sync_api import expect

    page = browser.new_page(viewport={"width": 1280, "height": 1100})
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(f"{site.rstrip('/')}/?trace={quote('<b>x</b>')}&tab={quote('<form><input name=p></form>')}")
    status = _status(page)
    expect(status).to_contain_text("no shipped trace '<b>x</b>'", timeout=HANG_MS)
    expect(status).to_contain_text("no tab '<form><input name=p></form>'")
    assert status.locator("b", has_text="x").count() == 0 and status.locator("form, input").count() == 0

    page.locator("#open-tab-button, button[role=tab]", has_text="Open a trace").first.click()
    page.locator("#trace-file input[type=file]").set_input_files(str(crafted(tmp_path / "crafted.json")))
    expect(status).to_contain_text("recorded: crafted.json", timeout=HANG_MS)
    expect(status).to_contain_text(SETTINGS)  # the $$ of a crafted settings line is no formula either
    assert status.locator("a, .katex").count() == 0
    assert status.locator("b", has_text="bold").count() == 0
    page.locator("button[role=tab]", has_text="Run").first.click()
    expect(page.locator("#text-view")).to_contain_text(TOKEN, timeout=HANG_MS)  # HighlightedText: text
    assert page.locator("#text-view b").count() == 0
    expect(page.locator("#cost-note")).to_contain_text("this <i>dev</i>")
    assert page.locator("#cost-note i").count() == 0
    expect(page.locator("#step-words")).to_contain_text(TOKEN)
    assert page.locator("#step-words b", has_text="tok").count() == 0
    tree = page.locator("#tree-plot .main-svg").first
    expect(tree).to_be_visible()
    assert any("<b>" in t for t in page.locator("#tree-plot text").all_text_contents())  # a label, as text
    assert dialogs == [] and page.evaluate("window.pwned") is None
    page.close()


def test_a_lecture_from_a_crafted_trace_runs_no_script_offline(browser, tmp_path):
    from playwright.sync_api import expect

    from components.export import read_trace_json
    from components.lecture import write_lecture
    from components.tree_plot import tree_figure

    meta, steps = read_trace_json(crafted(tmp_path / "crafted.json", SCRIPT))
    path = write_lecture(steps, meta, tmp_path / "lecture.html", {"tree (step 1)": tree_figure(steps[1])})
    context = browser.new_context()
    context.set_offline(True)
    requested, dialogs = [], []
    context.route(re.compile(r"^(https?|wss?)://"), lambda route: (requested.append(route.request.url), route.abort()))
    page = context.new_page()
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(path.as_uri())
    last = len(steps) - 1
    expect(page.locator("#step-label")).to_have_text(f"Step 0 of {last}", timeout=HANG_MS)
    expect(page.locator("[data-figure=tree] .main-svg").first).to_be_visible()
    expect(page.locator("#figures .main-svg").first).to_be_visible()  # the shown step's figures, below
    page.locator("#next").click()
    expect(page.locator("#step-label")).to_have_text(f"Step 1 of {last}")
    expect(page.locator("#text")).to_contain_text(SCRIPT)  # the crafted token, as text
    expect(page.locator("body")).to_contain_text("Prompt: {{frames}} <script>window.pwned=3</script>")
    page.locator("#play").click()
    expect(page.locator("#step-label")).to_have_text(f"Step {last} of {last}", timeout=HANG_MS)
    assert page.evaluate("window.pwned") is None and dialogs == [] and requested == []
    assert page.locator("#text img, #words img, #text script").count() == 0
    context.close()

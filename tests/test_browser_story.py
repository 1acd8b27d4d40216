"""The first minute in the lecture file, in a real browser (Debian's chromium through Playwright; issue 47), from
a shipped trace with no model and no network: the story's pages turn and light the views they name; predict mode
hides the verdict, takes marks by mouse and by keyboard alone, and scores them (the player's own espScore)
against the step's verdict; axe-core finds no serious or critical violation, light and dark; on a phone the story
and the tree open on the first screen. Timeouts are hang guards, never assertions."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterator

import pytest

from components.common import accepted_nodes
from components.export import read_trace_json
from components.lecture import write_lecture

CHROMIUM = "/usr/bin/chromium"
pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed")]
ROOT = Path(__file__).resolve().parents[1]
OPENING = ROOT / "assets" / "trace_qwen15.json"
HANG_MS = 30_000
PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="module")
def run():
    return read_trace_json(OPENING)


@pytest.fixture(scope="module")
def lecture(run, tmp_path_factory):
    meta, steps = run
    return write_lecture(steps, meta, tmp_path_factory.mktemp("lecture") / "lecture.html")


def opened(browser, lecture, **context):
    """The lecture file in a new offline page, once the player has drawn its first step."""
    from playwright.sync_api import expect

    ctx = browser.new_context(**{"viewport": {"width": 1440, "height": 900}, **context})
    ctx.set_offline(True)
    page = ctx.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(lecture.as_uri())
    expect(page.locator("[data-figure=tree] .main-svg").first).to_be_visible(timeout=HANG_MS)
    page.errors = errors
    return page


def phases_told(page, told: dict, seen: list) -> Iterator[dict]:
    """Turn the story's pages with #story-next, each showing its phase's text under a new title; yields each phase
    once it shows (its texts go into `seen`)."""
    from playwright.sync_api import expect

    nxt = page.locator("#story-next")
    for n, phase in enumerate(told["phases"]):
        if n:
            nxt.click()
            # The page turn scrolls the named view in at once: the next button is already where it rests (a glide
            # carried it from under the pointer, and a click meanwhile was lost).
            at = nxt.bounding_box()
            page.evaluate("new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(() => setTimeout(done, 300))))")
            assert nxt.bounding_box() == at, phase["name"]
        expect(page.locator("#story-text")).to_have_text(phase["text"])
        text = page.locator("#story").inner_text()
        assert phase["name"] in text and text not in seen
        seen.append(text)
        yield phase

def test_the_story_turns_its_pages_and_lights_what_each_names(browser, lecture, run):
    from playwright.sync_api import expect

    from components.story import story

    meta, steps = run
    told = story(steps, meta)
    page = opened(browser, lecture)
    expect(page.locator("#step-label")).to_have_text(f"Step {told['step']} of {len(steps) - 1}")  # opens on it
    boxes = {"tree": "[data-figure=tree]", "mask": "[data-figure=mask]", "eye": "[data-figure=eye]", "text": "#text", "lens": "[data-figure=lens]"}
    seen = []
    for phase in phases_told(page, told, seen):
        lit = page.locator(".esp-spotlight")
        expect(lit).to_have_count(1)
        assert lit.evaluate("(el, sel) => el.matches(sel)", boxes[phase["view"]])
        expect(page.locator("#words")).to_be_hidden()  # the story tells this step; the step's words wait
    assert len(seen) >= 4
    assert page.locator("#story-next").get_attribute("aria-disabled") == "true"
    expect(page.locator("#story-play")).to_be_visible()  # the last page offers the next action
    page.locator("#story-back").click()
    expect(page.locator("#story-text")).to_have_text(told["phases"][-2]["text"])
    expect(page.locator("#story-play")).to_be_hidden()
    page.locator("#story-next").click()
    page.locator("#story-play").click()  # play the whole run: the story closes and the run plays from step 0
    expect(page.locator("#story")).to_be_hidden()
    expect(page.locator("#play")).to_contain_text("Pause")
    assert int(page.locator("#scrub").input_value()) < told["step"]  # from the start
    page.locator("#play").click()
    expect(page.locator(".esp-spotlight")).to_have_count(0)
    page.locator("#story-open").click()
    expect(page.locator("#story-text")).to_have_text(told["phases"][0]["text"])
    expect(page.locator("#step-label")).to_have_text(f"Step {told['step']} of {len(steps) - 1}")
    assert page.errors == []
    page.context.close()


def _verdict_words(d: dict) -> list[str]:
    return [next(n["word"] for n in d["nodes"] if n["i"] == i) for i in d["kept"]]


def test_a_guess_is_scored_against_the_verdict(browser, lecture, run):
    from playwright.sync_api import expect

    from components.predict import predict_data

    meta, steps = run
    data = predict_data(steps, meta)["steps"]
    page = opened(browser, lecture)
    # The one scoring rule, the player's own: right, wrong, missed, exact.
    score = page.evaluate("espScore([1, 4], [1, 9])")
    assert score == {"right": [1], "wrong": [4], "missed": [9], "exact": False}
    assert page.evaluate("espScore([9, 1], [1, 9])")["exact"] and page.evaluate("espScore([], [])")["exact"]
    assert page.evaluate("espScore([], [3])") == {"right": [], "wrong": [], "missed": [3], "exact": False}

    page.locator("#predict").click()
    expect(page.locator("#predict-panel")).to_be_visible()
    expect(page.locator("#step-label")).to_have_text(f"Step 1 of {len(steps) - 1}")  # from the story: the first drafts
    expect(page.locator("[data-figure=tree]")).to_be_hidden()  # the verdict's views are veiled until the reveal
    expect(page.locator("#alt-tree")).to_be_hidden()
    for view in ("[data-figure=mask]", "[data-figure=eye]", "#text"):
        assert page.locator(view).evaluate("el => getComputedStyle(el).visibility") == "hidden"
    results = {}
    # Step 1: mark the masks' favourite (rejected there); step 2: mark the kept draft; step 3: mark nothing.
    plan = {1: max((n for n in data[1]["nodes"] if n["depth"] == 1), key=lambda n: n["cum"])["i"],
            2: data[2]["kept"][0], 3: None}
    for i, mark in plan.items():
        expect(page.locator("#step-label")).to_have_text(f"Step {i} of {len(steps) - 1}")
        d = data[i]
        shown = page.locator("#guess-tree .guess-node")
        expect(shown).to_have_count(len(d["nodes"]) - 1)  # every fed draft, the root aside
        if mark is not None:
            page.locator(f'#guess-tree [data-node="{mark}"]').click()
            expect(page.locator(f'#guess-tree [data-node="{mark}"]')).to_have_attribute("aria-pressed", "true")
        page.locator("#reveal").click()
        kept = set(d["kept"])
        marked = {mark} - {None}
        results[i] = (marked == kept, len(marked & kept), len(kept), len(marked - kept))
        result = page.locator("#guess-result").inner_text()
        assert result.startswith("Right!") == (marked == kept)
        for w in _verdict_words(d):
            assert f"“{w}”" in result
        assert f"then its own “{d['own']}” ({d['kind']})" in result
        for node in d["nodes"][1:]:  # each draft shows its verdict
            cls = page.locator(f'#guess-tree [data-node="{node["i"]}"]').get_attribute("class")
            assert ("kept" in cls.split()) == (node["i"] in kept) and ("lost" in cls.split()) == (node["i"] not in kept)
        expect(page.locator("[data-figure=tree]")).to_be_visible()
        hints = page.locator("#guess-hints li").all_inner_texts()
        assert hints == d["hints"]
        exact = sum(r[0] for r in results.values())
        found, total, wrong = (sum(r[k] for r in results.values()) for k in (1, 2, 3))
        expect(page.locator("#guess-score")).to_have_text(
            f"Score: {exact} of {len(results)} steps exactly right · found {found} of {total} kept drafts · "
            f"{wrong} wrong mark{'' if wrong == 1 else 's'}.")
        page.locator("#guess-next").click()
    assert results[2][0] and not results[1][0] and results[3][0] == (not data[3]["kept"])
    page.locator("#prev").click()  # a step already guessed shows its verdict again, the score unchanged
    expect(page.locator("#guess-result")).not_to_be_empty()
    expect(page.locator("[data-figure=tree]")).to_be_visible()
    assert page.errors == []
    page.context.close()


def test_story_and_predict_by_keyboard_alone(browser, lecture, run):
    from playwright.sync_api import expect

    from components.predict import predict_data
    from components.story import story

    meta, steps = run
    told = story(steps, meta)
    page = opened(browser, lecture)
    kb = page.keyboard

    def tab_to(elem_id: str, limit: int = 40) -> None:
        for _ in range(limit):
            kb.press("Tab")
            if page.evaluate("document.activeElement && document.activeElement.id") == elem_id:
                outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
                assert outline != "none", elem_id  # the focus shows
                return
        raise AssertionError(f"#{elem_id} is not reachable by Tab")

    tab_to("story-next")
    kb.press("Enter")
    expect(page.locator("#story-text")).to_have_text(told["phases"][1]["text"])
    kb.press("Space")  # Space presses the focused button (not the player's Play)
    expect(page.locator("#story-text")).to_have_text(told["phases"][2]["text"])
    expect(page.locator("#play")).to_contain_text("Play")
    kb.press("ArrowLeft")  # inside the story, the arrows turn its pages, not the player's steps
    expect(page.locator("#story-text")).to_have_text(told["phases"][1]["text"])
    expect(page.locator("#step-label")).to_have_text(f"Step {told['step']} of {len(steps) - 1}")

    tab_to("predict")
    kb.press("Enter")
    expect(page.locator("#step-label")).to_have_text(f"Step 1 of {len(steps) - 1}")
    d = predict_data(steps, meta)["steps"][1]
    kept = d["kept"]
    first = accepted_nodes(steps[1])[0]
    nodes = [n for n in d["nodes"] if n["i"] != 0]
    for _ in range(40):  # the tree is one tab stop: its current draft takes the focus
        kb.press("Tab")
        if page.evaluate("document.activeElement.classList.contains('guess-node')"):
            break
    assert page.evaluate("document.activeElement.dataset.node") == str(nodes[0]["i"])
    for _ in range(nodes.index(next(n for n in nodes if n["i"] == first.index))):
        kb.press("ArrowRight")
    assert page.evaluate("document.activeElement.dataset.node") == str(first.index)
    kb.press("Space")
    expect(page.locator(f'#guess-tree [data-node="{first.index}"]')).to_have_attribute("aria-pressed", "true")
    assert page.evaluate("document.activeElement.dataset.node") == str(first.index)  # the focus stays on it
    expect(page.locator("#step-label")).to_have_text(f"Step 1 of {len(steps) - 1}")  # no step moved meanwhile
    tab_to("reveal")
    kb.press("Enter")
    expect(page.locator("#guess-result")).to_contain_text("Right!" if [first.index] == kept else "The verifier")
    assert page.evaluate("document.activeElement.id") == "guess-next"  # next, the following step
    kb.press("Enter")
    expect(page.locator("#step-label")).to_have_text(f"Step 2 of {len(steps) - 1}")
    assert page.errors == []
    page.context.close()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_axe_finds_no_serious_violation_in_the_lecture(browser, lecture, scheme):
    from axe_playwright_python.sync_playwright import Axe

    page = opened(browser, lecture, color_scheme=scheme)
    assert page.evaluate("document.body.classList.contains('dark')") == (scheme == "dark")
    found = {}
    for state in ("story", "predict", "revealed"):
        if state == "predict":
            page.locator("#predict").click()
            page.locator("#guess-tree .guess-node").first.click()
        if state == "revealed":
            page.locator("#reveal").click()
        violations = Axe().run(page).response["violations"]
        found[state] = [(v["id"], [n["target"] for n in v["nodes"]]) for v in violations
                        if v["impact"] in ("serious", "critical")]
    assert found == {"story": [], "predict": [], "revealed": []}
    page.context.close()


def test_motion_waits_for_the_reader_who_asks_for_less(browser, lecture):
    page = opened(browser, lecture, reduced_motion="reduce")
    lit = page.locator(".esp-spotlight")
    assert lit.evaluate("el => getComputedStyle(el).transitionDuration") == "0s"
    page.context.close()
    page = opened(browser, lecture, reduced_motion="no-preference")
    assert page.locator(".esp-spotlight").evaluate("el => getComputedStyle(el).transitionDuration") != "0s"
    page.context.close()


def test_on_a_phone_the_story_and_its_tree_open_on_the_first_screen(browser, lecture):
    from playwright.sync_api import expect

    page = opened(browser, lecture, viewport=PHONE)
    page.wait_for_timeout(300)  # Plotly sizes its figures to the column
    assert page.evaluate("window.scrollY") == 0
    for sel in ("#story", "#story-next", "#predict", "[data-figure=tree] .scatterlayer"):
        box = page.locator(sel).first.bounding_box()
        assert box and 0 <= box["y"] and box["y"] + box["height"] <= PHONE["height"], (sel, box)
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]  # no sideways scrolling
    expect(page.locator("#story-text")).not_to_be_empty()
    page.context.close()


def test_a_crafted_trace_stays_text_in_the_story_and_the_guesses(browser, tmp_path):
    from playwright.sync_api import expect

    from components.lecture import write_lecture as write

    script = "</script><script>window.pwned=1</script><img src=x onerror=window.pwned=2>"
    data = json.loads(OPENING.read_text())
    for step in data["steps"]:
        for node in step["nodes"]:
            node["text"] = script
        step["emitted_text"] = [script] * len(step["emitted"])
    (tmp_path / "crafted.json").write_text(json.dumps(data))
    meta, steps = read_trace_json(tmp_path / "crafted.json")
    page = opened(browser, write(steps, meta, tmp_path / "lecture.html"))
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    expect(page.locator("#story-text")).to_contain_text(script.strip())
    page.locator("#predict").click()
    expect(page.locator("#guess-tree .guess-node").first).to_contain_text(script.replace(" ", "␣"))
    page.locator("#reveal").click()
    expect(page.locator("#guess-result")).to_contain_text(script)
    assert page.evaluate("window.pwned") is None and dialogs == [] and page.errors == []
    assert page.locator("#story img, #predict-panel img, #predict-panel script, .esp-sr img").count() == 0
    assert re.search(r"<img src=x", page.locator("#alt-tree").text_content())  # the description: text too
    page.context.close()


# ---------------------------------------------------------------- the app's page (issue 47): the same story and
# predict mode on the page's player, served with no model call (the page opens on a shipped trace)

DESKTOP = {"width": 1440, "height": 900}
# Every text node drawn on screen outside the figures (Plotly's and the player's boxes), as a visitor reads it (text
# for screen readers only, in a box of a pixel, aside).
WORDS_ON_SCREEN = """() => {
  const out = [], walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walk.nextNode(); n; n = walk.nextNode()) {
    const el = n.parentElement;
    if (!el || !n.textContent.trim() || el.closest(".js-plotly-plot, svg, script, style, [data-figure]")) continue;
    const style = getComputedStyle(el), box = el.getBoundingClientRect();
    if (style.visibility === "hidden" || style.opacity === "0" || box.width <= 1 || box.height <= 1) continue;
    const range = document.createRange();
    range.selectNodeContents(n);
    const seen = [...range.getClientRects()].some((r) => r.width > 1 && r.height > 1 && r.bottom > 0
      && r.top < innerHeight && r.right > 0 && r.left < innerWidth);
    if (seen) out.push(n.textContent.trim());
  }
  return out;
}"""
# The page's element for each view a story phase names (assets/explorer.js VIEWS).
PAGE_VIEWS = {"tree": "tree-plot", "mask": "mask-plot", "eye": "eye-plot", "lens": "lens-plot", "text": "text-view"}


def on_screen(locator, viewport: dict) -> bool:
    box = locator.bounding_box()
    return bool(box) and box["height"] > 0 and box["y"] < viewport["height"] and box["y"] + box["height"] > 0


def app_page(served, query: str = "", viewport: dict = DESKTOP):
    """The app's page as a new visitor opens it (a fresh browser context), once its tree is drawn."""
    from playwright.sync_api import expect

    url, chromium = served
    page = chromium.new_page(viewport=viewport)
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url + query)
    expect(page.locator("#tree-plot .main-svg").first).to_be_visible(timeout=HANG_MS)
    page.errors = errors
    return page


@pytest.fixture(scope="module")
def told(run):
    from components.story import story
    from explorer.views import ACTIONS

    meta, steps = run
    return story(steps, meta, actions=ACTIONS)


@pytest.mark.app
def test_the_pages_first_screen_tells_the_opening_runs_story(served, told):
    from playwright.sync_api import expect

    page = app_page(served)
    expect(page.locator("#story-text")).to_have_text(told["phases"][0]["text"], timeout=HANG_MS)
    page.wait_for_timeout(500)  # Plotly sizes its figures to the column
    assert page.evaluate("window.espExplorer.shown()") == told["step"]  # the story's step, not the run's last
    words = page.evaluate(WORDS_ON_SCREEN)
    assert sum(len(t.split()) for t in words) <= 120, words
    for hidden in ("#status", "#scrub-row", "#tabs [role=tablist]", "#glossary", "#room-row"):
        expect(page.locator(hidden).first).to_be_hidden()  # the dashboard waits one click away
    controls = page.locator("#controls").bounding_box()  # below the story's screen, a scroll away (first.css)
    assert controls and controls["y"] >= page.viewport_size["height"], controls
    expect(page.locator("#dashboard")).to_be_visible()
    seen = []
    for phase in phases_told(page, told, seen):
        assert on_screen(page.locator("#story"), DESKTOP)  # the story stays in view over what it lights
        lit = page.locator(".esp-spotlight")
        expect(lit).to_have_count(1)
        assert lit.get_attribute("id") == PAGE_VIEWS[phase["view"]]
        expect(lit).to_be_visible()
        page.wait_for_function("(id) => { const r = document.getElementById(id).getBoundingClientRect(); "
                               "return r.top < innerHeight && r.bottom > 0; }", arg=lit.get_attribute("id"),
                               timeout=HANG_MS)  # scrolled into view
    assert len(set(seen)) >= 4
    for action in ("#story-play", "#story-prompt"):  # the last phase offers the next actions
        expect(page.locator(action)).to_be_visible()
    expect(page.locator("#story-prompt")).to_have_text("Try your own prompt")
    page.locator("#story-prompt").click()  # ... which opens the dashboard at the prompt box
    expect(page.locator("#controls")).to_be_visible()
    assert page.evaluate("document.activeElement.closest('#prompt') !== null")
    assert page.errors == []
    page.close()


@pytest.mark.app
def test_the_dashboard_is_one_click_away_with_every_view_and_knob(served, told, run):
    from playwright.sync_api import expect

    meta, steps = run
    page = app_page(served)
    expect(page.locator("#story")).to_be_visible(timeout=HANG_MS)
    page.locator("#dashboard").click()
    for shown in ("#controls", "#status", "#scrub-row", "#play-row", "#step-words", "#tabs [role=tablist]",
                  "#glossary", "#room-start", "#run", "#text-view", "#stats", "#eye-plot", "#cost-plot",
                  "#align-plot", "#lens-plot", "#lens-rank-plot", "#commit-plot", "#hist-plot", "#timing-plot",
                  "#prompt", "#method", "#k", "#bc", "#lam"):
        expect(page.locator(shown).first).to_be_visible()
    expect(page.locator("#dashboard")).to_be_hidden()
    expect(page.locator("#story")).to_be_hidden()  # the story is one button away again
    expect(page.locator("#story-open")).to_have_text(f"Tell the story of step {told['step']}")
    expect(page.locator("#step-label")).to_have_text(f"Step {told['step']} of {len(steps) - 1}")
    page.wait_for_function(f"() => location.search.includes('step={told['step']}')", timeout=HANG_MS)
    # The knobs a first run does not need are folded until asked for.
    folded = {"Masks and tree": ("#init", "#tree"), "Decoding": ("#mode",)}
    for accordion, knobs in folded.items():
        for knob in knobs:
            expect(page.locator(knob)).to_be_hidden()
        page.get_by_text(accordion, exact=True).click()
        for knob in knobs:
            expect(page.locator(knob)).to_be_visible()
    page.locator("#story-open").click()  # the story again, over the dashboard
    expect(page.locator("#story-text")).to_have_text(told["phases"][0]["text"])
    assert page.errors == []
    page.close()


@pytest.mark.app
def test_predict_on_the_page_scores_a_guess_on_a_recorded_run(served, run):
    from playwright.sync_api import expect

    from components.predict import predict_data
    from explorer.calls import SHIPPED

    meta, steps = run
    data = predict_data(steps, meta)["steps"]
    page = app_page(served)
    expect(page.locator("#predict")).to_be_visible(timeout=HANG_MS)
    page.locator("#predict").click()  # from the first screen: the dashboard, guessing from the first drafts
    expect(page.locator("#predict-panel")).to_be_visible()
    expect(page.locator("#step-label")).to_have_text(f"Step 1 of {len(steps) - 1}")
    for veiled in ("#tree-plot", "#mask-plot", "#eye-plot", "#text-view"):  # the verdict's views wait
        assert page.locator(veiled).evaluate("el => getComputedStyle(el).visibility") == "hidden", veiled
    expect(page.locator("#guess-tree .guess-node")).to_have_count(len(data[1]["nodes"]) - 1)
    for i in data[1]["kept"]:
        page.locator(f'#guess-tree [data-node="{i}"]').click()
    page.locator("#reveal").click()
    expect(page.locator("#guess-result")).to_contain_text("Right!")
    kept = len(data[1]["kept"])
    expect(page.locator("#guess-score")).to_have_text(
        f"Score: 1 of 1 steps exactly right · found {kept} of {kept} kept drafts · 0 wrong marks.")
    expect(page.locator("#tree-plot [data-figure=tree]")).to_be_visible()
    page.locator("#guess-next").click()  # no mark at all on the next step with drafts
    nxt = next(i for i in range(2, len(data)) if data[i])
    expect(page.locator("#step-label")).to_have_text(f"Step {nxt} of {len(steps) - 1}")
    page.locator("#reveal").click()
    right = not data[nxt]["kept"]
    expect(page.locator("#guess-score")).to_contain_text(f"Score: {1 + right} of 2 steps exactly right")
    page.close()

    # Another recorded run, opened by its link: its own guesses (the page's data follows the run on screen).
    other_meta, other_steps = read_trace_json(SHIPPED["trace_masks"])
    other = predict_data(other_steps, other_meta)["steps"]
    at = next(i for i in range(3, len(other)) if other[i])
    page = app_page(served, f"?trace=trace_masks&step={at}")
    expect(page.locator("#controls")).to_be_visible(timeout=HANG_MS)  # a link to a step opens the dashboard
    page.locator("#predict").click()
    expect(page.locator("#step-label")).to_have_text(f"Step {at} of {len(other_steps) - 1}")
    expect(page.locator("#guess-tree .guess-node")).to_have_count(len(other[at]["nodes"]) - 1)
    assert page.errors == []
    page.close()


@pytest.mark.app
def test_on_a_phone_the_pages_story_is_on_the_first_screen_and_nothing_overflows(served):
    from playwright.sync_api import expect

    page = app_page(served, viewport=PHONE)
    expect(page.locator("#story-text")).not_to_be_empty(timeout=HANG_MS)
    page.wait_for_timeout(500)  # Plotly sizes its figures to the column
    page.evaluate("window.scrollTo(0, 0)")
    for sel in ("#story", "#story-next", "#predict"):
        box = page.locator(sel).bounding_box()
        assert box and 0 <= box["y"] and box["y"] + box["height"] <= PHONE["height"], (sel, box)
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]  # no sideways scrolling
    page.locator("#story-next").click()
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    page.locator("#dashboard").click()
    expect(page.locator("#controls-toggle")).to_be_visible()
    page.wait_for_timeout(500)
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    page.close()


@pytest.mark.app
def test_the_tours_card_stays_in_view_beside_each_stop(served):
    from playwright.sync_api import expect

    from components.tour import load_tour

    stops = load_tour()
    page = app_page(served)
    page.locator("#tour").click()
    text = page.locator("#tour-text")
    for n, stop in enumerate(stops, 1):
        if n > 1:
            page.locator("#tour-next").click()
        expect(text).to_contain_text(f"stop {n} of {len(stops)}", timeout=HANG_MS)
        expect(page.locator(f"#{stop.view}.esp-spotlight")).to_have_count(1, timeout=HANG_MS)
        page.wait_for_timeout(800)  # the scroll to the view
        card = page.locator("#tour-panel").bounding_box()
        view = page.locator(f"#{stop.view}").bounding_box()
        assert 0 <= card["y"] and card["y"] + card["height"] <= DESKTOP["height"], (n, card)
        assert view["y"] < DESKTOP["height"] and view["y"] + view["height"] > 0, (n, stop.view, view)
    assert page.errors == []
    page.close()

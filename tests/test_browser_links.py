"""Issue 37 in a real browser: the page opens on an ESP run (no model call), a click or a key on a token, a tree
node or an attention row focuses it in every view, a link made from a run done on the page reproduces it in a
fresh browser, and a crafted link is refused in one line with no markup. One server, in-process; the model is
loaded only by the last test, which runs it. Timeouts are hang guards, never a measure."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from app_server import serve

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
pytestmark = [pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed"),
              pytest.mark.browser]
HANG_MS = 60_000
MASKS = json.loads((ROOT / "assets" / "trace_masks.json").read_text())
VIEWPORT = {"width": 1280, "height": 1000}
STATUS = "#status [data-testid=markdown]"  # the status line itself, not its progress overlay


@pytest.fixture(scope="module")
def url(loads):
    with serve("local") as address:
        yield address.rstrip("/") + "/"


@pytest.fixture
def fresh(browser, url):
    """fresh(query): a page in a browser context of its own (no storage, no clipboard) opened at url + query,
    once the page's script is there."""
    contexts = []

    def open_page(query: str = ""):
        context = browser.new_context(viewport=VIEWPORT)
        contexts.append(context)
        page = context.new_page()
        page.goto(url + query)
        page.wait_for_function("() => window.espExplorer?.linked === true", timeout=HANG_MS)
        return page

    yield open_page
    for context in contexts:
        context.close()


def expect_step(page, n: int) -> None:
    from playwright.sync_api import expect

    expect(page.locator("#tree-plot .gtitle")).to_contain_text(f"step {n}", timeout=HANG_MS)
    expect(page.locator("#scrub input[type=range]")).to_have_value(str(n), timeout=HANG_MS)


def opening() -> dict:
    """The run the page opens on (explorer.calls.OPENING), as shipped."""
    from explorer.calls import OPENING

    return json.loads((ROOT / "assets" / f"{OPENING}.json").read_text())


def text_shown(page) -> str:
    """The generated text as the text view shows it (its tokens up to the shown step, in order)."""
    return page.evaluate("() => [...document.querySelectorAll('#text-view span[data-step]:not([hidden]) > .token')]"
                         ".map((t) => t.textContent).join('')")


def token_button(page, text: str, nth: int):
    """The `nth` token of the text view that reads exactly `text` (the player's token buttons, in order)."""
    buttons = page.locator("#text-view .token[role=button]")
    texts = buttons.evaluate_all("(all) => all.map((t) => t.textContent)")
    return buttons.nth([i for i, t in enumerate(texts) if t == text][nth])


def drawn(page, selector: str) -> None:
    """Scroll the player's view `selector` into view (the player draws a view once it is on screen) and wait
    until it is drawn."""
    page.locator(selector).scroll_into_view_if_needed()
    page.wait_for_function(f"() => document.querySelector('{selector} .js-plotly-plot')?._fullLayout", timeout=HANG_MS)


def test_the_page_opens_on_an_esp_run_with_its_alignment_and_prompt_and_no_model_call(fresh, loads):
    from playwright.sync_api import expect

    from explorer.calls import OPENING

    from components.story import story_step

    page = fresh()
    opened = opening()
    page.locator("#dashboard").click()  # the first screen tells the run's story; the dashboard is one click away
    expect_step(page, story_step(opened["steps"]))  # at the step its story tells
    expect(page.locator("#status")).to_contain_text(f"recorded: {OPENING}.json")
    expect(page.locator("#method input")).to_have_value("esp")
    expect(page.locator("#prompt textarea")).to_have_value(opened["meta"]["prompt"])  # the prompt box too
    drawn(page, "#align-plot")
    drawn(page, "#lens-plot")
    curves = page.evaluate("() => (document.querySelector('#align-plot .js-plotly-plot')?.data || [])"
                           ".filter((t) => (t.y || []).some((y) => y !== null)).length")
    assert curves >= 2, "the alignment is empty"
    grid = page.evaluate("() => (document.querySelector('#lens-plot .js-plotly-plot')?.data || [])"
                         ".filter((t) => t.type === 'heatmap' && (t.z || []).length > 0).length")
    assert grid == 1, "the Mask Lens grid is empty"
    assert f"trace={OPENING}" in page.evaluate("location.search")
    assert not loads, "a model was loaded"


def test_a_click_on_a_token_goes_to_the_step_that_emitted_it_and_focuses_its_node(fresh):
    from playwright.sync_api import expect

    page = fresh("?trace=trace_masks")
    step = MASKS["steps"][13]  # emitted ' ', '5', '\n': two accepted drafts (nodes 1 and 9), then the bonus
    node = next(n["index"] for n in step["nodes"] if n["status"] == "accepted" and n["depth"] == 2)
    token_button(page, "5", 1).click()  # the first '5' is step 11's bonus; the second, step 13's draft
    expect_step(page, 13)
    note = page.locator("#focus-note")
    expect(note).to_contain_text("is an accepted draft of step 13", timeout=HANG_MS)
    expect(note).to_contain_text(f"Node {node} ")
    expect(page.locator("#focus select")).to_have_value(str(node))
    page.wait_for_function("() => location.search.includes('step=13')", timeout=HANG_MS)


def test_keys_reach_the_tokens_and_the_tree_nodes(fresh):
    from playwright.sync_api import expect

    page = fresh("?trace=trace_masks&step=24")
    expect(page.locator("#keys-help")).to_contain_text("Enter to go to the step that wrote one")
    first = page.locator("#text-view .token[role=button]").first
    first.focus()
    page.keyboard.press("ArrowRight")  # token 1 ('.', step 1): the tokens' own key, not the next step
    page.keyboard.press("ArrowRight")  # token 2 (' ', step 2's accepted draft)
    assert page.evaluate("document.activeElement.textContent") == " "
    page.keyboard.press("Enter")
    expect_step(page, 2)
    expect(page.locator("#focus-note")).to_contain_text("is an accepted draft of step 2", timeout=HANG_MS)

    tree = page.locator("#tree-plot")
    tree.focus()
    page.keyboard.press("ArrowRight")  # the cursor on node 0, then node 1
    page.keyboard.press("ArrowRight")
    expect(page.locator("#tree-cursor")).to_contain_text("Node 1")
    assert page.locator("#tree-plot .esp-cursor").count() == 1
    page.keyboard.press("Enter")
    expect(page.locator("#focus-note")).to_contain_text("Node 1 ", timeout=HANG_MS)
    expect_step(page, 2)  # the arrows moved the cursor, not the step


def hover_click(page, plot: str, at: dict, row: int | None = None) -> None:
    """Move the mouse to `at` on figure `plot`, wait until Plotly has the point under it (a click goes to the point
    last hovered: a busy machine computes the hover later than the move, and a hover from before the move can land
    after it: with `row`, wait for a point of that heatmap row), then click."""
    page.evaluate(f"() => {{ document.querySelector('{plot} .js-plotly-plot')._hoverdata = null; }}")
    page.mouse.move(at["x"], at["y"])
    page.wait_for_function(f"""(row) => (document.querySelector('{plot} .js-plotly-plot')._hoverdata || [])
        .some((p) => row === null || (Array.isArray(p.pointNumber) && p.pointNumber[0] === row))""", arg=row,
                           timeout=HANG_MS)
    page.mouse.click(at["x"], at["y"])


def click_row(page, row: int) -> None:
    """Click the middle of block row `row` of the attention figure (a category axis: row r is category r)."""
    at = page.evaluate("""(r) => {
        const p = document.querySelector('#mask-plot .js-plotly-plot'), box = p.getBoundingClientRect();
        const x = p._fullLayout.xaxis, y = p._fullLayout.yaxis;
        return {x: box.left + x._offset + x._length / 2, y: box.top + y._offset + y.l2p(r)}; }""", row)
    hover_click(page, "#mask-plot", at, row)


def test_a_click_on_an_attention_row_focuses_its_node(fresh):
    from playwright.sync_api import expect

    page = fresh("?trace=trace_masks&step=13")
    expect_step(page, 13)
    labels = MASKS["steps"][13]["row_labels"]
    page.locator("#mask-plot").scroll_into_view_if_needed()
    click_row(page, labels.index("node 2:6"))
    note = page.locator("#focus-note")
    expect(note).to_contain_text("Node 2 ", timeout=HANG_MS)
    page.wait_for_function("() => (document.querySelector('#mask-plot .js-plotly-plot')?.layout.shapes || [])"
                           ".length > 0", timeout=HANG_MS)  # redrawn with the focus outlined
    click_row(page, labels.index("mask 4.1"))  # a mask's row: the node it was fed for
    expect(note).to_contain_text("Node 4 ", timeout=HANG_MS)


CRAFTED = [
    ("?prompt=hi&k=99", "k must be at most 4, not 99."),
    ("?prompt=hi&k=two&step=3", "k must be a number, not 'two'."),
    ("?prompt=hi&method=%3Cimg%20src%3Dx%20onerror%3D%22window.pwned%3D1%22%3E", "Unknown method '<img src=x"),
    ("?prompt=hi&model=meta-llama%2FLlama-3.2-1B-Instruct", "does not offer the model 'meta-llama/Llama-3.2-1B"),
    ("?prompt=%3Cscript%3Ewindow.pwned%3D1%3C%2Fscript%3E&max_new=%5Bb%5D(javascript%3Aalert(1))",
     "max new tokens must be a number, not '[b](javascript:alert(1))'."),
]


@pytest.mark.parametrize("query, says", CRAFTED)
def test_a_crafted_link_is_refused_in_one_line_with_no_markup(fresh, query, says):
    from playwright.sync_api import expect

    from explorer.calls import OPENING

    page = fresh(query)
    status = page.locator(STATUS)
    expect(status).to_contain_text("This link was refused: ", timeout=HANG_MS)
    line = status.inner_text().strip()
    assert says in line and "\n" not in line and line.startswith("⚠️")
    assert f"recorded: {OPENING}.json" in line  # the page opened as if the link named no run
    assert page.locator("#status img, #status script, #status a, #status b").count() == 0
    assert page.evaluate("window.pwned") is None and "Traceback" not in page.content()
    expect(page.locator("#prompt textarea")).to_have_value(opening()["meta"]["prompt"])  # nothing of the link kept
    page.wait_for_function(f"() => location.search.includes('trace={OPENING}')", timeout=HANG_MS)
    assert "prompt=" not in page.evaluate("location.search")


def test_a_prompt_with_markup_is_text_in_the_prompt_box(fresh):
    from playwright.sync_api import expect

    page = fresh("?prompt=%3Cb%3Ebold%3C%2Fb%3E%20%5Bx%5D(javascript%3Ax)&method=pld&max_new=16")
    expect(page.locator(STATUS)).to_contain_text("press Run to reproduce this run", timeout=HANG_MS)
    expect(page.locator("#prompt textarea")).to_have_value("<b>bold</b> [x](javascript:x)")
    expect(page.locator("#method input")).to_have_value("pld")
    assert page.locator("#status b").count() == 0 and page.locator("#status strong").count() == 1  # **Run**
    assert "prompt=" in page.evaluate("location.search")  # the link stays, to be run


def test_an_uploaded_trace_says_it_has_no_link(fresh):
    from playwright.sync_api import expect

    page = fresh("?trace=trace_masks&step=3")
    page.get_by_role("tab", name="Open a trace").click()
    page.locator("#trace-file input[type=file]").set_input_files(str(ROOT / "assets" / "trace_copy.json"))
    expect(page.locator("#status")).to_contain_text("recorded: trace_copy.json", timeout=HANG_MS)
    expect(page.locator("#link-note")).to_contain_text("opened from a file", timeout=HANG_MS)
    page.wait_for_function("() => !/trace=|step=/.test(location.search)", timeout=HANG_MS)
    page.locator("#copy-link").click()
    expect(page.locator("#copy-link")).to_contain_text("No link")


def set_number(page, elem_id: str, value: int) -> None:
    box = page.locator(f"#{elem_id} input[type=number]")
    box.fill(str(value))
    box.press("Enter")


def run_to_done(page) -> None:
    """Press Run and wait for this run's end (its status, then the link it is given)."""
    page.evaluate("window.espExplorer.run = null")
    page.locator("#run").click()
    page.wait_for_function(f"() => document.querySelector('{STATUS}').innerText.includes('Done') "
                           "&& typeof window.espExplorer.run === 'string' && window.espExplorer.run !== ''",
                           timeout=5 * HANG_MS)


def choose(page, elem_id: str, value: str) -> None:
    """Pick `value` in a dropdown."""
    page.locator(f"#{elem_id} input").click()
    page.get_by_role("option", name=value, exact=True).click()


@pytest.mark.model
def test_a_link_made_from_a_run_reproduces_it_in_a_fresh_browser(fresh, lm):
    from playwright.sync_api import expect

    page = fresh()
    page.locator("#dashboard").click()
    # The opened run fills the controls once it is shown: edits made before that would be overwritten.
    expect(page.locator("#prompt textarea")).to_have_value(opening()["meta"]["prompt"], timeout=HANG_MS)
    choose(page, "model", "embedded")  # the opened run filled in its own model, too big to run here
    page.locator("#prompt textarea").fill("Count from 1 to 9, separated by commas.")
    set_number(page, "k", 1)
    set_number(page, "bc", 12)
    page.get_by_text("Decoding", exact=True).click()
    set_number(page, "max-new", 16)
    expect(page.locator("#settings-note")).to_contain_text("BC=12", timeout=HANG_MS)
    expect(page.locator("#max-new input[type=number]")).to_have_value("16")
    run_to_done(page)
    last = int(re.search(r"(\d+) steps", page.locator(STATUS).inner_text()).group(1)) - 1
    whole = text_shown(page)
    page.locator("#prev").click()  # the link keeps the shown step
    expect_step(page, last - 1)
    page.wait_for_function(f"() => location.search.includes('step={last - 1}')", timeout=HANG_MS)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.locator("#copy-link").click()  # the button copies the address: the run's recipe and the step
    expect(page.locator("#copy-link")).to_contain_text("Copied", timeout=HANG_MS)
    link, status, text = page.evaluate("navigator.clipboard.readText()"), page.locator(STATUS).inner_text(), text_shown(page)
    assert link == page.evaluate("location.href")
    assert "prompt=Count+from+1+to+9" in link and "max_new=16" in link and "bc=12" in link

    other = fresh(link.split("/", 3)[3])  # the same address, in a browser context of its own
    expect(other.locator(STATUS)).to_contain_text("press Run to reproduce this run", timeout=HANG_MS)
    expect(other.locator("#prompt textarea")).to_have_value("Count from 1 to 9, separated by commas.")
    expect(other.locator("#method input")).to_have_value("esp")
    expect(other.locator("#model input")).to_have_value("embedded")
    expect(other.locator("#k input[type=number]")).to_have_value("1")
    expect(other.locator("#bc input[type=number]")).to_have_value("12")
    other.get_by_text("Decoding", exact=True).click()
    expect(other.locator("#max-new input[type=number]")).to_have_value("16")
    run_to_done(other)
    expect_step(other, last - 1)  # the link's step, once its own run is done
    assert other.locator(STATUS).inner_text() == status and text_shown(other) == text
    other.locator("#next").click()
    expect_step(other, last)
    assert text_shown(other) == whole  # the same tokens, to the last


def test_every_view_draws_with_no_script_error_as_the_steps_go(fresh, url):
    """Each figure of the Run tab, at steps with and without lens data, is drawn by Plotly (a figure Plotly
    rejects, such as a strip too short for its colour bar, leaves its box empty and throws on the page)."""
    page = fresh("?trace=trace_masks")
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    for step in (0, 3, 13):
        page.goto(f"{url}?trace=trace_masks&step={step}")
        expect_step(page, step)
        for view in ("tree-plot", "mask-plot", "eye-plot", "align-plot", "lens-plot", "lens-rank-plot", "commit-plot"):
            drawn(page, f"#{view}")
            page.wait_for_selector(f"#{view} .gtitle", state="attached", timeout=HANG_MS)
    assert errors == []


def point_at(page, plot: str, find: str) -> dict:
    """Viewport coordinates of the first point of figure `plot` whose customdata `find` (a JS predicate on one
    point's customdata) accepts: a scatter's points, or a heatmap's cells (customdata by row, then column)."""
    drawn(page, plot)
    at = page.evaluate("""([sel, find]) => {
        const p = document.querySelector(sel + ' .js-plotly-plot'), box = p.getBoundingClientRect();
        const pick = eval(find);
        for (const t of p._fullData) {
            const xa = p._fullLayout[t.xaxis.replace('x', 'xaxis')], ya = p._fullLayout[t.yaxis.replace('y', 'yaxis')];
            const where = (x, y) => ({x: box.left + xa._offset + xa.l2p(x), y: box.top + ya._offset + ya.l2p(y)});
            const cd = t.customdata || [];
            if (t.type === 'heatmap') {
                for (let r = 0; r < cd.length; r++) for (let c = 0; c < cd[r].length; c++)
                    if (pick(cd[r][c])) return where(c, t.y[r]);
            } else {
                for (let i = 0; i < cd.length; i++) if (pick(cd[i])) return where(t.x[i], t.y[i]);
            }
        }
        return null; }""", [plot, find])
    assert at, (plot, find)
    return at


def test_hovering_a_tree_node_shows_the_verifiers_bars_with_the_drafts_rank(fresh):
    from playwright.sync_api import expect

    from explorer.calls import OPENING

    opened = opening()
    hover = "#tree-plot .hoverlayer"
    # A node on the accepted path (rank 1), and a draft that lost (the tour's eye stop: ' sunlight', rank 3).
    for step_no, pick in ((7, lambda n: n["status"] == "accepted" and n["depth"] == 1),
                          (6, lambda n: n["status"] == "rejected" and n["target_rank"] == 3)):
        node = next(n for n in opened["steps"][step_no]["nodes"] if pick(n))
        page = fresh(f"?trace={OPENING}&step={step_no}")
        expect_step(page, step_no)
        at = point_at(page, "#tree-plot", f"(d) => Array.isArray(d) && d[4] === {node['index']}")
        page.mouse.move(at["x"], at["y"])
        expect(page.locator(hover)).to_contain_text(f"verifier: this draft is rank {node['target_rank']}",
                                                    timeout=HANG_MS)
        expect(page.locator(hover)).to_contain_text("◀ this draft")  # its bar among the model's top choices
        assert re.search("[█▏▎▍▌▋▊▉]", page.locator(hover).text_content())  # an SVG group: no inner_text


def test_a_click_on_a_lens_cell_focuses_its_node_in_every_view(fresh):
    from playwright.sync_api import expect

    from components.common import as_step, walk_end

    opened = opening()
    step = as_step(opened["steps"][1])
    end = walk_end(step).index  # the node whose masks the grid reads
    page = fresh("?trace=trace_qwen15&step=1")
    expect_step(page, 1)
    shapes = "() => (document.querySelector('#mask-plot .js-plotly-plot')?.layout.shapes || []).length"
    before = page.evaluate(shapes)
    at = point_at(page, "#lens-plot", "(d) => Array.isArray(d) && d[2] === 1 && d[3] === 27")  # mask 1, layer 27
    hover_click(page, "#lens-plot", at)
    expect(page.locator("#focus-note")).to_contain_text(f"Node {end} ", timeout=HANG_MS)
    expect(page.locator("#focus select")).to_have_value(str(end))
    page.locator("#mask-plot").scroll_into_view_if_needed()  # drawn with the focus once on screen
    page.wait_for_function(f"() => ({shapes})() > {before}", timeout=HANG_MS)  # the attention rows outlined
    expect_step(page, 1)  # the same step


def test_a_click_on_the_commitment_strip_goes_to_the_step_that_emitted_the_token(fresh):
    from playwright.sync_api import expect

    from components.common import as_steps
    from components.lens_view import commitments

    opened = opening()
    steps = as_steps(opened["steps"])
    last = len(steps) - 1
    k = min(commitments(steps, last))  # the first token accepted from an ESP mask with its lens resolved
    emitted_by = [s.step for s in steps for _ in s.emitted][k]
    page = fresh(f"?trace=trace_qwen15&step={last}")
    expect_step(page, last)
    at = point_at(page, "#commit-plot", f"(d) => Array.isArray(d) && d[1] === {k}")
    hover_click(page, "#commit-plot", at)
    expect(page.locator("#step-label")).to_have_text(f"Step {emitted_by} of {last}", timeout=HANG_MS)
    page.locator("#tree-plot").scroll_into_view_if_needed()  # the tree, drawn at that step once on screen
    expect_step(page, emitted_by)
    expect(page.locator("#focus-note")).to_contain_text(f"is an accepted draft of step {emitted_by}", timeout=HANG_MS)

"""The lecture file: one standalone HTML player of a run, built from a shipped trace, that plays through
every step from disk with the network off (in Debian's chromium through Playwright, when installed)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from components.export import read_trace_json
from components.frames import markdown_html
from components.lecture import lecture_html, write_lecture
from components.step_words import step_words

from lens_trace import without_lens

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "assets" / "trace_copy.json"  # 5 steps: a short play-through
# A shipped run with the Mask Lens and the verifier's eye (the one the page opens on), and one recorded without.
LENS_TRACE = ROOT / "assets" / "trace_qwen15.json"
PLAIN_TRACE = ROOT / "tests" / "data" / "trace_k2_bc30.json"
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def run():
    return read_trace_json(TRACE)


def embedded(page: str, name: str):
    """The JSON of the page's `esp-<name>` data element, as the page's script reads it."""
    return json.loads(re.search(f'<script type="application/json" id="esp-{name}">(.*?)</script>', page, re.S).group(1))


def _frames(page: str) -> list[dict]:
    return embedded(page, "run")["frames"]


def test_builds_every_step_with_no_external_reference(run):
    meta, steps = run
    page = lecture_html(steps, meta)
    frames = _frames(page)
    assert len(frames) == len(steps)
    for f, s in zip(frames, steps):
        assert f["tree"]["layout"]["title"]["text"].startswith(f"Draft tree · step {s.step}")
        assert f["mask"]["layout"]["title"]["text"].startswith(f"Attention pattern · step {s.step}")
        # trace_copy records the lens (scripts/record_traces.py): every step carries both figures
        assert f["eye"][0]["layout"]["title"]["text"].startswith(f"The verifier's eye · step {s.step}")
        assert f["lens"]["layout"]["title"]["text"].startswith(f"Mask Lens · step {s.step}")
        assert f["words"] == markdown_html(step_words(s, meta))
    assert set(embedded(page, "run")["views"]) == {"cost", "timing", "hist", "align", "lens_rank", "commit"}
    assert all(f["eye"] is None and f["lens"] is None  # recorded without the lens: the page says so instead
               for f in _frames(lecture_html(without_lens(steps), meta)))
    assert re.search(r"<script[^>]*\bsrc=", page) is None and "<link" not in page  # nothing to fetch
    assert "Plotly" in page and f'max="{len(steps) - 1}"' in page


def test_markdown_is_escaped():
    assert markdown_html("**Step 1** fed `<b>` & more") == "<b>Step 1</b> fed <code>&lt;b&gt;</code> &amp; more"


def test_no_steps_refused(run):
    with pytest.raises(ValueError, match="at least one step"):
        lecture_html([], run[0])


@pytest.mark.browser
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed")
def test_plays_from_disk_offline(run, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    meta, steps = run
    path = write_lecture(steps, meta, tmp_path / "lecture.html")
    last = len(steps) - 1
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        context = browser.new_context()
        context.set_offline(True)
        requested = []
        context.route(re.compile(r"^https?://"), lambda route: (requested.append(route.request.url), route.abort()))
        page = context.new_page()
        page.goto(path.as_uri())
        expect = sync_api.expect
        expect(page.locator("#step-label")).to_have_text(f"Step 0 of {last}")
        expect(page.locator("[data-figure=tree] .main-svg").first).to_be_visible()
        page.locator("#play").click()
        expect(page.locator("#play")).to_contain_text("Pause")
        expect(page.locator("#step-label")).to_have_text(f"Step {last} of {last}", timeout=15_000)
        expect(page.locator("#play")).to_contain_text("Play")  # stopped at the last step
        assert page.locator("#scrub").input_value() == str(last)
        assert f"step {last}" in page.locator("[data-figure=tree] .gtitle").text_content()
        page.locator("body").press("ArrowLeft")
        expect(page.locator("#step-label")).to_have_text(f"Step {last - 1} of {last}")
        page.locator("body").press("ArrowRight")
        expect(page.locator("#step-label")).to_have_text(f"Step {last} of {last}")
        assert requested == []
        browser.close()


@pytest.fixture(scope="module")
def lens_run():
    return read_trace_json(LENS_TRACE)


def test_every_step_carries_its_lens_and_eye(lens_run):
    meta, steps = lens_run
    frames = _frames(lecture_html(steps, meta))
    for f, s in zip(frames, steps):
        assert f["eye"][0]["layout"]["title"]["text"].startswith(f"The verifier's eye · step {s.step}")
        lens = f["lens"]["layout"]
        assert lens["title"]["text"].startswith(f"Mask Lens · step {s.step}")
        assert s.lens and [t for t in f["lens"]["data"] if t["type"] == "heatmap"]  # a grid at every step


@pytest.mark.browser
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed")
def test_the_lens_of_a_step_shows_from_disk(lens_run, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    meta, steps = lens_run
    path = write_lecture(steps, meta, tmp_path / "lecture.html")
    plain_meta, plain_steps = read_trace_json(PLAIN_TRACE)
    assert not any(s.lens for s in plain_steps)
    plain = write_lecture(plain_steps, plain_meta, tmp_path / "plain.html")
    step = steps[1]  # its first mask turns to ' blue', the token that came, from layer 24 on (assets/tour.json)
    first = next(r for r in step.lens if r.j == 1)
    came = first.texts[first.tokens[-1][0]]
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        context = browser.new_context()
        context.set_offline(True)
        page = context.new_page()
        page.goto(path.as_uri())
        expect = sync_api.expect
        expect(page.locator("[data-figure=tree] .main-svg").first).to_be_visible()  # it opens on the story's step
        page.locator("#scrub").fill(str(step.step))
        expect(page.locator("[data-figure=lens] .gtitle")).to_contain_text(f"Mask Lens · step {step.step}")
        cells = sum(len(r.tokens) for r in step.lens)
        assert page.locator("[data-figure=lens] .scatterlayer .textpoint").count() == cells  # a decoded token per layer and mask
        assert page.locator("[data-figure=lens] .scatterlayer .textpoint").filter(has_text=came.strip()).count() >= 5
        expect(page.locator("[data-figure=eye] .gtitle")).to_contain_text(f"The verifier's eye · step {step.step}")
        assert page.locator("#lens-note").is_hidden() and page.locator("#eye-note").is_hidden()
        page.goto(plain.as_uri())  # recorded without the lens: one line says so
        expect(page.locator("#lens-note")).to_be_visible()
        expect(page.locator("#lens-note")).to_contain_text("No Mask Lens in this trace")
        expect(page.locator("#eye-note")).to_contain_text("No verifier's eye in this trace")
        browser.close()

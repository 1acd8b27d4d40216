"""esp.show (issue 41): the notebook widget plays a shipped trace and a fresh esp.decode run with the app's own
step views (its data checked against what the app's page gets for the same run: explorer/views.py); bad input gets one line; outside a
notebook it writes the lecture file and says where; the widget's HTML export plays from disk offline; the
example notebook runs headless."""
from __future__ import annotations

import base64
import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import esp
import esp.notebook
from components import plotly_bundle
from components.lecture import lecture_html
from components.notebook import export_html, runs_of
from conftest import ROOT
from esp.errors import ESPError
from explorer.session import Session
from explorer.views import opened

TRACE = ROOT / "assets" / "trace_copy.json"  # 5 steps
MASKS = ROOT / "assets" / "trace_masks.json"
NOTEBOOK = ROOT / "docs" / "examples" / "notebook.ipynb"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


@pytest.fixture
def kernel(monkeypatch):
    """As in a notebook kernel: esp.show returns the widget."""
    monkeypatch.setattr(esp.notebook, "in_notebook", lambda: True)


def assert_matches_app(run: dict, steps, meta, i: int):
    """Step i of a widget run is the frame the app's page gets for it (explorer.views.opened), and the run's
    views are the page's."""
    app = opened(Session(steps=steps, meta=meta))
    assert run["frames"][i] == json.loads(json.dumps(app["frames"][i]))
    assert run["views"] == json.loads(json.dumps(app["views"])) and run["legend"] == app["legend"]


def test_the_widget_bundle_of_a_shipped_trace_holds_the_apps_views(kernel):
    player = esp.show(TRACE)
    data, _ = player._repr_mimebundle_()
    assert data[WIDGET_MIME]["model_id"] == player.model_id
    state = player.get_state()
    assert "function espPlayer(" in state["_esm"] and "export default { render }" in state["_esm"]
    # The players' Plotly.js inside: nothing to fetch
    assert gzip.decompress(base64.b64decode(state["plotly"])).decode() == plotly_bundle.source()
    assert state["version"] == plotly_bundle.VERSION
    (run,) = state["runs"]
    meta, steps = esp.notebook.views("export").read_trace_json(TRACE)
    assert len(run["frames"]) == len(steps) and f'max="{len(steps) - 1}"' in run["markup"]
    for i in (0, 2, len(steps) - 1):
        assert_matches_app(run, steps, meta, i)
    assert "Not recorded" not in run["markup"]  # the app's traces hold every view's data


def test_several_runs_play_side_by_side_with_their_labels(kernel):
    player = esp.show({"copy <b>": TRACE, "masks": MASKS})
    labels = [r["label"] for r in player.runs]
    assert labels == ["copy <b>", "masks"] and "<b>copy &lt;b&gt;</b>" in player.runs[0]["markup"]
    assert [len(r["frames"]) for r in player.runs] == [5, len(json.loads(MASKS.read_text())["steps"])]


@pytest.mark.model
def test_a_fresh_decode_plays_with_the_apps_views_and_names_what_it_did_not_record(kernel, tiny_lm):
    model = tiny_lm("llama").model
    ids = list(range(3, 23))
    plain = esp.decode(model, None, ids, method="esp:k=2:bc=12", max_new_tokens=10)
    masked = esp.decode(model, None, ids, method="esp:k=2:bc=12", max_new_tokens=10, trace_mask=True)
    assert plain.tokens == masked.tokens and not any(s.mask for s in plain.steps) and all(s.mask for s in masked.steps)
    player = esp.show([plain, masked])
    for run, result in zip(player.runs, (plain, masked)):
        (shown,) = runs_of(result)
        assert len(run["frames"]) == len(result.steps)
        for i in range(len(result.steps)):
            assert_matches_app(run, result.steps, shown.meta, i)
    assert "Not recorded in this run: the attention mask (record it with esp.decode(..., trace_mask=True))" \
        in player.runs[0]["markup"]
    assert "Not recorded" not in player.runs[1]["markup"]
    assert "did not record masks" in json.dumps(player.runs[0]["frames"][1]["mask"])  # the view says so too


@pytest.mark.model
def test_stream_traces_and_a_sampled_run(kernel, tiny_lm):
    model = tiny_lm("qwen2").model
    ids = [[5, 6, 7, 8, 9, 10], [11, 12, 13, 14]]
    batch = esp.show(esp.stream(model, None, ids, method="pld", max_new_tokens=6))
    assert [r["label"] for r in batch.runs] == ["pld · prompt 0", "pld · prompt 1"]
    single = esp.show(esp.stream(model, None, ids[0], method="pld", max_new_tokens=6))
    assert len(single.runs) == 1 and len(single.runs[0]["frames"]) >= 2
    sampled = esp.decode(model, None, ids[0], method="esp", max_new_tokens=6, temperature=0.8, seed=3)
    assert "sampled with seed 3" in esp.show(sampled).runs[0]["frames"][1]["words"]


def _crafted(tmp_path: Path, change) -> Path:
    trace = json.loads(TRACE.read_text())
    change(trace)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(trace))
    return path


@pytest.mark.parametrize("value,needle", [
    (3, "not int"),
    ([], "got no run"),
    ([TRACE, 3], "not int"),
    ({"a": {"b": TRACE}}, "not dict"),
    (b"{}", "not bytes"),
    ("no-such-trace.json", "Cannot read the trace no-such-trace.json"),
    (ROOT / "README.md", "README.md is not an ESP Explorer trace (it is not JSON"),
])
def test_bad_input_is_refused_with_one_line(value, needle):
    with pytest.raises(ESPError) as e:
        esp.show(value)
    assert needle in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("change,needle", [
    (lambda t: t["steps"][1]["nodes"][1].update(status="bogus"), "steps[1].nodes[1].status: input should be"),
    (lambda t: t.update(steps="many"), "steps"),
    (lambda t: t["steps"][2]["nodes"][0].update(parent=5), "node 0"),
])
def test_a_trace_failing_the_schema_is_refused_as_the_app_refuses_it(tmp_path, change, needle):
    with pytest.raises(ESPError) as e:
        esp.show(_crafted(tmp_path, change))
    assert str(e.value).startswith("bad.json is not an ESP Explorer trace (") and needle in str(e.value)
    assert "\n" not in str(e.value)


def test_a_result_without_traces_and_a_list_mixing_traces_are_refused():
    meta, steps = esp.notebook.views("export").read_trace_json(TRACE)
    empty = esp.Result([], "", [], esp.notebook.views("stats").run_summary(steps), [1, 2], False)
    with pytest.raises(ESPError, match="This Result holds no step traces"):
        esp.show(empty)
    with pytest.raises(ESPError, match="not list mixing StepTraces with other things"):
        esp.show([steps[0], TRACE])


def test_outside_a_notebook_it_writes_the_lecture_file_and_says_where(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    path = esp.show(TRACE)
    assert path.parent == tmp_path and path.name.startswith("esp-lecture-") and path.suffix == ".html"
    assert capsys.readouterr().out.splitlines() == [
        f"esp.show: no notebook here, so the player went to a file; open it in a browser: {path}"]
    meta, steps = esp.notebook.views("export").read_trace_json(TRACE)
    assert path.read_text() == lecture_html(steps, meta)  # the lecture file, as the app exports it
    two = esp.show([TRACE, MASKS], path=tmp_path / "two.html")
    assert two.read_text() == export_html(esp.notebook.views("notebook").widget_state(runs_of([TRACE, MASKS])))
    with pytest.raises(ESPError, match="Cannot write the player to"):
        esp.show(TRACE, path=tmp_path / "no-such-folder" / "x.html")


def test_a_run_missing_the_mask_says_so_in_the_file_case_too(tmp_path, capsys):
    path = _crafted(tmp_path, lambda t: [s.update(mask=[]) for s in t["steps"]])
    esp.show(path, path=tmp_path / "out.html")
    assert "not recorded in this run: the attention mask (record it with esp.decode(..., trace_mask=True))" \
        in capsys.readouterr().out


def test_import_esp_loads_no_view_library():
    code = ("import sys, esp; bad = [m for m in ('plotly', 'gradio', 'anywidget', 'IPython', 'networkx', 'pydantic', "
            "'components') if m in sys.modules]; print(bad)")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr[-1000:]


def test_without_the_notebook_extra_it_names_what_to_install():
    code = ("import sys; sys.modules['anywidget'] = None; import esp, esp.notebook as nb; nb.in_notebook = lambda: True\n"
            "try:\n    esp.show(%r)\nexcept esp.ESPError as e:\n    print(e)" % str(TRACE))
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.stdout.strip() == "esp.show needs anywidget: pip install 'esp-explorer[notebook]'.", r.stderr[-1000:]


# ------------------------------------------------------------------- the widget's HTML export, in a browser

@pytest.mark.browser
@pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="/usr/bin/chromium is not installed")
def test_the_widget_export_plays_from_disk_offline(browser, tmp_path, monkeypatch):
    from playwright.sync_api import expect

    monkeypatch.setattr(esp.notebook, "in_notebook", lambda: True)
    path = esp.show({"copy": TRACE, "masks": MASKS}).save_html(tmp_path / "widget.html")
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_offline(True)
    requested, errors = [], []
    context.route(re.compile(r"^(https?|wss?)://"), lambda route: (requested.append(route.request.url), route.abort()))
    page = context.new_page()
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.as_uri())
    first, second = page.locator(".esp-player").nth(0), page.locator(".esp-player").nth(1)
    last = 4
    expect(first.locator("#step-label")).to_have_text(f"Step 0 of {last}", timeout=20_000)
    expect(first.locator("[data-figure=tree] .main-svg").first).to_be_visible()
    expect(second.locator("#step-label")).to_have_text(re.compile(r"Step 0 of \d+"))
    first.locator("#next").click()
    expect(first.locator("#step-label")).to_have_text(f"Step 1 of {last}")
    assert "step 1" in first.locator("[data-figure=tree] .gtitle").text_content()
    first.locator("#step-label").click()  # the player takes the focus: the arrow keys are its own
    page.keyboard.press("ArrowRight")
    expect(first.locator("#step-label")).to_have_text(f"Step 2 of {last}")
    first.locator("#play").click()
    expect(first.locator("#step-label")).to_have_text(f"Step {last} of {last}", timeout=15_000)
    expect(first.locator("#play")).to_contain_text("Play")
    expect(first.locator("[data-figure=mask] .main-svg").first).to_be_visible()
    expect(second.locator("#step-label")).to_have_text(re.compile(r"Step 0 of "))  # the other player kept still
    second.locator("#next").click()
    expect(second.locator("#step-label")).to_have_text(re.compile(r"Step 1 of "))
    assert requested == [] and errors == []
    context.close()


# ------------------------------------------------------------------- the example notebook

def test_the_example_notebook_is_committed_without_outputs():
    nb = json.loads(NOTEBOOK.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code and all(c["outputs"] == [] and c["execution_count"] is None for c in code)
    assert any("esp.show(" in "".join(c["source"]) for c in code)


@pytest.mark.model
@pytest.mark.slow
def test_the_example_notebook_runs_headless_offline(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the kernel imports esp from this checkout
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
                            ).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    widgets = [o for o in outputs if WIDGET_MIME in o.get("data", {})]
    assert len(widgets) >= 2  # one run, then two methods side by side
    assert list(tmp_path.iterdir()) == []  # the notebook writes nothing

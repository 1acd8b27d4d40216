"""Opening a recorded trace needs no model: checked in a fresh process where loading one would fail."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.app, pytest.mark.slow]  # a fresh process builds the page and renders every step

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = """
import json
import esp.models.loader
def refuse(*args):
    raise RuntimeError("a model was loaded")
esp.models.loader._load = refuse
import plotly.graph_objects as go
import app
from explorer import calls, views as shown
from explorer.session import Session
app.build_app()
out = {}
for name in calls.TRACES:
    session = Session()
    status, scrub, *views, kept = calls.open_shipped(name, session)
    figures = [v for v in views if isinstance(v, go.Figure)]
    out[name] = {"status": status, "steps": len(session.steps), "figures": len(figures),
                 "empty": sum(not f.data for f in figures), "views": len(views),
                 "lens": any(s.lens for s in session.steps)}
    for i in range(len(session.steps)):  # every step re-renders with every view
        shown.render(session, i)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def opened() -> dict:
    run = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_shipped_traces_render_every_view_without_a_model(opened):
    from explorer.calls import TRACES
    from explorer.views import VIEWS

    assert set(opened) == set(TRACES)
    assert "trace_qwen05" in {p.stem for p in TRACES.values()}  # the paper's lesson: a bigger model
    for name, r in opened.items():
        assert r["status"].startswith("**Done**") and r["steps"] >= 3
        # tree, attention, align, hist, timing, cost, the verifier's eye, the Mask Lens grid, strip and run
        assert r["views"] == len(VIEWS) and r["figures"] == 10
        # At most the alignment of a method without masks is a note, and the lens views of a trace recorded
        # without the lens (each says so in one line).
        assert r["empty"] <= 1 + (0 if r["lens"] else 4), name


def test_shipped_traces_are_small_and_record_masks():
    from explorer.calls import TRACES

    for path in TRACES.values():
        data = json.loads(path.read_text())
        assert path.stat().st_size < 400_000
        assert all(step["mask"] for step in data["steps"])  # the mask view has data at every step
        assert data["meta"]["model_name"] and data["meta"]["prompt_ids"]  # what-if knows its model

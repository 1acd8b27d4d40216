"""Opening a recorded trace needs no model: checked in a fresh process where loading one would fail."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.app, pytest.mark.slow]  # a fresh process builds the page and every step's frame

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = """
import json
import esp.models.loader
def refuse(*args):
    raise RuntimeError("a model was loaded")
esp.models.loader._load = refuse
import plotly.graph_objects as go
import app
from explorer import calls
from explorer.session import Session
app.build_app()
out = {}
for name in calls.TRACES:
    session = Session()
    status, player, kept = calls.open_shipped(name, session)
    figures = {view: v["figure"] for view, v in player["views"].items()}
    for i, frame in enumerate(player["frames"]):  # every step's own views, in its frame
        figures.update({f"{view} {i}": frame[view] for view in ("tree", "mask", "lens") if frame[view]})
        figures.update({f"eye {i}.{row}": fig for row, fig in enumerate(frame["eye"] or [])})
    last = len(player["frames"]) - 1
    shown = {view: f for view, f in figures.items() if " " not in view or view.split(" ")[1] in (str(last), f"{last}.0")}
    empty = {view: f for view, f in shown.items() if not f["data"]}
    out[name] = {"status": status, "steps": len(session.steps), "frames": len(player["frames"]),
                 "views": sorted(player["views"]), "empty": sorted(empty),
                 "unexplained": [v for v, f in figures.items()
                                 if not f["data"] and not any(a.get("text") for a in f["layout"].get("annotations", []))],
                 "lens": any(s.lens for s in session.steps), "stem": calls.TRACES[name].stem}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def opened() -> dict:
    run = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_shipped_traces_render_every_view_without_a_model(opened):
    from explorer.calls import OPENING, TRACES

    assert set(opened) == set(TRACES)
    assert "trace_qwen05" in {p.stem for p in TRACES.values()}  # the paper's lesson: a bigger model
    for name, r in opened.items():
        assert r["status"].startswith("**Done**") and r["steps"] >= 3 and r["frames"] == r["steps"]
        # the run's own views beside each step's tree, attention pattern, verifier's eye and Mask Lens grid
        assert r["views"] == ["align", "commit", "cost", "hist", "lens_rank", "timing"]
        # A view with nothing to draw at the last step says why in a note, never a blank figure: the
        # alignment of a step whose masks have not been resolved yet, the lens of a step that fed no mask at
        # the end of its path, the verifier's row past the end of a run that stopped at its end-of-text.
        assert not r["unexplained"] and len(r["empty"]) <= 3, (name, r["empty"])
        if r["stem"] == OPENING:  # the first screen draws every view: the Mask Lens and the alignment filled
            assert r["lens"] and not r["empty"], r["empty"]


# A shipped trace stays under this many bytes. The largest, trace_qwen15 (30 steps of Qwen2.5-Coder-1.5B), is
# ~510 KB once scripts/record_traces.py has shrunk it: per step a 29-layer Mask Lens of 2 masks (top-5 ids,
# probabilities, texts: ~7 KB) and a 30 x 31 attention mask (~5 KB). The bound is that plus 10%: a trace
# recorded longer or wider than the page needs (more steps, a bigger k or BC) fails here, not in a clone.
MAX_SHIPPED_BYTES = 560_000


def test_shipped_traces_are_small_and_record_masks():
    from explorer.calls import TRACES

    for path in TRACES.values():
        data = json.loads(path.read_text())
        assert path.stat().st_size < MAX_SHIPPED_BYTES, path.name
        assert all(step["mask"] for step in data["steps"])  # the mask view has data at every step
        assert data["meta"]["model_name"] and data["meta"]["prompt_ids"]  # what-if knows its model

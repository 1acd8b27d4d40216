"""esp.show's view side: a run a researcher holds (an esp.decode Result, esp.stream's step traces, a trace file)
as the lecture player's data, for the notebook widget (components/widget.py) or a page of its own.

The widget and its HTML export run the lecture file's own player (components/lecture.py: PLAYER_JS on
PLAYER_MARKUP with components/frames.py run_data, as the app's page does); this module only adds the host around
it: one player per run, side by side, and a line saying what a view lacks when the run did not record it.
"""
from __future__ import annotations

import html
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping

from esp.api import Result
from esp.errors import ESPError
from esp.trace import StepTrace

from . import plotly_bundle
from .export import read_trace_json
from .palette import FOCUS, REJECTED
from .frames import run_data
from .lecture import PERIOD_MS, PLAYER_CSS, PLAYER_JS, fill, packed_plotly, player_markup, script_json
from .stats import run_summary

TAKES = ("esp.show takes a Result of esp.decode (or a list of them), the StepTraces of esp.stream, a trace JSON "
         "file, or a dict of label -> any of these")
# What a view needs that a run may not have recorded (any step holding it is enough), and how to record it.
UNRECORDED: tuple[tuple[str, Callable[[StepTrace], object], str], ...] = (
    ("the attention mask", lambda s: s.mask, "esp.decode(..., trace_mask=True)"),
)
# Widget state keys (synced traitlets), as the export page's stand-in model serves them too.
STATE = ("runs", "plotly", "version", "period")


@dataclass
class Run:
    """One run to play: its label, the meta the views read (model, spec, sampling, prompt), its steps."""

    label: str
    meta: dict
    steps: list[StepTrace]


def runs_of(value: object) -> list[Run]:
    """Every run in `value` (see TAKES), in order; a dict's keys label its runs. ESPError with one line for
    anything else, a run without step traces, or a trace file that fails components/trace_schema.py."""
    if isinstance(value, Mapping):
        runs = [r for label, v in value.items() for r in _runs(v, str(label))]
    else:
        runs = _runs(value, None)
    if not runs:
        raise ESPError(f"esp.show got no run to show: {TAKES}.")
    return runs


def _runs(value: object, label: str | None) -> list[Run]:
    if isinstance(value, Result):
        return [_result(value, label)]
    if isinstance(value, (str, os.PathLike)):
        return [_file(value, label)]
    if isinstance(value, Iterable) and not isinstance(value, (bytes, bytearray, Mapping)):
        items = list(value)  # esp.stream's generator runs to its end here
        if items and all(isinstance(x, StepTrace) for x in items):
            return [_steps(items, label)]
        if items and all(_batch_row(x) for x in items):  # a batch's esp.stream: (prompt index, trace)
            rows: dict[int, list[StepTrace]] = {}
            for i, s in items:
                rows.setdefault(i, []).append(s)
            return [_steps(steps, f"{label or steps[0].method} · prompt {i}") for i, steps in sorted(rows.items())]
        if not any(isinstance(x, StepTrace) for x in items):
            return [r for x in items for r in _runs(x, label)]
    raise ESPError(f"{TAKES}; not {type(value).__name__}"
                   f"{' mixing StepTraces with other things' if isinstance(value, (list, tuple)) else ''}.")


def _batch_row(x: object) -> bool:
    return isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], int) and isinstance(x[1], StepTrace)


def _result(r: Result, label: str | None) -> Run:
    if not r.steps:
        raise ESPError("This Result holds no step traces, so there is nothing to play: pass the Result that "
                       "esp.decode returned.")
    meta = {"spec": r.summary.method, "sampling": asdict(r.sampling), "text": r.text, "prompt_ids": r.prompt_ids}
    if r.model:  # a folder's name rather than its whole path
        meta["model"] = Path(r.model).name or r.model
    return Run(label or r.summary.method, meta, list(r.steps))


def _steps(steps: list[StepTrace], label: str | None) -> Run:
    return Run(label or steps[0].method, {"spec": steps[0].method}, steps)


def _file(path: str | os.PathLike, label: str | None) -> Run:
    name = Path(path).name
    try:
        meta, steps = read_trace_json(path)  # the app's checks and caps, as for an opened trace
    except OSError as e:
        raise ESPError(f"Cannot read the trace {name}: {e.strerror or type(e).__name__}.") from None
    except ValueError as e:
        detail = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        raise ESPError(f"{name} is not an ESP Explorer trace ({detail}): pass a JSON file written by the app's "
                       "Export or components.export.write_trace_json.") from None
    return Run(label or str(meta.get("spec") or name), meta, steps)


def unrecorded(steps: list[StepTrace]) -> list[str]:
    """What this run did not record that a view needs, each with how to record it."""
    return [f"{what} (record it with {how})" for what, has, how in UNRECORDED if not any(has(s) for s in steps)]


def run_head(run: Run) -> str:
    """The run's heading above its player: label, model, totals, prompt, and what it did not record
    (escaped HTML)."""
    s = run_summary(run.steps)
    facts = [run.meta.get("model"), f"{s.tokens} tokens in {s.forwards} forwards", f"τ {s.tau:.2f}"]
    out = [f'<p class="esp-head"><b>{html.escape(run.label)}</b> · '
           + " · ".join(html.escape(str(f)) for f in facts if f) + "</p>"]
    if run.meta.get("prompt"):
        out.append(f'<p class="esp-prompt"><b>Prompt:</b> {html.escape(str(run.meta["prompt"]))}</p>')
    missing = unrecorded(run.steps)
    if missing:
        out.append(f'<p class="esp-note">Not recorded in this run: {html.escape("; ".join(missing))}.</p>')
    return "\n".join(out)


def widget_state(runs: list[Run]) -> dict:
    """The widget's synced data (STATE): per run its markup and run_data, and Plotly.js packed once."""
    return {"runs": [{"label": r.label, "markup": run_head(r) + "\n" + player_markup(r.steps),
                      **run_data(r.steps, r.meta), "figures": []} for r in runs],
            "plotly": packed_plotly(), "version": plotly_bundle.VERSION, "period": PERIOD_MS}


# The widget's module (anywidget's `_esm`): the lecture player's script, and a render() that puts one player per
# run side by side in the widget's element. Its markup is made in Python above, every text escaped.
WIDGET_ESM = PLAYER_JS + r"""
function render({ model, el }) {
  const box = document.createElement("div");
  box.className = "esp-players";
  el.append(box);
  const stops = model.get("runs").map((run) => {
    const root = document.createElement("div");
    root.className = "esp-player";
    root.tabIndex = 0;  // the arrow keys and Space act on the player that has the focus
    root.dataset.lmSuppressShortcuts = "true";  // ... and not on JupyterLab's commands meanwhile
    root.innerHTML = run.markup;
    box.append(root);
    return espPlayer(root, run, {plotly: model.get("plotly"), version: model.get("version"),
                                 period: model.get("period"), keys: root});
  });
  return () => stops.forEach((stop) => stop());
}
export default { render };
"""

# The focus outline and a note's warning colour are the page's own (components/palette.py).
WIDGET_CSS = PLAYER_CSS + fill("""
.esp-players { display: flex; flex-wrap: wrap; gap: 1em; }
.esp-players > .esp-player { flex: 1 1 0; min-width: 380px; padding: .4em .8em; border-radius: 6px; }
.esp-players > .esp-player:focus-visible { outline: 2px solid {{focus}}; }
.esp-player .esp-head { margin: .2em 0; } .esp-player .esp-prompt { margin: .2em 0; font-size: .9em; }
.esp-player .esp-note { margin: .2em 0; font-size: .9em; color: {{warn}}; }
""", {"focus": FOCUS, "warn": REJECTED})

# The widget's HTML export: its own module and state on a page that opens from disk, with no widget manager
# (ipywidgets' embed fetches one from a CDN) and no network; the state is read by a stand-in for the model.
_EXPORT = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{title}}</title>
<style>{{css}}
 body { margin: 1em; }
</style></head>
<body>
<div id="esp-widget"></div>
<script type="application/json" id="esp-state">{{state}}</script>
<script type="module">{{esm}}
const state = JSON.parse(document.getElementById("esp-state").textContent);
render({model: {get: (key) => state[key], on() {}, off() {}}, el: document.getElementById("esp-widget")});
</script>
</body></html>
"""


def export_html(state: Mapping) -> str:
    """A standalone page playing the widget `state` (widget_state's keys) with the widget's own module."""
    title = "ESP Explorer · " + " vs ".join(r["label"] for r in state["runs"])
    return fill(_EXPORT, {"title": html.escape(title), "css": WIDGET_CSS, "esm": WIDGET_ESM,
                          "state": script_json({k: state[k] for k in STATE})})


def write_export(state: Mapping, path: str | Path) -> Path:
    path = Path(path)
    path.write_text(export_html(state), encoding="utf-8")
    return path

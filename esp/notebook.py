"""esp.show: play a run step by step with ESP Explorer's views, in a notebook (a widget) or, outside one, in a
lecture file. The views are the app's (components/), imported only when called: `import esp` loads no
plotting or widget library."""
from __future__ import annotations

import importlib
import importlib.util
import sys
import time
from pathlib import Path
from types import ModuleType

from esp.errors import ESPError

EXTRA = "pip install 'esp-explorer[notebook]'"
# The view layer's name in an installed wheel, where pyproject.toml packs components/ inside the engine's package
# (no generic top-level `components` in site-packages); in a checkout it is the components/ folder beside esp/.
WHEEL_VIEWS = "esp._components"
CHECKOUT = Path(__file__).resolve().parents[1] / "components"


def view_package() -> str:
    """The importable name of the view layer here; ESPError when this install has none."""
    if importlib.util.find_spec(WHEEL_VIEWS) is not None:
        return WHEEL_VIEWS
    found = importlib.util.find_spec("components")
    if found is not None and found.origin and Path(found.origin).resolve().parent == CHECKOUT:
        return "components"
    raise ESPError(f"esp.show needs ESP Explorer's views, which this install lacks: {EXTRA}.")


def views(module: str) -> ModuleType:
    """components.<module> of the view layer; ESPError naming the missing library when the extra is not in."""
    try:
        return importlib.import_module(f"{view_package()}.{module}")
    except ModuleNotFoundError as e:
        top = (e.name or "").split(".")[0]
        if top in ("esp", "components"):
            raise
        raise ESPError(f"esp.show needs {top or 'a library it cannot find'}: {EXTRA}.") from None


def in_notebook() -> bool:
    """Whether this runs in a notebook kernel that shows widgets: IPython's (Jupyter, JupyterLab, Colab,
    VS Code) or marimo's. Neither is imported here: a notebook has done so already."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if getattr(shell, "kernel", None) is not None:
        return True
    marimo = sys.modules.get("marimo")
    return bool(marimo is not None and marimo.running_in_notebook())


def show(runs, path: str | Path | None = None):
    """Play `runs` step by step: the step slider, prev / next, Play, and the lecture file's views (draft tree,
    attention mask, text, the step in words), one player per run, side by side.

    `runs`: a Result of `esp.decode` (or a list: a batch, or several methods to compare), the StepTraces of
    `esp.stream` (a batch's (index, trace) pairs give one run per prompt), a trace JSON file (checked as the
    app checks an opened trace), a list of these, or a dict of label -> any of these. In a notebook this
    returns the widget (`.save_html(path)` writes it as a page that opens offline). Elsewhere it writes the
    lecture file of a single run, or the widget's page for several, to `path` (default: a new
    esp-lecture-<time>.html in the current folder), prints where, and returns that path. A view whose data the
    run did not record (e.g. the mask: `esp.decode(..., trace_mask=True)`) says so. Bad input: ESPError."""
    notebook = views("notebook")
    played = notebook.runs_of(runs)
    if in_notebook():
        return views("widget").Player(played)
    path = Path(path) if path is not None else Path.cwd() / f"esp-lecture-{time.strftime('%Y%m%d-%H%M%S')}.html"
    try:
        if len(played) == 1:
            views("lecture").write_lecture(played[0].steps, played[0].meta, path)
        else:
            notebook.write_export(notebook.widget_state(played), path)
    except OSError as e:
        raise ESPError(f"Cannot write the player to {path}: {e.strerror or type(e).__name__}.") from None
    print(f"esp.show: no notebook here, so the player went to a file; open it in a browser: {path}")
    for run in played:
        for what in notebook.unrecorded(run.steps):
            print(f"esp.show: {run.label}: not recorded in this run: {what}.")
    return path

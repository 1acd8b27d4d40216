"""The notebook widget (anywidget: Jupyter, JupyterLab, Colab, VS Code, marimo): the lecture player on one or
more runs, side by side, offline (Plotly.js travels packed in its state, as in the lecture file)."""
from __future__ import annotations

from pathlib import Path

import anywidget
import traitlets

from .notebook import STATE, WIDGET_CSS, WIDGET_ESM, Run, widget_state, write_export


class Player(anywidget.AnyWidget):
    """Plays each run's steps (slider, prev / next, Play, arrow keys once clicked) with the lecture's views."""

    _esm = WIDGET_ESM
    _css = WIDGET_CSS
    runs = traitlets.List(traitlets.Dict()).tag(sync=True)  # per run: label, markup, frames, figures
    plotly = traitlets.Unicode().tag(sync=True)  # Plotly.js, gzip + base64 (components.lecture.packed_plotly)
    version = traitlets.Unicode().tag(sync=True)  # its version: a page that has it already reuses its own
    period = traitlets.Int().tag(sync=True)  # ms per step when playing

    def __init__(self, runs: list[Run]):
        super().__init__(**widget_state(runs))

    def save_html(self, path: str | Path) -> Path:
        """The widget as a standalone page (its own module and state, no network): open it from disk, share it."""
        return write_export({key: getattr(self, key) for key in STATE}, path)

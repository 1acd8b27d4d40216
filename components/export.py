"""Exports: a run's trace as JSON and the current figures as one standalone HTML page."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping, Sequence

import plotly.graph_objects as go

from esp.trace import StepTrace

from .common import as_steps
from .limits import Limits
from .stats import run_summary
from .trace_schema import load_trace


def trace_payload(steps: Sequence[StepTrace | dict], meta: Mapping) -> dict:
    """{"meta", "summary", "steps"}: everything needed to re-render the run without the model."""
    steps = as_steps(steps)
    return {"meta": dict(meta), "summary": run_summary(steps).to_dict(), "steps": [s.to_dict() for s in steps]}


def write_trace_json(steps: Sequence[StepTrace | dict], meta: Mapping, path: str | Path) -> Path:
    path = Path(path)
    path.write_text(json.dumps(trace_payload(steps, meta), ensure_ascii=False))
    return path


def read_trace_json(path: str | Path, limits: Limits | None = None) -> tuple[dict, list[StepTrace]]:
    """(meta, steps) from a file written by `write_trace_json`, checked as untrusted input against every cap
    of components/trace_schema.py and `limits` (default: the server's defaults); ValueError if refused."""
    return load_trace(path, limits or Limits())


def write_figures_html(figures: Mapping[str, go.Figure], path: str | Path, title: str = "ESP Explorer") -> Path:
    """One self-contained page (Plotly.js embedded once, so it opens offline) with every figure."""
    parts = [
        f"<h2>{name}</h2>" + fig.to_html(full_html=False, include_plotlyjs=i == 0)
        for i, (name, fig) in enumerate(figures.items())
    ]
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head>"
            f"<body style='font-family:sans-serif'><h1>{title}</h1>{''.join(parts)}</body></html>")
    path = Path(path)
    path.write_text(page, encoding="utf-8")
    return path

"""Exports: a run's trace as JSON, read back as untrusted input (components/trace_schema.py). The figures
and the whole run go out as one lecture file (components/lecture.py)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping, Sequence

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

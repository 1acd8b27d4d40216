"""The players' Plotly.js (components/plotly_bundle.py): the version plotly.py writes its figures for, in every
home (the page serves the file, the lecture file and the notebook pack it), and every trace type a view draws
registered in it (Plotly draws nothing for a type it lacks, and says so only in the console)."""
from __future__ import annotations

import base64
import gzip
import re

import pytest
from plotly.offline import get_plotlyjs, get_plotlyjs_version

import app
from components import plotly_bundle
from components.export import read_trace_json
from components.frames import run_data
from components.lecture import packed_plotly
from conftest import ROOT

SHIPPED = sorted(p.name for p in (ROOT / "assets").glob("trace_*.json"))


def registered(bundle: str) -> set[str]:
    """The trace types a Plotly.js bundle registers, read from its text."""
    return set(re.findall(r'moduleType:"trace",name:"(\w+)"', bundle))


def trace_types(value) -> set[str]:
    """The type of every trace of every figure in `value` (a figure is a dict with a "data" list; Plotly's
    default type is scatter)."""
    if isinstance(value, dict):
        data = value.get("data")
        found = {t.get("type", "scatter") for t in data if isinstance(t, dict)} if isinstance(data, list) else set()
        return found.union(*(trace_types(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(trace_types(v) for v in value))
    return set()


def test_the_bundle_is_the_version_plotly_py_writes_figures_for():
    assert plotly_bundle.VERSION == get_plotlyjs_version()


def test_every_home_draws_with_the_bundle():
    assert gzip.decompress(base64.b64decode(packed_plotly())).decode() == plotly_bundle.source()
    page = app.launch_options()
    assert f"gradio_api/file={plotly_bundle.PATH}" in page["head"] and str(plotly_bundle.PATH) in page["allowed_paths"]
    assert len(plotly_bundle.source()) < len(get_plotlyjs()) / 3


def test_the_types_a_bundle_registers_are_read_from_its_registrations():
    """The same reading finds the full bundle's 3-D, map and diagram types, which the cartesian one lacks."""
    full, ours = registered(get_plotlyjs()), registered(plotly_bundle.source())
    assert {"scatter", "bar", "heatmap"} <= ours < full
    assert {"scatter3d", "sankey", "scattergl", "table"} <= full - ours


@pytest.mark.parametrize("name", SHIPPED)
def test_every_view_of_a_shipped_trace_draws_with_a_registered_type(name):
    meta, steps = read_trace_json(ROOT / "assets" / name)
    types, ours = trace_types(run_data(steps, meta)), registered(plotly_bundle.source())
    assert {"scatter", "heatmap"} <= types, types
    assert types <= ours, types - ours

"""Linked focus: one node outlined in the tree, its rows in the mask, its token in the text, its masks'
curves in the alignment figure; no focus leaves every figure as it was."""
from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go
import pytest

from components.align_plot import align_figure
from components.common import walk_end
from components.export import read_trace_json
from components.focus import FOCUS_COLOR, focus_choices, focus_note, mask_records, mask_rows
from components.mask_plot import mask_figure
from components.text_view import FOCUS, token_sources
from components.tree_plot import tidy_layout, tree_figure, tree_graph
from esp.trace import ACCEPTED, PRUNED, REJECTED

TRACE = Path(__file__).resolve().parents[1] / "assets" / "trace_masks.json"


@pytest.fixture(scope="module")
def steps():
    return read_trace_json(TRACE)[1]


@pytest.fixture(scope="module")
def hit(steps):
    """A decoding step with an accepted draft, a rejected one and a pruned candidate."""
    return next(s for s in steps if s.accepted and any(n.status == PRUNED for n in s.nodes)
                and any(n.status == REJECTED for n in s.nodes))


def _node(step, status):
    return next(n for n in step.nodes if n.status == status)


def test_no_focus_changes_nothing(steps, hit):
    i = hit.step
    assert tree_figure(hit).to_plotly_json() == tree_figure(hit, focus=None).to_plotly_json()
    assert "shapes" not in mask_figure(hit).to_plotly_json()["layout"]
    assert token_sources(steps, i) == token_sources(steps, i, focus=None)
    assert align_figure(steps, i).to_plotly_json() == align_figure(steps, i, focus=None).to_plotly_json()


def test_tree_outlines_the_node(hit):
    node = _node(hit, REJECTED)
    fig = tree_figure(hit, focus=node.index)
    go.Figure(fig.to_dict())  # valid Plotly
    ring = fig.data[-1]
    assert ring.name == f"focus: node {node.index}"
    assert (ring.x[0], ring.y[0]) == tidy_layout(tree_graph(hit))[node.index]
    widths = [t.marker.line.width or 0 for t in fig.data[:-1] if t.mode and "markers" in t.mode]
    widest = max(w for x in widths for w in (x if isinstance(x, tuple) else [x]))
    assert ring.marker.line.width > widest and ring.marker.line.color == FOCUS_COLOR


def test_mask_outlines_row_and_mask_rows(steps, hit):
    node = walk_end(hit)
    rows = mask_rows(hit, node.index)
    assert rows and all(hit.row_labels[r].startswith(f"mask {node.row}.") for r in rows)
    fig = mask_figure(hit, focus=node.index)
    go.Figure(fig.to_dict())
    shapes = fig.layout.shapes
    assert [s.y0 + 0.5 for s in shapes] == [node.row, *rows]
    assert shapes[0].line.width > shapes[1].line.width
    # At the prefill a summary row of the prompt comes first, so block row r sits at y = r + 1.
    prefill = mask_figure(steps[0], focus=0)
    assert prefill.layout.shapes[0].y0 + 0.5 == 1
    # A pruned node has no row: nothing to outline.
    assert not mask_figure(hit, focus=_node(hit, PRUNED).index).layout.shapes


def test_text_marks_the_token(steps, hit):
    i = hit.step
    plain = token_sources(steps, i, limit=None)
    start = len(plain) - len(hit.emitted_text)
    node = _node(hit, ACCEPTED)
    marked = token_sources(steps, i, limit=None, focus=node.index)
    assert [j for j, (_, label) in enumerate(marked) if label == FOCUS] == [start + node.depth - 1]
    assert marked[start + node.depth - 1][0] == node.text
    # The root is the token emitted just before the step.
    root = token_sources(steps, i, limit=None, focus=0)
    assert root[start - 1] == (hit.nodes[0].text, FOCUS)
    for status in (REJECTED, PRUNED):  # not in the text: nothing marked
        assert FOCUS not in {label for _, label in token_sources(steps, i, focus=_node(hit, status).index)}


def test_alignment_emphasises_the_nodes_masks(steps, hit):
    i = hit.step
    end = walk_end(hit)
    records = mask_records(steps, i, end.index)
    assert records and all(r.source_step == i for r in records)
    fig = align_figure(steps, i, focus=end.index)
    go.Figure(fig.to_dict())
    thick = [t for t in fig.data if t.name.startswith(f"node {end.index} mask")]
    assert len(thick) == len(records) and all(t.line.width == 5 for t in thick)
    assert list(thick[0].y) == records[0].cos
    other = _node(hit, REJECTED).index  # its masks never drafted anything: no curve of its own
    assert mask_records(steps, i, other) == []
    assert len(align_figure(steps, i, focus=other).data) == len(align_figure(steps, i).data)


def test_notes_and_choices(hit):
    pruned = _node(hit, PRUNED)
    assert "never fed" in focus_note(hit, pruned.index)
    assert "accepted" in focus_note(hit, _node(hit, ACCEPTED).index)
    assert "is the root" in focus_note(hit, 0)
    assert focus_note(hit, None) == ""
    assert "has no node 999" in focus_note(hit, 999)
    choices = focus_choices(hit)
    assert [v for _, v in choices] == list(range(len(hit.nodes)))
    assert "never fed" in dict((v, k) for k, v in choices)[pruned.index]
    assert tree_figure(hit, focus=999).to_plotly_json() == tree_figure(hit).to_plotly_json()

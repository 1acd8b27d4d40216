"""The Mask Lens views and the verifier's eye, on a recorded run given consistent lens records
(tests/lens_trace.py), and their one-line notes on a trace recorded without the lens."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest

from components import palette
from components.common import BONUS, CORRECTION, accepted_nodes, own_kind, show_ws, walk_end
from components.export import read_trace_json
from components.eye_view import NO_EYE, decided_row, eye_figure, eye_pairs, node_eyes, row_drafts, text_bar
from components.lens_view import (NO_LENS, RAW, commit_figure, commit_layer, commitments, lens_figure, rank_figure,
                                  rank_stats, resolved)
from components.step_words import step_words
from components.tree_plot import tree_figure
from esp.trace import ACCEPTED, ESP, LENS_TOP, REJECTED, ROOT, LensReal

from lens_trace import with_lens

TRACE = Path(__file__).parent / "data" / "trace_k2_bc30.json"
LAYERS = 8


@pytest.fixture(scope="module")
def run():
    meta, steps = read_trace_json(TRACE)
    return meta, steps, with_lens(steps, k=2, layers=LAYERS)


@pytest.fixture(scope="module")
def lensed(run):
    return run[2]


def _valid(fig: go.Figure) -> go.Figure:
    go.Figure(fig.to_dict())  # the builders skip Plotly's validation: check their output here
    return fig


def _grid(fig: go.Figure):
    """(the shaded heatmap, {(x, y): the text drawn over that cell}) of a grid figure."""
    heat = next(t for t in fig.data if t.type == "heatmap")
    labels = next(t for t in fig.data if t.type == "scatter" and t.mode == "text")
    return heat, dict(zip(zip(labels.x, labels.y), labels.text))


def test_the_synthetic_trace_follows_the_engines_rules(lensed):
    """Mask j at the walk's end sits at its position + j; its output layer lists the next step's depth-j ESP
    drafts; its record arrives on the step that emitted the token at the next position."""
    tokens = [t for s in lensed for t in s.emitted]
    start = lensed[0].positions[0]
    for i, s in enumerate(lensed[:-1]):
        end = walk_end(s)
        for rec in s.lens:
            assert rec.position == end.position + rec.j and len(rec.tokens) == LAYERS
            drafts = sorted((n for n in lensed[i + 1].nodes if n.depth == rec.j and n.row is not None),
                            key=lambda n: -n.prob)
            assert rec.tokens[-1][: len(drafts[:LENS_TOP])] == [n.token for n in drafts[:LENS_TOP]]
            real = resolved(lensed, i).get(rec.j)
            if rec.position - start < len(tokens):
                assert real.token == tokens[rec.position - start]
                assert real.accepted == (len(lensed[i + 1].accepted) >= rec.j)
        for row, chosen in zip(s.eye, s.emitted):
            assert row[0] == chosen  # greedy: the token a row emitted is its top choice


def test_lens_grid(run, lensed):
    meta, steps, _ = run
    i = next(i for i in range(len(lensed)) if any(r.accepted for r in resolved(lensed, i).values()))
    step, real = lensed[i], resolved(lensed, i)
    fig = _valid(lens_figure(lensed, i))
    heat, text = _grid(fig)
    lens = sorted(step.lens, key=lambda r: r.j)
    assert np.asarray(heat.z, dtype=float).shape == (LAYERS, len(lens))  # layers x masks
    assert list(heat.y) == list(range(LAYERS)) and fig.layout.yaxis.title.text.startswith("layer (0 = embeddings")
    for c, rec in enumerate(lens):
        r = real[rec.j]
        assert [row[c] for row in heat.z] == pytest.approx(r.prob)  # shaded by the real token's probability
        mark = palette.ACCEPT_MARK if r.accepted else palette.REJECT_MARK
        assert heat.x[c] == f"mask {rec.j} → {show_ws(r.text)} {mark}"
        for layer in range(LAYERS):
            top = show_ws(rec.texts[rec.tokens[layer][0]])[:7]
            cell = text[(heat.x[c], layer)]
            assert top.rstrip("…")[:6] in cell
            assert cell.startswith("<b>") == (rec.tokens[layer][0] == r.token)  # bold where the top-1 is real
            assert heat.customdata[layer][c] == [step.step, walk_end(step).index, rec.j, layer]
            hover = heat.hovertext[layer][c]
            assert f"rank {r.rank[layer]}" in hover and hover.count("<br>") == LENS_TOP + 1
    assert heat.colorscale and heat.zmin == 0 and heat.zmax == 1 and heat.opacity < 1  # text reads on every cell
    assert RAW in fig.layout.annotations[0].text  # labelled honestly: a raw logit lens


def test_lens_grid_before_its_tokens_came(lensed):
    """The last step's masks are not resolved: their cells are left unshaded (their tokens still drawn), and a
    note says why."""
    i = max(i for i, s in enumerate(lensed) if s.lens)
    assert not resolved(lensed[: i + 1], i)
    fig = _valid(lens_figure(lensed[: i + 1], i))
    heat, text = _grid(fig)
    assert all(v is None for row in heat.z for v in row) and len(text) == LAYERS * len(lensed[i].lens)
    assert "has not come yet" in " ".join(a.text for a in fig.layout.annotations)
    assert all(x.endswith("→ ?") for x in heat.x)


def test_commit_layer():
    def rec(ranks):
        return LensReal(source_step=0, j=1, token=1, text="a", accepted=True, prob=[0.1] * len(ranks), rank=ranks)

    assert commit_layer(rec([9, 3, 1, 1])) == 2
    assert commit_layer(rec([1, 1, 1])) == 0
    assert commit_layer(rec([1, 2, 1])) == 2  # top-1 for good only from the last change on
    assert commit_layer(rec([1, 1, 2])) is None  # drafted as a lower choice


def test_commitment_strip(lensed):
    found = commitments(lensed, len(lensed) - 1)
    text = [t for s in lensed for t in s.emitted_text]
    # (this recorded run predates source marks: an unmarked draft of an ESP run is a mask's)
    accepted_esp = sum(len([n for n in accepted_nodes(s) if ESP in n.sources or not n.sources]) for s in lensed)
    assert found and len(found) == accepted_esp  # every token accepted from an ESP mask, once
    for k, (rec, layer) in found.items():
        assert text[k] == rec.text and rec.accepted and layer == commit_layer(rec)
    fig = _valid(commit_figure(lensed))
    heat, labels = _grid(fig)
    cells = {c[1]: (heat.z[r][col], labels[(col, r)]) for r, row in enumerate(heat.customdata)
             for col, c in enumerate(row)}
    for k, (rec, layer) in found.items():
        z, t = cells[k]
        assert z == layer and t.endswith(f"L{layer}" if layer is not None else "–")
    assert sorted(cells) == list(range(len(text))) and len(labels) == len(text)  # the whole text, line by line


def test_rank_chart(lensed):
    records = [r for s in lensed for r in s.lens_real]
    stats = rank_stats(records)
    acc = np.asarray([r.rank for r in records if r.accepted], dtype=float)
    np.testing.assert_allclose(stats["accepted"]["mean"], acc.mean(0))
    np.testing.assert_allclose(stats["accepted"]["top"], (acc <= 5).mean(0))
    fig = _valid(rank_figure(lensed))
    assert fig.layout.yaxis.type == "log"
    lines = {t.legendgroup: t for t in fig.data if t.showlegend is not False}
    assert lines["accepted"].line.dash != lines["rejected"].line.dash  # a second cue beside colour
    assert lines["accepted"].marker.symbol != lines["rejected"].marker.symbol
    assert lines["accepted"].line.color == palette.ACCEPTED and lines["rejected"].line.color == palette.REJECTED


def test_the_verifiers_eye_where_the_walk_stopped(run, lensed):
    meta = run[0]
    step = next(s for s in lensed if s.accepted and own_kind(s) == CORRECTION)
    fig = _valid(eye_figure(step, meta))
    bars = fig.data[0]
    row = len(step.accepted)
    pairs = eye_pairs(step, row)
    assert list(bars.x) == pytest.approx([p for _, p in pairs])
    drafts = {d.token: d for d in row_drafts(step, row)}
    for (t, _), color, label, custom in zip(pairs, bars.marker.color, bars.text, bars.customdata):
        d = drafts.get(t)
        assert custom == [step.step, row, t, d.index if d else -1]
        if d is not None:
            assert color == (palette.ACCEPTED if d.status == ACCEPTED else palette.REJECTED)
            assert f"draft, rank {pairs.index((t, _)) + 1}" in label
        if t == step.emitted[row]:
            assert "◀ emitted (correction)" in label
    assert "Greedy" in " ".join(a.text for a in fig.layout.annotations)


def test_the_eye_follows_the_focus(run, lensed):
    meta = run[0]
    step = next(s for s in lensed if s.accepted)
    node = accepted_nodes(step)[0]
    fig = _valid(eye_figure(step, meta, focus=node.index))
    assert decided_row(step, node) == 0
    widths = fig.data[0].marker.line.width
    assert widths[[c[3] for c in fig.data[0].customdata].index(node.index)] > 0  # the focused draft outlined
    orphan = next((n for s in lensed for n in s.nodes if n.row is not None and n.status == REJECTED
                   and s.nodes[n.parent].status == REJECTED), None)
    if orphan is not None:
        owner = next(s for s in lensed if orphan in s.nodes)
        assert "never checked" in eye_figure(owner, meta, focus=orphan.index).layout.annotations[0].text
    sampled = dict(meta, sampling={"temperature": 0.7, "top_p": 0.9, "top_k": 0, "seed": 3})
    note = " ".join(a.text for a in eye_figure(step, sampled).layout.annotations)
    assert "Sampling (temperature 0.7, top-p 0.9, seed 3)" in note and "drew from" in note


def test_tree_hover_carries_the_eye_as_text_bars(lensed):
    step = next(s for s in lensed if s.accepted)
    eyes = node_eyes(step)
    node = accepted_nodes(step)[0]
    assert f"this draft is rank {node.target_rank}" in eyes[node.index] and "◀ this draft" in eyes[node.index]
    assert text_bar(1.0) == "█" * 10 and text_bar(0.0) == "" and text_bar(0.5) == "█" * 5
    fig = tree_figure(step)
    acc = next(t for t in fig.data if t.name == ACCEPTED)
    assert acc.customdata[0][7] == eyes[node.index] and "%{customdata[7]}" in acc.hovertemplate
    root = next(t for t in fig.data if t.name == ROOT)
    assert root.customdata[0][4] == 0  # the node index stays where the page's click reads it


def test_step_words_name_the_correction_and_the_rank(run, lensed):
    meta = run[0]
    step = next(s for s in lensed if own_kind(s) == CORRECTION)
    words = step_words(step, meta)
    assert "**correction**" in words and "ranked " in words and "by the model (p = " in words
    bonus = next((s for s in lensed if own_kind(s) == BONUS and len(s.emitted) > len(s.accepted)), None)
    if bonus is not None:
        assert "**bonus token**" in step_words(bonus, meta)


def test_every_view_says_in_one_line_that_the_trace_has_no_lens(run):
    meta, steps, _ = run
    for fig in (lens_figure(steps, 3), commit_figure(steps), rank_figure(steps), eye_figure(steps[3], meta)):
        _valid(fig)
        assert not fig.data and fig.layout.annotations[0].text in (NO_LENS, NO_EYE)
    assert node_eyes(steps[3]) == {}
    assert all(c[7] == "" for t in tree_figure(steps[3]).data if t.customdata is not None for c in t.customdata)


def test_token_texts_stay_text(lensed):
    """A crafted token text shows as its characters in the lens grid, the strip and the eye."""
    steps = json.loads(json.dumps([s.to_dict() for s in lensed]))
    evil = "<b>x</b>"
    for s in steps:
        s["emitted_text"] = [evil] * len(s["emitted_text"])
        for n in s["nodes"]:
            n["text"] = evil
        for rec in s["lens"]:
            rec["texts"] = {k: evil for k in rec["texts"]}
        for r in s["lens_real"]:
            r["text"] = evil
    from components.common import as_steps

    steps = as_steps(steps)
    i = next(i for i, s in enumerate(steps) if s.lens and resolved(steps, i))
    shown = str([f.to_dict() for f in (lens_figure(steps, i), commit_figure(steps), eye_figure(steps[i]),
                                         tree_figure(steps[i]))])
    assert "<b>x</b>" not in shown and "&lt;b&gt;x&lt;/b&gt;" in shown

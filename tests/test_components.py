"""Figure builders on a recorded real trace (tests/data/trace_k2_bc30.json, made by scripts/make_test_trace.py)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest

from components.align_plot import GROUPS, align_figure, layer_stats
from components.common import (BONUS as BONUS_KIND, CORRECTION, OWN as OWN_KIND, STATUS_COLORS, as_step, own_kind,
                               show_ws)
from components import palette
from components.compare_view import compare_figure, compare_rows
from components.export import read_trace_json, trace_payload, write_trace_json
from components.mask_plot import BLOCKED, ON_PATH, VISIBLE, mask_figure, mask_matrix, row_names
from components.settings import RunSettings
from components.stats import CURRENT, PHASES, accept_hist_figure, run_summary, stats_markdown, timing_figure
from components.text_view import (BONUS, COLOR_MAP, CORRECTION as CORRECTION_LABEL, DRAFT_LABELS, MODEL_LABELS,
                                  OWN, token_sources)
from components.tree_plot import (LABEL_PX, MARKS, MIN_PANEL_PX, accepted_path, labelled_nodes, short,
                                  tidy_layout, tree_figure, tree_graph)
from esp.errors import ESPError
from esp.methods import build
from esp.trace import ACCEPTED, PRUNED, REJECTED, ROOT, StepTrace

TRACE = Path(__file__).parent / "data" / "trace_k2_bc30.json"


@pytest.fixture(scope="module")
def run():
    meta, steps = read_trace_json(TRACE)
    return meta, steps


@pytest.fixture(scope="module")
def steps(run):
    return run[1]


@pytest.fixture(scope="module")
def hit(steps) -> StepTrace:
    """A decoding step that accepted at least one draft."""
    return next(s for s in steps if s.accepted)


def _traces(fig: go.Figure) -> dict[str, go.Scatter]:
    return {t.name: t for t in fig.data}


def test_trace_round_trip(run, steps, tmp_path):
    meta, _ = run
    assert isinstance(steps[0], StepTrace) and steps[0].prefill and not any(s.prefill for s in steps[1:])
    again = read_trace_json(write_trace_json(steps, meta, tmp_path / "t.json"))[1]
    assert [s.to_dict() for s in again] == [s.to_dict() for s in steps]
    assert as_step(steps[3].to_dict()) == steps[3]


def test_every_builder_emits_a_valid_plotly_figure(steps, hit):
    """Builders skip Plotly's validation for speed; validate their output here once."""
    summary = run_summary(steps)
    rows = compare_rows([{"label": "ar", "summary": summary, "tokens": [1], "top2": []}])
    figs = [tree_figure(hit), tree_figure(steps[0]), mask_figure(hit), align_figure(steps), align_figure(steps, 0),
            accept_hist_figure(summary, 1), timing_figure(steps, 2), compare_figure(rows), compare_figure([])]
    for fig in figs:
        go.Figure(fig.to_dict())  # raises on any invalid property


def test_tree_graph_and_accepted_path(hit):
    g = tree_graph(hit)
    assert g.number_of_nodes() == len(hit.nodes) and g.number_of_edges() == len(hit.nodes) - 1
    path = accepted_path(g)
    assert path == hit.accepted_rows  # rows of root + accepted nodes, which are their node indices
    assert [g.nodes[n]["token"] for n in path[1:]] == hit.accepted


def test_tidy_layout_is_crossing_free_and_centred(steps):
    for step in steps[1:]:
        g = tree_graph(step)
        pos = tidy_layout(g)
        for n in g.nodes:
            kids = list(g.successors(n))
            assert pos[n][1] == -step.nodes[n].depth
            if kids:  # parent centred over its first and last child
                assert pos[n][0] == pytest.approx((pos[kids[0]][0] + pos[kids[-1]][0]) / 2)
        # No crossings: between two depths, edges sorted by parent x have non-decreasing child x.
        edges = sorted(g.edges, key=lambda e: (pos[e[0]][0], pos[e[1]][0]))
        for d in range(1, max(n.depth for n in step.nodes) + 1):
            xs = [pos[b][0] for a, b in edges if -pos[b][1] == d]
            assert xs == sorted(xs)
        leaves = sorted(pos[n][0] for n in g.nodes if g.out_degree(n) == 0)
        assert leaves == list(range(len(leaves)))  # leaves at consecutive slots


def test_tree_figure_colours_labels_and_hover(hit):
    fig = tree_figure(hit)
    traces = _traces(fig)
    for status in (ROOT, ACCEPTED, REJECTED, PRUNED):
        nodes = [n for n in hit.nodes if n.status == status]
        if not nodes:
            assert status not in traces
            continue
        t = traces[status]
        assert t.marker.color == STATUS_COLORS[status]
        assert len(t.x) == len(nodes)
        labels = [x for x in t.text if x]
        # Two lines, below; the verdict said again by its mark (colour never works alone).
        mark = MARKS.get(status, "")
        assert set(labels) <= {f"{short(n.text)}<br>{n.cum_prob:.2f}{mark}" for n in nodes}
        if status in (ROOT, ACCEPTED):  # the root and the accepted path are always labelled
            assert len(labels) == len(nodes)
        # customdata: raw text, draft p, depth, cumulative p, node index
        assert [c[4] for c in t.customdata] == [n.index for n in nodes]
        assert [c[2] for c in t.customdata] == [n.depth for n in nodes]
        assert [c[1] for c in t.customdata] == pytest.approx([n.prob for n in nodes])
    path = traces["accepted path"]
    assert path.line.width > traces["edges"].line.width
    assert len([x for x in path.x if x is not None]) == 2 * len(hit.accepted)  # one segment per accepted node
    assert f"accepted {len(hit.accepted)} of" in fig.layout.title.text


def test_whitespace_is_visible():
    assert show_ws(" the\n") == "␣the↵" and show_ws("") == "∅"


def test_prefill_tree_is_a_note(steps):
    fig = tree_figure(steps[0])
    assert not fig.data and "Prefill" in fig.layout.annotations[0].text


def test_mask_heatmap_shape_states_and_labels(steps, hit):
    fig = mask_figure(hit)
    heat = fig.data[0]
    rows = len(hit.row_labels)
    z = np.asarray(heat.z)
    assert z.shape == (rows, rows + 1)  # block rows x (prefix column + block columns)
    assert (z != BLOCKED).tolist() == hit.mask
    kept = set(hit.accepted_rows)
    on_path = {(r, c) for r, c in zip(*np.nonzero(z == ON_PATH))}
    assert on_path == {(r, c) for r in kept for c in [0] + [x + 1 for x in kept] if hit.mask[r][c]}
    assert (z == VISIBLE).any()
    assert len(set(heat.y)) == rows and list(heat.y) == row_names(hit) and heat.x[1:] == heat.y
    assert heat.x[0] == f"prefix ×{hit.n_past}"
    assert fig.layout.yaxis.autorange == "reversed"
    # The prefix grows from step to step.
    assert [mask_figure(s).data[0].x[0] for s in steps[1:3]] == [f"prefix ×{s.n_past}" for s in steps[1:3]]
    assert steps[2].n_past > steps[1].n_past


def test_mask_matrix_matches_a_hand_made_trace(hit):
    d = hit.to_dict()
    d.update(mask=[[True, True, False], [True, True, True]], accepted_rows=[0], row_labels=["root", "mask 0.1"])
    assert mask_matrix(d) == [[ON_PATH, ON_PATH, BLOCKED], [VISIBLE, VISIBLE, VISIBLE]]


def test_alignment_curves(steps):
    records = [r for s in steps for r in s.alignment]
    stats = layer_stats(records)
    assert set(stats) == {"accepted", "rejected"}  # the counting prompt gives both kinds
    acc = np.asarray([r.cos for r in records if r.accepted])
    assert stats["accepted"]["n"] == len(acc)
    np.testing.assert_allclose(stats["accepted"]["mean"], acc.mean(0))
    np.testing.assert_allclose(stats["accepted"]["hi"] - stats["accepted"]["mean"], acc.std(0))
    fig = align_figure(steps)
    run_panel = [t for t in fig.data if t.xaxis == "x2"]
    means = {t.legendgroup: t for t in run_panel if t.showlegend}
    assert means["accepted"].name == f"accepted (n={len(acc)})"
    np.testing.assert_allclose(means["accepted"].y, acc.mean(0))
    assert means["accepted"].line.color == GROUPS["accepted"]
    lower = [t for t in run_panel if t.fill == "tonexty"]
    assert len(lower) == 2 and all(t.line.width == 0 for t in lower)
    # The left panel holds only the records resolved at that step.
    last = steps[-1].alignment
    this_panel = [t for t in fig.data if t.xaxis == "x" and t.hovertemplate]
    assert {t.legendgroup for t in this_panel} == {"accepted" if r.accepted else "rejected" for r in last}


def test_alignment_empty_before_any_record(steps):
    assert not align_figure(steps, 0).data


def test_text_view_labels_drafts_and_the_models_own_tokens(steps):
    pairs = token_sources(steps)
    assert "".join(t for t, _ in pairs) == "".join(t for s in steps for t in s.emitted_text)
    assert sum(label in DRAFT_LABELS for _, label in pairs) == sum(len(s.accepted) for s in steps)
    # Every step adds one token of the model's own, unless max_new_tokens cut it off (the last step here): a
    # correction after a rejected draft, a bonus after every draft was accepted, plain where nothing was drafted.
    own = [label for _, label in pairs if label in MODEL_LABELS]
    assert len(own) == sum(len(s.emitted) > len(s.accepted) for s in steps)
    kinds = [own_kind(s) for s in steps if len(s.emitted) > len(s.accepted)]
    assert own == [{CORRECTION: CORRECTION_LABEL, BONUS_KIND: BONUS}.get(k, OWN) for k in kinds]
    assert own[0] == OWN and CORRECTION_LABEL in own  # the prefill drafts nothing; this run's walks stop on drafts
    assert len(token_sources(steps, 2)) == sum(len(s.emitted) for s in steps[:3])


def test_own_kind_names_correction_and_bonus(steps):
    def stop(step):  # the fed drafts under the walk's end
        end = max((n for n in step.nodes if n.status in (ROOT, ACCEPTED)), key=lambda n: n.depth)
        return [n for n in step.nodes if n.parent == end.index and n.row is not None]

    step = next(s for s in steps if s.accepted and stop(s))
    assert own_kind(step) == CORRECTION  # a draft under the walk's end was rejected
    d = step.to_dict()
    for n in stop(step):
        d["nodes"][n.index]["status"] = PRUNED
    assert own_kind(as_step(d)) == BONUS_KIND  # every draft checked on the path was accepted
    for n in d["nodes"][1:]:
        n["status"] = PRUNED
    assert own_kind(as_step(d)) == OWN_KIND  # nothing fed: the model's own token, as plain decoding's
    assert own_kind(steps[0]) == OWN_KIND  # the prefill


def test_stats_numbers_and_figures(steps, hit):
    s = run_summary(steps)
    tokens = sum(len(x.emitted) for x in steps)
    assert (s.tokens, s.forwards) == (tokens, len(steps)) and s.tau == pytest.approx(tokens / len(steps))
    assert f"| {tokens} | {len(steps)} | {s.tau:.2f} |" in stats_markdown(s)
    assert stats_markdown(s).rstrip().endswith(f"| {tokens - len(steps)} |")
    bars = accept_hist_figure(s, current=1).data[0]
    assert list(bars.y) == [s.accept_hist.get(x, 0) for x in bars.x]
    assert bars.marker.color[1] == CURRENT and bars.marker.color[0] != bars.marker.color[1]
    assert bars.text[1] == "this step" and not bars.text[0]  # a label as well as a shade
    timing = timing_figure(steps, current=3)
    assert [t.name for t in timing.data] == list(PHASES)
    forward = _traces(timing)["forward"]
    assert list(forward.y) == pytest.approx([1000 * x.timings["forward"] for x in steps[:4]])  # up to the current
    assert timing.layout.shapes[0].x0 == 3


def test_compare_rows_speed_up_and_verdict():
    def result(label, method, tokens_per_s, tokens, top2):
        s = run_summary([])
        s.method, s.tokens_per_s = method, tokens_per_s
        return {"label": label, "summary": s, "tokens": tokens, "top2": top2}

    ar = result("ar", "ar", 10.0, [5, 7, 9], [[5, 20.0, 6, 1.0], [7, 20.0, 8, 19.9], [9, 3.0, 1, 0.0]])
    same = result("esp k=2", "esp", 5.0, [5, 7, 9], [])
    tie = result("pld", "pld", 20.0, [5, 8, 2], [[5, 20.0, 6, 1.0], [8, 20.0, 7, 19.95], [2, 1.0, 3, 0.0]])
    wrong = result("stand", "stand", 10.0, [5, 6], [[5, 20.0, 6, 1.0], [6, 9.0, 7, 1.0]])
    rows = compare_rows([ar, same, tie, wrong], "bfloat16")
    assert [r[5] for r in rows] == [1.0, 0.5, 2.0, 1.0]
    assert [r[6].split(" ")[0] for r in rows] == ["baseline", "exact", "near-tie", "FAILED"], rows
    assert "token 1" in rows[2][6] and "token 1" in rows[3][6]  # where the texts part
    assert compare_rows([same])[0][6] == "—"  # no ar run to compare with


def test_exports(run, steps):
    meta, _ = run
    payload = trace_payload(steps, meta)
    assert json.loads(json.dumps(payload))["summary"]["tokens"] == run_summary(steps).tokens


def test_settings_use_the_engine_rules():
    s = RunSettings(k=2.0, bc=30.0, max_new_tokens=16.0)
    assert (s.k, s.bc) == (2, 30) and build(s.esp_spec()).cfg.k == 2
    with pytest.raises(ESPError, match="BC=10 is too small for k=4"):
        RunSettings(k=4, bc=10)
    with pytest.raises(ESPError, match="whole number"):
        RunSettings(k=2.5)
    assert RunSettings(mode="sampling", temperature=0.5).sampling().temperature == 0.5
    assert RunSettings(mode="greedy", temperature=0.5).sampling().greedy


def _wide_step(base: StepTrace, widths: list[int], sources: list[str] | None = None) -> StepTrace:
    """A step whose static tree has `widths` nodes per depth (top-1 expansion), the first path accepted."""
    nodes = [dict(base.nodes[0].to_dict() if hasattr(base.nodes[0], "to_dict") else vars(base.nodes[0]))]
    parent = 0
    for depth, width in enumerate(widths, 1):
        first = len(nodes)
        for r in range(width):
            nodes.append(dict(index=len(nodes), token=100 + len(nodes), text=f"tok{len(nodes)}xyz", parent=parent,
                              depth=depth, prob=0.5 / (r + 1), cum_prob=0.5 ** depth / (r + 1),
                              status=ACCEPTED if r == 0 else REJECTED, row=len(nodes), position=depth,
                              sources=list(sources or []), p=None))
        parent = first
    d = base.to_dict()
    d.update(nodes=nodes, accepted=[n["token"] for n in nodes if n["status"] == ACCEPTED])
    return StepTrace.from_dict(d)


@pytest.mark.parametrize("widths", [[29], [59], [15, 4], [29, 9], [7, 5, 3], [20, 8, 3, 1]])
def test_tree_labels_never_overlap_up_to_bc_120(hit, widths):
    step = _wide_step(hit, widths)
    fig = tree_figure(step)
    slots = sum(w - 1 for w in widths) + 1  # leaves: each level's rejected nodes + the deepest accepted one
    assert fig.layout.xaxis.range[1] - fig.layout.xaxis.range[0] == slots
    gap = LABEL_PX * slots / MIN_PANEL_PX
    points = [(x, y) for t in fig.data if t.mode == "markers+text" for x, y, s in zip(t.x, t.y, t.text) if s]
    for a in points:
        for b in points:
            if a != b and a[1] == b[1]:
                assert abs(a[0] - b[0]) >= gap - 1e-9  # labels on one level are a label's width apart
    assert len(points) >= len(widths) + 1  # root and accepted path at least
    hovers = [c for t in fig.data if t.mode == "markers+text" for c in t.customdata]
    assert len(hovers) == len(step.nodes)  # every node keeps its hover


def test_deep_chains_label_to_the_right(hit):
    from components.tree_plot import DEEP_LABEL_PX

    chain = _wide_step(hit, [1] * 10)  # a PLD-like chain of ten drafts
    fig = tree_figure(chain)
    node_traces = [t for t in fig.data if t.mode == "markers+text"]
    assert all(t.textposition == "middle right" for t in node_traces)
    assert all("<br>" not in x for t in node_traces for x in t.text)  # one line: levels are close
    lo, hi = fig.layout.xaxis.range
    assert hi - lo >= 2  # room right of the chain for its labels
    assert DEEP_LABEL_PX > LABEL_PX


def test_labelled_nodes_prefer_the_accepted_path(hit):
    step = _wide_step(hit, [59])
    g = tree_graph(step)
    shown = labelled_nodes(g, tidy_layout(g))
    assert 0 in shown and all(n in shown for n in g.nodes if g.nodes[n]["status"] == ACCEPTED)
    assert len(shown) < len(step.nodes)
    assert short("abcdefghij") == "abcde…" and short("ab") == "ab"


def test_sources_mark_tree_mask_and_text(hit):
    from components import sources as src
    from components.text_view import AGREED, BY_SOURCE

    step = _wide_step(hit, [3, 2], sources=["esp", "lookup"])
    fig = tree_figure(step)
    symbols = [sym for t in fig.data if t.name == ACCEPTED for sym in t.marker.symbol]
    assert symbols == [src.AGREED_SYMBOL] * 2  # both sources agreed on every node
    assert any(t.name == "source: agreed" for t in fig.data)
    hover = next(t for t in fig.data if t.name == ACCEPTED).customdata[0]
    assert hover[5] == src.describe(["esp", "lookup"]) and hover[6] == "not calibrated"
    assert row_names(step)[1].endswith("[E+L]")
    single = _wide_step(hit, [3], sources=["lookup"])
    assert [s for t in tree_figure(single).data if t.name == REJECTED for s in t.marker.symbol] == ["diamond"] * 2
    labels = [label for _, label in token_sources([single])]
    assert labels[0] == BY_SOURCE["lookup"] and labels[-1] in MODEL_LABELS
    assert [label for _, label in token_sources([step])][0] == AGREED
    # One colour per source in the text, the tree's outlines and the attention pattern's row tags.
    lookup = palette.SOURCES["lookup"]
    assert COLOR_MAP[BY_SOURCE["lookup"]] == lookup
    outlines = [c for t in tree_figure(single).data if t.name in (ACCEPTED, REJECTED) for c in t.marker.line.color]
    assert set(outlines) == {lookup}
    ticks = mask_figure(single).layout.yaxis.ticktext
    assert sum(f'color:{lookup}">[L]' in t for t in ticks) == sum(n.row is not None for n in single.nodes[1:])
    assert COLOR_MAP[AGREED] == palette.AGREED and f'color:{palette.AGREED}">[E+L]' in "".join(
        mask_figure(step).layout.yaxis.ticktext)


def test_text_view_folds_old_tokens(steps):
    full = token_sources(steps, limit=None)
    short_view = token_sources(steps, limit=5)
    assert len(short_view) == 6 and short_view[1:] == full[-5:]
    assert f"{len(full) - 5} earlier tokens" in short_view[0][0]


def test_prefill_mask_shows_the_prompt(steps):
    pre = steps[0]
    fig = mask_figure(pre)
    heat = fig.data[0]
    n = pre.positions[0]
    assert heat.y[0] == f"prompt ({n} tokens)" and heat.x[0] == f"prompt ×{n}"
    assert list(heat.z[0]) == [ON_PATH] + [BLOCKED] * (len(heat.x) - 1)
    assert len(heat.y) == len(pre.row_labels) + 1 and "prefill" in fig.layout.title.text
    assert "prefix ×0" not in heat.x


def test_timing_view_is_bounded_and_readable(steps):
    from components.stats import WINDOW

    many = []
    for i in range(400):
        d = steps[min(i, len(steps) - 1) if i == 0 else 1 + i % (len(steps) - 1)].to_dict()
        d["step"] = i
        many.append(StepTrace.from_dict(d))
    fig = timing_figure(many, 399)
    assert len(fig.data[0].x) == WINDOW and fig.data[0].x[-1] == 399
    assert f"steps 0-{399 - WINDOW}: mean" in fig.layout.title.text
    early = timing_figure(many, 10)
    decode_max = max(1000 * s.timings["total"] for s in many[1:11])
    assert early.layout.yaxis.range[1] == pytest.approx(1.15 * decode_max)  # the prefill does not flatten it
    if 1000 * many[0].timings["total"] > early.layout.yaxis.range[1]:
        assert "prefill" in early.layout.annotations[0].text


def test_legends_sit_outside_the_data(steps, hit):
    summary = run_summary(steps)
    for fig in (tree_figure(hit), align_figure(steps), timing_figure(steps), accept_hist_figure(summary)):
        legend = fig.layout.legend
        assert legend.x > 1 or legend.y > 1 or legend.y < 0
        assert fig.layout.xaxis.automargin  # tick labels and axis titles are never cut


FAKE_CURVE = {"q": [1, 10, 30, 60, 120], "t": [0.08, 0.12, 0.2, 0.29, 0.48]}


def test_cost_view_break_even_and_sentences(steps, hit):
    from components.cost_view import cost_figure, cost_sentences, ratio, step_width

    assert ratio(FAKE_CURVE, 1) == 1 and ratio(FAKE_CURVE, 60) == pytest.approx(0.29 / 0.08)
    assert ratio(FAKE_CURVE, 20) == pytest.approx(0.16 / 0.08)  # interpolated between 10 and 30
    fig = cost_figure(steps, hit.step, FAKE_CURVE)
    go.Figure(fig.to_dict())
    traces = {t.name: t for t in fig.data}
    line = traces["break-even: t(q)/t(1)"]
    assert list(line.x) == FAKE_CURVE["q"] and list(line.y) == pytest.approx([t / 0.08 for t in FAKE_CURVE["t"]])
    here = traces[f"step {hit.step}: emitted"]
    assert (here.x[0], here.y[0]) == (step_width(hit), len(hit.emitted)) and step_width(hit) == len(hit.positions)
    ratios = traces["time / t(1)"]
    decode = [s for s in steps[: hit.step + 1] if not s.prefill]
    assert list(ratios.y) == pytest.approx([s.timings["total"] / 0.08 for s in decode])
    text = cost_sentences(steps, hit.step, FAKE_CURVE)
    r = ratio(FAKE_CURVE, step_width(hit))
    assert f"costs {r:.1f}× a one-token forward" in text and f"emitted {len(hit.emitted)}" in text
    assert ("won" in text) == (len(hit.emitted) > r) and "GPU" in text and "6.0×" in text
    assert text.startswith("On the machine that recorded this run")  # an old trace names no device
    assert cost_sentences(steps, hit.step, FAKE_CURVE, device="CPU").startswith("On this CPU a forward")
    gpu = cost_sentences(steps, hit.step, FAKE_CURVE, device="T4")
    assert gpu.startswith("On this T4 a forward") and "On this T4 even 120 rows cost 6.0×" in gpu
    assert "What a step costs on this T4" in cost_figure(steps, hit.step, FAKE_CURVE, device="T4").layout.title.text
    assert not cost_figure(steps, 0, FAKE_CURVE).data  # the prefill has no draft cost: a note
    assert not cost_figure(steps, hit.step, None).data


def test_cost_view_prefers_the_step_cost_record(hit):
    from components.cost_view import cost_figure, step_width

    d = hit.to_dict()
    d["cost"] = {"budget": "auto", "rows": 7, "cap": 60, "expected_tokens": 2.5, "predicted_s": 0.1,
                 "measured_s": 0.11, "curve": {"q": [1, 7], "t": [0.1, 0.2]}}
    step = StepTrace.from_dict(d)
    fig = cost_figure([step], 0, FAKE_CURVE)
    traces = {t.name: t for t in fig.data}
    assert step_width(step) == 7 and list(traces["break-even: t(q)/t(1)"].y) == [1.0, 2.0]
    assert traces["expected"].y[0] == 2.5


def test_cost_view_shows_the_oracle_width_beside_the_width_fed(steps, hit):
    from components.cost_view import cost_figure, cost_sentences
    from esp.bench.oracle import oracle_width

    best = oracle_width(hit)
    assert best == len(hit.accepted_rows) + 2 < len(hit.positions)  # ESP k=2: two masks on the path's end
    mark = {t.name: t for t in cost_figure(steps, hit.step, FAKE_CURVE).data}["oracle width"]
    assert (mark.x[0], mark.y[0]) == (best, len(hit.emitted))
    assert f"would have taken {best} rows" in cost_sentences(steps, hit.step, FAKE_CURVE)


def test_old_traces_without_new_fields_still_load(hit):
    d = hit.to_dict()
    d.pop("cost")
    for n in d["nodes"]:
        n.pop("sources"), n.pop("p")
    old = StepTrace.from_dict(d)
    assert tree_figure(old).data and mask_figure(old).data and token_sources([old])


def test_server_limits_from_the_environment():
    from components.limits import Limits

    lim = Limits.from_env({"ESP_APP_MODELS": "embedded, /models/x ,embedded", "ESP_APP_MAX_NEW_TOKENS": "32",
                           "ESP_APP_THREADS": "1"})
    assert lim.models == ("embedded", "/models/x") and lim.max_new_tokens == 32 and lim.threads == 1
    assert lim.check_model("/models/x") == "/models/x"
    with pytest.raises(ESPError, match="does not offer the model 'Qwen/Qwen3-0.6B'"):
        lim.check_model("Qwen/Qwen3-0.6B")
    with pytest.raises(ESPError, match="at most 32 new tokens"):
        lim.check_new_tokens(33)
    with pytest.raises(ESPError, match="Compare decodes 7 methods, at most 1024 tokens in all on this server: "
                                       "set max new tokens to 146 or less"):
        lim.check_compare(7, 147)
    lim.check_compare(7, 146)
    with pytest.raises(ESPError, match="ESP_APP_THREADS must be a whole number"):
        Limits.from_env({"ESP_APP_THREADS": "many"})
    space = Limits.from_env({"SPACE_ID": "me/esp"})
    assert space.models[0] == "embedded" and len(space.models) > 1  # small Hub models on a Space


def test_installed_offline_models_are_offered_and_others_not(monkeypatch):
    import components.limits as limits

    monkeypatch.setattr(limits, "offline_models", lambda: ["embedded", "qwen2.5-coder-0.5b"])
    assert limits.Limits.from_env({}).models[:2] == ("embedded", "qwen2.5-coder-0.5b")
    monkeypatch.setattr(limits, "offline_models", lambda: ["embedded"])
    assert "qwen2.5-coder-0.5b" not in limits.Limits.from_env({}).models


def test_the_servers_torch_threads_are_the_cores_it_may_use(tmp_path):
    """Every core of the process's affinity, capped by a container's cgroup CPU quota (a Space's 2 vCPUs on a
    host whose os.cpu_count() is larger); at least one."""
    import os

    from components.limits import usable_cores

    mine = len(os.sched_getaffinity(0))
    cpu_max = tmp_path / "cpu.max"
    assert usable_cores(cpu_max) == mine  # no quota file
    cpu_max.write_text("max 100000\n")
    assert usable_cores(cpu_max) == mine
    cpu_max.write_text("100000 100000\n")
    assert usable_cores(cpu_max) == 1
    cpu_max.write_text("50000 100000\n")
    assert usable_cores(cpu_max) == 1  # half a core still gets one thread
    cpu_max.write_text(f"{(mine + 8) * 100000} 100000\n")
    assert usable_cores(cpu_max) == mine  # a quota above the affinity does not add cores

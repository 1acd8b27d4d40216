"""esp.bench.oracle: each step's cheapest feed for the same tokens, and the run priced on a cost curve."""
from __future__ import annotations

import pytest

from esp.bench.run import aggregate
from esp.decoding.engine import Decoder
from esp.methods import build
from esp.bench.oracle import cheapest, feeds, lead, mask_rows, oracle_width, price
from esp.trace import ACCEPTED, REJECTED, ROOT, NodeTrace, StepTrace


def step(n_nodes: int, path: list[int], owners: list[int] = (), k: int = 0, n_past: int = 50, before: int = 0,
         extra: int = 0) -> StepTrace:
    """A hand-built step: root + n_nodes-1 draft nodes (a chain), k masks on each owner, `extra` lookahead
    rows, `before` prompt rows fed ahead of the root (a prefill), the accepted `path` of node indices."""
    nodes = [NodeTrace(i, 100 + i, f"t{i}", i - 1, i, 1.0, 1.0,
                       ROOT if i == 0 else ACCEPTED if i in path else REJECTED, i, n_past + before + i)
             for i in range(n_nodes)]
    labels = ["root"] + [f"node {i}:t{i}" for i in range(1, n_nodes)]
    labels += [f"mask {v}.{j}" for v in owners for j in range(1, k + 1)] + [f"lookahead {i}:x" for i in range(extra)]
    kinds = ["root"] + ["node"] * (n_nodes - 1) + ["mask"] * (len(owners) * k) + ["lookahead"] * extra
    root = n_past + before
    return StepTrace(step=1, method="x", n_past=n_past, root=100, nodes=nodes,
                     accepted=[100 + i for i in path[1:]], bonus=7, emitted=[100 + i for i in path[1:]] + [7],
                     emitted_text=[], row_labels=labels, row_kinds=kinds, positions=[root + i for i in range(len(labels))],
                     mask=[], accepted_rows=list(path), shape=[], timings={}, prefill=before > 0)


def test_accepting_2_of_10_rows_with_k_masks_needs_1_plus_2_plus_k():
    for k in (1, 2, 3):
        s = step(10 - k, [0, 1, 2], owners=[2], k=k)
        assert len(s.positions) == 10 and oracle_width(s) == 1 + 2 + k


def test_only_the_last_accepted_node_s_masks_count():
    s = step(6, [0, 1, 2], owners=[0, 1, 2, 3, 4, 5], k=2)  # ESP: k masks on every node
    assert mask_rows(s, 2) == 2 and oracle_width(s) == 1 + 2 + 2
    assert oracle_width(step(6, [0, 1, 2], owners=[4, 5], k=2)) == 3  # no masks on the path's end: none needed
    assert oracle_width(step(12, [0, 1], owners=[1, 11], k=1)) == 3  # "mask 11.1" is not node 1's


def test_methods_without_masks_need_the_path_alone():
    assert oracle_width(step(10, [0, 1, 2, 3])) == 4
    assert oracle_width(step(8, [0], extra=20)) == 1  # LADE's lookahead rows are not in the oracle
    assert oracle_width(step(1, [0])) == 1  # a plain step


def test_price_sums_fed_oracle_and_flat_on_the_curve_with_the_prompt_in_the_prefill():
    t = lambda q: 1.0 + 0.1 * q  # noqa: E731
    pre = step(3, [0, 1], owners=[0, 1, 2], k=1, n_past=0, before=40)  # prompt of 41 rows, 6 block rows
    dec = step(8, [0, 1, 2], owners=[2], k=2)  # 10 rows, oracle 5
    assert lead(pre) == 40 and lead(dec) == 0 and oracle_width(pre) == 3
    got = price(feeds([pre, dec]), t)
    assert got.fed_s == pytest.approx(t(46) + t(10))
    assert got.oracle_s == pytest.approx(t(43) + t(5))
    assert got.flat_s == pytest.approx(t(41) + t(1))


def test_the_oracle_pads_to_a_wider_block_where_the_curve_falls():
    curve = {1: 1.0, 2: 1.5, 3: 2.0, 4: 1.2, 5: 1.3, 6: 3.0}
    t = curve.__getitem__
    floor = cheapest(t, 6)
    assert [floor(q) for q in range(1, 7)] == [1.0, 1.2, 1.2, 1.2, 1.3, 3.0]
    s = step(2, [0, 1], owners=[1], k=1)  # oracle 3 rows, fed 3 rows
    assert price(feeds([s]), t, 6).oracle_s == 1.2 and price(feeds([s]), t, 6).fed_s == 2.0
    assert price(feeds([s]), t).oracle_s == 2.0  # no padding without a range to pad in


def rec(qid: int, method: str, n: int, seconds: float, fed: float, oracle: float, flat: float, cat: str = "a") -> dict:
    return {"qid": qid, "category": cat, "method": method, "tokens": [1] * n, "n_tokens": n, "forwards": n,
            "seconds": seconds, "tokens_per_s": n / seconds, "fed_s": fed, "oracle_s": oracle, "flat_s": flat,
            "width_mean": 1.0, "oracle_width_mean": 1.0}


def test_aggregate_reports_the_oracle_speed_up_and_the_fraction_reached():
    rows = [rec(1, "ar", 10, 2.0, 1.0, 1.0, 1.0), rec(2, "ar", 10, 2.0, 1.0, 1.0, 1.0, "b"),
            rec(1, "x", 10, 1.0, 0.8, 0.5, 0.4), rec(2, "x", 10, 2.0, 1.0, 0.25, 0.2, "b")]
    r = aggregate(rows, ["ar", "x"])
    x = r["x"]
    assert x["speedup"] == pytest.approx(7.5 / 5)
    assert x["oracle_speedup"] == pytest.approx((20 + 40) / 2 / 10)
    assert x["fraction"] == pytest.approx(1.5 / 3)
    assert x["curve_speedup"] == pytest.approx((12.5 + 10) / 2 / 10)
    assert x["flat_speedup"] == pytest.approx((25 + 50) / 2 / 10)
    assert x["per_category"]["b"]["oracle_speedup"] == pytest.approx(4.0)
    assert x["per_category"]["b"]["fraction"] == pytest.approx(1.0 / 4.0)
    assert r["ar"]["oracle_speedup"] == 1.0 and r["ar"]["fraction"] == 1.0
    assert x["per_question"] == [
        {"qid": 1, "category": "a", "speedup": 2.0, "oracle_speedup": 2.0, "fraction": 1.0, "flat_speedup": 2.5},
        {"qid": 2, "category": "b", "speedup": 1.0, "oracle_speedup": 4.0, "fraction": 0.25, "flat_speedup": 5.0}]
    unpriced = [{k: v for k, v in row.items() if k != "oracle_s"} for row in rows]
    assert "oracle_speedup" not in aggregate(unpriced, ["ar", "x"])["x"]


@pytest.mark.model
@pytest.mark.parametrize("spec, masks", [("esp:k=2:bc=12", 2), ("pld", 0), ("hybrid:bc=30", None)])
def test_oracle_widths_of_real_runs(lm, spec, masks):
    """On the engine's own traces: the oracle is the path plus the masks on its end (k on every node for
    ESP, none for PLD, the hybrid's where it put them), never more than was fed."""
    g = Decoder(lm, build(spec), max_new_tokens=24, trace_mask=False).generate(lm.chat_ids("Count from 1 to 20."))
    steps = [s for s in g.steps if not s.prefill]
    for s in steps:
        w = oracle_width(s)
        assert w <= len(s.positions)
        if masks is not None:
            assert w == len(s.accepted_rows) + masks
        else:
            assert len(s.accepted_rows) <= w <= len(s.accepted_rows) + s.row_kinds.count("mask")
    assert any(len(s.accepted_rows) > 1 for s in steps)  # the run accepted drafts, so the test means something

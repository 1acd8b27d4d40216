"""The cost model: no sweep inside a call, a prior learned from the run's own forwards, robust to load, bounded
exploration, and the explicit sweep `esp.calibrate` (on fake machines and the tiny model: no wall-clock
assertions)."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest

import esp
import esp.budget.cost as cost
from esp.budget.cost import EXPLORE, EXPLORE_N, CostCurve
from esp.models.lm import LM

TRUE = {1: 1.0, 2: 1.2, 3: 1.3, 4: 1.6, 6: 1.7, 8: 2.0, 16: 2.3}  # a fake machine's shape, one-row units


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    """A machine with no stored curve: an empty ESP_CACHE and nothing read in this process."""
    monkeypatch.setenv("ESP_CACHE", str(tmp_path))
    monkeypatch.setattr(cost, "_CURVES", {})
    return tmp_path


def test_the_first_auto_call_makes_no_forward_beyond_its_own_steps(tiny_lm, empty_cache, monkeypatch):
    model = tiny_lm("llama").model
    fed, forward = [], LM.forward
    monkeypatch.setattr(LM, "forward", lambda self, emb, *a, **k: fed.append(len(emb)) or forward(self, emb, *a, **k))
    ids = [(5 * i) % 50 + 3 for i in range(12)] * 2
    out = esp.decode(model, None, ids, method="hybrid:bc=auto", max_new_tokens=24)
    assert len(fed) == len(out.steps) and fed[0] == len(ids) + out.widths[0] - 1  # the prefill, then one per step
    assert fed[1:] == out.widths[1:]
    assert not (empty_cache / "costs").exists()  # nothing was measured, so nothing stored
    curve = next(iter(cost._CURVES.values()))
    assert curve.weight == cost.SHAPE_WEIGHT and not curve.scaled  # the process keeps the default shape as read
    assert out.steps[-1].cost["curve"]["t"][0] != 1.0  # ... and the drafter's copy took its level from the steps


def test_the_learned_shape_survives_a_load_that_comes_and_goes():
    """The machine slows 1.8x for a stretch, during which the drafter feeds wide blocks (the case that bent
    the old curve: a wide step was judged against a t(1) measured before the load)."""
    curve = CostCurve(list(cost.GRID), list(cost.SHAPES["cpu-float32"]), weight=cost.SHAPE_WEIGHT, scaled=False)
    rng = random.Random(0)
    plan = [1, 2, 4, 1, 3, 8, 16, 6] * 30
    for step, w in enumerate(plan):
        load = 1.8 if 60 <= step < 150 else 1.0
        curve.observe(w, 0.05 * load * TRUE[w] * rng.uniform(0.95, 1.05))
    for w, r in TRUE.items():
        assert curve.predict(w) / curve.predict(1) == pytest.approx(r, rel=0.06), w
    assert curve.predict(1) == pytest.approx(0.05, rel=0.06)  # the level is the machine's now


def test_a_stored_curve_corrects_from_steps_and_its_first_steps_set_the_level():
    stored = CostCurve([1, 2, 4, 8], [0.05, 0.06, 0.07, 0.09], key="k")  # measured once; the machine changed
    c = stored.copy()
    for _ in range(30):
        for w in (1, 2, 4, 8):
            c.observe(w, 0.08 * {1: 1.0, 2: 1.5, 4: 1.3, 8: 1.9}[w])
    assert c.predict(1) == pytest.approx(0.08, rel=0.05) and c.drift == pytest.approx(1.6, rel=0.05)
    assert c.predict(2) / c.predict(1) == pytest.approx(1.5, rel=0.1)
    assert stored.t == [0.05, 0.06, 0.07, 0.09] and stored.steps == 0  # the prior itself was only read
    frozen = CostCurve([1, 2], [1.0, 2.0], rate=0.0)
    frozen.observe(2, 9.0)
    assert frozen.t == [1.0, 2.0]


def test_one_outlier_moves_the_curve_a_bounded_step():
    c = CostCurve([1, 4], [1.0, 1.5], weight=1.0)
    c.observe(4, 1.5)
    c.observe(4, 1000.0)  # a step preempted by another job
    assert c.predict(4) < 1.5 * 1.5 and c.predict(1) < 1.25


def test_exploration_prices_unknown_widths_cheaper_and_less_so_the_more_they_are_measured():
    shape = CostCurve([1, 2, 4], [1.0, 1.5, 2.0], weight=cost.SHAPE_WEIGHT)
    plain, explore = shape.table(4), shape.table(4, explore=True)
    assert explore[1:].tolist() == pytest.approx((plain[1:] * (1 - EXPLORE)).tolist())  # nothing measured yet
    shape.observe(1, 1.0)
    discounts = []
    for _ in range(12):  # samples at 2 rows: its discount falls as EXPLORE_N / (EXPLORE_N + n)
        shape.observe(2, shape.predict(2))
        discounts.append(1 - shape.table(2, explore=True)[2] / shape.table(2)[2])
    assert discounts[1] == pytest.approx(EXPLORE * EXPLORE_N / (EXPLORE_N + 2))
    assert all(a > b > 0 for a, b in zip(discounts, discounts[1:])) and discounts[-1] < EXPLORE / 6
    idle = CostCurve([1, 2, 4], [1.0, 1.5, 2.0])  # a stored curve measured idle: nothing to explore
    assert idle.table(4, explore=True).tolist() == idle.table(4).tolist()


def test_a_width_narrower_or_wider_than_the_measured_ones_is_priced_by_them_where_they_say_it_is_cheaper():
    """A prior dearer than the machine locks out no width: the measured knots price the others (a straight line
    between them; past the widest, the prior's shape from it; below the narrowest, rows in proportion)."""
    curve = CostCurve([1, 2, 4, 8, 16], [1.0, 1.9, 1.4, 1.8, 2.4], weight=cost.SHAPE_WEIGHT)  # a dip that is not here
    for _ in range(3):
        curve.observe(4, 1.1)
        curve.observe(8, 1.2)
    hopeful = curve._interp(np.array(curve._hopeful()), 16)  # before the discount
    t = curve.table(16)
    assert hopeful[2] == pytest.approx(t[4] / 2) and hopeful[1] == pytest.approx(t[4] / 4)
    assert hopeful[16] == pytest.approx(t[8] * 2.4 / 1.8) and hopeful[16] < t[16]
    assert hopeful[6] == pytest.approx(t[6])  # between measured knots: their line (the prior's, here)


def test_an_overpriced_width_gets_tried_by_the_drafter(tiny_lm, empty_cache, monkeypatch):
    """The default shape prices 2 rows at 1.3 plain steps; on this fake machine they cost 1.05, and only the
    exploration discount gets them fed at first."""
    from types import SimpleNamespace

    import esp.decoding.timer as timer
    from esp.drafters.hybrid import HybridDrafter
    from esp.decoding.engine import Decoder

    lm = tiny_lm("llama")
    monkeypatch.setattr(cost, "cpu_capability", lambda: "AVX2")  # the shape without the AVX512 dip
    clock = SimpleNamespace(now=0.0)
    forward = lm.forward

    def timed(embeds, *a, **k):
        clock.now += 0.05 * (1 + 0.05 * (len(embeds) - 1))
        return forward(embeds, *a, **k)

    monkeypatch.setattr(lm, "forward", timed)
    monkeypatch.setattr(timer, "time", SimpleNamespace(perf_counter=lambda: clock.now))
    monkeypatch.setattr(HybridDrafter, "clock", staticmethod(lambda: clock.now))
    ids = [(7 * i + 3) % 60 for i in range(10)] * 3
    d = HybridDrafter()
    run = Decoder(lm, d, max_new_tokens=32, trace_mask=False, timings=False).generate(ids)
    assert max(len(s.positions) for s in run.steps[1:]) >= 2
    assert d.curve.predict(2) / d.curve.predict(1) < 1.2  # learned: 2 rows are cheap here


def test_calibrate_pairs_each_width_with_a_one_row_forward_and_records_the_load(tiny_lm, empty_cache, monkeypatch):
    lm = tiny_lm("llama")
    fed, forward = [], lm.forward
    monkeypatch.setattr(lm, "forward", lambda emb, *a: fed.append(emb.shape[-2]) or forward(emb, *a))
    monkeypatch.setattr(cost.os, "getloadavg", lambda: (0.1, 0.2, 0.3))
    curve = esp.calibrate(lm, grid=(1, 2, 4), repeats=2)
    # The prefill of the cache, a warm-up per width, then rounds: each width right after a one-row forward.
    assert fed == [cost.CONTEXT] + [1, 2, 4] + [1, 1, 1, 2, 1, 4] * 2
    saved = json.loads((empty_cache / "costs" / f"{cost.curve_key(lm)}.json").read_text())
    assert saved["q"] == [1, 2, 4] and saved["loadavg"] == [0.1, 0.2, 0.3] and saved["measured_at"].endswith("Z")
    assert len(saved["ratio"]) == 3 and curve.weight == cost.STORED_WEIGHT
    monkeypatch.setattr(cost, "_CURVES", {})
    monkeypatch.setattr(cost, "samples", lambda *a, **k: pytest.fail("a stored curve must not be timed again"))
    again = cost.curve_for(lm)
    assert again.q == [1, 2, 4] and again.t == pytest.approx(saved["t"]) and again.scaled


def test_a_curve_stored_under_load_is_a_weak_prior(tiny_lm, empty_cache, monkeypatch):
    lm = tiny_lm("llama")
    monkeypatch.setattr(cost.os, "getloadavg", lambda: (64.0, 64.0, 64.0))
    assert esp.calibrate(lm, grid=(1, 2), repeats=1).weight == cost.BUSY_WEIGHT
    path = empty_cache / "costs" / f"{cost.curve_key(lm)}.json"
    path.write_text(json.dumps({"q": [1, 2], "t": [1.0, 1.2]}))  # an older file: no record of its load
    monkeypatch.setattr(cost, "_CURVES", {})
    assert cost.curve_for(lm).weight == cost.BUSY_WEIGHT
    path.write_text("{not json")
    monkeypatch.setattr(cost, "_CURVES", {})
    assert not cost.curve_for(lm).scaled  # a damaged file: the default shape, never a sweep


def test_the_default_shape_is_flat_for_bf16_only_where_the_cpu_has_it(monkeypatch):
    from types import SimpleNamespace

    import torch

    lm = SimpleNamespace(dtype=torch.bfloat16, device=torch.device("cpu"))
    monkeypatch.setattr(cost, "native_bf16", lambda: True)
    assert cost.shape_for(lm).t == list(cost.SHAPES["cpu-bfloat16"])
    monkeypatch.setattr(cost, "native_bf16", lambda: False)  # emulated: wide blocks are dear, as in float32
    monkeypatch.setattr(cost, "cpu_capability", lambda: "AVX2")
    assert cost.shape_for(lm).t == list(cost.SHAPES["cpu-float32"])


@pytest.mark.parametrize("kernels, vendor, name", [
    ("AVX512", "AuthenticAMD", "cpu-float32-avx512"), ("AVX512", "", "cpu-float32-avx512"),
    ("AVX512", "GenuineIntel", "cpu-float32-avx512-intel"), ("AVX2", "GenuineIntel", "cpu-float32"),
    ("DEFAULT", "AuthenticAMD", "cpu-float32"),
])
def test_float32_starts_from_the_shape_of_its_kernels_and_vendor(monkeypatch, kernels, vendor, name):
    from types import SimpleNamespace

    import torch

    lm = SimpleNamespace(dtype=torch.float32, device=torch.device("cpu"))
    monkeypatch.setattr(cost, "cpu_capability", lambda: kernels)
    monkeypatch.setattr(cost, "cpu_vendor", lambda: vendor)
    assert cost.shape_for(lm).t == list(cost.SHAPES[name])


def test_only_amds_avx512_shape_has_2_3_rows_dearer_than_4_8():
    amd = dict(zip(cost.GRID, cost.SHAPES["cpu-float32-avx512"]))
    intel = dict(zip(cost.GRID, cost.SHAPES["cpu-float32-avx512-intel"]))
    assert min(amd[2], amd[3]) > max(amd[4], amd[5], amd[6], amd[8])  # the dip the budget and the batch's padding use
    assert intel[2] < intel[3] < intel[4] < intel[8]


def test_a_width_is_trusted_once_its_knots_are_measured():
    curve = CostCurve(list(cost.GRID), list(cost.SHAPES["cpu-float32-avx512"]), weight=cost.SHAPE_WEIGHT, scaled=False)
    assert curve.trusted(8).tolist() == [True, True] + [False] * 7  # a shape: only the anchor
    for _ in range(3):
        curve.observe(4, 1.7)
    assert curve.trusted(8)[4] and not curve.trusted(8)[2] and not curve.trusted(8)[5]
    assert CostCurve([1, 2, 4], [1.0, 1.5, 1.4]).trusted(4).all()  # a stored curve, measured idle
    assert not CostCurve([1, 2, 4], [1.0, 1.5, 1.4], weight=cost.BUSY_WEIGHT).trusted(4)[2:].any()


def test_the_command_lines_sweep_only_with_calibrate(monkeypatch):
    import argparse

    import esp.models.loader
    from esp.cli import add_model_args, load_model

    swept = []
    monkeypatch.setattr(esp.models.loader, "load", lambda name, dtype=None, **kw: ("lm", name, dtype))
    monkeypatch.setattr(cost, "calibrate", lambda lm: swept.append(lm))
    p = argparse.ArgumentParser()
    add_model_args(p)
    assert load_model(p.parse_args([])) == ("lm", "embedded", None) and swept == []
    assert load_model(p.parse_args(["--calibrate", "--dtype", "float32"])) == ("lm", "embedded", "float32")
    assert swept == [("lm", "embedded", "float32")]


# A fake machine unlike every shipped shape: 2 rows nearly free, 3 or more dear (a kernel that runs two rows as
# one; the AMD AVX512 shape has 2-3 rows dearer than 4-8, native bfloat16's is flat to 32).
UNLIKE = {1: 1.0, 2: 1.05, 3: 1.6, 4: 1.7, 5: 1.75, 6: 1.8, 8: 1.9, 10: 2.0, 12: 2.1, 16: 2.3, 20: 2.6, 24: 2.9,
          32: 3.5, 48: 4.5, 64: 5.5, 96: 7.0, 128: 9.0}


@pytest.mark.parametrize("start", [s for s in cost.SHAPES if s.startswith("cpu")])
@pytest.mark.parametrize("drafts", [(0.3, 0.8), (0.5, 0.95)])
def test_a_curve_learnt_from_its_own_forwards_reaches_the_oracle_s_choices_from_any_starting_shape(start, drafts):
    """Whatever shipped shape a drafter starts from, the widths it chooses on a machine unlike all of them earn, once
    it has learnt, what the machine's true curve would choose (the oracle's), from its own forwards' times alone."""
    import numpy as np

    from esp.budget.width import choose

    assert all(np.max(np.abs(np.log(np.array(s) / np.array([UNLIKE[q] for q in cost.GRID])))) > 0.25
               for s in cost.SHAPES.values())  # unlike every shipped shape
    true = CostCurve(list(UNLIKE), list(UNLIKE.values()), rate=0.0).table(32)
    curve = CostCurve(list(cost.GRID), list(cost.SHAPES[start]), weight=cost.SHAPE_WEIGHT, scaled=False)
    rng = random.Random(1)
    reached = []
    for step in range(400):
        p = np.cumprod([rng.uniform(*drafts) for _ in range(31)])  # a chain of candidates, best first
        got = choose(p, list(range(31)), 0, 0.0, 32, curve.table(32, explore=True), margin=0.1)
        best = choose(p, list(range(31)), 0, 0.0, 32, true)
        curve.observe(got.rows, 0.05 * true[got.rows] * rng.uniform(0.97, 1.03))
        if step >= 300:  # what the chosen width earns on the true curve, against the oracle's choice
            reached.append((got.expected / true[got.rows]) / (best.expected / true[best.rows]))
    assert sum(reached) / len(reached) > 0.99


def test_a_table_is_read_only_kept_while_the_curve_stands_and_made_anew_when_it_moves():
    """A step reads the table two or three times between samples: one computation, never a stale one."""
    curve = CostCurve(list(cost.GRID), list(cost.SHAPES["cpu-float32-avx512"]), weight=cost.SHAPE_WEIGHT, scaled=False)
    first = curve.table(16, explore=True)
    assert curve.table(16, explore=True) is first and curve.table(16) is not first
    with pytest.raises(ValueError):
        first[3] = 0.0  # read-only: a caller that wrote into it would move every later step's prices
    curve.observe(4, 0.07)
    moved = curve.table(16, explore=True)
    assert moved is not first and moved[4] != first[4]
    assert moved.tolist() == CostCurve.table(curve.copy(), 16, explore=True).tolist()  # what a fresh computation gives

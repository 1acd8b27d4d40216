"""Drafters in one process share no mutable state: each bc=auto drafter decides exactly as it would alone.

Timing is made deterministic: a fake clock advances only when the model runs, by what a fake machine's
forward of that many rows costs, so a step's measured seconds depend on its width alone, not on the
machine or on which drafter ran before it. The stored (process-wide) cost curve differs from the fake
machine, so every drafter corrects its curve online and the back-off books real-looking seconds.
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest

import esp.budget.cost as cost
import esp.decoding.timer as timer
from esp.budget.cost import CostCurve
from esp.drafters.hybrid import HybridDrafter
from esp.decoding.engine import Decoder
from esp.methods import build

SPECS = ["hybrid:bc=auto", "hybrid:bc=auto:sources=esp", "hybrid:bc=auto:sources=lookup+table",
         "esp:bc=auto", "stand:bc=auto", "hybrid:bc=auto:start=hot"]
STORED = CostCurve([1, 2, 4, 8, 64], [1.0, 1.3, 1.5, 2.0, 6.0])  # what the process measured once
MACHINE = CostCurve([1, 2, 4, 8, 64], [1.0, 1.05, 1.1, 1.3, 3.0])  # what a forward takes now


@pytest.fixture
def fake_machine(tiny_lm, monkeypatch):
    """The tiny model on a fake clock; the process's stored curve for it is STORED."""
    lm = tiny_lm("llama")
    clock = SimpleNamespace(now=0.0)
    forward = lm.forward

    def timed(embeds, *a, **k):
        clock.now += MACHINE.predict(len(embeds))
        return forward(embeds, *a, **k)

    monkeypatch.setattr(lm, "forward", timed)
    monkeypatch.setattr(timer, "time", SimpleNamespace(perf_counter=lambda: clock.now))
    monkeypatch.setattr(HybridDrafter, "clock", staticmethod(lambda: clock.now))
    monkeypatch.setattr(cost, "_CURVES", {cost.curve_key(lm): STORED.copy()})
    return lm


def _prompts(vocab: int) -> list[list[int]]:
    base = [(7 * i + 3) % vocab for i in range(12)]
    return [base * 3, [(t + 5) % vocab for t in base] * 2 + base, base[::-1] * 3]


def _decisions(lm, drafters: dict, prompts: list[list[int]]) -> dict[str, list]:
    """Per drafter, per prompt: each step's (rows fed, rows chosen by the budget, tokens emitted)."""
    out = {s: [] for s in drafters}
    for p in prompts:
        for s, d in drafters.items():  # interleaved: prompt by prompt, every drafter in turn
            run = Decoder(lm, d, max_new_tokens=24, trace_mask=False, timings=False).generate(p)
            out[s].append([(len(st.positions), st.cost["rows"], len(st.emitted)) for st in run.steps])
    return out


def test_each_drafter_decides_as_it_would_alone(fake_machine):
    lm = fake_machine
    prompts = _prompts(lm.vocab_size)
    alone = {}
    for s in SPECS:
        alone.update(_decisions(lm, {s: build(s)}, prompts))
    together = _decisions(lm, {s: build(s) for s in SPECS}, prompts)
    assert together == alone
    rows = {r for runs in alone.values() for run in runs for _, r, _ in run[1:]}
    assert 1 in rows and max(rows) > 1  # the widths do vary: plain steps and drafted ones


def test_a_shared_curve_would_change_each_others_widths(fake_machine, monkeypatch):
    """The check above can fail: with one curve object for every drafter (as before), it does."""
    lm = fake_machine
    prompts = _prompts(lm.vocab_size)
    alone = {}
    for s in SPECS:
        monkeypatch.setattr(cost, "_CURVES", {cost.curve_key(lm): STORED.copy()})
        alone.update(_decisions(lm, {s: build(s)}, prompts))
    shared = STORED.copy()
    monkeypatch.setattr(CostCurve, "copy", lambda self: shared)
    monkeypatch.setattr(cost, "_CURVES", {cost.curve_key(lm): shared})
    assert _decisions(lm, {s: build(s) for s in SPECS}, prompts) != alone


def test_drafters_own_their_learning(fake_machine):
    """Calibration, mask values, reliability, back-off, table and curve are each drafter's own objects."""
    lm = fake_machine
    a, b = build("hybrid:bc=auto"), build("hybrid:bc=auto")
    for d in (a, b):
        Decoder(lm, d, max_new_tokens=8, trace_mask=False).generate(_prompts(lm.vocab_size)[0])
    for part in ("calibrator", "mask_value", "reliability", "backoff", "table"):
        assert getattr(a.memory, part) is not getattr(b.memory, part), part
    for part in ("memory", "curve", "mask"):
        assert getattr(a, part) is not getattr(b, part), part
    assert a.memory.calibrator.counts is not b.memory.calibrator.counts and a.curve.t is not b.curve.t
    assert cost._CURVES[cost.curve_key(lm)] == STORED  # the stored curve was only read

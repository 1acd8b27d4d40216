"""The hybrid's start=cold|hot: hot keeps its table, lookup history and calibration across prompts; cold
starts every prompt as a fresh drafter would. Both stay lossless."""
from __future__ import annotations

import pytest

from esp.budget.cost import CostCurve
from esp.drafters.hybrid import HybridDrafter
from esp.decoding.engine import Decoder
from esp.errors import ESPError
from esp.methods import build

FLAT = CostCurve([1, 64], [1.0, 1.0], rate=0.0)
PROMPT = [5, 17, 9, 33, 2, 41, 8, 3, 60, 12]
OTHER = [70, 4, 51, 19, 88, 6, 27, 44, 13, 90]


def _runs(lm, drafter, prompts, n=24):
    ref = {tuple(p): Decoder(lm, max_new_tokens=n).generate(p).tokens for p in prompts}
    runs = []
    for p in prompts:
        run = Decoder(lm, drafter, max_new_tokens=n, trace_mask=False).generate(p)
        assert run.tokens == ref[tuple(p)]  # lossless, hot or cold
        runs.append(run)
    return runs


def _shape(run):
    return [(len(s.positions), len(s.emitted)) for s in run.steps]


@pytest.mark.parametrize("sources", [("table",), ("lookup",)])
def test_hot_drafts_from_the_first_prompt_cold_does_not(tiny_lm, sources):
    lm = tiny_lm("llama")
    hot = _runs(lm, HybridDrafter(bc=16, sources=sources, curve=FLAT, start="hot"), [OTHER, PROMPT, PROMPT])
    cold = _runs(lm, HybridDrafter(bc=16, sources=sources, curve=FLAT), [OTHER, PROMPT, PROMPT])
    # Cold: the second run of the prompt is the first one again, step for step (nothing carried over),
    # and the same as a fresh drafter's.
    fresh = _runs(lm, HybridDrafter(bc=16, sources=sources, curve=FLAT), [PROMPT])[0]
    assert _shape(cold[1]) == _shape(cold[2]) == _shape(fresh)
    # Hot: the second run drafts from what the first one saw (its table rows, or its text to copy).
    assert len(hot[2].steps) < len(hot[1].steps) <= len(fresh.steps)
    assert hot[2].summary.tau > fresh.summary.tau


def test_hot_keeps_calibration_and_cold_restarts_it_from_the_prior(tiny_lm):
    lm = tiny_lm("llama")
    for start in ("cold", "hot"):
        d = HybridDrafter(bc=16, curve=FLAT, start=start)
        _runs(lm, d, [PROMPT])
        learned = d.learned().counts
        assert learned  # the run labelled candidates
        _runs(lm, d, [OTHER])
        again = d.learned().counts
        if start == "hot":
            assert all(again[k][1] >= s for k, (_, s) in learned.items())
        else:  # only OTHER's labels, from the same (here flat) prior: what a fresh drafter learns
            fresh = HybridDrafter(bc=16, curve=FLAT)
            _runs(lm, fresh, [OTHER])
            assert again == fresh.learned().counts


def test_start_and_prior_settings_are_checked():
    assert "start=hot" in build("hybrid:start=hot").describe()
    with pytest.raises(ESPError, match="start must be cold"):
        build("hybrid:start=warm")
    with pytest.raises(ESPError, match="prior must be auto"):
        build("hybrid:prior=maybe")

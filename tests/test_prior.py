"""The calibration prior: saved, shipped or none; every drafter starts from its own copy."""
from __future__ import annotations

import json

import pytest

import esp.budget.prior as prior
from esp.budget.cost import CostCurve
from esp.drafters.hybrid import HybridDrafter
from esp.decoding.engine import Decoder

FLAT = CostCurve([1, 64], [1.0, 1.0], rate=0.0)
PROMPT = [5, 17, 9, 33, 2, 41, 8, 3, 60, 12]


@pytest.fixture
def places(tmp_path, monkeypatch):
    """A fresh machine cache and shipped folder, and no prior read yet in this process."""
    monkeypatch.setenv("ESP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(prior, "SHIPPED", tmp_path / "shipped")
    monkeypatch.setattr(prior, "_PRIORS", {})
    return tmp_path


def _learned(lm) -> prior.Prior:
    d = HybridDrafter(bc=16, curve=FLAT, prior="none", start="hot")
    for _ in range(2):
        Decoder(lm, d, max_new_tokens=16, trace_mask=False).generate(PROMPT)
    return d.learned()


def test_a_saved_prior_round_trips_and_caps_its_counts(tiny_lm, places):
    lm = tiny_lm("llama")
    p = _learned(lm)
    p.counts[(("esp",),)] = [300.0, 1000.0]
    prior.save(lm, p)
    got = prior.prior_for(lm)
    assert got.counts[(("esp",),)] == pytest.approx([60.0, prior.CAP])  # the rate kept, the weight capped
    assert {k for k in got.counts} == set(p.counts)
    key = "esp+lookup+table"
    assert got.reliability[key] == pytest.approx(p.reliability[key], abs=1e-3)  # rounded to 3 places
    assert got.mask_value[key] == [pytest.approx(x, abs=1e-3) for x in p.mask_value[key]]


def test_the_machine_prior_comes_before_the_shipped_one_and_damage_means_none(tiny_lm, places):
    lm = tiny_lm("llama")
    assert prior.prior_for(lm) is None
    shipped = prior.Prior({(("table",),): [1.0, 2.0]})
    prior.save(lm, shipped, prior.SHIPPED / f"{prior.model_key(lm)}.json")
    assert prior.prior_for(lm).counts == shipped.counts
    prior.save(lm, prior.Prior({(("table",),): [2.0, 2.0]}))
    assert prior.prior_for(lm).counts == {(("table",),): [2.0, 2.0]}
    prior.saved_path(lm).write_text("{not json")
    prior.SHIPPED.joinpath(f"{prior.model_key(lm)}.json").write_text(json.dumps({"counts": [["(", 1, 2]]}))
    prior._PRIORS.clear()
    assert prior.prior_for(lm) is None


def test_a_fresh_drafter_starts_from_its_own_copy_of_the_prior(tiny_lm, places):
    lm = tiny_lm("llama")
    prior.save(lm, _learned(lm))
    stored = prior.prior_for(lm)
    a, b = HybridDrafter(bc=16, curve=FLAT), HybridDrafter(bc=16, curve=FLAT)
    Decoder(lm, a, max_new_tokens=16, trace_mask=False).generate(PROMPT)
    assert a.initial.counts == stored.counts  # started from the prior ...
    assert a.learned().counts != stored.counts  # ... learned on from there ...
    assert prior.prior_for(lm).counts == stored.counts  # ... and the stored prior did not move
    flat = HybridDrafter(bc=16, curve=FLAT, prior="none")
    Decoder(lm, flat, max_new_tokens=16, trace_mask=False).generate(PROMPT)
    assert flat.initial.counts == {}
    Decoder(lm, b, max_new_tokens=16, trace_mask=False).generate(PROMPT)
    assert b.learned().counts == a.learned().counts  # the same start and text: the same learning

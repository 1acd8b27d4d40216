"""What a fresh hybrid drafter knows about its model before its first prompt: a calibration prior.

A drafter learns P(accept) per candidate feature (`esp.budget.calibrate.Calibrator`), how much its mask drafts add
and how optimistic its path probabilities run (`reliability`). Learned from scratch, the first prompt pays
for the lesson: every ESP candidate starts at the calibrator's flat 0.2, so the first steps feed rows that
a calibrated drafter would not. A prior is that learning saved from earlier prompts of the same model:

- `prior_for(lm)` finds the model's prior: one saved on this machine (`save`, next to the cost curves),
  else one shipped with the code (`esp/priors/`, for the embedded model; `scripts/make_prior.py` writes
  it from development questions only), else none;
- the process keeps each prior read-only; every drafter starts from its own `copy()`, so drafters never
  share what they learn (see `esp.budget.cost` for the same rule on cost curves).

Counts are capped at `CAP` labels per key when saved: the prior tells a fresh drafter where to start,
and a prompt's own labels can still move it.
"""
from __future__ import annotations

import ast
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from esp.paths import cache_root

CAP = 200.0  # labels kept per calibration key in a saved prior
SHIPPED = Path(__file__).with_name("priors")


@dataclass
class Prior:
    """Calibration counts (key -> [accepted, seen]) and, per source set, mask values and reliability."""

    counts: dict = field(default_factory=dict)
    mask_value: dict[str, list[list[float]]] = field(default_factory=dict)  # sources -> per mask j [sum, steps]
    reliability: dict[str, list[float]] = field(default_factory=dict)  # sources -> [accepted, sum of P]

    def copy(self) -> "Prior":
        """An independent copy for one drafter to learn on. Keys are immutable and values flat lists of floats,
        so copying the lists is enough: a generic deep copy took ~30 ms for the embedded model's prior, paid by
        every fresh drafter (each call of `esp.decode` / custom_generate) before its first token."""
        return Prior({k: list(v) for k, v in self.counts.items()},
                     {k: [list(x) for x in v] for k, v in self.mask_value.items()},
                     {k: list(v) for k, v in self.reliability.items()})

    def to_dict(self) -> dict:
        """JSON-ready, counts capped at CAP labels per key (keys written as Python literals)."""
        def capped(a: float, s: float) -> list[float]:
            f = min(1.0, CAP / s) if s > 0 else 1.0
            return [round(a * f, 3), round(s * f, 3)]

        return {"counts": sorted([repr(k), *capped(a, s)] for k, (a, s) in self.counts.items()),
                "mask_value": {k: [capped(a, s) for a, s in v] for k, v in self.mask_value.items()},
                "reliability": {k: capped(*v) for k, v in self.reliability.items()}}

    @classmethod
    def from_dict(cls, d: dict) -> "Prior":
        return cls({ast.literal_eval(k): [float(a), float(s)] for k, a, s in d["counts"]},
                   {k: [[float(a), float(s)] for a, s in v] for k, v in d["mask_value"].items()},
                   {k: [float(a), float(s)] for k, (a, s) in d["reliability"].items()})


def model_key(lm) -> str:
    """The file name a model's prior goes under (its name; the prior does not depend on the machine)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", lm.name).strip("_")


def saved_path(lm) -> Path:
    return cache_root() / "priors" / f"{model_key(lm)}.json"


_PRIORS: dict[str, Prior | None] = {}  # model key -> its prior as read: read only, handed out as copies


def prior_for(lm) -> Prior | None:
    """A copy of `lm`'s prior: saved on this machine, else shipped, else None."""
    key = model_key(lm)
    if key not in _PRIORS:
        _PRIORS[key] = None
        for path in (saved_path(lm), SHIPPED / f"{key}.json"):
            try:
                _PRIORS[key] = Prior.from_dict(json.loads(path.read_text()))
                break
            except (OSError, ValueError, KeyError, TypeError, SyntaxError):
                continue  # missing or damaged: the next place, else no prior
    got = _PRIORS[key]
    return None if got is None else got.copy()


def save(lm, prior: Prior, path: Path | None = None) -> Path:
    """Write `prior` as `lm`'s prior on this machine (or to `path`); later processes start from it."""
    path = path or saved_path(lm)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    d = prior.to_dict()
    counts = ",\n".join(json.dumps(c) for c in d["counts"])  # one key a line: a readable, diffable file
    tmp.write_text(f'{{"counts": [\n{counts}\n],\n"mask_value": {json.dumps(d["mask_value"])},\n'
                   f'"reliability": {json.dumps(d["reliability"])}}}\n')
    tmp.replace(path)
    _PRIORS.pop(model_key(lm), None)
    return path

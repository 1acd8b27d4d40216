"""What a forward of q new rows costs on this machine: measured once, kept on disk, corrected online.

The budgeted drafters pick each step's width by expected tokens per second, (1 + sum P) / t(rows), so
they need t(q) for the model, device, dtype and thread count at hand. The first use times one forward
(LM head on every row, as the engine does) over a realistic cache for a grid of q, keeps the medians
as a piecewise-linear curve, and writes it next to the converted-model cache; later starts read it in
milliseconds. Every step's measured forward then nudges the curve (machine load and cache length drift).

The curve is not forced to be monotone, on purpose: on a CPU, 2-3 rows can cost more than 4-8, because
the BLAS runs a few rows as repeated matrix-vector products and switches to a matrix-matrix kernel only
from about 4 rows (SmolLM2's LM head: 6.9 ms for 1 row, 20.7 ms for 3, 11.7 ms for 4). A width choice
that reads the true curve then prefers 4 rows to 2, rather than paying more for less.
"""
from __future__ import annotations

import json
import os
import re
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .paths import cache_root
GRID = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64, 96, 128)
CONTEXT = 300  # cached tokens under the timed forwards: a Spec-Bench prompt plus some output


@dataclass
class CostCurve:
    """Seconds per forward of q new rows: piecewise-linear through knots (q, t), extrapolated linearly."""

    q: list[int]
    t: list[float]
    rate: float = 0.05  # online correction: share of each step's error moved into the curve
    key: str = ""
    steps: int = field(default=0, compare=False)  # online corrections so far

    def __post_init__(self):
        if len(self.q) != len(self.t) or not self.q or sorted(set(self.q)) != list(self.q) or self.q[0] < 1:
            raise ValueError("a cost curve needs increasing q >= 1 with one time each")
        self.t = [float(x) for x in self.t]

    def _segment(self, rows: float) -> tuple[int, float]:
        """Knot index i and weight w so that rows sits at (1-w) q[i] + w q[i+1] (w may leave [0, 1] at the ends)."""
        q = self.q
        if len(q) == 1:
            return 0, 0.0
        i = max(0, min(len(q) - 2, next((j for j in range(len(q) - 1) if rows <= q[j + 1]), len(q) - 2)))
        return i, (rows - q[i]) / (q[i + 1] - q[i])

    def predict(self, rows: int | float) -> float:
        """Seconds for a forward of `rows` new rows."""
        if len(self.q) == 1:
            return self.t[0] * rows / self.q[0]
        i, w = self._segment(rows)
        return max(self.t[i] + w * (self.t[i + 1] - self.t[i]), 1e-9)

    def table(self, upto: int) -> torch.Tensor:
        """t(r) for r = 0..upto as one tensor (index 0 unused), for vectorised width choices: `predict`
        for every r at once (it is read every step, and the curve moves every step)."""
        r = torch.arange(upto + 1, dtype=torch.float64)
        q, t = torch.tensor(self.q, dtype=torch.float64), torch.tensor(self.t, dtype=torch.float64)
        if len(q) == 1:
            out = t[0] * r / q[0]
        else:
            i = (torch.searchsorted(q, r) - 1).clamp(0, len(q) - 2)  # the segment r falls in, or the end one
            w = (r - q[i]) / (q[i + 1] - q[i])
            out = (t[i] + w * (t[i + 1] - t[i])).clamp(min=1e-9)
        out[0] = 0.0
        return out

    def observe(self, rows: int, seconds: float) -> None:
        """Move the curve a little towards one measured forward (least-mean-squares on the two knots)."""
        if self.rate <= 0 or seconds <= 0:
            return
        err = seconds - self.predict(rows)
        if len(self.q) == 1:
            self.t[0] += self.rate * err
        else:
            i, w = self._segment(rows)
            w = min(max(w, 0.0), 1.0)
            self.t[i] += self.rate * (1 - w) * err
            self.t[i + 1] += self.rate * w * err
        self.t = [max(x, 1e-6) for x in self.t]
        self.steps += 1

    def to_dict(self) -> dict:
        return {"q": list(self.q), "t": [round(x, 6) for x in self.t]}

    @classmethod
    def from_dict(cls, d: dict, **kw) -> "CostCurve":
        return cls(list(d["q"]), list(d["t"]), **kw)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def causal_mask(q: int, past: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """(1, 1, q, past + q) additive mask: the prefix and earlier new rows are visible."""
    m = torch.full((q, past + q), torch.finfo(dtype).min, dtype=dtype, device=device)
    m[:, :past] = 0
    m[:, past:] = m[:, past:].triu(1)
    return m[None, None]


@torch.inference_mode()
def measure(lm, grid: tuple[int, ...] = GRID, context: int = CONTEXT, repeats: int = 5) -> dict[int, float]:
    """Median seconds of one forward of q new rows (LM head on every row) over a `context`-token cache."""
    from .kvcache import commit

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, lm.vocab_size, (context + max(grid),), generator=g).tolist()
    cache = lm.new_cache()
    dev = lm.device
    lm.forward(lm.embed(ids[:context]), torch.arange(context, device=dev), causal_mask(context, 0, lm.dtype, dev), cache)
    out = {}
    for q in grid:
        emb = lm.embed(ids[context : context + q])
        pos = torch.arange(context, context + q, device=dev)
        mask = causal_mask(q, context, lm.dtype, dev)
        times = []
        for r in range(repeats + 1):  # the first run warms up kernels and allocator for this size
            _sync(dev)
            t = time.perf_counter()
            h, _ = lm.forward(emb, pos, mask, cache)
            lm.head(h)
            _sync(dev)
            commit(cache, context, [])  # back to the same cache for the next timing
            if r:
                times.append(time.perf_counter() - t)
        out[q] = statistics.median(times)
    return out


def curve_key(lm) -> str:
    """Which machine setting a curve belongs to: model, device, dtype, threads."""
    dev = lm.device.type if lm.device.type != "cuda" else torch.cuda.get_device_name(lm.device).replace(" ", "_")
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", lm.name)
    return f"{name}-{dev}-{str(lm.dtype).removeprefix('torch.')}-{torch.get_num_threads()}t"


def cache_dir() -> Path:
    """Next to the converted-model cache (ESP_CACHE overrides both)."""
    return cache_root() / "costs"


_CURVES: dict[str, CostCurve] = {}


def curve_for(lm, grid: tuple[int, ...] = GRID, repeats: int = 5) -> CostCurve:
    """This machine's curve for `lm`: from memory, else from disk, else measured now and saved."""
    key = curve_key(lm)
    if key in _CURVES:
        return _CURVES[key]
    path = cache_dir() / f"{key}.json"
    curve = None
    if path.exists():
        try:
            curve = CostCurve.from_dict(json.loads(path.read_text()), key=key)
        except (ValueError, KeyError, TypeError):
            curve = None  # a damaged file is measured again
    if curve is None:
        times = measure(lm, grid, repeats=repeats)
        curve = CostCurve(list(times), list(times.values()), key=key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(curve.to_dict()))
            tmp.replace(path)
        except OSError:
            pass  # a read-only cache only costs a re-measure next start
    _CURVES[key] = curve
    return curve

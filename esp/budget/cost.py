"""What a forward of q new rows costs on this machine: measured once, kept on disk, corrected online.

The budgeted drafters pick each step's width by expected tokens per second, (1 + sum P) / t(rows), so
they need t(q) for the model, device, dtype and thread count at hand. The first use times one forward
(LM head on every row, as the engine does) over a realistic cache for a grid of q, keeps the medians
as a piecewise-linear curve, and writes it next to the converted-model cache; later starts read it in
milliseconds. Every step's measured forward then nudges the curve (machine load and cache length drift).

The curve is not forced to be monotone, on purpose: on a CPU, 2-3 rows can cost more than 4-8, because
the BLAS runs a few rows as repeated matrix-vector products and switches to a matrix-matrix kernel only
from about 4 rows (SmolLM2's LM head: 6.9 ms for 1 row, 20.7 ms for 3, 11.7 ms for 4). A width choice
that reads the true curve then prefers 4 rows to 2, rather than paying more for less. Only falls within
the timing noise are smoothed away (`smooth`): a fall larger than its knots' measured spread is kept.

Each drafter corrects its own copy: the process keeps the measured curves (`curve_for` reads them from
disk or measures them once) as read-only data and hands every drafter a fresh copy, so drafters in one
process never move each other's width choices.

A curve measured under one load goes stale when the load changes. Each one-row step's correction moves
t(1); when the corrected t(1) stays more than DRIFT away from the measured one for DRIFT_STEPS one-row
steps in a row, the curve is `stale` and the drafter measures it again at its next prompt (`refresh`).
"""
from __future__ import annotations

import json
import os
import re
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from esp.paths import cache_root
GRID = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64, 96, 128)
CONTEXT = 300  # cached tokens under the timed forwards: a Spec-Bench prompt plus some output
DRIFT = 0.2  # t(1) off the measured curve by more than this share ...
DRIFT_STEPS = 32  # ... for this many one-row steps in a row: the curve is measured again
NOISE = 1.0  # a fall between neighbouring knots within this many times their summed spreads is noise
REMEASURE_REPEATS = 3  # timings per width when a stale curve is measured again mid-session (5 at first use)


@dataclass
class CostCurve:
    """Seconds per forward of q new rows: piecewise-linear through knots (q, t), extrapolated linearly."""

    q: list[int]
    t: list[float]
    rate: float = 0.05  # online correction: share of each step's error moved into the curve
    key: str = ""  # the machine setting it was measured for; a curve without one (given by hand) never goes stale
    steps: int = field(default=0, compare=False)  # online corrections so far
    patience: int = field(default=DRIFT_STEPS, compare=False)  # one-row steps off the curve that make it stale
    off: int = field(default=0, compare=False)  # one-row steps in a row with t(1) off by more than DRIFT
    generation: int = field(default=0, compare=False)  # which measurement of its key in this process it copies

    def __post_init__(self):
        if len(self.q) != len(self.t) or not self.q or sorted(set(self.q)) != list(self.q) or self.q[0] < 1:
            raise ValueError("a cost curve needs increasing q >= 1 with one time each")
        self.t = [float(x) for x in self.t]
        self.base = self.t[0]  # t(q[0]) as measured: what drift is judged against

    @property
    def drift(self) -> float:
        """The online-corrected t(1) over the measured one."""
        return self.t[0] / self.base

    @property
    def stale(self) -> bool:
        """True once t(1) has stayed more than DRIFT off the measured curve for `patience` one-row steps."""
        return bool(self.key) and self.off >= self.patience

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

    def table(self, upto: int) -> np.ndarray:
        """t(r) for r = 0..upto as one host array (index 0 unused), for vectorised width choices: `predict`
        for every r at once (it is read every step, and the curve moves every step)."""
        r = np.arange(upto + 1, dtype=np.float64)
        q, t = np.asarray(self.q, dtype=np.float64), np.asarray(self.t, dtype=np.float64)
        if len(q) == 1:
            out = t[0] * r / q[0]
        else:
            i = np.clip(np.searchsorted(q, r) - 1, 0, len(q) - 2)  # the segment r falls in, or the end one
            w = (r - q[i]) / (q[i + 1] - q[i])
            out = np.maximum(t[i] + w * (t[i + 1] - t[i]), 1e-9)
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
        if rows <= self.q[0]:  # only these move t(1)
            self.off = self.off + 1 if max(self.drift, 1 / self.drift) > 1 + DRIFT else 0

    def copy(self) -> "CostCurve":
        """An independent curve with this one's knots and drift settings, for one drafter to correct."""
        return CostCurve(list(self.q), list(self.t), self.rate, self.key, patience=self.patience,
                         generation=self.generation)

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


def measure(lm, grid: tuple[int, ...] = GRID, context: int = CONTEXT, repeats: int = 5) -> dict[int, float]:
    """Median seconds of one forward of q new rows (LM head on every row) over a `context`-token cache."""
    return {q: statistics.median(ts) for q, ts in samples(lm, grid, context, repeats).items()}


def spread(ts: list[float]) -> float:
    """The timing noise of a median: the median absolute deviation of the runs."""
    m = statistics.median(ts)
    return statistics.median(abs(x - m) for x in ts)


def smooth(t: list[float], noise: list[float]) -> list[float]:
    """`t` with its noise falls pooled away: more rows never cost less, unless they measurably do.

    Pool-adjacent-violators restricted to small violations: a knot lower than the one before it by at
    most NOISE x (their spreads summed) is merged with it (the mean of the pooled knots, spreads taken as
    the largest), repeatedly; a larger fall is real (a BLAS kernel switch) and kept."""
    blocks: list[list[float]] = []  # [sum of times, knots, spread]
    for x, s in zip(t, noise):
        blocks.append([x, 1, s])
        while len(blocks) > 1:
            (a, na, sa), (b, nb, sb) = blocks[-2], blocks[-1]
            fall = a / na - b / nb
            if fall <= 0 or fall > NOISE * (sa + sb):
                break
            blocks[-2:] = [[a + b, na + nb, max(sa, sb)]]
    return [b[0] / b[1] for b in blocks for _ in range(int(b[1]))]


@torch.inference_mode()
def samples(lm, grid: tuple[int, ...] = GRID, context: int = CONTEXT, repeats: int = 5) -> dict[int, list[float]]:
    """Seconds of `repeats` timed forwards of q new rows (LM head on every row) over a `context`-token cache."""
    from esp.decoding.kvcache import commit

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, lm.vocab_size, (context + max(grid),), generator=g).tolist()
    cache = lm.new_cache()
    dev = lm.device
    lm.forward(lm.embed(ids[:context]), torch.arange(context, device=dev), causal_mask(context, 0, lm.dtype, dev), cache)
    inputs = {q: (lm.embed(ids[context : context + q]), torch.arange(context, context + q, device=dev),
                  causal_mask(q, context, lm.dtype, dev)) for q in grid}

    def timed(q: int) -> float:
        emb, pos, mask = inputs[q]
        _sync(dev)
        t = time.perf_counter()
        h, _ = lm.forward(emb, pos, mask, cache)
        lm.head(h)
        _sync(dev)
        commit(cache, context, [])  # back to the same cache for the next timing
        return time.perf_counter() - t

    for q in grid:  # a first run per width warms up kernels and allocator for that size
        timed(q)
    # Then the widths in turn, a round per repeat: a change in the machine's speed during the sweep (another
    # job, a throttled core) moves every width alike instead of bending the curve (a timed-in-a-row width
    # once came out at t(16) = 1.57 t(1), below t(8); 2.04 when timed again).
    out: dict[int, list[float]] = {q: [] for q in grid}
    for _ in range(repeats):
        for q in grid:
            out[q].append(timed(q))
    return out


def curve_key(lm) -> str:
    """Which machine setting a curve belongs to: model, device, dtype, threads."""
    dev = lm.device.type if lm.device.type != "cuda" else torch.cuda.get_device_name(lm.device).replace(" ", "_")
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", lm.name)
    return f"{name}-{dev}-{str(lm.dtype).removeprefix('torch.')}-{torch.get_num_threads()}t"


def cache_dir() -> Path:
    """Next to the converted-model cache (ESP_CACHE overrides both)."""
    return cache_root() / "costs"


_CURVES: dict[str, CostCurve] = {}  # key -> the latest measured curve: read only, handed out as copies


def curve_for(lm, grid: tuple[int, ...] = GRID, repeats: int = 5) -> CostCurve:
    """A fresh copy of this machine's curve for `lm`: from memory, else from disk, else measured now and saved."""
    key = curve_key(lm)
    if key in _CURVES:
        return _CURVES[key].copy()
    path = cache_dir() / f"{key}.json"
    curve = None
    if path.exists():
        try:
            curve = CostCurve.from_dict(json.loads(path.read_text()), key=key)
        except (ValueError, KeyError, TypeError):
            curve = None  # a damaged file is measured again
    if curve is None:
        curve = _measured(lm, key, grid, repeats)
    _CURVES[key] = curve
    return curve.copy()


def refresh(lm, old: CostCurve, cap: int | None = None, grid: tuple[int, ...] = GRID,
            repeats: int = REMEASURE_REPEATS) -> CostCurve:
    """A copy of `lm`'s curve measured again (`old`, a drafter's copy, went stale), saved for later copies.

    It runs in the middle of a session, inside a prompt's time, so it is kept cheap: `repeats` timings per
    width, and with `cap` (the widest block the drafter may pick) only the grid up to the first width
    that covers it. Wider blocks extrapolate the last segment. On a 0.5B model on a CPU that is about half
    the forwards of a first measurement.
    A re-measure that finds t(1) where `old` had it (within DRIFT) shows the drift came from elsewhere,
    e.g. longer contexts than the timed one: the next re-measure then waits twice as long, so useless
    re-measures stay O(log steps). A measurement made in this process after the one `old` copies is the
    machine's newer state, not another drafter's: it is copied instead of timing the grid again."""
    key = old.key or curve_key(lm)
    latest = _CURVES.get(key)
    if latest is not None and latest.generation > old.generation:
        return latest.copy()
    if cap is not None:
        grid = tuple(q for i, q in enumerate(grid) if i < 2 or grid[i - 1] < cap)
    new = _measured(lm, key, grid, repeats)
    same = max(new.t[0] / old.base, old.base / new.t[0]) <= 1 + DRIFT
    new.patience = old.patience * 2 if same else DRIFT_STEPS
    new.generation = max(old.generation, latest.generation if latest is not None else 0) + 1
    _CURVES[key] = new
    return new.copy()


def _measured(lm, key: str, grid: tuple[int, ...], repeats: int) -> CostCurve:
    """Time the grid, smooth the noise, save (with the raw medians and spreads) and return the curve."""
    runs = samples(lm, grid, repeats=repeats)
    raw = [statistics.median(ts) for ts in runs.values()]
    noise = [spread(ts) for ts in runs.values()]
    curve = CostCurve(list(runs), smooth(raw, noise), key=key)
    path = cache_dir() / f"{key}.json"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps({**curve.to_dict(), "raw": [round(x, 6) for x in raw],
                                   "spread": [round(x, 6) for x in noise]}))
        tmp.replace(path)
    except OSError:
        pass  # a read-only cache only costs a re-measure next start
    return curve

"""What a forward of q new rows costs on this machine: a prior, then learned from the run's own forwards.

The budgeted drafters pick each step's width by expected tokens per second, (1 + sum P) / t(rows), so
they need t(q) for the model, device, dtype and thread count at hand; only its shape, t(q) / t(1), moves
the choice. A drafter never times anything to get it, and no call of a caller's waits for a sweep:

- Prior (`curve_for`). A curve stored on this machine (by an explicit `calibrate`), else a shipped
  default shape for the device and dtype (`SHAPES`, in one-row units), whose level the first measured
  forward sets. A stored curve counts as STORED_WEIGHT samples per knot, or BUSY_WEIGHT when it was
  measured on a busy machine (it records when and under what load average); a shipped shape is a guess
  (SHAPE_WEIGHT, none): the first sample at a knot replaces it there. No shipped shape needs to fit this
  machine: they only decide which widths the first steps try.
- Learning (`CostCurve.observe`). Every step's forward is a timed sample at its width, taken without a
  device sync (`esp.decoding.timer.ForwardTimer`). A sample's log error moves the whole curve by LEVEL_RATE (the
  machine's load: every width alike), and what is left moves the width's knots (the one-row anchor too) by a
  running mean over their samples (prior included; never less than `rate`). So widths are compared by their
  ratio to the level the last few steps set, not to a t(1) from another moment: a load that comes and goes
  moves the level, not the shape. A stale stored curve is corrected the same way, from steps.
- Exploration (`table(..., explore=True)`, what the width choices read). A knot is priced by what the
  measured knots (EXPLORE_N samples or more) say wherever that is less than its own value (`_hopeful`: their
  straight line between them, past the widest the prior's shape from it, below the narrowest rows in
  proportion), and EXPLORE x EXPLORE_N / (EXPLORE_N + n) cheaper at n samples. So a width the prior
  overprices, or one estimated from a few early samples, still gets tried, and then it is measured. The
  cost is bounded: a step chosen under the discount loses at most the discount's share of its expected rate
  (if the estimate is right), so a knot's discounts over its first n samples sum to about EXPLORE x
  EXPLORE_N x ln(1 + n / EXPLORE_N) steps' worth of rate (O(log n)), none at all on a stored curve measured
  idle; a width priced hopefully is measured at its first samples, and the per-call loss cap
  (`esp.budget.width.Backoff`) bounds what any of it costs a call.
- Sweep (`calibrate`, public as `esp.calibrate`; `esp-bench --calibrate`, the app at start-up). It times
  each width right after a one-row forward, a round per repeat, and keeps the median of those adjacent
  ratios: a change of machine speed during the sweep moves a width and its partner alike.

The curve is not forced to be monotone, on purpose: on a CPU, 2-3 rows can cost more than 4-8, because
the BLAS runs a few rows as repeated matrix-vector products and switches to a matrix-matrix kernel only
from about 4 rows. Only falls within the timing noise are smoothed away (`smooth`).

Each drafter corrects its own copy: the process keeps the priors (`curve_for`) as read-only data and hands
every drafter a fresh copy, so drafters in one process never move each other's width choices.
"""
from __future__ import annotations

import bisect
import functools
import json
import math
import os
import re
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from esp.device import cpu_capability, cpu_vendor, native_bf16
from esp.models.timing import CONTEXT, GRID, samples, spread
from esp.paths import cache_root, write_atomic

NOISE = 1.0  # a fall between neighbouring knots within this many times their summed spreads is noise
LEVEL_RATE = 0.25  # share of a sample's log error that moves the whole curve (load moves every width alike)
CLIP = 0.4  # a sample's log error is clipped to this: a preempted step moves the curve by a bounded amount
STORED_WEIGHT = 4.0  # samples per knot a stored curve counts as (measured on an idle machine)
BUSY_WEIGHT = 1.0  # ... measured with the load average at BUSY of the cores or more, or of unknown load
BUSY = 0.5
SHAPE_WEIGHT = 0.0  # ... a shipped default shape: a guess, which the first sample at a knot replaces
EXPLORE = 0.2  # a knot with no samples is priced this share cheaper for the width choice ...
EXPLORE_N = 2.0  # ... falling as EXPLORE_N / (EXPLORE_N + n) with its n samples; a knot is measured from this many
PAD_GAIN = 0.05  # a batch's block is padded to a wider one only where that saves this share of its time
SWEEP_REPEATS = 5  # rounds of paired timings a sweep takes (the bench's oracle curve: these, then one a question)

# Default shapes, t(q) / t(1), where nothing is stored. CPU float32 with AVX2 kernels: a 2-core AVX2 CPU
# (t(2) = 1.07, t(3) = 1.13, t(4) = 1.47, t(8) = 1.8, t(64) = 3.1), smoothed up a little. CPU float32 with AVX512
# kernels on an AMD CPU: a float matmul of 2-3 rows runs a slower kernel than one of 4-8, so 2-3 rows cost more
# than 4-8 (a 2-core AVX512 EPYC: t(2) = 1.5-1.55, t(3) = 1.8-2.05, t(4..8) = 1.2-1.55, t(16) = 1.5-1.9); on an
# Intel one they do not (a 2-core AMX Xeon, 2 threads, 2026-12-03: 1.2, 1.29, 1.73, 1.77, 1.77, 2.0, 2.26 at
# 2-10 rows, 2.17 at 16, 5.38 at 128); CPU bfloat16 where native (AMX / AVX512-BF16): nearly flat to 32 rows;
# CUDA: a small model's forward reads the weights once, so rows are nearly free. Packed CPU kernels
# (esp.models.cpu_kernels, oneDNN), a 2-core AVX512-BF16 EPYC, SmolLM2-135M, 2026-12-05: float32 t(2) = 1.14,
# t(4) = 1.13, t(8) = 1.28, t(16) = 1.5; held to AVX2, 1.16, 1.29, 1.51, 2.03; bfloat16 1.09, 1.14, 1.28, 1.43.
SHAPES = {
    "cpu-float32": (1.0, 1.3, 1.4, 1.45, 1.5, 1.55, 1.7, 1.8, 1.9, 2.1, 2.25, 2.4, 2.7, 3.0, 3.3, 4.0, 4.6),
    "cpu-float32-avx512": (1.0, 1.5, 1.9, 1.4, 1.4, 1.45, 1.45, 1.6, 1.65, 1.75, 1.8, 1.9, 2.3, 2.9, 3.4, 4.6, 5.4),
    "cpu-float32-avx512-intel": (1.0, 1.2, 1.3, 1.7, 1.75, 1.8, 2.0, 2.25, 2.25, 2.2, 2.3, 2.4, 2.7, 3.2, 3.8, 4.4,
                                 5.4),
    "cpu-bfloat16": (1.0, 1.05, 1.08, 1.1, 1.12, 1.14, 1.18, 1.22, 1.26, 1.35, 1.45, 1.55, 1.75, 2.1, 2.5, 3.3, 4.0),
    "cpu-float32-packed": (1.0, 1.2, 1.25, 1.3, 1.35, 1.4, 1.5, 1.7, 1.8, 2.05, 2.25, 2.5, 2.95, 4.3, 5.2, 7.2, 9.3),
    "cpu-float32-packed-avx512": (1.0, 1.15, 1.17, 1.15, 1.17, 1.2, 1.28, 1.35, 1.4, 1.5, 1.6, 1.8, 2.1, 2.7, 3.2, 4.4,
                                  5.5),
    "cpu-bfloat16-packed": (1.0, 1.1, 1.1, 1.14, 1.15, 1.17, 1.28, 1.34, 1.36, 1.45, 1.55, 1.8, 2.05, 2.7, 3.35, 4.45,
                            5.7),
    "cuda": (1.0, 1.01, 1.02, 1.02, 1.03, 1.03, 1.04, 1.05, 1.06, 1.08, 1.1, 1.12, 1.15, 1.22, 1.3, 1.45, 1.6),
}


@dataclass
class CostCurve:
    """Seconds per forward of q new rows: piecewise-linear through knots (q, t), extrapolated linearly,
    learning from measured forwards (see the module's docstring). `rate` = 0 freezes it; otherwise it is the
    least share of a sample's error a knot takes once its samples are many. `weight`: the samples per knot
    the knots as given count as. `scaled=False`: `t` is a shape in one-row units until a first sample."""

    q: list[int]
    t: list[float]
    rate: float = 0.05
    key: str = ""  # the machine setting it belongs to ("" for a curve given by hand)
    weight: float = field(default=STORED_WEIGHT, compare=False)
    scaled: bool = field(default=True, compare=False)
    steps: int = field(default=0, compare=False)  # samples learned so far
    n: list[float] | None = field(default=None, compare=False)  # samples per knot, prior weight included
    shape: list[float] | None = field(default=None, compare=False)  # the knots as first given (the prior's shape)
    _last: dict = field(default_factory=dict, init=False, compare=False, repr=False)  # the last `table` of each kind

    def __post_init__(self):
        if len(self.q) != len(self.t) or not self.q or sorted(set(self.q)) != list(self.q) or self.q[0] < 1:
            raise ValueError("a cost curve needs increasing q >= 1 with one time each")
        if any(not (x > 0 and math.isfinite(x)) for x in self.t):
            raise ValueError("a cost curve's times must be positive numbers")
        self.t = [float(x) for x in self.t]
        self.n = [float(self.weight)] * len(self.q) if self.n is None else list(self.n)
        self.shape = list(self.t) if self.shape is None else list(self.shape)
        self.base = self.t[0]  # t(q[0]) as the prior had it: what `drift` is judged against

    @property
    def drift(self) -> float:
        """t(1) now over the prior's (for a shape, over the level its first sample set)."""
        return self.t[0] / self.base

    def _segment(self, rows: float) -> tuple[int, float]:
        """Knot index i and weight w so that rows sits at (1-w) q[i] + w q[i+1] (w may leave [0, 1] at the ends)."""
        q = self.q
        if len(q) == 1:
            return 0, 0.0
        i = bisect.bisect_left(q, rows, 1, len(q) - 1) - 1  # the first segment ending at or past rows, else the last
        return i, (rows - q[i]) / (q[i + 1] - q[i])

    def predict(self, rows: int | float) -> float:
        """Seconds for a forward of `rows` new rows (one-row units while a shape has no sample yet)."""
        if len(self.q) == 1:
            return self.t[0] * rows / self.q[0]
        i, w = self._segment(rows)
        return max(self.t[i] + w * (self.t[i + 1] - self.t[i]), 1e-9)

    def least(self, lo: int, hi: int) -> float:
        """The least of `predict(r)` over r = lo..hi (lo <= hi), from the knots alone: a straight line between two
        knots is least at one of its ends, so no table need be built to know that no width there is cheap."""
        return min(self.predict(lo), self.predict(hi), *(t for x, t in zip(self.q, self.t) if lo < x < hi))

    def _interp(self, values: np.ndarray, upto: int) -> np.ndarray:
        """Values at the knots (the last axis; several rows at once) at r = 0..upto."""
        if len(self.q) == 1:
            return values[..., :1] * np.arange(upto + 1, dtype=np.float64) / self.q[0]
        i, j, w = _segments(tuple(self.q), upto)
        return values[..., i] + w * (values[..., j] - values[..., i])

    def table(self, upto: int, explore: bool = False) -> np.ndarray:
        """t(r) for r = 0..upto as one host array (index 0 unused), for vectorised width choices: `predict`
        for every r at once (it is read every step, and the curve moves every step). `explore`: with the
        discount on knots of few samples (what the width choice reads; see the module's docstring). Read-only: a
        step reads it two or three times between two samples, so the last one of each kind is kept until the curve
        moves (a budgeted step reads both: its choice the discounted one, its loss cap the plain one)."""
        # A frozen curve, or a stored sweep measured idle (every knot measured, no discount), explores nothing: its
        # discounted table is its own, so a step that reads both builds one.
        explores = self.rate > 0 and (self.weight < EXPLORE_N or min(self.n) < EXPLORE_N)
        explore = explore and explores
        key = (upto, self.rate, self.weight, tuple(self.t), tuple(self.n))
        last = self._last.get(explore)
        if last is not None and last[0] == key:
            return last[1]
        # Both kinds in one interpolation of their knots where the curve explores: a budgeted step reads both, and
        # right after a forward every numpy call runs cache-cold, so the call count is the cost.
        knots = self._interp(np.array([self.t, *((self._hopeful(), self._discounts()) if explores else ())]), upto)
        made = {False: np.maximum(knots[0], 1e-9)}
        if explores:
            made[True] = np.maximum(knots[1], 1e-9) * (1 - np.clip(knots[2], 0.0, EXPLORE))
        for kind, out in made.items():
            out[0] = 0.0
            out.setflags(write=False)
            self._last[kind] = (key, out)
        return made[explore]

    def _hopeful(self) -> list[float]:
        """The knots, each of fewer than EXPLORE_N samples priced at what the measured knots say where that is less
        than its prior: between two measured knots, their straight line; past the widest, that knot's time times the
        prior's shape from it on. So a prior dearer than this machine (another vendor's shape, or none that fits)
        locks out no width the run's own forwards suggest is cheap: it gets tried, and then it is measured."""
        # Plain Python over the few knots: read right after a forward, when every numpy call runs cache-cold,
        # this is a third of the time of the same in numpy (52 against 170 us a step on the 2-core EPYC).
        t, q, shape = self.t, self.q, self.shape
        known = [n >= EXPLORE_N for n in self.n]
        if not any(known):
            return list(t)
        m, out = len(t), list(t)
        below, a = [], -1  # the widest measured knot at or below each
        for j in range(m):
            a = j if known[j] else a
            below.append(a)
        above, b = [m] * m, m  # the narrowest measured knot at or above each
        for j in range(m - 1, -1, -1):
            b = above[j] = j if known[j] else b
        for j in range(m):
            a, b = below[j], above[j]
            if known[j]:
                continue
            if a >= 0 and b < m:  # between two measured knots: their straight line
                guess = t[a] + (q[j] - q[a]) / (q[b] - q[a]) * (t[b] - t[a])
            elif a >= 0:  # past the widest: the prior's shape from it
                guess = t[a] * shape[j] / shape[a]
            else:  # narrower than every measured knot: a cost in proportion to rows
                guess = t[b] * q[j] / q[b]
            out[j] = min(out[j], guess)
        return out

    def trusted(self, upto: int) -> np.ndarray:
        """For r = 0..upto, whether t(r) rests on measurements (EXPLORE_N samples at its knots, a stored sweep
        measured idle counting as such) rather than on a shipped shape or a busy sweep."""
        known = np.array([1.0] + [float(n >= EXPLORE_N) for n in self.n[1:]])
        return self._interp(known, upto) >= 1.0

    def _discounts(self) -> list[float]:
        """The exploration discount at each knot (`table` interpolates it between knots, at most EXPLORE): EXPLORE on a
        knot with no samples, falling as EXPLORE_N / (EXPLORE_N + n) with its n samples; on the one-row anchor's width
        too (so on a fresh shape the ratios to t(1) that the width choice reads are the shape's until the anchor has
        samples, and then a wider width's worst case t(r) / t(1) - 1 falls by up to EXPLORE x t(r) / t(1) within a few
        plain steps); never on a stored sweep measured idle."""
        if self.weight >= EXPLORE_N:
            return [0.0] * len(self.n)
        return [EXPLORE * EXPLORE_N / (EXPLORE_N + n) for n in self.n]

    def observe(self, rows: int, seconds: float) -> None:
        """Learn from one measured forward of `rows` rows: the level, then the width's knots (see above)."""
        if self.rate <= 0 or not (seconds > 0 and math.isfinite(seconds)):
            return
        self.steps += 1
        i, w = self._segment(rows)
        w = min(max(w, 0.0), 1.0)
        if not self.scaled:  # a shape in one-row units: the first sample sets its level
            f = seconds / self.predict(rows)
            self.t = [x * f for x in self.t]
            self.base, self.scaled = self.t[0], True
            for j, wj in ((i, 1 - w), (i + 1, w)):
                if j < len(self.q):
                    self.n[j] += wj
            return
        err = max(-CLIP, min(CLIP, math.log(seconds / self.predict(rows))))
        level = max(1 / (self.steps + 1), LEVEL_RATE)  # the first samples after a stored curve set its level
        rest = (1 - level) * err
        for j, wj in ((i, 1 - w), (i + 1, w)):
            if wj <= 0 or j >= len(self.q):
                continue
            self.n[j] += wj
            b = max(wj / self.n[j], self.rate * wj)
            self.t[j] *= math.exp(b * rest)
        f = math.exp(level * err)
        self.t = [max(x * f, 1e-7) for x in self.t]

    def copy(self) -> "CostCurve":
        """An independent curve with this one's knots and what it has learned, for one drafter to correct."""
        c = CostCurve(list(self.q), list(self.t), self.rate, self.key, self.weight, self.scaled, self.steps, list(self.n),
                      self.shape)
        c.base = self.base
        return c

    def to_dict(self) -> dict:
        return {"q": list(self.q), "t": [round(x, 6) for x in self.t]}

    @classmethod
    def from_dict(cls, d: dict, **kw) -> "CostCurve":
        return cls(list(d["q"]), list(d["t"]), **kw)


@functools.lru_cache(maxsize=64)
def _segments(q: tuple[int, ...], upto: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For r = 0..upto, on knots `q`: the knots i and j = i + 1 of the segment r falls in (or the end one) and r's
    weight towards j. The same for every step of a curve, which reads its table every step."""
    r, qa = np.arange(upto + 1, dtype=np.float64), np.asarray(q, dtype=np.float64)
    i = np.clip(np.searchsorted(qa, r) - 1, 0, len(q) - 2)
    return i, i + 1, (r - qa[i]) / (qa[i + 1] - qa[i])


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


def curve_key(lm) -> str:
    """Which machine setting a curve belongs to: model, device, dtype (and packed CPU kernels), threads."""
    dev = lm.device.type if lm.device.type != "cuda" else torch.cuda.get_device_name(lm.device).replace(" ", "_")
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", lm.name)
    packed = "-packed" if getattr(lm, "packed", False) else ""
    return f"{name}-{dev}-{str(lm.dtype).removeprefix('torch.')}{packed}-{torch.get_num_threads()}t"


def cache_dir() -> Path:
    """Next to the converted-model cache (ESP_CACHE overrides both)."""
    return cache_root() / "costs"


def shape_for(lm, key: str = "") -> CostCurve:
    """The shipped default shape for `lm`'s device, dtype and CPU kernels, in one-row units (its level unset)."""
    dt = str(lm.dtype).removeprefix("torch.")
    # bfloat16 is flat only where the CPU computes it natively; emulated, wide blocks cost more than in float32.
    native = dt != "bfloat16" or native_bf16()
    name = "cuda" if lm.device.type == "cuda" else f"cpu-{dt}" if f"cpu-{dt}" in SHAPES and native else "cpu-float32"
    if getattr(lm, "packed", False) and name.startswith("cpu"):
        name += "-packed-avx512" if name == "cpu-float32" and cpu_capability() == "AVX512" else "-packed"
    elif name == "cpu-float32" and dt == "float32" and cpu_capability() == "AVX512":
        name = "cpu-float32-avx512-intel" if cpu_vendor() == "GenuineIntel" else "cpu-float32-avx512"
    return CostCurve(list(GRID), list(SHAPES[name]), key=key, weight=SHAPE_WEIGHT, scaled=False)


def padded(seconds, trusted=None, hoped=None) -> np.ndarray:
    """For `seconds[i]`, the time of feeding i + 1 rows per sequence, the rows per sequence each width is best
    fed as: itself, or at most twice it plus two where that costs PAD_GAIN less (a CPU's curve can fall where
    its BLAS switches kernels, at about 4 rows, so a narrow block padded with rows nobody reads is cheaper).
    `trusted[i]` (default: all): whether seconds[i] was measured; a width is padded only from a measured one, and to
    a measured one, or to one whose hoped-for price `hoped[j]` (the curve's exploration price) says it may be
    cheaper: then its samples measure it, and padding stays only where it measured cheaper. Padding from a width on a
    prior's word alone would never correct that width's price (a batch of two fed two rows each, 1.6x plain, for
    good); a padded width that is dearer than hoped is corrected by its own samples."""
    sec = np.asarray(seconds, dtype=np.float64)
    known = np.ones(sec.size, dtype=bool) if trusted is None else np.asarray(trusted, dtype=bool)
    to = np.where(known, sec, np.inf)
    if hoped is not None:
        to = np.minimum(to, np.asarray(hoped, dtype=np.float64))
    best = np.arange(1, sec.size + 1)
    for i in np.flatnonzero(known):
        reach = np.concatenate([[sec[i]], to[i + 1 : min(2 * i + 4, sec.size)]])  # widths i+1 .. 2(i+1)+2
        j = int(reach.argmin())
        if reach[j] < (1 - PAD_GAIN) * sec[i]:
            best[i] = i + 1 + j
    return best


def stored(lm) -> CostCurve | None:
    """The curve `calibrate` stored for `lm`'s setting, as a prior weighed by the load it was measured
    under (None when there is none, or it is damaged)."""
    key = curve_key(lm)
    try:
        d = json.loads((cache_dir() / f"{key}.json").read_text())
        load, cpus = d.get("loadavg"), d.get("cpus") or os.cpu_count() or 1
        idle = isinstance(load, list) and bool(load) and load[0] < BUSY * cpus
        return CostCurve.from_dict(d, key=key, weight=STORED_WEIGHT if idle else BUSY_WEIGHT)
    except (OSError, ValueError, KeyError, TypeError):
        return None


_CURVES: dict[str, CostCurve] = {}  # key -> the prior for that setting: read only, handed out as copies


def curve_for(lm) -> CostCurve:
    """A fresh copy of the prior for `lm`: from memory, else stored on disk, else the default shape.
    Never times a forward."""
    key = curve_key(lm)
    if key not in _CURVES:
        _CURVES[key] = stored(lm) or shape_for(lm, key)
    return _CURVES[key].copy()


def curve_of(runs: dict[int, list[tuple[float, float]]], key: str = "") -> tuple[CostCurve, list[float], list[float]]:
    """The curve that paired timings give (`samples`' output, or several of its rounds pooled per width): each width's
    median ratio to its one-row partners, falls within the noise smoothed away, times the median one-row time; with
    the ratios and their spreads."""
    ratios = {q: [s / one for s, one in ps] for q, ps in runs.items()}
    ratio, spreads = [statistics.median(r) for r in ratios.values()], [spread(r) for r in ratios.values()]
    one = statistics.median(one for ps in runs.values() for _, one in ps)  # the level, from every partner
    return CostCurve(list(runs), [one * r for r in smooth(ratio, spreads)], key=key), ratio, spreads


def sweep(lm, grid: tuple[int, ...] = GRID, repeats: int = SWEEP_REPEATS) -> tuple[CostCurve, dict]:
    """Time this machine's cost curve for `lm` now (a blocking sweep of len(grid) x repeats pairs of forwards,
    seconds on a CPU) and return it with the record `calibrate` stores; nothing is stored here."""
    load = list(os.getloadavg()) if hasattr(os, "getloadavg") else None  # before the sweep loads the machine
    runs = samples(lm, grid, repeats=repeats)
    curve, ratio, spreads = curve_of(runs, curve_key(lm))
    record = {**curve.to_dict(), "ratio": [round(x, 4) for x in ratio],
              "raw": [round(statistics.median(s for s, _ in ps), 6) for ps in runs.values()],
              "spread": [round(x, 4) for x in spreads],
              "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "loadavg": [round(x, 2) for x in load] if load else None, "cpus": os.cpu_count(),
              "threads": torch.get_num_threads(), "repeats": repeats, "context": CONTEXT}
    return curve, record


def calibrate(lm, grid: tuple[int, ...] = GRID, repeats: int = SWEEP_REPEATS) -> CostCurve:
    """Time this machine's cost curve for `lm` now (`sweep`), store it for later processes and drafters, and return
    a copy: for callers who ask for it before they serve (`esp.calibrate` takes a Hugging Face model)."""
    curve, record = sweep(lm, grid, repeats)
    write_atomic(cache_dir() / f"{curve.key}.json", json.dumps(record))  # a read-only cache: this process still uses it
    _CURVES[curve.key] = stored(lm) or curve
    return _CURVES[curve.key].copy()

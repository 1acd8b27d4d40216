"""An arm against a base arm over the same questions: the difference of the figures the bench reports, with a
confidence interval paired by question, and what it says: "better" or "worse" when the interval leaves zero
out, "equal" when it holds zero (no difference these questions can tell apart).

The figures are Spec-Bench's, from each question's record (esp.bench.run): tau pooled over questions (all tokens
over all forwards; the difference of two arms' taus) and the speed (the mean over questions of tokens per second;
the ratio of two arms', as a log ratio, so its interval is a ratio: 0.95x [0.91, 0.99]). The interval is the
leave-one-question-out jackknife's, with Student's t on n - 1 degrees of freedom: each replicate leaves the same
question out of both arms (paired), and for a mean of per-question differences it is the usual t interval."""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Callable, Sequence

LEVEL = 0.95
BETTER, EQUAL, WORSE = "better", "equal", "worse"


def t_coverage(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with `df` (a positive integer) degrees of freedom, in closed form
    (Abramowitz and Stegun 26.7.3-4: a finite series in cos(theta), theta = atan(t / sqrt(df)))."""
    theta = math.atan(t / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    if df % 2:  # odd: 2/pi (theta + sin cos (1 + 2/3 c^2 + 2.4/3.5 c^4 + ...))
        term, total = 1.0, 1.0 if df > 1 else 0.0
        for i in range(1, (df - 1) // 2):
            term *= c2 * (2 * i) / (2 * i + 1)
            total += term
        return 2 / math.pi * (theta + math.sin(theta) * math.cos(theta) * total)
    term, total = 1.0, 1.0  # even: sin (1 + 1/2 c^2 + 1.3/2.4 c^4 + ...)
    for i in range(1, df // 2):
        term *= c2 * (2 * i - 1) / (2 * i)
        total += term
    return math.sin(theta) * total


def t_quantile(level: float, df: int) -> float:
    """The t such that P(|T| <= t) = level (two-sided), by bisection on `t_coverage`."""
    lo, hi = 0.0, 1.0
    while t_coverage(hi, df) < level:
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_coverage(mid, df) < level else (lo, mid)
    return (lo + hi) / 2


@dataclass(frozen=True)
class Paired:
    """The mean paired difference over `n` questions and its confidence interval [lo, hi]."""

    mean: float
    lo: float
    hi: float
    n: int

    @property
    def word(self) -> str:
        """better / worse when the interval leaves zero out (a positive difference is better), else equal."""
        return BETTER if self.lo > 0 else WORSE if self.hi < 0 else EQUAL


def interval(diffs: list[float], level: float = LEVEL) -> Paired:
    """Mean of `diffs` (one per question) and its t interval; with fewer than two, the interval is the mean."""
    n = len(diffs)
    if n == 0:
        raise ValueError("no questions to pair")
    mean = statistics.fmean(diffs)
    if n < 2:
        return Paired(mean, mean, mean, n)
    half = t_quantile(level, n - 1) * statistics.stdev(diffs) / math.sqrt(n)
    return Paired(mean, mean - half, mean + half, n)


def jackknife(stat: Callable[[Sequence], float], items: Sequence, level: float = LEVEL) -> Paired:
    """`stat` over all `items` (one per question) and its leave-one-out jackknife t interval."""
    n, est = len(items), stat(items)
    if n < 2:
        return Paired(est, est, est, n)
    loo = [stat([x for j, x in enumerate(items) if j != i]) for i in range(n)]
    centre = statistics.fmean(loo)
    half = t_quantile(level, n - 1) * math.sqrt((n - 1) / n * sum((x - centre) ** 2 for x in loo))
    return Paired(est, est - half, est + half, n)


def per_question(records: list[dict], method: str) -> dict:
    """qid -> that question's record for `method`."""
    return {r["qid"]: r for r in records if r["method"] == method}


def pooled_tau(rs: Sequence[dict]) -> float:
    """Spec-Bench's tau over records: all their tokens over all their forwards."""
    return sum(r["n_tokens"] for r in rs) / sum(r["forwards"] for r in rs)


def mean_speed(rs: Sequence[dict]) -> float:
    return statistics.fmean(r["tokens_per_s"] for r in rs)


def paired(records: list[dict], arm: str, base: str) -> tuple[Paired, Paired]:
    """(tau: arm's pooled tau - base's, time: log(arm's mean tokens/s / base's)) over the questions both ran, each
    with its jackknife interval over those questions."""
    a, b = per_question(records, arm), per_question(records, base)
    pairs = [(a[q], b[q]) for q in a if q in b]
    if not pairs:
        raise ValueError(f"{arm} and {base} share no question")
    tau = jackknife(lambda ps: pooled_tau([x for x, _ in ps]) - pooled_tau([y for _, y in ps]), pairs)
    time = jackknife(lambda ps: math.log(mean_speed([x for x, _ in ps]) / mean_speed([y for _, y in ps])), pairs)
    return tau, time


def difference(p: Paired, word: bool = True) -> str:
    """'+0.05 [+0.01, +0.09] better': a tau difference and its interval (and what it says)."""
    return f"{p.mean:+.2f} [{p.lo:+.2f}, {p.hi:+.2f}]" + (f" {p.word}" if word else "")


def ratio(p: Paired, word: bool = True) -> str:
    """'0.95x [0.91, 0.99] worse': a log-ratio interval as a ratio (and what it says; faster is better)."""
    return f"{math.exp(p.mean):.2f}x [{math.exp(p.lo):.2f}, {math.exp(p.hi):.2f}]" + (f" {p.word}" if word else "")

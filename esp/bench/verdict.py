"""Is a method's output lossless? Exact token equality, or a flip at a rounding near-tie, or a failure.

In fp32 every method here reproduces plain decoding token for token. In bf16 / fp16 a tree step feeds
many rows in one forward, so a row's logits differ from a one-row forward's by rounding; where the two
best tokens are within that rounding the greedy choice can flip and every later token differs. The rule:

- **exact**: the token lists are equal;
- otherwise at the first differing position i, with `a` = ar's token and `b` = the method's token, a
  **near-tie** when each run chose its token first and holds the other's among its recorded best
  `TOP_K`, and each run's gap between the two is at
  most `TIE_ULPS` units of rounding of its top logit in the run's dtype (one unit = 2^(floor(log2|z|) - p),
  p = the dtype's mantissa bits: 7 for bf16, 10 for fp16, 23 for fp32); for bf16 and a logit in [16, 32)
  that is 8 x 0.125 = 1.0, the most that a wider block's rounding was measured to move such a gap;
- a **failure** otherwise (a length mismatch, a token outside the other run's recorded best, a wider gap).

Tokens after i are not compared: once the texts part, they are different texts. Each emitted position
carries the best `TOP_K` (id, logit) of the row that chose it, `[id1, logit1, id2, logit2, ...]` (see
`StepTrace.top2`). More than two, because bf16 makes three-way ties: on one Spec-Bench question the plain
run's row had 18 and 504 a unit apart, the hybrid's row 1653 and 504, and neither held the other's choice.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from esp.decoding.verify import TOP_K

EXACT, NEAR_TIE, FAILURE = "exact", "near_tie", "failure"
# Rounding units a near-tie may span: the most that rounding alone moved a row's gap between its best token and
# its next four when the row was fed inside a wider block, 7.75 units in bf16 on a CPU with native bf16
# (AVX512-BF16; 4.0 with AVX2 kernels), 403 rows of the embedded model (docs/results/rounding_noise_bf16.json; docs/history.md).
TIE_ULPS = 8
MANTISSA_BITS = {"bfloat16": 7, "float16": 10, "float32": 23, "float64": 52}

Top2 = list  # [id1, logit1, id2, logit2, ...] of the row that chose one emitted token, best first


def dtype_name(dtype) -> str:
    """'bfloat16' / 'float16' / 'float32' from a torch dtype or its name ('torch.bfloat16', 'bf16', ...)."""
    name = str(dtype).replace("torch.", "")
    name = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32", "double": "float64"}.get(
        name, name)
    if name not in MANTISSA_BITS:
        raise ValueError(f"no rounding rule for dtype {dtype!r}: use one of {', '.join(MANTISSA_BITS)}.")
    return name


def ulp(z: float, dtype="bfloat16") -> float:
    """One unit of rounding of a logit of magnitude |z| in `dtype`."""
    z = max(abs(z), 2.0 ** -14)
    return 2.0 ** (math.floor(math.log2(z)) - MANTISSA_BITS[dtype_name(dtype)])


@dataclass(frozen=True)
class Verdict:
    """One question's verdict for one method against `ar`."""

    kind: str  # EXACT / NEAR_TIE / FAILURE
    index: int | None = None  # first differing emitted position (None when exact)
    gap: float | None = None  # the wider of the two runs' gaps there, in rounding units (None if unknown)
    reason: str = ""

    def to_dict(self) -> dict:
        return {"kind": self.kind, "index": self.index, "gap": self.gap, "reason": self.reason}


def _gap_ulps(top: Top2 | None, first: int, other: int, dtype: str) -> float | None:
    """How many rounding units `first` led `other` by in one row, or None unless the row holds both and
    `first` is its best (an exact tie may be recorded in either order)."""
    ids, logits = (top[0::2], top[1::2]) if top else ([], [])
    if first not in ids or other not in ids or logits[ids.index(first)] < max(logits):
        return None
    best = logits[ids.index(first)]
    return (best - logits[ids.index(other)]) / ulp(best, dtype)


def classify(ar_tokens: list[int], ar_top2: list[Top2] | None, tokens: list[int], top2: list[Top2] | None,
             dtype="float32") -> Verdict:
    """The verdict of one method's run (`tokens`, `top2`) against the plain run of the same prompt."""
    if list(tokens) == list(ar_tokens):
        return Verdict(EXACT)
    n = min(len(tokens), len(ar_tokens))
    i = next((j for j in range(n) if tokens[j] != ar_tokens[j]), None)
    if i is None:
        return Verdict(FAILURE, n, None, f"lengths differ ({len(ar_tokens)} vs {len(tokens)} tokens)")
    a, b = ar_tokens[i], tokens[i]
    name = dtype_name(dtype)
    gaps = [_gap_ulps(ar_top2[i] if ar_top2 and i < len(ar_top2) else None, a, b, name),
            _gap_ulps(top2[i] if top2 and i < len(top2) else None, b, a, name)]
    if None in gaps:
        return Verdict(FAILURE, i, None, f"at token {i} the runs chose {a} and {b}, one outside the other's best {TOP_K}")
    gap = max(gaps)
    if gap <= TIE_ULPS:
        return Verdict(NEAR_TIE, i, gap, f"at token {i}: {a} vs {b} within {gap:.2f} rounding units")
    return Verdict(FAILURE, i, gap, f"at token {i}: {a} vs {b} apart by {gap:.2f} rounding units (> {TIE_ULPS})")


def tally(verdicts: list[Verdict]) -> dict:
    """Counts per kind and the largest gap (rounding units) among the non-exact verdicts; lossless = no
    failure."""
    gaps = [v.gap for v in verdicts if v.gap is not None]
    return {EXACT: sum(v.kind == EXACT for v in verdicts), NEAR_TIE: sum(v.kind == NEAR_TIE for v in verdicts),
            FAILURE: sum(v.kind == FAILURE for v in verdicts), "max_gap": max(gaps, default=0.0)}


def label(v: Verdict) -> str:
    """A short word for tables: 'exact', 'near-tie (1.5 units)', 'FAILED'."""
    if v.kind == EXACT:
        return "exact"
    if v.kind == NEAR_TIE:
        return f"near-tie at token {v.index} ({v.gap:.1f} units)"
    return f"FAILED at token {v.index}"

"""P(accept) for a drafted token, learned online from the labels every verify forward gives for free.

After a forward, the target's own choice after every fed node is known, so every candidate child of a
fed node (fed or not, accepted path or not) is labelled: did it equal that choice? Estimates are counts
with hierarchical shrinkage: a candidate's features give keys from coarse to fine (say, its sources;
sources and depth; ... ; everything), and each level's rate is pulled towards the coarser level's in
proportion to how few labels it has seen. A key seen often speaks for itself; a rare one borrows.
"""
from __future__ import annotations

from bisect import bisect_right
from typing import Hashable

Keys = tuple  # of hashable keys, coarse to fine

# Score buckets for a draft probability: finer where acceptance changes fastest.
EDGES = (0.02, 0.05, 0.1, 0.2, 0.3, 0.45, 0.6, 0.75, 0.9)


def bucket(p: float) -> int:
    """0 .. len(EDGES): which probability band `p` falls in."""
    return bisect_right(EDGES, p)


class Calibrator:
    """Acceptance rates per feature key, shrunk towards coarser keys (strength = pseudo-labels)."""

    def __init__(self, prior: float = 0.2, strength: float = 4.0):
        self.prior, self.strength = prior, strength
        self.counts: dict[Hashable, list[float]] = {}  # key -> [accepted, seen]
        self.seen = 0  # candidates labelled so far

    def p(self, keys: Keys) -> float:
        """The shrunk acceptance rate of the finest key."""
        est, s = self.prior, self.strength
        for key in keys:
            hit = self.counts.get(key)
            if hit is not None:
                est = (hit[0] + s * est) / (hit[1] + s)
        return est

    def update(self, keys: Keys, accepted: float, seen: int = 1) -> None:
        """`seen` labels, `accepted` of them positive, for every level of a candidate's keys."""
        self.seen += seen
        for key in keys:
            hit = self.counts.get(key)
            if hit is None:
                self.counts[key] = [float(accepted), float(seen)]
            else:
                hit[0] += accepted
                hit[1] += seen

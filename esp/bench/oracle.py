"""The limit of a run's drafts: per step, the cheapest feed that would have emitted the same tokens.

A step fed the root, its draft nodes and (ESP-style methods) k mask rows on some nodes, and accepted one
path. With the same drafts, a perfect budget would have fed only the root, the accepted path's nodes and
the masks on the path's last node (they give the next step's ESP drafts); a method without masks needs
the path alone. That feed is the step's oracle width. Priced on a cost curve t(q) (padded to a wider
block where that is cheaper: a CPU's curve can fall at 4 rows), summed over the run, it gives the oracle
time; against `ar`'s feed on the same curve, the oracle speed-up: the most these
drafts could give on that machine. It is optimistic on purpose: the drafts are held as proposed, although
rejected rows also taught the tables (TR, STAND, the hybrid) and LADE's lookahead rows feed its pool.

On a flat curve (t(q) = t(1) up to the tree size, as on a GPU whose forward reads the weights once)
every block costs one forward, so a step costs t(rows before the root + 1) whatever its width: that
figure is what the drafts are worth where rows are free.

Torch-free: the app's views read the widths; the bench prices them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from esp.trace import StepTrace


def lead(step: StepTrace) -> int:
    """Rows fed before the step's root (the prompt at the prefill, none afterwards)."""
    return step.positions[0] - step.n_past if step.positions else 0


def mask_rows(step: StepTrace, node: int) -> int:
    """Mask rows the step fed on draft node `node` (labelled 'mask <node>.<j>')."""
    own = f"mask {node}."
    return sum(1 for kind, label in zip(step.row_kinds, step.row_labels) if kind == "mask" and label.startswith(own))


def oracle_width(step: StepTrace) -> int:
    """Block rows of the cheapest feed that emits this step's tokens with its drafts: the root, the
    accepted nodes and the masks on the last accepted node (never more than the step fed)."""
    path = step.accepted_rows or [0]
    return min(len(path) + mask_rows(step, path[-1]), len(step.positions))


@dataclass(frozen=True)
class Priced:
    """A run's forwards priced on one cost curve (seconds)."""

    fed_s: float  # the rows the method fed
    oracle_s: float  # the oracle feed of every step
    flat_s: float  # every step on a flat curve: t(rows before the root + 1)


def cheapest(t: Callable[[int], float], upto: int) -> Callable[[int], float]:
    """q -> the least t(q') over q <= q' <= upto: on a curve that falls somewhere (a CPU's BLAS switching
    kernels at 4 rows) a feed of q rows can be padded to a cheaper width; beyond `upto`, t itself."""
    best = [0.0] * (upto + 2)
    best[upto + 1] = float("inf")
    for q in range(upto, 0, -1):
        best[q] = min(t(q), best[q + 1])
    return lambda q: best[q] if 1 <= q <= upto else t(q)


def feeds(steps: Iterable[StepTrace]) -> list[list[int]]:
    """Per step, the rows of its three feeds: as fed, as the oracle would have fed, on the flat curve (what
    `price` prices; a record keeps them, so that a run is priced once its curve is known)."""
    return [[lead(s) + len(s.positions), lead(s) + oracle_width(s), lead(s) + 1] for s in steps]


def price(fed_rows: Iterable[list[int]], t: Callable[[int], float], upto: int = 0) -> Priced:
    """A run's time on the curve `t` (seconds for a forward of q new rows) from its steps' `feeds`: as fed, as
    the oracle would have fed (padded to a cheaper width up to `upto` rows where the curve falls), and on
    the flat curve."""
    floor = cheapest(t, upto)
    fed = oracle = flat = 0.0
    for rows, best, one in fed_rows:
        fed += t(rows)
        oracle += floor(best)
        flat += t(one)
    return Priced(fed, oracle, flat)

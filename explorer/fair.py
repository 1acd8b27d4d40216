"""The order in which waiting runs get the model (issue 38): in turn, not first come, first served.

Gradio's queue serves each concurrency group first in, first out: a caller who queued forty runs before anyone
else would hold the model for all forty. The door (explorer.door) reorders the model's group by this order
whenever the model is about to take its next run, so that Gradio's "first" is the fair one:
- across visitors (addresses): the one whose last run started longest ago (or never) goes first, then the
  next, one run each per round, whatever the number of sessions behind each address;
- within a visitor, the same across its units (a session, or a signed-in user), so that a class behind one
  school address is served one student after another;
- within a unit, first come, first served.
A visitor that has had no turn yet, or only long ago, is served before one just served: a caller with many
sessions gets no more turns than an address with one.
"""
from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict
from typing import Callable, Hashable, Sequence, TypeVar

T = TypeVar("T")
# Who an item (a waiting run) belongs to and when it was queued: (visitor, unit, enqueue time).
Identity = tuple[str, str, float]
REMEMBERED = 4096  # visitors and units whose last turn is remembered; older ones count as never served


class FairOrder:
    """The turns each visitor and unit had (`served`), and the fair order of waiting items (`order`)."""

    def __init__(self) -> None:
        self._clock = itertools.count(1)
        self._turns: OrderedDict[Hashable, int] = OrderedDict()  # (kind, key) -> the turn of its last start

    def served(self, visitor: str, unit: str) -> None:
        """A run of `unit` (behind `visitor`) took the model now."""
        turn = next(self._clock)
        for key in (("visitor", visitor), ("unit", unit)):
            self._turns.pop(key, None)
            self._turns[key] = turn
        while len(self._turns) > REMEMBERED:
            self._turns.popitem(last=False)

    def last_turn(self, kind: str, key: str) -> int:
        """The turn of the last start of a 'visitor' or 'unit' (0: never, or forgotten)."""
        return self._turns.get((kind, key), 0)

    def order(self, items: Sequence[T], identity: Callable[[T], Identity]) -> list[T]:
        """`items` in the order they should get the model: round robin across visitors, and across units
        within each visitor, each round starting with the one served longest ago."""
        ids = {id(item): identity(item) for item in items}
        visitors: dict[str, dict[str, list[T]]] = {}
        for item in sorted(items, key=lambda x: ids[id(x)][2]):
            who, unit, _ = ids[id(item)]
            visitors.setdefault(who, {}).setdefault(unit, []).append(item)
        rounds = itertools.count(next(self._clock))  # turns beyond every real one, for the rounds ahead
        at = lambda x: ids[id(x)][2]  # noqa: E731 - the enqueue time of an item
        per_visitor = {who: _round_robin(units, lambda u: self.last_turn("unit", u), at, rounds)
                       for who, units in visitors.items()}
        return _round_robin(per_visitor, lambda w: self.last_turn("visitor", w), at, rounds)


def _round_robin(groups: dict[str, list[T]], last: Callable[[str], int], at: Callable[[T], float],
                 rounds: itertools.count) -> list[T]:
    """Every item of `groups` (each group's items in its own order), one group at a time: next is always the
    group whose last turn (`last`, then the rounds handed out here) is the oldest, ties to the earliest queued."""
    heap = [(last(key), at(items[0]), key) for key, items in groups.items() if items]
    heapq.heapify(heap)
    taken = {key: 0 for key in groups}
    out = []
    while heap:
        _, _, key = heapq.heappop(heap)
        items = groups[key]
        out.append(items[taken[key]])
        taken[key] += 1
        if taken[key] < len(items):
            heapq.heappush(heap, (next(rounds), at(items[taken[key]]), key))
    return out

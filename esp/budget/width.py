"""How wide a step should be: the number of draft nodes and ESP masks that maximises expected tokens per
second, (1 + sum of the chosen nodes' P + value of the masks fed) / t(rows).

Candidates come best-first by P (a node's calibrated probability of being accepted, the product along its
path), so any prefix of them is a valid tree. Masks are worth feeding on a node only if that node may be
where the accepted path ends: P_end(v) = P(v) - sum of P over v's fed children. Feeding k masks on v is
worth `mask_value` tokens (what ESP's drafts add to the next step, learned online) times P_end(v).
A fixed budget (bc=N) is the same choice with a flat cost, so it fills its N rows the way that adds the
most expected tokens; `bc=auto` reads the machine's measured curve instead and may pick one row.
`Backoff` then checks what `bc=auto`'s drafted steps actually earn against plain steps, and stops drafting
(with a bounded cost of finding out) where they do not pay; its per-call loss cap (`Backoff.affordable`) admits
a width only while the call's net loss against plain decoding stays within LOSS_SHARE per step plus LOSS_START.
The choice runs on the host in numpy: its inputs are Python numbers, and a torch tensor read back on the
host would count as a device sync for the step (scripts/count_syncs.py).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


PLAIN_GAP = 16  # plain steps after a failed probe; doubled with each further failure in a row
LOSS_BUDGET = 2.0  # plain steps' worth of time a probe may lose (or must gain to pass), net
PLAIN_EMA = 0.1  # weight of each new plain step in the plain step time, once 10 have been seen
LOSS_SHARE = 0.005  # eps: plain steps' worth a call may lose per step it has run, net of what its drafts gained
LOSS_START = 1.0  # L0: plain steps' worth a call may lose before its steps have earned any allowance
# Most of the allowance up front: a call whose first wide probe fails (a copy that did not hold, 0.5-0.7 plain steps
# on float32) can probe again at once rather than wait some 30 steps for eps to refill it. Priced on one sweep, 8
# fresh drafters each (float32, the AVX512 EPYC): extraction 3.88x every time against 1.58x-2.65x at eps 1.5% and L0
# 0.5, where nothing pays (writing, roleplay) no lower; a 64-token call that cannot win loses at most 1.3 plain steps
# (was 1.45), a longer one less still.


@dataclass(frozen=True, kw_only=True)
class Choice:
    """The step's shape: the first `n` candidates, `k` masks on each node in `masked` (0 = root)."""

    n: int
    masked: tuple[int, ...]
    rows: int
    expected: float  # expected tokens this step: 1 (the bonus) + sum P + mask value
    seconds: float | None  # predicted forward time (None under a flat budget)
    k: int = 0

    def score(self) -> float:
        """What the budget maximises: expected tokens per second, or expected tokens under a flat cost."""
        return self.expected if self.seconds is None else self.expected / self.seconds


def choose(
    p,
    parents: list[int],
    k: int,
    mask_value: float,
    cap: int,
    cost=None,
    max_masked: int = 16,
    force_mask: bool = False,
    margin: float = 0.0,
) -> Choice:
    """Best (nodes, masks) for candidates with path probabilities `p` (non-increasing, parents first).

    `parents[i]` is candidate i's parent as a tree index (0 = root, j = candidate j-1). `cost[r]` is the
    forward time of r rows (r = 1..cap); None means a flat cost, i.e. fill up to `cap` rows.
    `force_mask` feeds masks on at least one node (so that their value can be measured at all); under a
    measured cost, a wider step must beat the plain one-row step by `margin` (a share). `p` and `cost`
    are array-likes (numpy arrays in the drafter).
    """
    p = np.asarray(p, dtype=np.float64)[: max(cap - 1, 0)]
    cost = None if cost is None else np.asarray(cost, dtype=np.float64)
    n_cand = p.size
    m_max = 0 if k <= 0 or (mask_value <= 0 and not force_mask) else min(n_cand + 1, max_masked, (cap - 1) // k)
    if cost is not None and not force_mask:
        plain = (1 + margin) / float(cost[1])
        if best_rate(p, mask_value if m_max else 0.0, cost[: max(cap, 1) + 1], 2) * (1 + 1e-9) < plain:
            # exactly what the tables would pick; the slack covers rounding
            return Choice(n=0, masked=(), rows=1, expected=1.0, seconds=float(cost[1]), k=k)
    expected, rows, p_end = _tables(p, parents, k, mask_value, m_max)
    ok = rows <= max(cap, 1)
    if force_mask and m_max:
        ok[0] = False
    if cost is None:
        score = expected
    else:
        score = expected / cost[np.minimum(rows, cost.size - 1)]
        score[0, 0] *= 1 + margin
    score = np.where(ok, score, -1.0)
    best = int(score.argmax())  # first maximum: fewer masks, then fewer nodes
    m, n = divmod(best, n_cand + 1)
    masked = tuple(sorted(np.argsort(-p_end[:, n], kind="stable")[:m].tolist()))
    r = int(rows[m, n])
    return Choice(n=n, masked=masked, rows=r, expected=float(expected[m, n]),
                  seconds=None if cost is None else float(cost[r]), k=k)


def _tables(p: np.ndarray, parents: list[int], k: int, mask_value: float, m_max: int):
    """expected[m, n] and rows[m, n] of feeding the first n candidates and k masks on the m best nodes,
    and p_end[v, n], the chance that the accepted path ends at node v with n candidates fed."""
    n_cand = p.size
    full = np.concatenate([np.ones(1), p])  # path probability per tree index, root = 1
    served = np.zeros((n_cand + 1, n_cand + 1))  # [v, n]: P of v's children among the first n
    if n_cand:
        child = np.zeros((n_cand + 1, n_cand))
        child[np.asarray(parents[:n_cand]), np.arange(n_cand)] = 1.0
        served[:, 1:] = (child * p[None, :]).cumsum(1)
    exists = np.arange(n_cand + 1)[:, None] <= np.arange(n_cand + 1)[None, :]
    p_end = np.where(exists, full[:, None] - served, -1.0)
    top = -np.sort(-p_end, axis=0)[:m_max].cumsum(0)  # [m-1, n]: best m masked nodes
    gain = np.concatenate([np.zeros((1, n_cand + 1)), mask_value * top])  # [m, n]
    nodes = np.concatenate([np.zeros(1), p.cumsum(0)])  # [n]
    expected = 1.0 + nodes[None, :] + gain
    rows = 1 + np.arange(n_cand + 1)[None, :] + k * np.arange(m_max + 1)[:, None]
    return expected, rows, p_end


def by_rows(p, parents: list[int], k: int, mask_value: float, cap: int, max_masked: int = 16) -> np.ndarray:
    """The most expected tokens any choice of at most r rows gives, for r = 0..cap (index 0 is 0): what one
    row of a batch offers at each width (`BatchWidth`), from `choose`'s tables under a flat cost."""
    p = np.asarray(p, dtype=np.float64)[: max(cap - 1, 0)]
    m_max = 0 if k <= 0 or mask_value <= 0 else min(p.size + 1, max_masked, (cap - 1) // k)
    expected, rows, _ = _tables(p, parents, k, mask_value, m_max)
    best = np.zeros(cap + 1)
    fits = rows <= cap
    np.maximum.at(best, rows[fits], expected[fits])
    return np.maximum.accumulate(best)


def best_rate(p, mask_value: float, cost, lo: int) -> float:
    """An upper bound of expected tokens per unit of `cost` over every choice of `lo` or more rows: every
    candidate fed and masks at full value, on the cheapest such width. Masks add mask_value times the
    sum of their nodes' positive P_end, and P_end(v) <= P(v), so at most mask_value * (1 + sum P).
    It lets a step that nothing predicts skip the (candidates x candidates) tables of `choose`."""
    wide = np.asarray(cost, dtype=np.float64)[lo:]
    if not wide.size:
        return 0.0
    total = float(np.asarray(p, dtype=np.float64).sum())
    return (1.0 + total + max(mask_value, 0.0) * (1.0 + total)) / float(wide.min())


def grown_enough(p: list[float], q: float, masks: list[tuple[int, float]], cost: list[float], margin: float,
                 probe: float | None = None) -> bool:
    """Whether `choose` (on `cost`, with `margin`, for every (masks per node j, their value) in `masks`) picks among
    the first len(p) candidates (path probabilities `p`, best first) what it picks among any more, and so does a mask
    probe that must keep the share `probe` of the chosen score (None: no probe): then growing more can be left undone.

    Every choice that feeds a further candidate is bounded above (each further candidate at the next one's P `q`,
    which bounds them all; the root's masks worth their full value, another node's at most the best candidate's P),
    and the bound must fall below a score some choice among the grown ones already reaches (feeding the first i of
    them, the root's masks, or the plain step with its margin), strictly, so that even ties cannot change the pick.
    Plain Python over host lists, stopping at the first width whose bound reaches it: it runs right after a forward,
    where numpy's calls cost more than the few dozen products (the rows a step weighs)."""
    m, top = len(p), len(cost) - 1
    if m + 2 > top:  # no width left for a further candidate
        return True
    grown, total = (1 + margin) / cost[1], 0.0
    for i, x in enumerate(p):
        total += x
        grown = max(grown, (1 + total) / cost[i + 2])
    best = p[0] if m else q
    usable = [bool(j) and v > 0 and 1 + j <= top for j, v in masks]  # masks `choose` may feed at that count
    bars = [max(grown, (1 + v) / cost[1 + j]) if ok else grown for (j, v), ok in zip(masks, usable)]
    for (j, value), masked, bar in zip(masks, usable, bars):
        if probe is not None and j == masks[-1][0]:
            bar = min(bar, probe / (1 + margin) * max(bars))
        bar /= 1 + 1e-9
        for r in range(m + 2, top + 1):
            free = r - 1 - m  # rows past the grown ones
            more = free * q  # no masks: every one a further candidate
            if masked and free > j:
                more = max(more, (free - j) * q + value)  # masks on one node
                most = (free - 1) // j  # on as many nodes as fit
                more = max(more, (free - j * most) * q + value * (1 + (most - 1) * best))
            if (1 + total + more) / cost[r] >= bar:
                return False
    return True


@dataclass
class LossCap:
    """A call's per-call loss cap (Backoff's docstring states the bound): its net loss against plain decoding in
    plain steps, the steps it has booked, and the allowance they earn (`share` per step, `allowance` at start)."""

    share: float
    allowance: float
    steps: int = 0
    net: float = 0.0

    def room(self) -> float:
        """Plain steps' worth of worst-case extra cost the next step may take."""
        return self.share * (self.steps + 1) + self.allowance - self.net


class Backoff:
    """Whether `bc=auto` drafts at all: the rate its drafted steps achieve, measured against plain steps.

    The budget trusts calibrated P and a cost curve; either can be wrong on a prompt (P optimistic, the
    machine loaded), and then drafted steps cost more than the tokens they bring. So every drafted step
    (two or more rows) is booked against plain decoding: it lost `seconds - tokens * t1`, where t1 is the
    measured time of a plain one-row step less the drafter's own work in it (what plain decoding's step costs,
    averaged over the drafter's lifetime). A probe is a stretch of drafting; it fails when its losses, net of
    gains, exceed B plain steps (a CUSUM: gains before a loss do not count twice), and it passes once its drafted
    steps have gained B plain steps net. A failed probe is followed by G * 2^j plain one-row steps (j = failed
    probes in a row before it, kept across prompts; a pass sets j = 0). Every prompt starts with a probe.

    Regret bound. Let c = t(r) / t(1) for the widest block the budget picks. One probe loses at most
    (B + c - 1) t1: it stops on the first drafted step that takes its net loss past B t1, and one step
    loses at most (c - 1) t1 since it emits a token. If drafting never pays, a prompt of n steps holds at
    most 1 + log2(1 + n / G) probes (the gaps between them double and sum to at most n), so it runs at
    most (1 + log2(1 + n / G)) (B + c - 1) t1 slower than plain decoding: O(log n) plain steps. Over a
    lifetime of P prompts and N steps, (P + log2(1 + N / G)) (B + c - 1) t1. A drafter whose proposals are
    never accepted loses at least d t1 per drafted step, d = min over r >= 2 of t(r) / t(1) - 1, so a probe
    fails within floor(B / d) + 1 drafted steps. Where drafting pays, a probe fails only on a run of bad
    luck worth B plain steps, and then costs the gain it would have made over G * 2^j steps.
    Defaults: G = 16, B = 2.

    Per-call loss cap. The bound above grows with log n and, per prompt, costs a probe of B + c - 1 plain
    steps: 10-15% of a short call. So each call (prompt, or batch) also keeps its net loss in plain steps,
    N = sum over its drafted steps (two or more rows) of (seconds / t1 - tokens), gains counted negative, plus
    the drafter's own work on the one-row steps it grew a tree for over t1 (the tree, the width choice, the
    learning: 0.7 ms a step on the 2-core EPYC, 4% of a bfloat16 forward, which plain decoding does not spend), and
    `affordable` admits a width r for the next step only if
    N + w(r) <= eps (n + 1) + L0, where n is the call's booked steps so far and w(r) = t(r) / t(1) - 1 the
    step's worst case on the cost curve's own estimate, never its exploration-discounted prices (a step emits at least
    one token per row). Otherwise the step is plain.
    Hence after any step, N <= eps n + L0 + x, where x >= 0 is by how much the last drafted step's loss
    exceeded its w(r) (the curve's error and the drafting's host time: at most one step's worst case). In
    seconds: a call of n steps whose drafts never pay runs at most (eps n + L0 + x) t1 slower than plain
    decoding, with its one-row steps' own work; the learning of the plain steps the cap or the back-off holds it
    to (what later steps need, 0.13 ms a step there), the prefill and the drafter's per-call start are outside it.
    Gains earned earlier fund later probes, so drafts that pay are never throttled by the cap.
    Defaults: eps = LOSS_SHARE (0.5%), L0 = LOSS_START (one plain step).
    """

    def __init__(self, gap: int = PLAIN_GAP, budget: float = LOSS_BUDGET, share: float = LOSS_SHARE,
                 start: float = LOSS_START):
        if gap < 1 or budget <= 0 or share < 0 or start < 0:
            raise ValueError("a back-off needs a gap of at least one step, a positive loss budget and a loss cap >= 0")
        self.gap, self.budget = gap, budget
        self.cap = LossCap(share, start)
        self.fails = 0  # failed probes in a row, across prompts
        self.backoffs = 0  # failed probes in this drafter's lifetime
        self.t1: float | None = None  # seconds of a plain step, measured
        self.n1 = 0  # plain steps measured
        self.left = 0  # plain steps still to run before the next probe
        self.loss = self.gain = 0.0  # this probe's CUSUM of lost seconds, and its net saved seconds
        self.life = {"draft": [0, 0.0], "plain": [0, 0.0]}  # tokens, seconds of each kind of step, lifetime
        self.start()

    def start(self) -> None:
        """A new prompt: it opens with a probe, judged on its own steps; t1 and j carry over."""
        self.left = 0
        self.loss = self.gain = 0.0
        self.cap = LossCap(self.cap.share, self.cap.allowance)  # a new call: its own steps and net loss
        self.prompt = {"draft": [0, 0.0], "plain": [0, 0.0]}

    @property
    def drafting(self) -> bool:
        """False while backed off: the step should be a plain one-row step."""
        return self.left == 0

    def room(self) -> float:
        """Plain steps' worth of worst-case extra cost the next step may take under the per-call cap."""
        return self.cap.room()

    def affordable(self, seconds: np.ndarray, own: np.ndarray | None = None) -> np.ndarray:
        """`seconds[i]` (a cost table, index 1 the plain width, index 0 unused) with every width whose
        worst case t(r) / t(1) - 1 exceeds `room` priced at infinity, so that no budget picks it; all
        infinite past index 1 while backed off. `own`: the table the worst cases are read from, if not
        `seconds`: the curve's own estimate (`CostCurve.table`) where `seconds` is what the width choice reads,
        discounted for exploration, since a discounted worst case can fall below zero on a fresh curve and
        would admit a width the call cannot afford."""
        seconds = np.asarray(seconds, dtype=np.float64)
        return np.where(self.admitted(seconds if own is None else own), seconds, np.inf)

    def admitted(self, own: np.ndarray) -> np.ndarray:
        """Which widths of a cost table (the curve's own estimate) `affordable` keeps: index 0 and 1 always."""
        own = np.asarray(own, dtype=np.float64)
        keep = own / own[1] - 1.0 <= self._limit()
        keep[: 2] = True
        return keep

    def admits(self, least: float, one: float) -> bool:
        """`admitted`'s rule for the cheapest width past one row alone (`least` seconds against `one` for a plain
        row, the curve's own estimate), with a hair of slack for rounding: whether any such width is admitted, known
        without a cost table."""
        return least <= (1 + self._limit()) * one * (1 + 1e-9)

    def _limit(self) -> float:
        """The most worst-case extra cost, t(r) / t(1) - 1, a width may have now: the cap's room, or less than any
        width's while backed off."""
        return self.room() if self.drafting else -1.0

    def may_draft(self, seconds: np.ndarray, own: np.ndarray | None = None) -> bool:
        """Whether any width above one row is affordable now (else the step is plain: no tree is grown)."""
        return bool(np.isfinite(self.affordable(seconds, own)[2:]).any())

    def observe(self, rows: int, tokens: float, seconds: float, t1_hint: float, host: float = 0.0,
                tried: bool = True) -> None:
        """Book one decoding step (not the prefill): its width, tokens emitted and measured seconds, `host` of them
        the drafter's own work (which plain decoding does not do); `tried`: the drafter grew a tree for it (not a
        plain step it was held to), so that on one row its own work is a loss. `t1_hint` (a plain step's time by
        the cost curve) stands in for t1 until a plain step is measured."""
        drafted = rows > 1
        kind = "draft" if drafted else "plain"
        for book in (self.prompt[kind], self.life[kind]):
            book[0] += tokens
            book[1] += seconds
        self.cap.steps += 1
        if not drafted:
            self.n1 += 1
            w = max(1.0 / self.n1, PLAIN_EMA)
            plain = seconds - host  # the step as plain decoding takes it
            self.t1 = plain if self.t1 is None else self.t1 + w * (plain - self.t1)
            if tried:
                self.cap.net += host / self.t1
            self.left = max(self.left - 1, 0)
            return
        t1 = self.t1 if self.t1 is not None else t1_hint
        lost = seconds - tokens * t1
        self.cap.net += lost / t1
        self.loss = max(self.loss + lost, 0.0)
        self.gain -= lost
        if self.loss > self.budget * t1:  # drafting is not paying here: back off, for longer each time
            self.left = self.gap * 2 ** self.fails
            self.fails += 1
            self.backoffs += 1
            self.loss = self.gain = 0.0
        elif self.gain >= self.budget * t1:  # it pays: a later failure starts again from the shortest gap
            self.fails = 0
            self.gain = 0.0

    def state(self) -> dict:
        """For the trace: the plain steps left, failures in a row, this probe's books and the rates."""
        t1 = self.t1 or 0.0
        rate = lambda b: round(b[0] / b[1], 3) if b[1] > 0 else None  # tokens per second
        return {"plain_left": self.left, "fails": self.fails, "backoffs": self.backoffs, "net": round(self.cap.net, 3),
                "room": round(self.room(), 3),
                "loss": round(self.loss / t1, 3) if t1 else 0.0, "gain": round(self.gain / t1, 3) if t1 else 0.0,
                "t1_s": round(t1, 6), "draft_rate": rate(self.prompt["draft"]), "plain_rate": rate(self.prompt["plain"]),
                "draft_rate_all": rate(self.life["draft"]), "plain_rate_all": rate(self.life["plain"])}

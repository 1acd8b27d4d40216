"""How wide a step should be: the number of draft nodes and ESP masks that maximises expected tokens per
second, (1 + sum of the chosen nodes' P + value of the masks fed) / t(rows).

Candidates come best-first by P (a node's calibrated probability of being accepted, the product along its
path), so any prefix of them is a valid tree. Masks are worth feeding on a node only if that node may be
where the accepted path ends: P_end(v) = P(v) - sum of P over v's fed children. Feeding k masks on v is
worth `mask_value` tokens (what ESP's drafts add to the next step, learned online) times P_end(v).
A fixed budget (bc=N) is the same choice with a flat cost, so it fills its N rows the way that adds the
most expected tokens; `bc=auto` reads the machine's measured curve instead and may pick one row.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Choice:
    """The step's shape: the first `n` candidates, k masks on each node in `masked` (0 = root)."""

    n: int
    masked: tuple[int, ...]
    rows: int
    expected: float  # expected tokens this step: 1 (the bonus) + sum P + mask value
    seconds: float | None  # predicted forward time (None under a flat budget)


def choose(
    p: torch.Tensor,
    parents: list[int],
    k: int,
    mask_value: float,
    cap: int,
    cost: torch.Tensor | None = None,
    max_masked: int = 16,
    force_mask: bool = False,
    margin: float = 0.0,
) -> Choice:
    """Best (nodes, masks) for candidates with path probabilities `p` (non-increasing, parents first).

    `parents[i]` is candidate i's parent as a tree index (0 = root, j = candidate j-1). `cost[r]` is the
    forward time of r rows (r = 1..cap); None means a flat cost, i.e. fill up to `cap` rows.
    `force_mask` feeds masks on at least one node (so that their value can be measured at all); under a
    measured cost, a wider step must beat the plain one-row step by `margin` (a share) to be chosen.
    """
    p = p.double()[: max(cap - 1, 0)]
    n_cand = p.numel()
    m_max = 0 if k <= 0 or (mask_value <= 0 and not force_mask) else min(n_cand + 1, max_masked, (cap - 1) // k)
    if cost is not None and not force_mask:
        plain = (1 + margin) / float(cost[1])
        if best_rate(p, mask_value if m_max else 0.0, cost[: max(cap, 1) + 1], 2) * (1 + 1e-9) < plain:
            return Choice(0, (), 1, 1.0, float(cost[1]))  # exactly what the tables would pick; the slack covers rounding
    full = torch.cat([p.new_ones(1), p])  # path probability per tree index, root = 1
    served = torch.zeros(n_cand + 1, n_cand + 1, dtype=torch.float64)  # [v, n]: P of v's children among the first n
    if n_cand:
        child = torch.zeros(n_cand + 1, n_cand, dtype=torch.float64)
        child[torch.tensor(parents[:n_cand]), torch.arange(n_cand)] = 1.0
        served[:, 1:] = (child * p[None, :]).cumsum(1)
    exists = torch.arange(n_cand + 1)[:, None] <= torch.arange(n_cand + 1)[None, :]
    p_end = torch.where(exists, full[:, None] - served, torch.full_like(served, -1.0))
    top = p_end.sort(0, descending=True).values[:m_max].cumsum(0)  # [m-1, n]: best m masked nodes
    gain = torch.cat([torch.zeros(1, n_cand + 1, dtype=torch.float64), mask_value * top])  # [m, n]
    nodes = torch.cat([p.new_zeros(1), p.cumsum(0)])  # [n]
    expected = 1.0 + nodes[None, :] + gain
    rows = 1 + torch.arange(n_cand + 1)[None, :] + k * torch.arange(m_max + 1)[:, None]
    ok = rows <= max(cap, 1)
    if force_mask and m_max:
        ok[0] = False
    if cost is None:
        score = expected
    else:
        score = expected / cost[rows.clamp(max=cost.numel() - 1)]
        score[0, 0] *= 1 + margin
    score = torch.where(ok, score, torch.full_like(score, -1.0))
    best = int(score.flatten().argmax())  # first maximum: fewer masks, then fewer nodes
    m, n = divmod(best, n_cand + 1)
    masked = tuple(sorted(p_end[:, n].argsort(descending=True)[:m].tolist()))
    r = int(rows[m, n])
    return Choice(n, masked, r, float(expected[m, n]), None if cost is None else float(cost[r]))


def best_rate(p: torch.Tensor, mask_value: float, cost: torch.Tensor, lo: int) -> float:
    """An upper bound of expected tokens per unit of `cost` over every choice of `lo` or more rows: every
    candidate fed and masks at full value, on the cheapest such width. Masks add mask_value times the
    sum of their nodes' positive P_end, and P_end(v) <= P(v), so at most mask_value * (1 + sum P).
    It lets a step that nothing predicts skip the (candidates x candidates) tables of `choose`."""
    wide = cost[lo:]
    if not wide.numel():
        return 0.0
    total = float(p.sum())
    return (1.0 + total + max(mask_value, 0.0) * (1.0 + total)) / float(wide.min())

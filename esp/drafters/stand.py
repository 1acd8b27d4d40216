"""STAND (Song et al. 2025, arXiv 2506.04708): an n-gram table of the target's own next-token
distributions, drafting a best-first tree under the same per-forward budget as ESP.

No official code exists; the choices the paper leaves open are ours and all keep decoding lossless:
- The table maps every context of 1..4 tokens to the target's top-10 next-token distribution (after
  temperature / top-k / top-p when sampling, plain softmax when greedy). A context seen again is merged
  by running mean over the union of tokens (a missing token counts as 0) and cut back to the top 10.
- Seeding: the prefill forward only yields logits for the prompt's last row, so the table is seeded from
  the prompt text itself: each prompt n-gram adds a one-hot distribution on the token that followed it
  (running means of those are the prompt's empirical n-gram statistics). The prefill's root logits
  then enter like every later verification.
- Updates: after every verification, the target's distributions at the root and at each accepted node
  (their contexts are now committed text) are added for all 1..4-token suffixes.
- Drafting: lookup backs off from the longest suffix (4) to 1 token. The tree is grown best-first by
  cumulative probability (`esp.decoding.tree.best_first`) to bc - 1 nodes (STAND feeds no masks, so a forward
  holds at most bc tokens). Greedy: a node's children are tried in stored order (top-c); sampling:
  in Gumbel-top-c order, from a generator seeded by (seed, step) so runs repeat exactly.
"""
from __future__ import annotations

from operator import itemgetter
from typing import Sequence

import torch

from esp.device import read_all
from esp.errors import ESPError
from esp.sampling import probs as target_probs
from esp.decoding.tree import best_first
from esp.trace import TABLE
from esp.decoding.drafter import Context, Drafter, Notes, Proposal, StepResult


class NGramTable:
    """Context (1..max_n tokens) -> top-`top` next-token distribution, merged by running mean; with a
    finite `memory` m, each observation after the m-th weighs 1/m (an exponential mean: recency, for the hybrid)."""

    def __init__(self, max_n: int = 4, top: int = 10, memory: float = float("inf")):
        self.max_n, self.top = max_n, top
        self.memory = memory
        # key -> [tokens sorted by prob (desc), probs, observations]
        self.entries: dict[tuple[int, ...], list] = {}

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, context: Sequence[int], tokens: list[int], probs: list[float]) -> None:
        """One observation of the distribution after `context`, for each of its 1..max_n suffixes."""
        for n in range(1, min(self.max_n, len(context)) + 1):
            self._merge(tuple(context[-n:]), tokens, probs)

    def _merge(self, key: tuple[int, ...], tokens: list[int], probs: list[float]) -> None:
        entry = self.entries.get(key)
        if entry is None:
            self.entries[key] = [list(tokens[: self.top]), list(probs[: self.top]), 1]
            return
        old_t, old_p, count = entry
        count += 1
        span = min(count, self.memory)
        keep = (span - 1) / span
        merged = {t: p * keep for t, p in zip(old_t, old_p)}
        for t, p in zip(tokens, probs):
            merged[t] = merged.get(t, 0.0) + p / span
        best = sorted(merged.items(), key=itemgetter(1), reverse=True)[: self.top]  # stable: ties keep their order
        entry[0], entry[1], entry[2] = [t for t, _ in best], [p for _, p in best], count

    def lookup(self, context: Sequence[int]) -> tuple[list[int], list[float]]:
        """The distribution stored for the longest suffix of `context` in the table (empty if none)."""
        _, toks, probs = self.match(context)
        return toks, probs

    def match(self, context: Sequence[int]) -> tuple[int, list[int], list[float]]:
        """(suffix length, tokens, probs) for the longest suffix of `context` in the table ((0, [], []) if none)."""
        for n in range(min(self.max_n, len(context)), 0, -1):
            entry = self.entries.get(tuple(context[-n:]))
            if entry is not None:
                return n, entry[0], entry[1]
        return 0, [], []

    def seed(self, tokens: Sequence[int]) -> None:
        """Each n-gram of `tokens` adds a one-hot distribution on the token that followed it."""
        for i in range(1, len(tokens)):
            self.add(tokens[max(0, i - self.max_n) : i], [tokens[i]], [1.0])


class STANDDrafter(Drafter):
    """Best-first tree from the n-gram table, bc - 1 draft nodes per step."""

    name = "stand"
    source = TABLE

    def __init__(self, bc: int = 30, top: int = 10, n: int = 4):
        if not (isinstance(bc, int) and bc >= 2):
            raise ESPError(f"stand: BC must be an integer >= 2 (the root plus at least one draft), not {bc}.")
        if not (isinstance(top, int) and top >= 1):
            raise ESPError(f"stand: top (tokens kept per context) must be an integer >= 1, not {top}.")
        if not (isinstance(n, int) and n >= 1):
            raise ESPError(f"stand: n (longest context) must be an integer >= 1, not {n}.")
        self.bc, self.top, self.n = bc, top, n
        self.table = NGramTable(n, top)

    def describe(self) -> str:
        return f"stand bc={self.bc} top={self.top} n={self.n}"

    def start(self, ctx: Context) -> None:
        self.table = NGramTable(self.n, self.top)
        self.table.seed(ctx.tokens)

    def propose(self, ctx: Context) -> Proposal:
        recent = ctx.tokens[-self.n :]
        gen = None
        if not ctx.sampling.greedy:
            gen = torch.Generator().manual_seed((ctx.sampling.seed * 1_000_003 + ctx.step) % (2**63))

        def children(tree, node: int, depth: int) -> tuple[list[int], list[float]]:
            path = []
            while node > 0 and len(path) < self.n:  # only the last n tokens of the context matter
                path.append(tree.tokens[node])
                node = tree.parents[node]
            toks, probs = self.table.lookup(recent + path[::-1])
            if gen is not None and len(toks) > 1:
                p = torch.tensor(probs, dtype=torch.float64).clamp_min(1e-30)
                u = torch.rand(len(toks), generator=gen, dtype=torch.float64).clamp(1e-12, 1 - 1e-12)
                order = torch.argsort(p.log() - (-u.log()).log(), descending=True).tolist()
                toks, probs = [toks[i] for i in order], [probs[i] for i in order]
            return toks, probs

        return Proposal(tree=best_first(ctx.tokens[-1], children, self.bc - 1))

    def observe(self, ctx: Context, res: StepResult) -> Notes:
        s = ctx.sampling
        logits = res.node_logits[res.path]
        dist = torch.softmax(logits.double(), -1) if s.greedy else target_probs(logits.double(), s)
        p, t = torch.topk(dist, min(self.top, dist.shape[-1]), dim=-1)
        # Row j is the distribution after root + j accepted drafts, i.e. after text[: r + j + 1].
        r = len(ctx.tokens) - len(res.emitted) - 1
        rows = min(len(res.path), len(res.emitted))  # a cut at EOS / max tokens ends the run anyway
        tt, pp = read_all([t[:rows], p[:rows]])  # one read
        for j, (toks, probs) in enumerate(zip(tt, pp)):
            toks = [int(x) for x in toks]
            end = r + j + 1
            self.table.add(ctx.tokens[max(0, end - self.n) : end], toks, probs)
        return Notes()

"""LADE (lookahead decoding, Fu et al. 2024): Jacobi iterations in a lookahead window produce n-grams;
n-grams starting with the root token are verified as tree chains, all in one forward.

Follows the official LookaheadDecoding code (lade 0.0.2, greedy search with ALWAYS_FWD_ONE):
- The window holds N-1 levels. The root serves as level 0's first column, so level 0 has W-1 tokens of
  its own (offsets 1..W-1 from the root) and level l >= 1 has W columns at offsets l+j, j = 0..W-1.
  In these "column" terms a token at level l, column j sits at root + l + j.
- Visibility (besides the committed prefix and the root): level 0 is causal within itself; level l,
  column j sees level 0's columns <= j and column j of levels 1..l. Draft chains never see the window
  and the window never sees them.
- Start: level 0 is W+N-3 tokens drawn from the prompt (seeded by the sampling seed); the prefill and
  N-3 further warm-up steps each fill one more level while every level drops its first column (the root
  moved on by one); from then on the window is full: W-1, W, ..., W tokens.
- Full window, after each forward: the argmax at the top level's W rows gives new tokens; column j gives
  the n-gram (level-0 column j, levels 1..N-2 at column j, new token j), whose level-0 column 0 is the
  root; it goes into the pool under its first token (LRU, at most G per key). Then the window slides one
  level (level 0 <- level 1 minus its first column, level l <- level l+1, top <- the new tokens),
  however many tokens were accepted.
- Guesses: the pool's (N-1)-grams keyed by the root, as chains under the root (merged as a trie, which
  changes no verification outcome). The shared verifier accepts the longest match plus a bonus token and
  the engine keeps only the accepted path's KV. Under sampling the verifier draws the target's tokens;
  the window stays greedy, as in the official sampling code.
"""
from __future__ import annotations

import functools
import random

import torch

from esp.errors import ESPError
from esp.decoding.layout import Extra
from esp.decoding.tree import DraftTree
from esp.trace import POOL
from esp.decoding.drafter import Context, Drafter, Notes, Proposal, StepResult


@functools.lru_cache(maxsize=64)
def window_geometry(lengths: tuple[int, ...]) -> tuple[tuple[int, ...], torch.Tensor]:
    """Position offsets from the root and (E, E) visibility of a window whose levels have `lengths`."""
    level = torch.cat([torch.full((n,), lv) for lv, n in enumerate(lengths)])
    col = torch.cat([torch.arange(n) + (1 if lv == 0 else 0) for lv, n in enumerate(lengths)])
    la, ca, lb, cb = level[:, None], col[:, None], level[None, :], col[None, :]
    see = ((lb == 0) & (cb <= ca)) | ((lb > 0) & (la > 0) & (cb == ca) & (lb <= la))
    return tuple((level + col).tolist()), see


def remember(pool: dict[int, list[tuple[int, ...]]], key: int, gram: tuple[int, ...], g: int) -> None:
    """Add `gram` under `key`, least recently added first out once a key holds g grams."""
    grams = pool.setdefault(key, [])
    if gram in grams:
        grams.remove(gram)
    elif len(grams) >= g:
        grams.pop(0)
    grams.append(gram)


class LADEDrafter(Drafter):
    """Lookahead window in extra rows, pool n-grams as draft chains."""

    name = "lade"
    source = POOL

    def __init__(self, n: int = 5, w: int = 7, g: int = 7):
        if not (isinstance(n, int) and n >= 3):
            raise ESPError(f"lade: n (n-gram size, window levels + 1) must be an integer >= 3, not {n}.")
        if not (isinstance(w, int) and w >= 2):
            raise ESPError(f"lade: w (window width) must be an integer >= 2, not {w}.")
        if not (isinstance(g, int) and g >= 1):
            raise ESPError(f"lade: g (guesses per step) must be an integer >= 1, not {g}.")
        self.n, self.w, self.g = n, w, g
        self.levels: list[list[int]] = []
        self.pool: dict[int, list[tuple[int, ...]]] = {}

    def describe(self) -> str:
        return f"lade n={self.n} w={self.w} g={self.g}"

    @property
    def full(self) -> bool:
        return len(self.levels) == self.n - 1

    def start(self, ctx: Context) -> None:
        rng = random.Random(ctx.sampling.seed)
        self.levels = [[rng.choice(ctx.tokens) for _ in range(self.w + self.n - 3)]]
        self.pool = {}

    def propose(self, ctx: Context) -> Proposal:
        tree = DraftTree.root_only(ctx.tokens[-1])
        if self.full:
            for gram in self.pool.get(tree.tokens[0], ()):
                tree.add_chain(0, list(gram))
        lengths = tuple(len(lv) for lv in self.levels)
        offsets, see_self = window_geometry(lengths)
        see_tree = torch.zeros(len(offsets), len(tree), dtype=torch.bool)
        see_tree[:, 0] = True
        ids = tuple(t for lv in self.levels for t in lv)
        return Proposal(tree=tree, extra=Extra(ids, offsets, see_tree, see_self, key=("lade", lengths)))

    def observe(self, ctx: Context, res: StepResult) -> Notes:
        lay = res.layout
        new = res.logits(list(range(lay.size - len(self.levels[-1]), lay.size)), ctx.lm).argmax(-1).tolist()
        if len(self.levels) == 1:  # after the prefill: level-0 outputs already sit one column on
            self.levels = [self.levels[0][1:], new]
        elif not self.full:
            self.levels = [lv[1:] for lv in self.levels] + [new[1:]]
        else:
            first = [res.proposal.tree.tokens[0]] + self.levels[0]
            for j in range(self.w):
                gram = tuple(lv[j] for lv in self.levels[1:]) + (new[j],)
                remember(self.pool, first[j], gram, self.g)
            self.levels = [self.levels[1][1:]] + self.levels[2:] + [new]
        return Notes()

"""The hybrid's candidates for one step: every source's proposals merged into one trie, calibrated, and grown
best-first by P (esp.drafters.hybrid explains the sources and the calibration)."""
from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from esp.budget.calibrate import Calibrator, bucket
from esp.decoding.tree import DraftTree
from esp.drafters.pld import NgramIndex
from esp.drafters.stand import NGramTable
from esp.trace import ESP, LOOKUP, SOURCES, TABLE

RANKS = 3  # a source's ranks from 3 on share one calibration key
MATCHES = 4  # copies from the running prompt a step drafts
HISTORY_MATCHES = 2  # a hot drafter's copies from earlier prompts, besides the running prompt's MATCHES

Paths = dict[tuple[int, ...], list[tuple[int, int]]]  # tokens below the root -> copies' (next token, match score)
Enough = Callable[[list[float], float], bool]  # grown candidates' path probabilities, the next one's -> stop growing


@dataclass(slots=True, kw_only=True)
class Candidate:
    """A proposed child: its token, what each source said about it, and its calibrated P(accept | parent)."""

    token: int
    sources: tuple[str, ...]
    keys: tuple
    cond: float


@dataclass(kw_only=True)
class Draft:
    """One step's grown candidates: the tree (every candidate grown, best first by P; the fed tree is a prefix of
    it), what it was grown from, and what labels them once the target has spoken."""

    tree: DraftTree
    p: np.ndarray  # path probability of tree nodes 1.., scaled by `gain`, at most 1
    cands: dict[int, list[Candidate]]  # per grown node, its candidate children, best first
    path_of: dict[int, tuple[int, ...]]  # per grown node, its tokens below the root
    gain: float  # the drafter's reliability (accepted drafts over the sum of their P) that scaled P
    esp_depths: int | None  # depths of ESP drafts it had from the last step's masks (None: none)


@dataclass(kw_only=True)
class Evidence:
    """What a step's candidates are grown from, besides the text: the sources' state at that step."""

    sources: tuple[str, ...]
    table: NGramTable
    n: int  # longest table context
    esp_top: list[list[tuple[int, int, int]]] | None  # per depth: ESP's (token, band, rank), from the last step's masks
    paths: Paths  # the lookup's copies
    calibrator: Calibrator
    live: bool  # the last step's accepted path ended on a lookup node: its copy still holds


class History:
    """A hot drafter's earlier prompts and outputs, the last `size` tokens of them searched, indexed as each prompt
    joins: a prompt's start indexes that prompt's text alone, not the whole history again (the index is rebuilt
    over the window only once the text kept has doubled it)."""

    def __init__(self, match: int, size: int):
        self.match, self.size = match, size
        self.index = NgramIndex(match)

    def __len__(self) -> int:
        return min(len(self.index.text), self.size)

    def add(self, tokens: list[int]) -> None:
        """One more prompt's text (prompt and output), after the earlier ones."""
        text = self.index.text + list(tokens)
        if len(text) > 2 * self.size:
            self.index, text = NgramIndex(self.match), text[-self.size :]
        self.index.extend(text)

    def continuations(self, suffix: list[int], draft: int, limit: int) -> list[tuple[int, list[int]]]:
        """`NgramIndex.continuations` over the window: the last `size` tokens."""
        return self.index.continuations(suffix, draft, limit, lo=len(self.index.text) - len(self))


class Lookup:
    """Copies of earlier text: continuations of the text's suffix in the running prompt (indexed as the text
    grows, so that a step's lookup costs the same at any length) and, for a hot drafter, in earlier prompts."""

    def __init__(self, match: int, history: History | None = None):
        self.index = NgramIndex(match)
        self.history = history if history is not None and len(history) else None

    def paths(self, tokens: list[int], draft: int) -> Paths:
        """Every copy's next tokens, keyed by the tokens before them (best match first)."""
        self.index.extend(tokens)
        found = self.index.continuations(tokens, draft, MATCHES)
        if self.history is not None:
            # Copies from other text get a score of their own (-n): a match into an earlier prompt
            # (the same chat template, say) predicts less than one into this prompt.
            found += [(-n, c) for n, c in self.history.continuations(tokens, draft, HISTORY_MATCHES)]
        paths: Paths = {}
        for n, cont in found:
            for d, tok in enumerate(cont):
                paths.setdefault(tuple(cont[:d]), []).append((tok, n))
        return paths


def grow(text: list[int], ev: Evidence, cap: int, floor: float, enough: Enough | None = None
         ) -> tuple[DraftTree, dict[int, list[Candidate]], dict[int, tuple[int, ...]]]:
    """Best-first by P over the merged candidates after `text`, up to `cap` nodes while P is at least `floor`:
    the tree, each grown node's candidate children and each node's tokens below the root. `enough(p, q)`, asked
    when 0, 1, 3, 7, ... candidates are grown (their path probabilities `p`, the next one's `q`), stops the growth
    there when it says that no further candidate can change the step's choice."""
    tree = DraftTree([text[-1]], [-1], [1.0], [1.0], sources=[()], p=[1.0])
    known: dict[tuple, tuple] = {}  # what proposed a candidate -> its calibration, for this step
    cands: dict[int, list[Candidate]] = {}
    path_of = {0: ()}
    frontier: list[tuple[float, int, int]] = []

    def open_node(v: int) -> None:
        cands[v] = cs = children(text, path_of[v], tree.tokens[v], ev, known)
        if cs:
            heapq.heappush(frontier, (-tree.cum_probs[v] * cs[0].cond, v, 0))

    open_node(0)
    ask = 0  # candidates grown at the next question to `enough`
    while frontier and len(tree) < cap:
        if -frontier[0][0] < floor:
            break
        if enough is not None and len(tree) - 1 == ask:
            if enough(tree.cum_probs[1:], -frontier[0][0]):
                break
            ask = 2 * ask + 1
        neg, v, rank = heapq.heappop(frontier)
        cs = cands[v]
        if rank + 1 < len(cs):
            heapq.heappush(frontier, (-tree.cum_probs[v] * cs[rank + 1].cond, v, rank + 1))
        c = cs[rank]
        node = tree.add(v, c.token, c.cond)
        tree.sources.append(c.sources)
        tree.p.append(tree.cum_probs[node])
        path_of[node] = path_of[v] + (c.token,)
        open_node(node)
    return tree, cands, path_of


def children(text: list[int], path: tuple[int, ...], parent: int, ev: Evidence, known: dict) -> list[Candidate]:
    """Every source's proposals after text + path, merged per token and calibrated, best first (`known`: the
    calibrations looked up so far this step)."""
    depth = len(path) + 1
    said: dict[int, dict[str, tuple]] = {}  # token -> source -> (score, rank)
    if TABLE in ev.sources:
        order, toks, probs = ev.table.match((text[-ev.n :] + list(path))[-ev.n :])
        for r, (t, q) in enumerate(zip(toks, probs)):
            said[t] = {TABLE: ((order, bucket(q)), min(r, RANKS))}
    if ev.esp_top is not None and depth <= len(ev.esp_top):
        for t, band, r in ev.esp_top[depth - 1]:
            by = said.get(t)
            if by is not None:
                by[ESP] = (band, r)
            elif t != parent:  # ESP's rule: a mask rarely means "repeat the parent"
                said[t] = {ESP: (band, r)}
    for t, n in ev.paths.get(path, ()):  # best match first: this prompt's longest, then earlier text's
        by = said.setdefault(t, {})
        if LOOKUP not in by:
            by[LOOKUP] = (n, 0)
    out = []
    d = min(depth, 6)
    for t, by in said.items():
        what = (d, tuple(by.items()))
        got = known.get(what)
        if got is None:
            known[what] = got = calibrated(by, d, ev.calibrator, ev.live)
        out.append(Candidate(token=t, sources=got[0], keys=got[1], cond=got[2]))
    out.sort(key=lambda c: -c.cond)
    return out


def calibrated(by: dict[str, tuple], d: int, calibrator: Calibrator,
               live: bool) -> tuple[tuple[str, ...], tuple, float]:
    """Sources, calibration keys and P(accept | parent) of a candidate that `by` sources proposed at depth d."""
    if len(by) == 1:
        ((src, (score, rank)),) = by.items()
        srcs, scores = (src,), (score,)
    else:
        srcs = tuple(s for s in SOURCES if s in by)
        scores = tuple(by[s][0] for s in srcs)
        rank = min(v[1] for v in by.values())
    # Score before depth: a 6-token copy match predicts acceptance at every depth of its chain.
    keys = ((srcs,), (srcs, scores), (srcs, scores, d), (srcs, scores, d, rank))
    if LOOKUP in srcs:
        # Chain-aware: a copy whose drafts were accepted up to the last step's end tends to hold on, which
        # a product of pooled conditionals misses. Every lookup node's ancestors are the same copy's (lookup
        # proposals are keyed by their whole path), so the chain's parent that varies is the root's: the
        # last accepted node. Finest level: the prior's coarser keys stay usable.
        keys += ((srcs, scores, d, rank, live),)
    return srcs, keys, calibrator.p(keys)

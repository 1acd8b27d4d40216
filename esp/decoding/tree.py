"""Draft trees: the shape every drafter hands to the verifier, and ESP's two ways of growing one."""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Callable

import torch


@dataclass
class DraftTree:
    """A token tree hanging off the root (node 0). Parents precede their children."""

    tokens: list[int]
    parents: list[int]  # -1 for the root
    probs: list[float]  # draft probability of each node (1.0 for the root)
    cum_probs: list[float]
    pruned: list[tuple[int, int, float, float]] = field(default_factory=list)  # (parent, token, prob, cum)
    sources: list[tuple[str, ...]] | None = None  # per node, when a drafter merges several sources
    p: list[float] | None = None  # per node, calibrated P(accepted), when a drafter calibrates

    @classmethod
    def root_only(cls, root: int) -> "DraftTree":
        return cls([root], [-1], [1.0], [1.0])

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def depths(self) -> list[int]:
        d = [0] * len(self.parents)
        for i, p in enumerate(self.parents[1:], 1):
            d[i] = d[p] + 1
        return d

    def add(self, parent: int, token: int, prob: float) -> int:
        """Append a child of `parent`; returns its index."""
        self.tokens.append(token)
        self.parents.append(parent)
        self.probs.append(prob)
        self.cum_probs.append(self.cum_probs[parent] * prob)
        return len(self.tokens) - 1

    def add_chain(self, parent: int, tokens: list[int], probs: list[float] | None = None) -> list[int]:
        """Append a chain below `parent`, reusing children that already hold the same token (a trie)."""
        children = self.children()
        out = []
        for i, tok in enumerate(tokens):
            hit = next((c for c in children.get(parent, []) if self.tokens[c] == tok), None)
            if hit is None:
                hit = self.add(parent, tok, probs[i] if probs else 1.0)
                children.setdefault(parent, []).append(hit)
            out.append(hit)
            parent = hit
        return out

    def children(self) -> dict[int, list[int]]:
        ch: dict[int, list[int]] = {}
        for i, p in enumerate(self.parents[1:], 1):
            ch.setdefault(p, []).append(i)
        return ch

    def shape(self) -> list[int]:
        """Node count per depth, depth 1 first."""
        depths = self.depths[1:]
        return [depths.count(d) for d in range(1, max(depths, default=0) + 1)]


def _ranked(dists: torch.Tensor, n: int) -> list[tuple[list[int], list[float]]]:
    """Per row of (depth, V) draft distributions, its `n` best (tokens, probs): one topk, one host read."""
    p, t = torch.topk(dists, min(n, dists.shape[-1]), dim=-1)
    both = torch.cat([t.to(p.dtype), p], -1).tolist()  # ids are exact in float32 below 2^24
    n = t.shape[-1]
    return [([int(x) for x in row[:n]], row[n:]) for row in both]


def static_tree(root: int, dists: torch.Tensor, shape: list[int]) -> DraftTree:
    """[K_1..K_k] with top-1 expansion: depth i holds K_i children of the best depth-(i-1) node.

    `dists` is (k, V): row i is the draft distribution for depth i+1. A candidate equal to its parent's
    token is pruned and its slot goes to the next-ranked token.
    """
    tree = DraftTree.root_only(root)
    parent = 0
    ranked = _ranked(dists[: len(shape)], max(shape) + 1)
    for depth, width in enumerate(shape):
        toks, probs = ranked[depth][0][: width + 1], ranked[depth][1][: width + 1]
        added: list[int] = []
        for tok, p in zip(toks, probs):
            if len(added) == width:
                break
            if tok == tree.tokens[parent]:
                tree.pruned.append((parent, tok, p, tree.cum_probs[parent] * p))
                continue
            added.append(tree.add(parent, tok, p))
        if not added:
            break
        parent = added[0]
    return tree


def best_first(
    root: int,
    children: Callable[[DraftTree, int, int], tuple[list[int], list[float]]],
    n_nodes: int,
    prune_repeats: bool = False,
) -> DraftTree:
    """Grow a tree of up to `n_nodes` nodes best-first by cumulative probability.

    `children(tree, node, depth)` gives a node's candidate children in the order they should be tried
    (tokens, probs); it is asked once, when the node joins the tree (return empty lists for a leaf).
    The frontier holds, per parent, its next untried candidate. With `prune_repeats`, a candidate equal
    to its parent's token is skipped (recorded in `tree.pruned`) and the slot goes to the next one.
    """
    tree = DraftTree.root_only(root)
    depth = [0]
    cands: dict[int, tuple[list[int], list[float]]] = {}
    frontier: list[tuple[float, int, int]] = []  # (-cum prob, parent, rank)

    def open_node(node: int) -> None:
        toks, probs = children(tree, node, depth[node])
        if toks:
            cands[node] = (toks, probs)
            heapq.heappush(frontier, (-tree.cum_probs[node] * probs[0], node, 0))

    open_node(0)
    while frontier and len(tree) - 1 < n_nodes:
        neg, parent, rank = heapq.heappop(frontier)
        toks, probs = cands[parent]
        if rank + 1 < len(toks):
            heapq.heappush(frontier, (-tree.cum_probs[parent] * probs[rank + 1], parent, rank + 1))
        if prune_repeats and toks[rank] == tree.tokens[parent]:
            tree.pruned.append((parent, toks[rank], probs[rank], -neg))
            continue
        node = tree.add(parent, toks[rank], probs[rank])
        depth.append(depth[parent] + 1)
        open_node(node)
    return tree


def dynamic_tree(root: int, dists: torch.Tensor, n_nodes: int) -> DraftTree:
    """Best-first tree of `n_nodes` nodes by cumulative probability, at most k = len(dists) deep.

    Each depth's candidates come from that depth's distribution, so a node's children are ranked the
    same way everywhere. The result is the set of `n_nodes` highest cumulative-probability paths closed
    under prefixes (children never beat parents).
    """
    k = dists.shape[0]
    ranked = _ranked(dists, n_nodes + 1)
    return best_first(root, lambda tree, node, d: ranked[d] if d < k else ([], []), n_nodes, prune_repeats=True)

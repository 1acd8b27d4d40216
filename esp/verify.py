"""The one verifier: walk the draft tree while a child equals the target's own choice."""
from __future__ import annotations

import torch

from .sampling import Sampling, draw
from .tree import DraftTree


def verify(tree: DraftTree, logits: torch.Tensor, root_pos: int, s: Sampling) -> tuple[list[int], int]:
    """Accepted node indices (root first) and the bonus token.

    `logits[i]` are the target's logits at node i. The target's token after node i is drawn exactly as
    autoregressive decoding would draw it at that position, so the output never changes.
    """
    children: dict[int, dict[int, int]] = {}
    for i, p in enumerate(tree.parents[1:], 1):
        children.setdefault(p, {})[tree.tokens[i]] = i
    # Only the walked rows are read: the path is a few nodes of a block of up to ~100.
    path, depth = [0], 0
    while True:
        cur = path[-1]
        want = draw(logits[cur], root_pos + depth + 1, s)
        nxt = children.get(cur, {}).get(want)
        if nxt is None:
            return path, want
        path.append(nxt)
        depth += 1

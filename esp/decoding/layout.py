"""Block layout: which row of a step's block sees which, and at what position it sits.

A block is [root, tree nodes 1..N, k masks per masked node, extra rows]. Node i is row i; ESP puts masks
on every node (root included), a budgeted drafter only on the nodes where they pay ("owners"); mask j
(1-based) of the o-th owner is row N+1 + o*k + j-1; a drafter's extra rows (LADE's lookahead window)
come last with visibility of their own. A node sees its ancestors and itself; mask j of node v sees
v's path and v's masks 1..j. Node at depth d sits at root+d, its mask j at root+d+j. Everything sees
the committed prefix.

Two builders give identical results: `EfficientLayouts` (array ops, cached per tree shape, prefix
columns kept in a persistent buffer; the host arrays are numpy, so that a new shape reads no tensor back) and `NaiveLayouts` (per-node loops, rebuilt every step), kept for
the paper's ablation.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable

import numpy as np
import torch

from esp.device import canonical, to_device
from esp.errors import ESPError


@dataclass(frozen=True)
class Extra:
    """Rows a drafter appends after the tree and its masks."""

    ids: tuple[int, ...]
    offsets: tuple[int, ...]  # position offset from the root
    see_tree: torch.Tensor  # (E, N+1) bool: extra row -> tree node
    see_self: torch.Tensor  # (E, E) bool: extra row -> extra row
    key: Hashable  # equal keys promise equal visibility (for caching)
    kind: str = "lookahead"


@dataclass(frozen=True)
class Layout:
    """The block's visibility (rows x block columns) and position offsets from the root."""

    visible: torch.Tensor  # (B, B) bool
    offsets: torch.Tensor  # (B,) long
    n_nodes: int  # root + draft nodes
    k: int  # masks per masked node
    n_extra: int
    owners: tuple[int, ...] = ()  # the nodes that carry masks, in block order
    # What steps of this shape reuse: host lists for traces and device tensors for the forward (a cached
    # layout is built once per tree shape, so these are too).
    _memo: dict = field(default_factory=dict, compare=False, repr=False)

    def host(self) -> tuple[list[int], list[list[bool]]]:
        """Offsets and visibility as Python lists (read without touching a tensor again)."""
        if "host" not in self._memo:
            self._memo["host"] = (self.offsets.tolist(), self.visible.tolist())
        return self._memo["host"]

    @property
    def max_offset(self) -> int:
        return max(self.host()[0])

    def on(self, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, B) additive block mask in `dtype` (0 visible, dtype-min blocked) and the (B,) offsets, on
        `device`: copied there once, then reused by every step of this shape."""
        key = (canonical(device), dtype)
        hit = self._memo.get(key)
        if hit is None:
            vis = to_device(self.visible, key[0])
            block = torch.zeros(vis.shape, dtype=dtype, device=key[0]).masked_fill_(~vis, torch.finfo(dtype).min)
            hit = self._memo[key] = (block, to_device(self.offsets, key[0]))
        return hit

    def mask_rows(self, node: int) -> list[int]:
        """Rows of node's masks 1..k (none if the node carries no masks)."""
        if node not in self.owners:
            return []
        start = self.n_nodes + self.owners.index(node) * self.k
        return list(range(start, start + self.k))

    @property
    def size(self) -> int:
        return self.visible.shape[0]

    def kinds(self) -> list[str]:
        return ["root"] + ["node"] * (self.n_nodes - 1) + ["mask"] * (len(self.owners) * self.k) + ["extra"] * self.n_extra


def _ancestors(parents) -> np.ndarray:
    """anc[i, a] is True when a is i itself or one of its ancestors (`parents`: a parent's index, -1 at
    the root, parents before children)."""
    par = np.asarray(parents, dtype=np.int64)
    anc = np.eye(len(par), dtype=bool)
    for i in range(1, len(par)):  # a node sees what its parent sees, and itself
        anc[i] |= anc[par[i]]
    return anc


def _efficient(parents: tuple[int, ...], k: int, extra: Extra | None, owners: tuple[int, ...]) -> Layout:
    n = len(parents)
    anc = _ancestors(parents)
    depth = anc.sum(1) - 1
    owner = np.repeat(np.asarray(owners, dtype=np.int64), k)
    j = np.tile(np.arange(1, k + 1), len(owners))
    m = owner.size
    e = 0 if extra is None else len(extra.ids)
    b = n + m + e
    vis = np.zeros((b, b), dtype=bool)
    vis[:n, :n] = anc
    vis[n : n + m, :n] = anc[owner]
    vis[n : n + m, n : n + m] = (owner[:, None] == owner[None, :]) & (j[None, :] <= j[:, None])
    offsets = np.concatenate([depth, depth[owner] + j]).astype(np.int64)
    if extra is None:
        lay = Layout(torch.from_numpy(vis), torch.from_numpy(offsets), n, k, e, owners)
        lay._memo["host"] = (offsets.tolist(), vis.tolist())
        return lay
    visible = torch.from_numpy(vis)
    visible[n + m :, :n] = extra.see_tree
    visible[n + m :, n + m :] = extra.see_self
    offsets = np.concatenate([offsets, np.asarray(extra.offsets, dtype=np.int64)])
    return Layout(visible, torch.from_numpy(offsets), n, k, e, owners)


def _naive(parents: tuple[int, ...], k: int, extra: Extra | None, owners: tuple[int, ...]) -> Layout:
    n = len(parents)

    def path(v: int) -> set[int]:
        out = set()
        while v >= 0:
            out.add(v)
            v = parents[v]
        return out

    rows: list[tuple[set[int], int, int]] = []  # (visible tree nodes, owner or -1, j)
    offsets = []
    for v in range(n):
        rows.append((path(v), -1, 0))
        offsets.append(len(path(v)) - 1)
    for v in owners:
        for j in range(1, k + 1):
            rows.append((path(v), v, j))
            offsets.append(len(path(v)) - 1 + j)
    m = len(owners) * k
    e = 0 if extra is None else len(extra.ids)
    b = n + m + e
    vis = [[False] * b for _ in range(b)]
    for r, (seen, owner, j) in enumerate(rows):
        for c in range(b):
            if c < n:
                vis[r][c] = c in seen
            elif c < n + m:
                mo, mj = divmod(c - n, k)
                vis[r][c] = owner == owners[mo] and mj + 1 <= j
    if extra is not None:
        for i in range(e):
            r = n + m + i
            for c in range(n):
                vis[r][c] = bool(extra.see_tree[i, c])
            for c in range(e):
                vis[r][n + m + c] = bool(extra.see_self[i, c])
            offsets.append(extra.offsets[i])
    return Layout(torch.tensor(vis, dtype=torch.bool), torch.tensor(offsets, dtype=torch.long), n, k, e, owners)


def _owners(parents: list[int], k: int, owners: tuple[int, ...] | None) -> tuple[int, ...]:
    if not k:
        return ()
    return tuple(range(len(parents))) if owners is None else tuple(owners)


class EfficientLayouts:
    """Tensor-built layouts cached per (tree shape, k, extra key); prefix columns never rebuilt."""

    name = "efficient"

    def __init__(self, max_cached: int = 512):
        self._cache: dict[Hashable, Layout] = {}
        self._max = max_cached
        self._buf: torch.Tensor | None = None
        self._dirty = (0, 0)  # columns written by the previous step

    def layout(self, parents: list[int], k: int, extra: Extra | None = None,
               owners: tuple[int, ...] | None = None) -> Layout:
        """The block for a tree; `owners` are the nodes carrying k masks (default: every node)."""
        owners = _owners(parents, k, owners)
        key = (tuple(parents), k, None if extra is None else extra.key, owners)
        hit = self._cache.get(key)
        if hit is None:
            if len(self._cache) >= self._max:
                self._cache.pop(next(iter(self._cache)))
            hit = self._cache[key] = _efficient(tuple(parents), k, extra, owners)
        return hit

    def additive(self, layout: Layout, n_prefix: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """(1, 1, B, n_prefix + B) additive mask: 0 where visible, dtype-min where blocked."""
        b = layout.size
        buf, device = self._buf, canonical(device)
        if buf is None or buf.dtype != dtype or buf.device != device or buf.shape[0] < b or buf.shape[1] < n_prefix + b:
            rows = max(b, 64 if buf is None else buf.shape[0])
            cols = max(2 * (n_prefix + b), 1024)
            buf = self._buf = torch.zeros(rows, cols, dtype=dtype, device=device)
            self._dirty = (0, 0)
        lo, hi = self._dirty
        buf[:, lo:hi] = 0
        buf[:b, n_prefix : n_prefix + b] = layout.on(device, dtype)[0]
        self._dirty = (n_prefix, n_prefix + b)
        return buf[:b, : n_prefix + b][None, None]


class NaiveLayouts:
    """Per-node loops every step, the whole mask (prefix included) rebuilt: the ablation's baseline."""

    name = "naive"

    def layout(self, parents: list[int], k: int, extra: Extra | None = None,
               owners: tuple[int, ...] | None = None) -> Layout:
        return _naive(tuple(parents), k, extra, _owners(parents, k, owners))

    def additive(self, layout: Layout, n_prefix: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        b = layout.size
        low = torch.finfo(dtype).min
        vis = layout.visible.tolist()
        rows = [[0.0] * n_prefix + [0.0 if vis[r][c] else low for c in range(b)] for r in range(b)]
        return torch.tensor(rows, dtype=dtype, device=device)[None, None]


BUILDERS = ("efficient", "naive")


def make_layouts(kind: str) -> EfficientLayouts | NaiveLayouts:
    """'efficient' (default) or 'naive'."""
    if kind == "efficient":
        return EfficientLayouts()
    if kind == "naive":
        return NaiveLayouts()
    raise ESPError(f"mask builder must be 'efficient' or 'naive', not {kind!r}.")

"""Every edit of a KV cache, in one place: commit a step (one sequence, or a batch's rows), crop, append
another cache's rows, keep some rows. A `DynamicCache` layer holds keys and values as (rows, kv heads, slots,
head dim); slot j of a row holds its j-th committed token.

Here, beside the model (`esp.models.lm.LM.new_cache`), rather than in the decoding loop, since the forward
timings of `esp.models.timing` also crop a cache and sit below the decoding loop."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from esp.device import to_device

SIDES = ("keys", "values")


def truncate(cache: DynamicCache, slots: int) -> None:
    """Keep the first `slots` slots of every row."""
    for layer in cache.layers:
        # A layer with nothing past `slots` is left as it is: a one-row step commits all it fed, and slicing
        # every layer anyway took 0.11 ms a step (30 layers), 0.3% of a float32 step of the embedded model.
        if layer.keys.shape[-2] > slots:
            layer.keys, layer.values = layer.keys[..., :slots, :], layer.values[..., :slots, :]


def commit(cache: DynamicCache, past: int, rows: list[int]) -> None:
    """One sequence: keep the first `past` cached tokens and then block rows `rows` (increasing), drop the rest."""
    keep = past + len(rows)
    if rows == list(range(len(rows))):  # a prefix of the block: cropping is enough
        truncate(cache, keep)
        return
    idx = torch.tensor(rows) + past
    on: dict[torch.device, torch.Tensor] = {}  # layers may sit on several GPUs (device_map="auto")
    for layer in cache.layers:
        for name in SIDES:
            t = getattr(layer, name)
            if t.device not in on:
                on[t.device] = to_device(idx, t.device)
            t[..., past:keep, :] = t.index_select(-2, on[t.device])
            setattr(layer, name, t[..., :keep, :])


def commit_rows(cache: DynamicCache, kept: list[tuple[int, list[int]]], slots: int) -> None:
    """A batch: move each row's kept block rows (`kept[b]`: the slots it had committed, and block-relative rows,
    increasing; the block sits at `slots`) to its next free slots, then cut every layer to the longest row."""
    rows, dst, src = [], [], []
    for b, (past, keep) in enumerate(kept):
        for j, r in enumerate(keep):
            if past + j != slots + r:
                rows.append(b)
                dst.append(past + j)
                src.append(slots + r)
    if rows:
        # As flat indices into a (rows x heads x slots, dim) view of the storage (contiguous: the forward's
        # cat made it): two index ops a tensor, where t[r, :, d] = t[r, :, s] broadcasts three index tensors
        # (a plain step of 16 rows moving 15 roots took 1.8 ms).
        r, d, s = (torch.tensor(x)[:, None] for x in (rows, dst, src))
        on: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}  # layers may sit on several GPUs
        for layer in cache.layers:
            for name in SIDES:
                t = getattr(layer, name)
                key = (t.device, t.shape[1], t.shape[2])
                if key not in on:
                    base = (r * t.shape[1] + torch.arange(t.shape[1])[None, :]) * t.shape[2]
                    on[key] = tuple(to_device((base + x).reshape(-1), t.device) for x in (d, s))
                to, fro = on[key]
                flat = t.view(-1, t.shape[-1])
                flat.index_copy_(0, to, flat.index_select(0, fro))
    truncate(cache, max(past + len(keep) for past, keep in kept))


def select_rows(cache: DynamicCache, keep: list[int], slots: int) -> None:
    """Keep only rows `keep` (in that order), cut to `slots` slots."""
    cache.batch_select_indices(torch.tensor(keep, device=cache.layers[0].keys.device))
    truncate(cache, slots)


def append(cache: DynamicCache, other: DynamicCache) -> DynamicCache:
    """`cache` with `other`'s rows after its own in every layer, the shorter side's slots padded at the end (a
    row never sees the slots past its own tokens)."""
    for mine, theirs in zip(cache.layers, other.layers):
        for name in SIDES:
            a, b = getattr(mine, name), getattr(theirs, name).to(getattr(mine, name).device)
            n = max(a.shape[-2], b.shape[-2])
            setattr(mine, name, torch.cat([F.pad(a, (0, 0, 0, n - a.shape[-2])), F.pad(b, (0, 0, 0, n - b.shape[-2]))]))
    return cache

"""Committing a step to the KV cache: keep the prefix plus the accepted rows of the block, in order."""
from __future__ import annotations

import torch
from transformers import DynamicCache

from esp.device import to_device


def commit(cache: DynamicCache, past: int, rows: list[int]) -> None:
    """Keep the first `past` cached tokens and then block rows `rows` (increasing), drop the rest."""
    keep = past + len(rows)
    if rows == list(range(len(rows))):  # a prefix of the block: cropping is enough
        for layer in cache.layers:
            layer.keys, layer.values = layer.keys[..., :keep, :], layer.values[..., :keep, :]
        return
    idx = torch.tensor(rows) + past
    on: dict[torch.device, torch.Tensor] = {}  # layers may sit on several GPUs (device_map="auto")
    for layer in cache.layers:
        for name in ("keys", "values"):
            t = getattr(layer, name)
            if t.device not in on:
                on[t.device] = to_device(idx, t.device)
            t[..., past:keep, :] = t.index_select(-2, on[t.device])
            setattr(layer, name, t[..., :keep, :])

"""Timing a model's forwards: seconds of one forward of q new rows (LM head on every row) over a cache of
`context` tokens, each width paired with a one-row forward timed just before it. The cost curves
(esp.budget.cost) and the CPU dtype check (esp.models.cpu_dtype) both time forwards this way."""
from __future__ import annotations

import statistics
import time

import torch

from esp.models.kvcache import truncate

GRID = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64, 96, 128)
CONTEXT = 300  # cached tokens under the timed forwards: a Spec-Bench prompt plus some output


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def causal_mask(q: int, past: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """(1, 1, q, past + q) additive mask: the prefix and earlier new rows are visible."""
    m = torch.full((q, past + q), torch.finfo(dtype).min, dtype=dtype, device=device)
    m[:, :past] = 0
    m[:, past:] = m[:, past:].triu(1)
    return m[None, None]


def measure(lm, grid: tuple[int, ...] = GRID, context: int = CONTEXT, repeats: int = 5) -> dict[int, float]:
    """Median seconds of one forward of q new rows (LM head on every row) over a `context`-token cache."""
    return {q: statistics.median(s for s, _ in ts) for q, ts in samples(lm, grid, context, repeats).items()}


def spread(ts: list[float]) -> float:
    """The timing noise of a median: the median absolute deviation of the runs."""
    m = statistics.median(ts)
    return statistics.median(abs(x - m) for x in ts)


@torch.inference_mode()
def samples(lm, grid: tuple[int, ...] = GRID, context: int = CONTEXT,
            repeats: int = 5) -> dict[int, list[tuple[float, float]]]:
    """Per width q, `repeats` pairs (seconds of a forward of q new rows, seconds of the one-row forward
    timed just before it), LM head on every row, over a `context`-token cache."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, lm.vocab_size, (context + max(grid),), generator=g).tolist()
    cache = lm.new_cache()
    dev = lm.device
    lm.forward(lm.embed(ids[:context]), torch.arange(context, device=dev), causal_mask(context, 0, lm.dtype, dev), cache)
    # One row is timed unmasked, as the one-row loop runs a plain step (esp.models.lm.LM.forward).
    inputs = {q: (lm.embed(ids[context : context + q]), torch.arange(context, context + q, device=dev),
                  causal_mask(q, context, lm.dtype, dev) if q > 1 else None) for q in {1, *grid}}

    def timed(q: int) -> float:
        emb, pos, mask = inputs[q]
        _sync(dev)
        t = time.perf_counter()
        h, _ = lm.forward(emb, pos, mask, cache)
        lm.head(h)
        _sync(dev)
        truncate(cache, context)  # back to the same cache for the next timing
        return time.perf_counter() - t

    for q in grid:  # a first run per width warms up kernels and allocator for that size
        timed(q)
    # Then the widths in turn, a round per repeat, each right after a one-row forward: a change in the
    # machine's speed (another job, a throttled core) moves a width and its partner alike, so their ratio
    # holds (a width timed in a row once came out at t(16) = 1.57 t(1), below t(8); 2.04 when timed again).
    out: dict[int, list[tuple[float, float]]] = {q: [] for q in grid}
    for _ in range(repeats):
        for q in grid:
            one = timed(1)
            out[q].append((timed(q), one))
    return out

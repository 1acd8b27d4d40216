"""Throughput of batched decoding: the questions B at a time, in question order, for a method through the
engine (`BatchDecoder`, B prompts in flight) and for transformers' own batched greedy `generate()` (static
batches of B, left padding, as its users run it), side by side on the same prompts."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from esp.decoding.batch import BatchDecoder
from esp.decoding.engine import Decoder
from esp.methods import build, build_batch
from esp.models.lm import LM

GENERATE = "generate()"


@dataclass
class BatchRun:
    """One method over every prompt at one batch size: each prompt's new tokens and forwards, the batches' wall time."""

    method: str
    batch: int
    tokens: list[list[int]] = field(default_factory=list)
    forwards: list[int] = field(default_factory=list)  # per prompt (generate(): its new tokens)
    seconds: float = 0.0

    @property
    def n_tokens(self) -> int:
        return sum(len(t) for t in self.tokens)

    @property
    def tokens_per_s(self) -> float:
        return self.n_tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def tau(self) -> float:
        """Pooled tokens per forward of a row (each prompt's own forwards, as alone)."""
        return self.n_tokens / max(sum(self.forwards), 1)

    def to_dict(self) -> dict:
        return {"method": self.method, "batch": self.batch, "tokens": self.n_tokens, "seconds": round(self.seconds, 4),
                "tokens_per_s": round(self.tokens_per_s, 3), "tau": round(self.tau, 4), "per_prompt": self.tokens}


def chunks(items: list, size: int) -> list[list]:
    return [items[i : i + size] for i in range(0, len(items), size)]


CHUNK = 4  # batches of questions per interleaved part of a run


def throughput(lm: LM, prompts: list[list[int]], specs: list[str], batch: int, max_new_tokens: int) -> dict[str, BatchRun]:
    """Every method of `specs` and batched `generate()` over `prompts`, `batch` at a time, in question order.
    generate() runs each group of `batch` prompts to its end (static batches, as its users run it); the engine
    keeps `batch` prompts in flight, the next one joining as a row ends (`BatchDecoder`'s batch_size). They are
    interleaved per part of CHUNK batches, so that a change of machine speed during the run moves every row
    alike. Every prompt gets a fresh drafter."""
    runs = {name: BatchRun(name, batch) for name in [GENERATE, *specs]}
    for part in chunks(prompts, batch if batch == 1 else CHUNK * batch):
        for name, run in runs.items():
            start = time.perf_counter()
            if name == GENERATE:
                got = [row for group in chunks(part, batch) for row in _generate(lm, group, max_new_tokens)]
            else:
                got = _engine(lm, part, name, batch, max_new_tokens)
            run.seconds += time.perf_counter() - start
            for tokens, forwards in got:
                run.tokens.append(tokens)
                run.forwards.append(forwards)
    return runs


def _engine(lm: LM, prompts: list[list[int]], spec: str, batch: int, max_new_tokens: int) -> list[tuple[list[int], int]]:
    """The prompts through the engine, `batch` in flight (batch 1: the one-row loop, as a caller of one prompt gets it)."""
    if batch == 1:
        gens = [Decoder(lm, build(spec), max_new_tokens=max_new_tokens, trace_mask=False, timings=False).generate(p)
                for p in prompts]
    else:
        drafters, planner = build_batch(spec, len(prompts))
        gens = BatchDecoder(lm, drafters, max_new_tokens=max_new_tokens, planner=planner, batch_size=batch).generate(prompts)
    return [(g.tokens, g.summary.forwards) for g in gens]


@torch.inference_mode()
def _generate(lm: LM, group: list[list[int]], max_new_tokens: int) -> list[tuple[list[int], int]]:
    """transformers' batched greedy `generate()`, left-padded with an attention mask; each row's new tokens
    up to and including its EOS (and as many forwards)."""
    model, eos = lm.model, sorted(lm.eos_ids)
    pad = model.generation_config.pad_token_id
    pad = pad if pad is not None else (eos[0] if eos else 0)
    n = max(len(p) for p in group)
    ids = torch.tensor([[pad] * (n - len(p)) + p for p in group], device=lm.device)
    mask = torch.tensor([[0] * (n - len(p)) + [1] * len(p) for p in group], device=lm.device)
    seq = model.generate(ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=False,
                         pad_token_id=pad, eos_token_id=eos or None)
    out = []
    for row in seq[:, n:].tolist():  # .tolist() waits for the device, so the caller's clock is honest
        end = next((i + 1 for i, t in enumerate(row) if t in lm.eos_ids), len(row))
        out.append((row[:end], end))
    return out


def table(runs: list[dict[str, BatchRun]]) -> str:
    """One markdown row per (batch size, method): tokens/s over the batches, wall seconds, the ratio to
    batched generate() at that batch size, tau, and how many prompts got generate()'s exact tokens."""
    lines = ["| B | method | tokens/s | wall s | x generate() | tau | = generate() |", "|---|---|---|---|---|---|---|"]
    for by in runs:
        ref = by[GENERATE]
        for name, r in by.items():
            same = sum(a == b for a, b in zip(r.tokens, ref.tokens))
            lines.append(f"| {r.batch} | {name} | {r.tokens_per_s:.1f} | {r.seconds:.1f} | "
                         f"{r.tokens_per_s / ref.tokens_per_s:.3f} | {r.tau:.2f} | {same}/{len(r.tokens)} |")
    return "\n".join(lines)


def parse_batches(value: str) -> list[int]:
    """'1,4,16' -> [1, 4, 16]: the bench's --batch sizes (positive integers)."""
    try:
        sizes = [int(x) for x in str(value).split(",") if x.strip()]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise ValueError(f"--batch takes batch sizes such as 4 or 1,4,16, not {value!r}.")
    return sizes


def report(lm: LM, prompts: list[list[int]], specs: list[str], batches: list[int], max_new_tokens: int,
           json_path: str | None = None, meta: dict | None = None) -> list[dict[str, BatchRun]]:
    """The bench's --batch: every batch size in turn, generate() beside the methods; prints each table as it
    ends and writes every run (per-prompt tokens included) to `json_path`."""
    import json
    from pathlib import Path

    throughput(lm, prompts[:2], specs, min(2, len(prompts)), 8)  # warm-up: kernels, allocator
    runs = []
    for b in batches:
        runs.append(throughput(lm, prompts, specs, b, max_new_tokens))
        print(table(runs[-1:]), flush=True)
    if json_path:
        Path(json_path).write_text(json.dumps({"meta": {**(meta or {}), "model": lm.name, "dtype": str(lm.dtype),
                                                        "max_new_tokens": max_new_tokens, "prompts": len(prompts)},
                                               "runs": [{k: v.to_dict() for k, v in r.items()} for r in runs]}))
    return runs

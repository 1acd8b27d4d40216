"""Throughput of batched decoding: the questions B at a time, in question order, for a method through the
engine (`BatchDecoder`) and for transformers' own batched greedy `generate()` (left padding, as its users
run it), side by side on the same prompts."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from esp.decoding.batch import BatchDecoder
from esp.decoding.engine import Decoder
from esp.methods import build
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


def run_method(lm: LM, prompts: list[list[int]], spec: str, batch: int, max_new_tokens: int) -> BatchRun:
    """`spec` over `prompts`, `batch` at a time (batch 1: the one-row engine, as a caller of one prompt
    gets it); every prompt gets a fresh drafter."""
    out = BatchRun(spec, batch)
    for group in chunks(prompts, batch):
        start = time.perf_counter()
        if batch == 1:
            gens = [Decoder(lm, build(spec), max_new_tokens=max_new_tokens, trace_mask=False, timings=False).generate(group[0])]
        else:
            gens = BatchDecoder(lm, [build(spec) for _ in group], max_new_tokens=max_new_tokens).generate(group)
        out.seconds += time.perf_counter() - start
        out.tokens += [g.tokens for g in gens]
        out.forwards += [g.summary.forwards for g in gens]
    return out


@torch.inference_mode()
def run_generate(lm: LM, prompts: list[list[int]], batch: int, max_new_tokens: int) -> BatchRun:
    """transformers' batched greedy `generate()` over `prompts`, `batch` at a time, left-padded with an
    attention mask; each row's new tokens up to and including its EOS."""
    out = BatchRun(GENERATE, batch)
    model, eos = lm.model, sorted(lm.eos_ids)
    pad = model.generation_config.pad_token_id
    pad = pad if pad is not None else (eos[0] if eos else 0)
    for group in chunks(prompts, batch):
        n = max(len(p) for p in group)
        ids = torch.tensor([[pad] * (n - len(p)) + p for p in group], device=lm.device)
        mask = torch.tensor([[0] * (n - len(p)) + [1] * len(p) for p in group], device=lm.device)
        start = time.perf_counter()
        seq = model.generate(ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=False,
                             pad_token_id=pad, eos_token_id=eos or None)
        if lm.device.type == "cuda":
            torch.cuda.synchronize()
        out.seconds += time.perf_counter() - start
        for row in seq[:, n:].tolist():
            end = next((i + 1 for i, t in enumerate(row) if t in lm.eos_ids), len(row))
            out.tokens.append(row[:end])
            out.forwards.append(end)
    return out

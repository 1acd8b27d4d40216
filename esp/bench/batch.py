"""Throughput of batched decoding: the questions B at a time, in question order, for a method through the
engine (`BatchDecoder`, B prompts in flight) and for transformers' own batched greedy `generate()` (static
batches of B, left padding, as its users run it), side by side on the same prompts, in several interleaved
rounds (ABBA), so that each ratio comes with its spread over rounds."""
from __future__ import annotations

import statistics
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
    tokens: list[list[int]] = field(default_factory=list)  # per prompt, from the first round
    forwards: list[int] = field(default_factory=list)  # per prompt (generate(): its new tokens)
    rounds: list[float] = field(default_factory=list)  # wall seconds of each round over every prompt

    @property
    def seconds(self) -> float:
        """Wall seconds of one round over every prompt, the mean over rounds."""
        return statistics.fmean(self.rounds) if self.rounds else 0.0

    @property
    def n_tokens(self) -> int:
        return sum(len(t) for t in self.tokens)

    def ratios(self, ref: "BatchRun") -> list[float]:
        """This run's tokens/s over `ref`'s, round by round (the rounds interleave, so each pair shares a machine
        state)."""
        return [(self.n_tokens / a) / (ref.n_tokens / b) for a, b in zip(self.rounds, ref.rounds) if a > 0 and b > 0]

    @property
    def tokens_per_s(self) -> float:
        return self.n_tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def tau(self) -> float:
        """Pooled tokens per forward of a row (each prompt's own forwards, as alone)."""
        return self.n_tokens / max(sum(self.forwards), 1)

    def to_dict(self) -> dict:
        return {"method": self.method, "batch": self.batch, "tokens": self.n_tokens, "seconds": round(self.seconds, 4),
                "tokens_per_s": round(self.tokens_per_s, 3), "tau": round(self.tau, 4), "per_prompt": self.tokens,
                "rounds": [round(x, 4) for x in self.rounds]}


def spread(ratios: list[float]) -> dict:
    """The median ratio over rounds and its range: what a claim about a batch size rests on."""
    return {"median": round(statistics.median(ratios), 4), "min": round(min(ratios), 4), "max": round(max(ratios), 4),
            "rounds": [round(r, 4) for r in ratios]} if ratios else {}


def chunks(items: list, size: int) -> list[list]:
    return [items[i : i + size] for i in range(0, len(items), size)]


CHUNK = 4  # batches of questions per interleaved part of a run
ROUNDS = 3  # rounds over every prompt per batch size (the bench's --rounds)


def throughput(lm: LM, prompts: list[list[int]], specs: list[str], batch: int, max_new_tokens: int,
               rounds: int = ROUNDS, static: bool = False) -> dict[str, BatchRun]:
    """Every method of `specs` and batched `generate()` over `prompts`, `batch` at a time, in question order,
    `rounds` times. generate() runs each group of `batch` prompts to its end (static batches, as its users run
    it); the engine keeps `batch` prompts in flight, the next one joining as a row ends (`BatchDecoder`'s
    batch_size), or with `static` runs the same groups as generate() does, each to its end (what `esp.decode`
    and `custom_generate` do with a batch). They are interleaved per part of CHUNK batches, in ABBA order
    (generate(), the methods, then the methods in reverse and generate(), part after part), so that a drift of
    machine speed moves every row alike and each round's ratio is a fair pair. Every prompt gets a fresh drafter;
    the tokens kept are the first round's."""
    runs = {name: BatchRun(name, batch) for name in [GENERATE, *specs]}
    names = list(runs)
    parts = chunks(prompts, batch if batch == 1 else CHUNK * batch)
    for r in range(rounds):
        for run in runs.values():
            run.rounds.append(0.0)
        for j, part in enumerate(parts):
            for name in names if (r * len(parts) + j) % 2 == 0 else names[::-1]:
                run = runs[name]
                start = time.perf_counter()
                if name == GENERATE:
                    got = [row for group in chunks(part, batch) for row in _generate(lm, group, max_new_tokens)]
                else:
                    got = _engine(lm, part, name, batch, max_new_tokens, static)
                run.rounds[-1] += time.perf_counter() - start
                if r == 0:
                    for tokens, forwards in got:
                        run.tokens.append(tokens)
                        run.forwards.append(forwards)
    return runs


def _engine(lm: LM, prompts: list[list[int]], spec: str, batch: int, max_new_tokens: int,
            static: bool = False) -> list[tuple[list[int], int]]:
    """The prompts through the engine, `batch` in flight, or (`static`) in groups of `batch` each run to its end; a
    group of one runs the one-row loop, as `esp.decode` gives a caller of one prompt."""
    gens = []
    for group in chunks(prompts, batch) if static or batch == 1 else [prompts]:
        if len(group) == 1:
            gens.append(Decoder(lm, build(spec), max_new_tokens=max_new_tokens, trace_mask=False, timings=False)
                        .generate(group[0]))
        else:
            drafters, planner = build_batch(spec, len(group))
            gens += BatchDecoder(lm, drafters, max_new_tokens=max_new_tokens, planner=planner,
                                 batch_size=batch).generate(group)
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
    """One markdown row per (batch size, method): tokens/s (mean over rounds), wall seconds per round, the median
    ratio to batched generate() at that batch size over the rounds and its range, tau, and how many prompts got
    generate()'s exact tokens."""
    lines = ["| B | method | tokens/s | wall s | x generate() (median) | min-max over rounds | tau | = generate() |",
             "|---|---|---|---|---|---|---|---|"]
    for by in runs:
        ref = by[GENERATE]
        for name, r in by.items():
            same = sum(a == b for a, b in zip(r.tokens, ref.tokens))
            x = spread(r.ratios(ref))
            lines.append(f"| {r.batch} | {name} | {r.tokens_per_s:.1f} | {r.seconds:.1f} | {x['median']:.3f} | "
                         f"{x['min']:.3f}-{x['max']:.3f} | {r.tau:.2f} | {same}/{len(r.tokens)} |")
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
           json_path: str | None = None, meta: dict | None = None, rounds: int = ROUNDS,
           static: bool = False) -> list[dict[str, BatchRun]]:
    """The bench's --batch: every batch size in turn, generate() beside the methods in `rounds` interleaved rounds
    (`static`: the engine on generate()'s static batches); prints each table as it ends and writes every run
    (per-prompt tokens, each round's seconds and each method's ratio to generate(), `x_generate`: median, min,
    max, per round) to `json_path`."""
    import json
    from pathlib import Path

    throughput(lm, prompts[:2], specs, min(2, len(prompts)), 8, rounds=1)  # warm-up: kernels, allocator
    runs = []
    for b in batches:
        runs.append(throughput(lm, prompts, specs, b, max_new_tokens, rounds, static))
        print(table(runs[-1:]), flush=True)
    if json_path:
        Path(json_path).write_text(json.dumps({"meta": {**(meta or {}), "model": lm.name, "dtype": str(lm.dtype),
                                                        "max_new_tokens": max_new_tokens, "prompts": len(prompts),
                                                        "rounds": rounds, "static": static},
                                               "runs": [_to_dict(r) for r in runs]}))
    return runs


def _to_dict(by: dict[str, BatchRun]) -> dict:
    """One batch size's runs for the JSON: each method's record, with its ratio to generate() over the rounds."""
    ref = by[GENERATE]
    return {k: v.to_dict() | ({} if k == GENERATE else {"x_generate": spread(v.ratios(ref))}) for k, v in by.items()}

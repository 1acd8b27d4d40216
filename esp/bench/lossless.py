"""`python -m esp.bench verdict`: is every method lossless in a dtype, alone and in batches? Each run's tokens against
plain one-row greedy decoding of the same prompt in that dtype (esp.bench.verdict: exact, a flip at a rounding
near-tie, or a failure); for a real model, plain decoding's against transformers' `generate()` too. float32 must be
exact; a lower precision must have no failure. Exits 1 otherwise.

    python -m esp.bench verdict --json out/bf16.json                     # the embedded model in bfloat16, B = 4
    python -m esp.bench verdict --model qwen2.5-coder-0.5b --dtypes bfloat16,float32 --json F
    python -m esp.bench verdict --random --json out/gpu_verdict.json     # CUDA: a random-weight Llama-3.2-1B shape
    python -m esp.bench verdict --random --tiny --json out/tiny.json     # its tiny twin on the CPU (tests)

A random-weight model needs no network and no weights; its prompts are development questions through the embedded
model's tokenizer when both are here and fit its vocabulary, else repeated random ids (so lookups find copies).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from esp.bench import shapes
from esp.bench.batch import chunks
from esp.bench.overhead import random_lm
from esp.bench.provenance import provenance
from esp.bench.questions import DEV_QUESTIONS, load_questions
from esp.bench.run import Turn, reference
from esp.bench.verdict import EXACT, FAILURE, classify, dtype_name, tally
from esp.cli import fail
from esp.decoding.batch import BatchDecoder
from esp.decoding.engine import Decoder
from esp.device import canonical
from esp.methods import build, build_batch

METHODS = "esp,pld,stand,lade,tr,hybrid:bc=auto,hybrid:bc=60"
GENERATE = "ar vs generate()"


def random_prompts(vocab: int, n: int, questions: str) -> list[list[int]]:
    """Development questions through the embedded tokenizer (at most 200 ids each) if they fit `vocab`, else random
    phrases repeated."""
    try:
        from transformers import AutoTokenizer

        from esp.models.offline import MODELS, converted

        tok = AutoTokenizer.from_pretrained(str(converted(MODELS["embedded"])))
        out = [tok(q["turns"][0])["input_ids"][:200] for q in load_questions(questions, 1)[:n]]
        if all(max(ids) < vocab for ids in out):
            return out
    except (OSError, ValueError):
        pass
    g = torch.Generator().manual_seed(0)
    return [torch.randint(0, vocab, (12,), generator=g).tolist() * 4 for _ in range(n)]


def check(lm, prompts: list[list[int]], specs: list[str], batch: int, tokens: int, with_generate: bool) -> dict:
    """One dtype: every method alone and in batches of `batch` against plain decoding; the verdicts, each method's
    tau alone, and ok (float32: all exact; else no failure)."""
    kind = dtype_name(lm.dtype)
    plain = [Turn.of(lm, Decoder(lm, max_new_tokens=tokens, timings=False).generate(p)) for p in prompts]
    verdicts, tau = {}, {}
    if with_generate:
        refs = [reference(lm, p, tokens) for p in prompts]
        verdicts[GENERATE] = tally([classify(b.tokens, b.top2, t, r, kind) for b, (t, r, _) in zip(plain, refs)])
    for spec in specs:
        alone = [Decoder(lm, build(spec), max_new_tokens=tokens, timings=False).generate(p) for p in prompts]
        tau[spec] = sum(len(g.tokens) for g in alone) / sum(g.summary.forwards for g in alone)
        runs = {spec: [Turn.of(lm, g) for g in alone]}
        if batch > 1:
            runs[f"{spec} B={batch}"] = [Turn.of(lm, g) for group in chunks(prompts, batch) for g in batched(lm, spec, group, tokens)]
        for name, turns in runs.items():
            vs = [classify(b.tokens, b.top2, r.tokens, r.top2, kind) for b, r in zip(plain, turns)]
            verdicts[name] = tally(vs)
            print(f"{kind} {name}: {verdicts[name]}", *[v.reason for v in vs if v.kind == FAILURE], flush=True)
    ok = all(v[EXACT] == len(prompts) if kind == "float32" else v[FAILURE] == 0 for v in verdicts.values())
    return {"verdicts": verdicts, "tau": tau, "ok": ok}


def batched(lm, spec: str, group: list[list[int]], tokens: int):
    drafters, planner = build_batch(spec, len(group))
    return BatchDecoder(lm, drafters, max_new_tokens=tokens, planner=planner).generate(group)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m esp.bench verdict", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="embedded", help="the model (ignored with --random)")
    p.add_argument("--random", action="store_true", help="a random-weight Llama-3.2-1B shape on CUDA instead of --model")
    p.add_argument("--tiny", action="store_true", help="with --random: its tiny twin on the CPU, a check of the code")
    p.add_argument("--dtypes", default=None, help="comma list (default bfloat16; with --random float32,bfloat16)")
    p.add_argument("--methods", default=METHODS)
    p.add_argument("--batch", type=int, default=4, help="each method also in batches of this size (1: alone only)")
    p.add_argument("--questions", default=str(DEV_QUESTIONS))
    p.add_argument("--per-category", type=int, default=1)
    p.add_argument("--prompts", type=int, default=None, help="with --random: prompts (default 6; tiny 2)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="default 48 (--random 64, tiny 12)")
    p.add_argument("--json", required=True)
    a = p.parse_args(argv)
    made = provenance(argv, "python -m esp.bench verdict")
    cuda = torch.cuda.is_available() and not a.tiny
    if a.random and not (cuda or a.tiny):
        fail("no CUDA device here; the 1B-shaped model needs a GPU (use --tiny for a CPU check).")
    dtypes = (a.dtypes or ("float32,bfloat16" if a.random else "bfloat16")).split(",")
    tokens = a.max_new_tokens or (48 if not a.random else 12 if a.tiny else 64)
    specs = [s for s in a.methods.split(",") if s]
    out = {"provenance": made, "questions": 0, "tokens": tokens, "batch": a.batch, "dtypes": {}}
    for name in dtypes:
        if a.random:
            cfg = shapes.llama_1b(a.tiny)
            torch.manual_seed(0)
            lm = random_lm(cfg, canonical("cuda" if cuda else "cpu"), getattr(torch, name), f"random llama-3.2-1b {name}")
            prompts = random_prompts(cfg.vocab_size, a.prompts or (2 if a.tiny else 6), a.questions)
        else:
            from esp.models.loader import load

            lm = load(a.model, dtype=name)
            prompts = [lm.chat_ids(q["turns"][0]) for q in load_questions(a.questions, a.per_category)]
        out.update(model=a.model if not a.random else "random llama-3.2-1b" + (" (tiny)" if a.tiny else ""),
                   device=torch.cuda.get_device_name() if lm.device.type == "cuda" else "cpu", questions=len(prompts))
        out["dtypes"][name] = check(lm, prompts, specs, a.batch, tokens, with_generate=not a.random)
        del lm
        if cuda:
            torch.cuda.empty_cache()
    out["ok"] = all(d["ok"] for d in out["dtypes"].values())
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps(out, indent=1))
    print("every method lossless" if out["ok"] else "FAILED: see the verdicts above")
    sys.exit(0 if out["ok"] else 1)

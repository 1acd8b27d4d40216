"""`python -m esp.bench first-call`: the first prompt of a new user. Per question, a fresh process with no stored cost
curve (ESP_CACHE pointing at a folder that holds only the converted embedded model) loads the model the ordinary
transformers way (float32), warms it with one generate() on another prompt, then times generate(), the first
`esp.decode(model, tok, prompt, method="hybrid:bc=auto")`, the same call again, and generate() again.

    python -m esp.bench first-call [--limit 8] [--per-category 1] [--max-new-tokens 96] [--json F]

Reported: the first call over the call again (issue 29's bar: <= 1.15) and generate()'s time (the mean of its two)
over the first call's (bar: >= 1.1x), median over questions, and every question's figures. (A fresh drafter per
prompt against generate() in a warm process is the bench itself: `python -m esp.bench --reference --turns first`.)
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

import esp
from esp.bench.provenance import provenance
from esp.bench.questions import DEV_QUESTIONS, load_questions

METHOD = "hybrid:bc=auto"
PACKAGE_HOME = Path(esp.__file__).resolve().parents[1]  # where `python -m esp.bench` finds this esp


def hf_greedy(model, ids: list[int], n: int, eos, pad) -> tuple[list[int], float]:
    """transformers' own greedy decoding of `ids` (n new tokens): the new tokens and the seconds."""
    x = torch.tensor([ids], device=model.device)
    t = time.perf_counter()
    out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, do_sample=False, eos_token_id=eos,
                         pad_token_id=pad)
    return out[0, len(ids):].tolist(), time.perf_counter() - t


def one(a: argparse.Namespace) -> dict:
    """In this (fresh) process: the model loaded by transformers, warm, then the timed calls of question `a.one`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(a.folder)
    model = AutoModelForCausalLM.from_pretrained(a.folder, dtype=torch.float32)
    eos, pad = model.generation_config.eos_token_id, tok.eos_token_id

    def chat(text: str) -> list[int]:
        enc = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True)
        return list(enc["input_ids"] if hasattr(enc, "keys") else enc)

    hf_greedy(model, chat(load_questions(a.questions)[-1]["turns"][0]), 16, eos, pad)  # warm, on an unmeasured question
    prompt = load_questions(a.questions, a.per_category)[a.one]["turns"][0]
    ids = chat(prompt)
    times = {}
    ref, times["generate"] = hf_greedy(model, ids, a.max_new_tokens, eos, pad)
    for name in ("first", "again"):
        t = time.perf_counter()
        out = esp.decode(model, tok, prompt, method=METHOD, max_new_tokens=a.max_new_tokens)
        times[name] = time.perf_counter() - t
        times[f"{name}_same"] = out.tokens == ref
        times[f"{name}_forwards"] = out.summary.forwards  # with the rows fed: a slow call of sane widths is the machine
        times[f"{name}_rows"] = statistics.mean(out.widths[1:] or [1])
    _, times["generate_again"] = hf_greedy(model, ids, a.max_new_tokens, eos, pad)
    times["stored_curve_after"] = any((Path(os.environ["ESP_CACHE"]) / "costs").glob("*.json"))
    return times


def every(a: argparse.Namespace, made: dict) -> dict:
    """One fresh process per question, each on a cache with no stored curve; the summary and every row."""
    from esp.models.offline import MODELS, converted

    folder = converted(MODELS["embedded"])
    rows = []
    for i, q in enumerate(load_questions(a.questions, a.per_category)[: a.limit or None]):
        with tempfile.TemporaryDirectory() as cache:
            os.symlink(folder, Path(cache) / folder.name)  # the converted model, and no cost curve
            cmd = [sys.executable, "-m", "esp.bench", "first-call", "--one", str(i), "--folder", str(folder),
                   "--questions", str(Path(a.questions).resolve()), "--per-category", str(a.per_category),
                   "--max-new-tokens", str(a.max_new_tokens)]
            r = subprocess.run(cmd, cwd=PACKAGE_HOME, env={**os.environ, "ESP_CACHE": cache}, capture_output=True,
                               text=True, check=True)
        t = json.loads(r.stdout.strip().splitlines()[-1])
        gen = (t["generate"] + t["generate_again"]) / 2
        row = {"category": q["category"], **t, "first_over_again": t["first"] / t["again"], "generate_over_first": gen / t["first"]}
        rows.append(row)
        print(f"{q['category']}: first {t['first']:.2f} s, again {t['again']:.2f} s, generate() {gen:.2f} s: "
              f"first/again {row['first_over_again']:.3f}, vs generate() {row['generate_over_first']:.3f}x", flush=True)
    out = {"provenance": made, "method": METHOD, "questions": len(rows), "max_new_tokens": a.max_new_tokens,
           "first_over_again_median": statistics.median(r["first_over_again"] for r in rows),
           "first_over_again_max": max(r["first_over_again"] for r in rows),
           "first_vs_generate_median": statistics.median(r["generate_over_first"] for r in rows),
           "first_vs_generate_ratio_of_sums": sum((r["generate"] + r["generate_again"]) / 2 for r in rows) / sum(r["first"] for r in rows),
           "rows": rows}
    print(f"first call / same call again: median {out['first_over_again_median']:.3f} (max {out['first_over_again_max']:.3f}); "
          f"first call vs generate(): median {out['first_vs_generate_median']:.3f}x, over all {out['first_vs_generate_ratio_of_sums']:.3f}x")
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m esp.bench first-call", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--questions", default=str(DEV_QUESTIONS))
    p.add_argument("--per-category", type=int, default=1)
    p.add_argument("--limit", type=int, default=8, help="at most this many questions (0: all)")
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)  # the child process's question
    p.add_argument("--folder", help=argparse.SUPPRESS)
    p.add_argument("--json")
    a = p.parse_args(argv)
    if a.one is not None:
        print(json.dumps(one(a)))
        return
    out = every(a, provenance(argv, "python -m esp.bench first-call"))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))

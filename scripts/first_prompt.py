"""What a caller gets on a single prompt: a fresh drafter per prompt against transformers' greedy generate().

    python scripts/first_prompt.py [--model embedded] [--dtype float32|bfloat16|auto] [--calibrate]
        [--methods ar,hybrid:bc=auto,hybrid:bc=16] [--questions F] [--per-category 1] [--limit N]
        [--max-new-tokens 96] [--repeats 1] [--json F]
    python scripts/first_prompt.py --first-call [--limit 8] [--max-new-tokens 96] [--json F]

For every question (the first `--per-category` of each category of the development split, in file order,
at most `--limit` of them), interleaved: `model.generate(ids, max_new_tokens=N, do_sample=False)` and, per
method, a drafter built for that prompt alone (`methods.build(spec)` then `Decoder.generate`), as an API
user would. One warm-up generation of each on a question that is not measured (the last one of the
file). With `--repeats R` every question runs R times, interleaved, and each one's tokens/s is its median
run (as esp.bench does). The speed-up is Spec-Bench's ratio of means: mean tokens/s of the method over the
mean of generate(); every output is judged against generate()'s tokens (esp.bench.verdict: exact, near-tie,
failure; in float32 they must be exact). The cost curve and the calibration prior are what the process
reads once (esp.budget.cost, esp.budget.prior), as for any caller.

`--first-call`: the first prompt of a new user. Per question, a fresh process with no stored cost curve
(ESP_CACHE pointing at a folder that holds only the converted model) loads the model the ordinary
transformers way (float32), warms it with one generate() on another prompt, then times generate(), the
first `esp.decode(model, tok, prompt, method="hybrid:bc=auto")`, the same call again, and generate()
again. Reported: first call over the call again (bar: <= 1.15x) and generate()'s time (the mean of its
two) over the first call's (bar: >= 1.1x), median over questions, and every question's figures.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from esp.bench.run import load_questions  # noqa: E402
from esp.cli import add_model_args, load_model  # noqa: E402
from esp.decoding.engine import Decoder  # noqa: E402
from esp.methods import build  # noqa: E402
from esp.decoding.verify import ranked  # noqa: E402
from esp.bench.verdict import EXACT, FAILURE, NEAR_TIE, classify, dtype_name  # noqa: E402

FIRST_CALL = "hybrid:bc=auto"


def hf_greedy(model, ids: list[int], n: int, eos: list[int] | None, pad: int | None) -> tuple[list[int], list[list], float]:
    """transformers' own greedy decoding: its new tokens, the top-2 of the logits behind each, and seconds."""
    x = torch.tensor([ids], device=model.device)
    t = time.perf_counter()
    out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, do_sample=False, eos_token_id=eos,
                         pad_token_id=pad, output_logits=True, return_dict_in_generate=True)
    secs = time.perf_counter() - t
    return out.sequences[0, len(ids):].tolist(), ranked(torch.stack(out.logits)[:, 0]), secs


def fresh(lm, spec: str, ids: list[int], n: int) -> tuple[list[int], list[list], float]:
    """A drafter made for this prompt alone: its tokens, their top-2 and seconds (building it included)."""
    t = time.perf_counter()
    g = Decoder(lm, build(spec), max_new_tokens=n, trace_mask=False, timings=False).generate(ids)
    return g.tokens, [x for s in g.steps for x in s.top2], time.perf_counter() - t


def questions(a: argparse.Namespace) -> list[dict]:
    qs = load_questions(a.questions, a.per_category)
    return qs[: a.limit] if a.limit else qs


def per_prompt(a: argparse.Namespace) -> dict:
    """The interleaved comparison of fresh drafters against generate() in this process."""
    lm = load_model(a)
    eos, pad = sorted(lm.eos_ids) or None, lm.tokenizer.eos_token_id
    specs = a.methods.split(",")
    qs = questions(a)
    warm = lm.chat_ids(load_questions(a.questions, None)[-1]["turns"][0])
    hf_greedy(lm.model, warm, 16, eos, pad)
    for s in specs:
        fresh(lm, s, warm, 16)
    rows = []
    for q in qs:
        ids = lm.chat_ids(q["turns"][0])
        runs: dict[str, list[float]] = {s: [] for s in ["generate", *specs]}
        row = {"category": q["category"]}
        for _ in range(a.repeats):
            ref, ref_top2, secs = hf_greedy(lm.model, ids, a.max_new_tokens, eos, pad)
            runs["generate"].append(len(ref) / secs)
            for s in specs:
                toks, top2, secs = fresh(lm, s, ids, a.max_new_tokens)
                runs[s].append(len(toks) / secs)
                row[f"{s} verdict"] = classify(ref, ref_top2, toks, top2, dtype_name(lm.dtype)).kind
        row.update({s: statistics.median(v) for s, v in runs.items()})
        rows.append(row)
        print(q["category"], " ".join(f"{s} {row[s] / row['generate']:.2f}x ({row[f'{s} verdict']})" for s in specs), flush=True)
    base = statistics.mean(r["generate"] for r in rows)
    out = {"model": lm.name, "dtype": dtype_name(lm.dtype), "questions": len(rows), "max_new_tokens": a.max_new_tokens,
           "threads": torch.get_num_threads(), "generate_tokens_per_s": base,
           "tokens_per_s": {s: statistics.mean(r[s] for r in rows) for s in specs},
           "speedup_over_generate": {s: statistics.mean(r[s] for r in rows) / base for s in specs},
           "verdicts": {s: {k: sum(r[f"{s} verdict"] == k for r in rows) for k in (EXACT, NEAR_TIE, FAILURE)} for s in specs},
           "rows": rows}
    print(f"generate(): {base:.1f} tokens/s ({out['dtype']})")
    for s in specs:
        v = out["verdicts"][s]
        print(f"{s}: {out['tokens_per_s'][s]:.1f} tokens/s, {out['speedup_over_generate'][s]:.3f}x generate(); "
              f"{v[EXACT]} exact, {v[NEAR_TIE]} near-tie, {v[FAILURE]} failure")
    return out


def one_first_call(a: argparse.Namespace) -> dict:
    """In this (fresh) process: the model loaded by transformers, warm, then the timed calls of one prompt."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import esp

    folder = a.folder
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    eos, pad = model.generation_config.eos_token_id, tok.eos_token_id

    def chat(text: str) -> list[int]:
        enc = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True)
        return list(enc["input_ids"] if hasattr(enc, "keys") else enc)

    hf_greedy(model, chat(load_questions(a.questions, None)[-1]["turns"][0]), 16, eos, pad)  # warm
    prompt = questions(a)[a.index]["turns"][0]
    ids = chat(prompt)
    times = {}
    ref, _, times["generate"] = hf_greedy(model, ids, a.max_new_tokens, eos, pad)
    for name in ("first", "again"):
        t = time.perf_counter()
        out = esp.decode(model, tok, prompt, method=FIRST_CALL, max_new_tokens=a.max_new_tokens)
        times[name] = time.perf_counter() - t
        times[f"{name}_same"] = out.tokens == ref
        times[f"{name}_forwards"] = out.summary.forwards  # with the rows fed: a slow call of sane widths is the machine
        times[f"{name}_rows"] = statistics.mean(out.widths[1:] or [1])
    _, _, times["generate_again"] = hf_greedy(model, ids, a.max_new_tokens, eos, pad)
    times["stored_curve_after"] = any((Path(os.environ["ESP_CACHE"]) / "costs").glob("*.json"))
    return times


def first_calls(a: argparse.Namespace) -> dict:
    """--first-call: one fresh process per question, each on a cache with no stored curve."""
    from esp.models.offline import MODELS, converted

    folder = converted(MODELS["embedded"])
    rows = []
    for i, q in enumerate(questions(a)):
        with tempfile.TemporaryDirectory() as cache:
            os.symlink(folder, Path(cache) / folder.name)  # the converted model, and no cost curve
            cmd = [sys.executable, __file__, "--one-first-call", str(i), "--folder", str(folder), "--questions", a.questions,
                   "--per-category", str(a.per_category), "--max-new-tokens", str(a.max_new_tokens)]
            r = subprocess.run(cmd, env={**os.environ, "ESP_CACHE": cache}, capture_output=True, text=True, check=True)
        t = json.loads(r.stdout.strip().splitlines()[-1])
        gen = (t["generate"] + t["generate_again"]) / 2
        row = {"category": q["category"], **t, "first_over_again": t["first"] / t["again"], "generate_over_first": gen / t["first"]}
        rows.append(row)
        print(f"{q['category']}: first {t['first']:.2f} s, again {t['again']:.2f} s, generate() {gen:.2f} s: "
              f"first/again {row['first_over_again']:.3f}, vs generate() {row['generate_over_first']:.3f}x", flush=True)
    out = {"method": FIRST_CALL, "questions": len(rows), "max_new_tokens": a.max_new_tokens,
           "first_over_again_median": statistics.median(r["first_over_again"] for r in rows),
           "first_over_again_max": max(r["first_over_again"] for r in rows),
           "first_vs_generate_median": statistics.median(r["generate_over_first"] for r in rows),
           "first_vs_generate_ratio_of_sums": sum((r["generate"] + r["generate_again"]) / 2 for r in rows) / sum(r["first"] for r in rows),
           "rows": rows}
    print(f"first call / same call again: median {out['first_over_again_median']:.3f} (max {out['first_over_again_max']:.3f}); "
          f"first call vs generate(): median {out['first_vs_generate_median']:.3f}x, over all {out['first_vs_generate_ratio_of_sums']:.3f}x")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_args(p)
    p.set_defaults(max_new_tokens=96)
    p.add_argument("--methods", default="hybrid:bc=auto,hybrid:bc=auto:prior=none")
    p.add_argument("--questions", default=str(ROOT.parent / "shared/data/spec_bench/question.jsonl"))
    p.add_argument("--per-category", type=int, default=1)
    p.add_argument("--limit", type=int, default=0, help="at most this many questions (0: all)")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--first-call", action="store_true", help="the first call of a fresh process, per question")
    p.add_argument("--one-first-call", type=int, dest="index", default=None, help=argparse.SUPPRESS)
    p.add_argument("--folder", help=argparse.SUPPRESS)
    p.add_argument("--json")
    a = p.parse_args()
    if a.index is not None:
        print(json.dumps(one_first_call(a)))
        return
    out = first_calls(a) if a.first_call else per_prompt(a)
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

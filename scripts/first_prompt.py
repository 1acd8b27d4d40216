"""What a caller gets on a single prompt: a fresh drafter per prompt against transformers' greedy generate().

    python scripts/first_prompt.py [--model embedded] [--methods hybrid:bc=auto,hybrid:bc=auto:prior=none]
        [--questions F] [--per-category 1] [--max-new-tokens 96] [--repeats 1] [--json F]

For every question (the first `--per-category` of each category of the development split, in file order),
interleaved: `model.generate(ids, max_new_tokens=N, do_sample=False)` and, per method, a drafter built
for that prompt alone (`methods.build(spec)` then `Decoder.generate`), as an API user would. One warm-up
generation of each on a question that is not measured (the last one of the file). With `--repeats R`
every question runs R times, interleaved, and each one's tokens/s is its median run (as esp.bench.run does). The speed-up is
Spec-Bench's ratio of means: mean tokens/s of the method over the mean of generate(); every output must
equal generate()'s tokens (float32). The cost curve and the calibration prior are what the process
reads once (esp.budget.cost, esp.budget.prior), as for any caller.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from esp.bench.run import load_questions  # noqa: E402
from esp.cli import add_model_args  # noqa: E402
from esp.decoding.engine import Decoder  # noqa: E402
from esp.methods import build  # noqa: E402
from esp.models.loader import load  # noqa: E402


def hf_greedy(lm, ids: list[int], n: int) -> tuple[list[int], float]:
    """transformers' own greedy decoding: its new tokens and seconds."""
    x = torch.tensor([ids], device=lm.device)
    t = time.perf_counter()
    out = lm.model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, do_sample=False,
                            eos_token_id=sorted(lm.eos_ids) or None, pad_token_id=lm.tokenizer.eos_token_id)
    return out[0, len(ids):].tolist(), time.perf_counter() - t


def fresh(lm, spec: str, ids: list[int], n: int) -> tuple[list[int], float]:
    """A drafter made for this prompt alone: its tokens and seconds (building it included)."""
    t = time.perf_counter()
    g = Decoder(lm, build(spec), max_new_tokens=n, trace_mask=False, timings=False).generate(ids)
    return g.tokens, time.perf_counter() - t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_args(p)
    p.set_defaults(max_new_tokens=96)
    p.add_argument("--methods", default="hybrid:bc=auto,hybrid:bc=auto:prior=none")
    p.add_argument("--questions", default=str(ROOT.parent / "shared/data/spec_bench/question.jsonl"))
    p.add_argument("--per-category", type=int, default=1)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--json")
    a = p.parse_args()
    lm = load(a.model, dtype=a.dtype)
    specs = a.methods.split(",")
    qs = load_questions(a.questions, a.per_category)
    warm = lm.chat_ids(load_questions(a.questions, None)[-1]["turns"][0])
    hf_greedy(lm, warm, 16)
    for s in specs:
        fresh(lm, s, warm, 16)
    rows = []
    for q in qs:
        ids = lm.chat_ids(q["turns"][0])
        runs: dict[str, list[float]] = {s: [] for s in ["generate", *specs]}
        row = {"category": q["category"]}
        for _ in range(a.repeats):
            ref, secs = hf_greedy(lm, ids, a.max_new_tokens)
            runs["generate"].append(len(ref) / secs)
            for s in specs:
                toks, secs = fresh(lm, s, ids, a.max_new_tokens)
                runs[s].append(len(toks) / secs)
                row[f"{s} same"] = row.get(f"{s} same", True) and toks == ref
        row.update({s: statistics.median(v) for s, v in runs.items()})
        rows.append(row)
        print(q["category"], " ".join(f"{s} {row[s] / row['generate']:.2f}x" for s in specs), flush=True)
    base = statistics.mean(r["generate"] for r in rows)
    out = {"model": lm.name, "questions": len(rows), "max_new_tokens": a.max_new_tokens, "threads": torch.get_num_threads(),
           "speedup_over_generate": {s: statistics.mean(r[s] for r in rows) / base for s in specs},
           "same_tokens": {s: sum(r[f"{s} same"] for r in rows) for s in specs}, "rows": rows}
    for s in specs:
        print(f"{s}: {out['speedup_over_generate'][s]:.3f}x generate(), same tokens on {out['same_tokens'][s]}/{len(rows)}")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

"""Small tau / lossless check of the baselines against the issue's anchors (not a benchmark).

    python scripts/baselines_check.py --per-category 2 --tokens 96 [--methods ar,pld,...] [--hf 2,3]

Greedy, first turn, chat template. For every method: tau (all tokens / all forwards, prefill included)
per category and overall, and whether its tokens equal the first method's. `--hf N` also runs
transformers' built-in prompt lookup (`prompt_lookup_num_tokens=10, max_matching_ngram_size=N`),
counting the model's forward calls, as method `hf-pld-N`.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

from esp.decoding.engine import Decoder
from esp.methods import build
from esp.models.loader import load

QUESTIONS = Path(__file__).resolve().parents[2] / "shared" / "data" / "spec_bench" / "question.jsonl"


def questions(per_category: int) -> list[dict]:
    seen: dict[str, int] = defaultdict(int)
    out = []
    for line in QUESTIONS.read_text().splitlines():
        q = json.loads(line)
        if seen[q["category"]] < per_category:
            seen[q["category"]] += 1
            out.append(q)
    return out


def hf_prompt_lookup(lm, prompt: list[int], tokens: int, ngram: int) -> tuple[list[int], int]:
    """transformers' prompt lookup: (new tokens, number of model forwards)."""
    calls = [0]
    hook = lm.model.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    try:
        with torch.inference_mode():
            out = lm.model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                    do_sample=False, max_new_tokens=tokens, prompt_lookup_num_tokens=10,
                                    max_matching_ngram_size=ngram, pad_token_id=lm.tokenizer.eos_token_id)
    finally:
        hook.remove()
    return out[0, len(prompt):].tolist(), calls[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-category", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--methods", default="ar,pld:n=2,pld:n=2:rule=hf,pld,stand,lade")
    ap.add_argument("--categories", default="", help="comma list of categories (default: all)")
    ap.add_argument("--hf", default="2", help="comma list of n-gram sizes for transformers' prompt lookup ('' for none)")
    args = ap.parse_args()
    lm = load()
    specs = args.methods.split(",")
    names = specs + [f"hf-pld-{n}" for n in args.hf.split(",") if n]
    stats = {m: defaultdict(lambda: [0, 0]) for m in names}  # method -> category -> [tokens, forwards]
    same = {m: 0 for m in names}
    secs = defaultdict(float)
    qs = questions(args.per_category)
    if args.categories:
        qs = [q for q in qs if q["category"] in args.categories.split(",")]
    for i, q in enumerate(qs):
        prompt = lm.chat_ids(q["turns"][0])
        ref = None
        for name in names:
            t0 = time.perf_counter()
            if name.startswith("hf-pld-"):
                toks, fwd = hf_prompt_lookup(lm, prompt, args.tokens, int(name.rsplit("-", 1)[1]))
            else:
                gen = Decoder(lm, build(name), max_new_tokens=args.tokens).generate(prompt)
                toks, fwd = gen.tokens, gen.summary.forwards
            secs[name] += time.perf_counter() - t0
            print(f"  {q['category']} {name}: {len(toks)} tokens / {fwd} forwards", file=sys.stderr, flush=True)
            ref = toks if ref is None else ref
            same[name] += toks == ref
            for cat in (q["category"], "overall"):
                stats[name][cat][0] += len(toks)
                stats[name][cat][1] += fwd
        print(f"[{i + 1}/{len(qs)}] {q['category']}", file=sys.stderr, flush=True)
    cats = list(dict.fromkeys(q["category"] for q in qs)) + ["overall"]
    print("| method | " + " | ".join(cats) + f" | same tokens as {names[0]} | seconds |")
    print("|---" * (len(cats) + 3) + "|")
    for name in names:
        taus = [stats[name][c][0] / stats[name][c][1] for c in cats]
        print(f"| {name} | " + " | ".join(f"{t:.2f}" for t in taus) + f" | {same[name]}/{len(qs)} | {secs[name]:.0f} |")


if __name__ == "__main__":
    main()

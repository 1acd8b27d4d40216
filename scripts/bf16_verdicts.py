"""The lossless verdict in a low-precision dtype for every method, alone and in batches: each run's tokens against
plain one-row greedy decoding in that dtype (esp.bench.verdict: exact, a flip at a rounding near-tie, or a
failure), and plain decoding's against transformers' `generate()`.

    python scripts/bf16_verdicts.py [--model embedded] [--dtype bfloat16] [--batch 4] [--per-category 1]
        [--max-new-tokens 48] [--methods ar,esp,...] [--json F]

Exits 1 when any run has a failure.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from esp.bench.batch import chunks  # noqa: E402
from esp.bench.run import Turn, load_questions, reference  # noqa: E402
from esp.bench.verdict import FAILURE, classify, dtype_name, tally  # noqa: E402
from esp.cli import add_model_args, load_model  # noqa: E402
from esp.decoding.batch import BatchDecoder  # noqa: E402
from esp.decoding.engine import Decoder  # noqa: E402
from esp.methods import build  # noqa: E402

METHODS = "esp,pld,stand,lade,tr,hybrid:bc=auto,hybrid:bc=60"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_model_args(p)
    p.add_argument("--methods", default=METHODS)
    p.add_argument("--batch", type=int, default=4, help="each method also in batches of this size")
    p.add_argument("--questions", default=str(ROOT.parent / "shared/data/spec_bench/question.jsonl"))
    p.add_argument("--per-category", type=int, default=1)
    p.add_argument("--json", default=None)
    p.set_defaults(dtype="bfloat16", max_new_tokens=48)
    a = p.parse_args()
    lm = load_model(a)
    kind, n = dtype_name(lm.dtype), a.max_new_tokens
    prompts = [lm.chat_ids(q["turns"][0]) for q in load_questions(a.questions, a.per_category)]
    turn = lambda g: Turn.of(lm, g)
    plain = [turn(Decoder(lm, max_new_tokens=n, timings=False).generate(pr)) for pr in prompts]
    refs = [reference(lm, pr, n) for pr in prompts]
    res = {"ar vs generate()": tally([classify(b.tokens, b.top2, t, r, kind) for b, (t, r, _) in zip(plain, refs)])}
    print("ar vs generate()", res["ar vs generate()"], flush=True)
    for spec in a.methods.split(","):
        alone = [turn(Decoder(lm, build(spec), max_new_tokens=n, timings=False).generate(pr)) for pr in prompts]
        batched = [turn(g) for group in chunks(prompts, a.batch)
                   for g in BatchDecoder(lm, [build(spec) for _ in group], max_new_tokens=n).generate(group)]
        for name, runs in ((spec, alone), (f"{spec} B={a.batch}", batched)):
            vs = [classify(b.tokens, b.top2, r.tokens, r.top2, kind) for b, r in zip(plain, runs)]
            res[name] = tally(vs)
            print(name, res[name], [v.reason for v in vs if v.kind == FAILURE], flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps({"model": a.model, "dtype": kind, "questions": len(prompts), "tokens": n,
                                            "verdicts": res}, indent=1))
    return 1 if any(t["failure"] for t in res.values()) else 0


if __name__ == "__main__":
    sys.exit(main())

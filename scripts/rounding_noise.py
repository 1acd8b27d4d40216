"""How far rounding alone moves a row's logits when the row is fed inside a wider block: the measurement behind
esp.bench.verdict's near-tie bound (TIE_ULPS).

    python scripts/rounding_noise.py [--model embedded] [--dtype bfloat16] [--widths 1,3,8,24] [--questions F]
        [--per-category 1] [--max-new-tokens 64] [--every 2] [--json F]

For every question (the first `--per-category` of each category), greedy decoding writes `--max-new-tokens`
tokens; then at every `--every`-th position t of the answer the same row (token t over the cache of tokens
< t) is fed alone and as the first row of blocks of each width (the other rows random tokens it cannot see,
as a tree's later rows are). The row's logits differ only by the block's rounding. Per width: the change of
the gap between the row's best token and each of its next four, in units of rounding of its best logit
(esp.bench.verdict.ulp), as median, 90th and 99th percentiles and maximum. A greedy choice can flip between
two correct runs only where the runs' gaps are within that change.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from esp.bench.run import load_questions  # noqa: E402
from esp.bench.verdict import dtype_name, ulp  # noqa: E402
from esp.cli import add_model_args, load_model  # noqa: E402
from esp.decoding.engine import Decoder  # noqa: E402
from esp.models.timing import causal_mask  # noqa: E402


@torch.inference_mode()
def gap_changes(lm, seq: list[int], t: int, widths: list[int], g: torch.Generator) -> dict[int, float]:
    """Per width, the largest change (rounding units of the best logit) of the row at t's gaps to its next four."""
    cache = lm.new_cache()
    lm.forward(lm.embed(seq[:t]), torch.arange(t, device=lm.device), causal_mask(t, 0, lm.dtype, lm.device), cache)
    alone = top = None
    out = {}
    for w in [1, *widths]:
        ids = [seq[t]] + torch.randint(0, lm.vocab_size, (w - 1,), generator=g).tolist()
        hidden, _ = lm.forward(lm.embed(ids), torch.arange(t, t + w, device=lm.device),
                               causal_mask(w, t, lm.dtype, lm.device), cache)
        z = lm.head(hidden[:1])[0]
        for layer in cache.layers:
            layer.keys, layer.values = layer.keys[..., :t, :], layer.values[..., :t, :]
        if alone is None:
            alone, top = z, torch.topk(z, 5).indices
            continue
        d = z[top] - alone[top]
        out[w] = float((d[0] - d[1:]).abs().max()) / ulp(float(alone[top[0]]), lm.dtype)
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(p)
    p.add_argument("--widths", default="3,8,24")
    p.add_argument("--questions", default=str(ROOT.parent / "shared" / "data" / "spec_bench" / "question.jsonl"))
    p.add_argument("--per-category", type=int, default=1)
    p.add_argument("--every", type=int, default=2)
    p.add_argument("--json")
    p.set_defaults(max_new_tokens=64, dtype="bfloat16")
    a = p.parse_args(argv)
    lm = load_model(a)
    widths = [int(w) for w in a.widths.split(",")]
    g = torch.Generator().manual_seed(0)
    seen: dict[int, list[float]] = {w: [] for w in widths}
    for q in load_questions(a.questions, a.per_category):
        prompt = lm.chat_ids(q["turns"][0])
        seq = prompt + Decoder(lm, max_new_tokens=a.max_new_tokens, timings=False, trace_mask=False).generate(prompt).tokens
        for t in range(len(prompt), len(seq) - 1, a.every):
            for w, x in gap_changes(lm, seq, t, widths, g).items():
                seen[w].append(x)
    rows = {w: {"n": len(v), "median": float(np.median(v)), "p90": float(np.quantile(v, 0.9)),
                "p99": float(np.quantile(v, 0.99)), "max": float(max(v))} for w, v in seen.items()}
    print(f"{lm.name} {dtype_name(lm.dtype)}, torch CPU capability {torch.backends.cpu.get_cpu_capability()}")
    for w, r in rows.items():
        print(f"width {w:3d}: {r['n']} rows, gap change in rounding units: median {r['median']:.2f}, "
              f"p90 {r['p90']:.2f}, p99 {r['p99']:.2f}, max {r['max']:.2f}")
    if a.json:
        Path(a.json).write_text(json.dumps({"model": lm.name, "dtype": dtype_name(lm.dtype), "widths": rows,
                                            "capability": torch.backends.cpu.get_cpu_capability()}, indent=1))


if __name__ == "__main__":
    main()

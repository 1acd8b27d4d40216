"""Engine cost figures for docs/BENCHMARKS.md: the forward cost curve, the engine's per-step overhead
share, and the efficient vs naive mask builders.

    python scripts/engine_costs.py [--model embedded] [--context 300] [--repeats 15] [--questions FILE]

Works on CPU or CUDA (pass --model and --dtype for a random-weight model of a given config folder with
--random-config); medians throughout.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from esp.drafters.esp import ESPConfig, ESPDrafter  # noqa: E402
from esp.engine import Decoder  # noqa: E402
from esp.layout import EfficientLayouts, NaiveLayouts  # noqa: E402
from esp.lm import LM  # noqa: E402


def _sync(lm: LM) -> None:
    if lm.device.type == "cuda":
        torch.cuda.synchronize()


def cost_curve(lm: LM, context: int, sizes: list[int], repeats: int) -> dict[int, float]:
    """Median seconds of one forward (with the LM head on every row) of q new tokens over a `context`-token cache."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, lm.vocab_size, (context + max(sizes),), generator=g).tolist()
    out = {}
    for q in sizes:
        times = []
        for r in range(repeats + 2):
            cache = lm.new_cache()
            n = context
            lm.forward(lm.embed(ids[:n]), torch.arange(n, device=lm.device), _causal(n, 0, lm), cache)
            emb = lm.embed(ids[n : n + q])
            pos = torch.arange(n, n + q, device=lm.device)
            mask = _causal(q, n, lm)
            _sync(lm)
            t = time.perf_counter()
            h, _ = lm.forward(emb, pos, mask, cache)
            lm.head(h)
            _sync(lm)
            if r >= 2:  # two warm-ups
                times.append(time.perf_counter() - t)
        out[q] = statistics.median(times)
    return out


def _causal(q: int, past: int, lm: LM) -> torch.Tensor:
    m = torch.full((q, past + q), torch.finfo(lm.dtype).min, dtype=lm.dtype, device=lm.device)
    m[:, :past] = 0
    m[:, past:] = m[:, past:].triu(1)
    return m[None, None]


def overhead(lm: LM, prompts: list[list[int]], configs: dict[str, ESPConfig], tokens: int) -> dict:
    """Share of step time spent outside the model (draft, mask, verify, commit, trace) per config."""
    out = {}
    for name, cfg in configs.items():
        sums: dict[str, list[float]] = {}
        for ids in prompts:
            for st in Decoder(lm, ESPDrafter(cfg), max_new_tokens=tokens).generate(ids).steps[1:]:
                for k, v in st.timings.items():
                    sums.setdefault(k, []).append(v)
        med = {k: statistics.median(v) for k, v in sums.items()}
        mean = {k: sum(v) / len(v) for k, v in sums.items()}
        engine = sum(mean[k] for k in ("draft", "mask", "verify", "commit", "trace"))
        out[name] = {"median_ms": {k: round(v * 1e3, 3) for k, v in med.items()},
                     "mean_ms": {k: round(v * 1e3, 3) for k, v in mean.items()},
                     "engine_share": engine / mean["total"], "steps": len(sums["total"])}
    return out


def builders(repeats: int, past: int = 300) -> dict:
    """Median microseconds to build a step's mask (layout + additive mask with the prefix) at BC=60."""
    from esp.tree import dynamic_tree, static_tree

    v = 1000
    g = torch.Generator().manual_seed(0)
    out = {}
    for name, (k, make) in {
        "k=1 static [29]": (1, lambda d: static_tree(0, d, [29])),
        "k=2 static [15,4]": (2, lambda d: static_tree(0, d, [15, 4])),
        "k=2 dynamic N=19": (2, lambda d: dynamic_tree(0, d, 19)),
    }.items():
        trees = [make(torch.softmax(torch.randn(k, v, generator=g) * 3, -1)) for _ in range(repeats)]
        row = {}
        for builder in (EfficientLayouts(), NaiveLayouts()):
            times = []
            for i, tree in enumerate(trees * 2):
                t = time.perf_counter()
                lay = builder.layout(tree.parents, k)
                builder.additive(lay, past + i, torch.float32, torch.device("cpu"))
                times.append(time.perf_counter() - t)
            row[builder.name] = statistics.median(times[len(trees):]) * 1e6
        row["ratio"] = row["naive"] / row["efficient"]
        out[name] = row
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="embedded")
    p.add_argument("--random-config", help="a config.json: build random weights of that shape instead of loading")
    p.add_argument("--dtype", default=None)
    p.add_argument("--context", type=int, default=300)
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--questions", default=str(Path(__file__).resolve().parents[2] / "shared/data/spec_bench/question.jsonl"))
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--json")
    a = p.parse_args()
    if a.random_config:
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer  # noqa: F401

        cfg = AutoConfig.from_pretrained(a.random_config)
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        model = AutoModelForCausalLM.from_config(cfg, dtype=getattr(torch, a.dtype or "bfloat16"),
                                                 attn_implementation="sdpa").to(dev)
        lm = LM(model, None, f"random {cfg.model_type}")
        prompts = [torch.randint(0, lm.vocab_size, (200,)).tolist() for _ in range(a.prompts)]
    else:
        from esp.models import load

        lm = load(a.model, dtype=a.dtype)
        qs = [json.loads(x) for x in Path(a.questions).read_text().splitlines()]
        prompts = [lm.chat_ids(q["turns"][0]) for q in qs[:: max(1, len(qs) // a.prompts)][: a.prompts]]
    print(f"model {lm.name} on {lm.device} ({lm.dtype}), torch threads {torch.get_num_threads()}")
    curve = cost_curve(lm, a.context, [1, 2, 4, 10, 30, 60, 120], a.repeats)
    print("forward cost curve (median over", a.repeats, "runs, cache", a.context, "tokens):")
    for q, t in curve.items():
        print(f"  q={q:4d}  {t * 1e3:8.2f} ms  {t / curve[1]:.2f}x")
    ov = overhead(lm, prompts, {"k=1 bc=60 static": ESPConfig(k=1, bc=60), "k=2 bc=60 static": ESPConfig(k=2, bc=60),
                                "k=2 bc=60 dynamic": ESPConfig(k=2, bc=60, tree="dynamic")}, a.tokens)
    print("per-step time (mean ms) and engine share (everything but the model's forward and LM head):")
    for name, r in ov.items():
        print(f"  {name:20s} {r['mean_ms']}  share {r['engine_share']:.1%} over {r['steps']} steps")
    b = builders(a.repeats * 4)
    print("mask building at BC=60 (median us, layout + additive mask over a 300-token prefix):")
    for name, r in b.items():
        print(f"  {name:20s} efficient {r['efficient']:8.1f}  naive {r['naive']:9.1f}  naive/efficient {r['ratio']:.1f}x")
    if a.json:
        Path(a.json).write_text(json.dumps({"curve_s": curve, "overhead": ov, "builders_us": b}, indent=1))


if __name__ == "__main__":
    main()

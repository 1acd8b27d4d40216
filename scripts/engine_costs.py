"""Engine cost figures for docs/BENCHMARKS.md: the forward cost curve, the engine's per-step overhead
share, and the efficient vs naive mask builders.

    python scripts/engine_costs.py [--model embedded] [--context 300] [--repeats 15] [--questions FILE]
    python scripts/engine_costs.py --overhead-only --methods hybrid:bc=60,hybrid:bc=auto,ar [--prompts 8]

Works on CPU or CUDA (pass --model and --dtype for a random-weight model of a given config folder with
--random-config); medians throughout. The measurements live in esp/bench/overhead.py; scripts/gpu_costs.py runs
them on random-weight 8B-shaped models.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from esp.bench.overhead import BC60, measure_builders, measure_model, measure_overhead, random_lm, random_prompts  # noqa: E402


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
    p.add_argument("--methods", help="comma list of method specs whose overhead is measured (default: ESP and the hybrid at BC=60)")
    p.add_argument("--overhead-only", action="store_true", help="skip the cost curve and the mask builders")
    p.add_argument("--json")
    a = p.parse_args()
    if a.random_config:
        from transformers import AutoConfig

        dev = "cuda" if torch.cuda.is_available() else "cpu"
        cfg = AutoConfig.from_pretrained(a.random_config)
        lm = random_lm(cfg, dev, getattr(torch, a.dtype or "bfloat16"), f"random {cfg.model_type}")
        prompts = random_prompts(lm, a.prompts, 200)
    else:
        from esp.models.loader import load

        lm = load(a.model, dtype=a.dtype)
        qs = [json.loads(x) for x in Path(a.questions).read_text().splitlines()]
        prompts = [lm.chat_ids(q["turns"][0]) for q in qs[:: max(1, len(qs) // a.prompts)][: a.prompts]]
    specs = {s: s for s in a.methods.split(",")} if a.methods else BC60
    if a.overhead_only:
        r = {"overhead": measure_overhead(lm, prompts, specs, a.tokens)}
    else:
        r = measure_model(lm, prompts, a.context, [1, 2, 4, 10, 30, 60, 120], a.repeats, a.tokens, specs)
        r["builders_us"] = measure_builders(a.repeats * 4)
    if a.json:
        Path(a.json).write_text(json.dumps(r, indent=1))


if __name__ == "__main__":
    main()

"""`python -m esp.bench costs`: what a step costs on this device. Per model, the forward cost curve t(q) for q new
rows (a `--context`-token cache, the LM head on every row, medians), the engine's per-step overhead (ESP and the
hybrid at BC = 60 by default: its share of each step outside the model) and, once, the efficient against the naive
mask builders. One JSON (esp.bench.provenance in it).

    python -m esp.bench costs --json out/gpu_costs.json              # CUDA: random-weight Llama-3.1-8B and Qwen3-8B
                                                                     #   shapes in bf16, under 5 min on an H200
    python -m esp.bench costs --tiny --json out/tiny.json            # the same code on a CPU, tiny shapes (tests)
    python -m esp.bench costs --model embedded --json out/costs.json # a real model, on CPU or CUDA
    python -m esp.bench costs --model embedded --overhead-only --methods hybrid:bc=60,hybrid:bc=auto,ar --json F

The random shapes need no network and no weights (esp.bench.shapes): each is built on the device, one at a time.
"""
from __future__ import annotations

import argparse
import gc
import json
import time
from pathlib import Path

import torch

from esp.bench import shapes
from esp.bench.overhead import BC60, measure_builders, measure_model, measure_overhead, random_lm, random_prompts
from esp.bench.provenance import provenance
from esp.bench.questions import DEV_QUESTIONS, load_questions
from esp.cli import fail
from esp.device import canonical

SIZES = [1, 2, 4, 8, 16, 32, 48, 64, 96, 128]


def one_model(lm, prompts: list[list[int]], a: argparse.Namespace, specs: dict[str, str]) -> dict:
    """One model's entry: its curve (ms and ratios to one row) unless --overhead-only, its overhead, peak memory."""
    if a.overhead_only:
        return {"overhead": measure_overhead(lm, prompts, specs, a.tokens)}
    r = measure_model(lm, prompts, a.context, SIZES, a.repeats, a.tokens, specs)
    curve = r["curve_s"]
    return {"curve_ms": {q: s * 1e3 for q, s in curve.items()}, "curve_ratio": {q: s / curve[1] for q, s in curve.items()},
            "overhead": r["overhead"],
            "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None}


def random_models(a: argparse.Namespace, device, specs: dict[str, str]) -> dict:
    """Every 8B shape (or its tiny twin), built with random weights on `device`, measured and freed in turn."""
    dtype = torch.float32 if a.tiny and device.type == "cpu" else torch.bfloat16
    a.dtype = str(dtype).removeprefix("torch.")
    out = {}
    for name, cfg in shapes.eight_b(a.tiny).items():
        t = time.perf_counter()
        torch.manual_seed(0)
        lm = random_lm(cfg, device, dtype, f"random {name}")
        built = time.perf_counter() - t
        params = sum(p.numel() for p in lm.model.parameters())
        print(f"{name}: {params / 1e9:.2f}B parameters built in {built:.1f} s", flush=True)
        prompts = random_prompts(lm, a.prompts, 16 if a.tiny else 200)
        out[name] = {"config": shapes.summary(cfg), "params": params, "build_s": built, **one_model(lm, prompts, a, specs)}
        del lm
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
    return out


def real_model(a: argparse.Namespace, device, specs: dict[str, str]) -> dict:
    """The named model on `device`, prompted with the first `--prompts` development questions (one per category)."""
    from esp.models.loader import load

    lm = load(a.model, device=str(device), dtype=a.dtype)
    a.dtype = str(lm.dtype).removeprefix("torch.")
    prompts = [lm.chat_ids(q["turns"][0]) for q in load_questions(a.questions, 1)[: a.prompts]]
    return {lm.name: {"config": shapes.summary(lm.model.config), "params": sum(p.numel() for p in lm.model.parameters()),
                      **one_model(lm, prompts, a, specs)}}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m esp.bench costs", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="a real model (embedded, an offline model, a Hub id) instead of the random 8B shapes")
    p.add_argument("--dtype", default=None, help="with --model: its dtype (default: the device's, float32 on a CPU)")
    p.add_argument("--tiny", action="store_true", help="the random shapes' tiny twins in float32 on the CPU: a check of the code")
    p.add_argument("--context", type=int, default=None, help="cached tokens before each timed forward (default 512; tiny 64)")
    p.add_argument("--repeats", type=int, default=None, help="timed runs per block size (default 15; tiny 2)")
    p.add_argument("--prompts", type=int, default=None, help="prompts per overhead method (default 4; tiny 1)")
    p.add_argument("--tokens", type=int, default=None, help="new tokens per prompt (default 64; tiny 8)")
    p.add_argument("--methods", help="comma list of method specs whose overhead is measured (default: ESP and the hybrid at BC=60)")
    p.add_argument("--overhead-only", action="store_true", help="skip the cost curve and the mask builders")
    p.add_argument("--questions", default=str(DEV_QUESTIONS), help="with --model: Spec-Bench question.jsonl")
    p.add_argument("--json", required=True)
    a = p.parse_args(argv)
    made = provenance(argv, "python -m esp.bench costs")
    cuda = torch.cuda.is_available()
    if not (cuda or a.tiny or a.model):
        fail("no CUDA device here; the 8B-shaped models need a GPU (use --tiny for a CPU check, or --model).")
    a.repeats, a.prompts = a.repeats or (2 if a.tiny else 15), a.prompts or (1 if a.tiny else 4)
    a.tokens, a.context = a.tokens or (8 if a.tiny else 64), a.context or (64 if a.tiny else 512)
    device = canonical("cuda" if cuda else "cpu")  # "cuda:0": the layout buffer's device compares equal
    specs = {s: s for s in a.methods.split(",")} if a.methods else BC60
    start = time.perf_counter()
    models = real_model(a, device, specs) if a.model else random_models(a, device, specs)
    out = {"provenance": made, "device": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__,
           "transformers": __import__("transformers").__version__, "dtype": a.dtype, "tiny": a.tiny,
           "context": a.context, "repeats": a.repeats, "prompts": a.prompts, "tokens": a.tokens, "models": models}
    if not a.overhead_only:
        out["builders_us"] = measure_builders(a.repeats * 4 if not a.tiny else 4, device)
    out["seconds"] = time.perf_counter() - start
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps(out, indent=1))
    print(f"wrote {a.json} after {out['seconds']:.0f} s")

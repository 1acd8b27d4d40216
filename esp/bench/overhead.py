"""Engine overhead measurements for `python -m esp.bench costs` (a real model on CPU or GPU, or random-weight
8B-shaped models): the engine's share of each ESP and hybrid step at BC = 60 and
the efficient vs naive mask builders, next to the forward cost curve t(q) of esp/models/timing.py; plus the
random-weight stand-ins those need. Medians throughout."""
from __future__ import annotations

import statistics
import time

import torch

from esp.models.timing import measure
from esp.decoding.engine import Decoder
from esp.decoding.layout import EfficientLayouts, NaiveLayouts
from esp.models.lm import LM, IdTokenizer
from esp.methods import build
from esp.decoding.tree import dynamic_tree, static_tree

# The paper's BC = 60: the methods whose per-step overhead is measured (label -> method spec)
BC60 = {"k=1 bc=60 static": "esp:k=1:bc=60", "k=2 bc=60 static": "esp:k=2:bc=60",
        "k=2 bc=60 dynamic": "esp:k=2:bc=60:tree=dynamic", "hybrid bc=60": "hybrid:bc=60"}


def random_lm(config, device: str | torch.device, dtype: torch.dtype, name: str) -> LM:
    """A random-weight model of `config`, built and initialised directly on `device` (no download, no
    CPU copy of 8B weights), with the stand-in tokenizer; it never emits EOS, so runs have a fixed length."""
    from transformers import AutoModelForCausalLM

    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa")
    model.generation_config.eos_token_id = None
    return LM(model, IdTokenizer(), name)


def random_prompts(lm: LM, n: int, length: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, lm.vocab_size, (length,), generator=g).tolist() for _ in range(n)]


def overhead(lm: LM, prompts: list[list[int]], specs: dict[str, str], tokens: int) -> dict:
    """Share of step time spent outside the model (draft, mask, verify, commit, trace) per method spec."""
    out = {}
    for name, spec in specs.items():
        sums: dict[str, list[float]] = {}
        drafter = build(spec)
        for ids in prompts:
            for st in Decoder(lm, drafter, max_new_tokens=tokens).generate(ids).steps[1:]:
                for k, v in st.timings.items():
                    sums.setdefault(k, []).append(v)
        med = {k: statistics.median(v) for k, v in sums.items()}
        mean = {k: sum(v) / len(v) for k, v in sums.items()}
        engine = sum(mean[k] for k in ("draft", "mask", "verify", "commit", "trace"))
        out[name] = {"median_ms": {k: round(v * 1e3, 3) for k, v in med.items()},
                     "mean_ms": {k: round(v * 1e3, 3) for k, v in mean.items()},
                     "engine_share": engine / mean["total"], "steps": len(sums["total"])}
    return out


def builders(repeats: int, past: int = 300, device: torch.device = torch.device("cpu")) -> dict:
    """Median microseconds to build a step's mask (layout + additive mask with the prefix, on `device`) at
    BC=60, the efficient builder against the naive one."""
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
                builder.additive(lay, past + i, torch.float32, device)
                if device.type == "cuda":
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - t)
            row[builder.name] = statistics.median(times[len(trees):]) * 1e6
        row["ratio"] = row["naive"] / row["efficient"]
        out[name] = row
    return out


def measure_model(lm: LM, prompts: list[list[int]], context: int, sizes: list[int], repeats: int, tokens: int,
                  specs: dict[str, str] = BC60) -> dict:
    """The model's cost curve and the per-step overhead of `specs` (ESP and the hybrid at BC = 60), printed as they come."""
    print(f"model {lm.name} on {lm.device} ({lm.dtype}), torch threads {torch.get_num_threads()}", flush=True)
    curve = measure(lm, tuple(sizes), context, repeats)
    print(f"forward cost curve (median over {repeats} runs, cache {context} tokens):")
    for q, t in curve.items():
        print(f"  q={q:4d}  {t * 1e3:8.2f} ms  {t / curve[sizes[0]]:.2f}x")
    return {"curve_s": curve, "overhead": measure_overhead(lm, prompts, specs, tokens)}


def measure_overhead(lm: LM, prompts: list[list[int]], specs: dict[str, str], tokens: int) -> dict:
    """`overhead`, printed."""
    ov = overhead(lm, prompts, specs, tokens)
    print("per-step time (mean ms) and engine share (everything but the model's forward and LM head):")
    for name, r in ov.items():
        print(f"  {name:20s} {r['mean_ms']}  share {r['engine_share']:.1%} over {r['steps']} steps")
    return ov


def measure_builders(repeats: int, device: torch.device = torch.device("cpu")) -> dict:
    """`builders`, printed."""
    b = builders(repeats, device=device)
    print(f"mask building at BC=60 on {device} (median us, layout + additive mask over a 300-token prefix):")
    for name, r in b.items():
        print(f"  {name:20s} efficient {r['efficient']:8.1f}  naive {r['naive']:9.1f}  naive/efficient {r['ratio']:.1f}x")
    return b

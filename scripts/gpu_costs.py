"""GPU cost figures on random-weight models shaped like the paper's (Llama-3.1-8B and Qwen3-8B), in bf16:
the forward cost curve t(q) for q up to 128, ESP's per-step engine overhead at BC = 60, and the efficient
vs naive mask builders. Needs no network and no weights (configs below, random init on the GPU); one JSON.

    python scripts/gpu_costs.py --json out/gpu_costs.json            # CUDA machine, under 5 min on an H200
    python scripts/gpu_costs.py --tiny --json out/gpu_tiny.json      # the same on CPU with tiny shapes (tests)
"""
from __future__ import annotations

import argparse
import gc
import json
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from esp.device import canonical  # noqa: E402
from esp.bench.overhead import measure_builders, measure_model, random_lm, random_prompts  # noqa: E402

SIZES = [1, 2, 4, 8, 16, 32, 48, 64, 96, 128]


def configs(tiny: bool) -> dict:
    """The published shapes (from the models' config.json files), or tiny ones of the same families."""
    from transformers import LlamaConfig, Qwen3Config

    if tiny:
        small = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=16, max_position_embeddings=4096)
        return {"llama-3.1-8b": LlamaConfig(vocab_size=1024, **small), "qwen3-8b": Qwen3Config(vocab_size=1024, **small)}
    llama = LlamaConfig(
        vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, head_dim=128, max_position_embeddings=131072, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
        bos_token_id=128000, eos_token_id=128009, tie_word_embeddings=False)
    qwen3 = Qwen3Config(
        vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
        num_key_value_heads=8, head_dim=128, max_position_embeddings=40960, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        bos_token_id=151643, eos_token_id=151645, tie_word_embeddings=False)
    return {"llama-3.1-8b": llama, "qwen3-8b": qwen3}


def shape(cfg) -> dict:
    keys = ("model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "head_dim")
    return {k: getattr(cfg, k) for k in keys}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tiny", action="store_true", help="tiny shapes in float32: a CPU check of the script")
    p.add_argument("--context", type=int, default=512, help="cached tokens before the measured forward")
    p.add_argument("--repeats", type=int, default=None, help="timed runs per block size (default 15; tiny 2)")
    p.add_argument("--prompts", type=int, default=None, help="random prompts per ESP config (default 4; tiny 1)")
    p.add_argument("--tokens", type=int, default=None, help="new tokens per prompt (default 64; tiny 8)")
    p.add_argument("--json", required=True)
    a = p.parse_args()
    cuda = torch.cuda.is_available()
    if not cuda and not a.tiny:
        sys.exit("error: no CUDA device here; the 8B-shaped models need a GPU (use --tiny for a CPU check).")
    repeats, n_prompts, tokens = a.repeats or (2 if a.tiny else 15), a.prompts or (1 if a.tiny else 4), a.tokens or (8 if a.tiny else 64)
    context = min(a.context, 64) if a.tiny else a.context
    device = canonical("cuda" if cuda else "cpu")  # "cuda:0": the layout buffer's device compares equal
    dtype = torch.float32 if a.tiny and not cuda else torch.bfloat16
    start = time.perf_counter()
    out = {"device": torch.cuda.get_device_name() if cuda else platform.processor() or "cpu",
           "torch": torch.__version__, "transformers": __import__("transformers").__version__,
           "dtype": str(dtype).removeprefix("torch."), "tiny": a.tiny, "context": context, "repeats": repeats,
           "prompts": n_prompts, "tokens": tokens, "models": {}}
    for name, cfg in configs(a.tiny).items():
        t = time.perf_counter()
        torch.manual_seed(0)
        lm = random_lm(cfg, device, dtype, f"random {name}")
        built = time.perf_counter() - t
        print(f"{name}: {sum(p.numel() for p in lm.model.parameters()) / 1e9:.2f}B parameters built in {built:.1f} s")
        r = measure_model(lm, random_prompts(lm, n_prompts, 200 if not a.tiny else 16), context, SIZES, repeats, tokens)
        curve = r["curve_s"]
        out["models"][name] = {
            "config": shape(cfg), "params": sum(p.numel() for p in lm.model.parameters()), "build_s": built,
            "curve_ms": {q: s * 1e3 for q, s in curve.items()}, "curve_ratio": {q: s / curve[1] for q, s in curve.items()},
            "overhead": r["overhead"],
            "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
        }
        del lm, r
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
    out["builders_us"] = measure_builders(repeats * 4 if not a.tiny else 4, device)
    out["seconds"] = time.perf_counter() - start
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps(out, indent=1))
    print(f"wrote {a.json} after {out['seconds']:.0f} s")


if __name__ == "__main__":
    main()

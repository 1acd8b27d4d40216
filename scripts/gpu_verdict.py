"""The bench's lossless verdict on a random-weight Llama-3.2-1B-shaped model: every method exact against
ar in float32 and no failure in bfloat16. Built from a config on the device: no network, no download.

    python scripts/gpu_verdict.py --json out/gpu_verdict.json     # CUDA, a couple of minutes on an H200
    python scripts/gpu_verdict.py --tiny --json out/tiny.json     # the same on CPU with a tiny shape (tests)

Prompts: Spec-Bench's questions through the embedded model's tokenizer when both are here (ids stay below
the model's vocabulary), else repeated random ids (so that lookup drafters find something to copy).
Exits 1 when a check fails.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from esp.bench.run import Turn, aggregate, record  # noqa: E402
from esp.device import canonical  # noqa: E402
from esp.decoding.engine import Decoder  # noqa: E402
from esp.methods import build  # noqa: E402
from esp.bench.overhead import random_lm  # noqa: E402

METHODS = ["ar", "pld", "stand", "lade", "esp:k=2:bc=60", "hybrid:bc=60"]
QUESTIONS = Path(__file__).resolve().parents[2] / "shared/data/spec_bench/question.jsonl"


def config(tiny: bool):
    from transformers import LlamaConfig

    if tiny:
        return LlamaConfig(vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096)
    return LlamaConfig(  # Llama-3.2-1B's published shape
        vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
        num_key_value_heads=8, head_dim=64, max_position_embeddings=131072, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
        tie_word_embeddings=True)


def prompts(vocab: int, n: int) -> list[tuple[dict, list[int]]]:
    """(question, ids) pairs: Spec-Bench through the embedded tokenizer if available, else random ids."""
    try:
        from transformers import AutoTokenizer

        from esp.models.offline import MODELS, converted

        tok = AutoTokenizer.from_pretrained(str(converted(MODELS["embedded"])))
        qs = [json.loads(x) for x in QUESTIONS.read_text().splitlines()][:: 240 // n][:n]
        out = [(q, tok(q["turns"][0])["input_ids"][:200]) for q in qs]
        if all(max(ids) < vocab for _, ids in out):
            return out
    except (OSError, ValueError):
        pass
    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(n):
        base = torch.randint(0, vocab, (12,), generator=g).tolist()
        out.append(({"question_id": i, "category": "random", "turns": [""]}, base * 4))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tiny", action="store_true", help="tiny shape on the CPU: a check of the script")
    p.add_argument("--prompts", type=int, default=None, help="questions (default 6; tiny 2)")
    p.add_argument("--tokens", type=int, default=None, help="new tokens per question (default 64; tiny 12)")
    p.add_argument("--json", required=True)
    a = p.parse_args()
    cuda = torch.cuda.is_available() and not a.tiny
    if not cuda and not a.tiny:
        sys.exit("error: no CUDA device here; the 1B-shaped model needs a GPU (use --tiny for a CPU check).")
    device = canonical("cuda" if cuda else "cpu")
    n, tokens = a.prompts or (2 if a.tiny else 6), a.tokens or (12 if a.tiny else 64)
    cfg = config(a.tiny)
    qs = prompts(cfg.vocab_size, n)
    out, ok, start = {"device": torch.cuda.get_device_name() if cuda else "cpu", "tiny": a.tiny, "tokens": tokens,
                      "questions": len(qs), "dtypes": {}}, True, time.perf_counter()
    for name in ("float32", "bfloat16"):
        torch.manual_seed(0)
        lm = random_lm(cfg, device, getattr(torch, name), f"random llama-3.2-1b {name}")
        rows = []
        for q, ids in qs:
            for spec in METHODS:
                g = Decoder(lm, build(spec), max_new_tokens=tokens, trace_mask=False, timings=False).generate(ids)
                rows.append(record(q, spec, [Turn.of(lm, g)], False))
        res = aggregate(rows, METHODS, name)
        verdicts = {m: r["verdict"] for m, r in res.items()}
        good = all(v["exact"] == len(qs) for v in verdicts.values()) if name == "float32" else \
            all(v["failure"] == 0 for v in verdicts.values())
        ok &= good
        out["dtypes"][name] = {"verdict": verdicts, "tau": {m: r["tau"] for m, r in res.items()}, "ok": good}
        print(f"{name}: {'ok' if good else 'FAILED'}  " + "  ".join(
            f"{m} {v['exact']}/{v['near_tie']}/{v['failure']}" for m, v in verdicts.items()), flush=True)
        del lm
        if cuda:
            torch.cuda.empty_cache()
    out["ok"], out["seconds"] = ok, time.perf_counter() - start
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps(out, indent=1))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

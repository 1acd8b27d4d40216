"""Batches and model.generate on the device: a random-weight Llama-3.2-1B-shaped model in float32, prompts of
different lengths, each method's batch of B rows (one forward per step) against plain greedy decoding of each
prompt alone, and `model.generate(..., custom_generate=<this checkout>)` against plain `model.generate` for
esp, hybrid:bc=auto and pld, with tokens and wall times. No network, no download.

    python -m scripts.gpu_batch --json out/gpu_batch.json           # CUDA (scripts/gpu_check.sh runs it)
    python -m scripts.gpu_batch --tiny --json out/tiny_batch.json   # the same on CPU with a tiny shape (tests)

Exits 1 when a row's tokens differ from its greedy tokens.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from esp.bench.overhead import random_lm
from esp.bench.shapes import llama_1b
from esp.decoding.batch import BatchDecoder
from esp.decoding.engine import Decoder
from esp.device import canonical
from esp.methods import build_batch

ROOT = Path(__file__).resolve().parents[1]  # this checkout: custom_generate/ for model.generate

METHODS = ["ar", "esp", "pld", "stand", "lade", "tr", "hybrid:bc=60", "hybrid:bc=auto"]
THROUGH_GENERATE = ["esp", "hybrid:bc=auto", "pld"]


def prompts(vocab: int, n: int) -> list[list[int]]:
    """n prompts of different lengths, each a random phrase repeated (so lookup drafters find copies)."""
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, vocab, (6 + 3 * i,), generator=g).tolist() * 3 for i in range(n)]


def timed(fn):
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    out = fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return out, time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tiny", action="store_true", help="tiny shape on the CPU: a check of the script")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--tokens", type=int, default=None, help="new tokens per prompt (default 64; tiny 10)")
    p.add_argument("--json", required=True)
    a = p.parse_args()
    cuda = torch.cuda.is_available() and not a.tiny
    if not cuda and not a.tiny:
        sys.exit("error: no CUDA device here; the 1B-shaped model needs a GPU (use --tiny for a CPU check).")
    device = canonical("cuda" if cuda else "cpu")
    tokens = a.tokens or (10 if a.tiny else 64)
    lm = random_lm(llama_1b(a.tiny), device, torch.float32, "random-llama-1b" if not a.tiny else "tiny-llama")
    batch = prompts(lm.vocab_size, a.batch)
    alone = [Decoder(lm, max_new_tokens=tokens).generate(ids).tokens for ids in batch]
    rows, ok = [], True
    for spec in METHODS:
        drafters, planner = build_batch(spec, len(batch))
        gens, secs = timed(lambda: BatchDecoder(lm, drafters, max_new_tokens=tokens, planner=planner).generate(batch))
        same = sum(g.tokens == ref for g, ref in zip(gens, alone))
        ok &= same == len(batch)
        rows.append({"method": spec, "batch": len(batch), "same_as_alone": same, "seconds": round(secs, 4),
                     "tau": round(sum(len(g.tokens) for g in gens) / sum(g.summary.forwards for g in gens), 4)})
        print(f"B={len(batch)} {spec}: {same}/{len(batch)} rows exact, {secs:.2f} s", flush=True)
    model = lm.model
    ids = torch.tensor([batch[0]], device=device)
    plain, plain_s = timed(lambda: model.generate(ids, max_new_tokens=tokens, do_sample=False))
    through = []
    for spec in THROUGH_GENERATE:
        out, secs = timed(lambda: model.generate(ids, custom_generate=str(ROOT), trust_remote_code=True, method=spec,
                                                 max_new_tokens=tokens))
        same = torch.equal(out, plain)
        ok &= same
        through.append({"method": spec, "equal_to_generate": same, "seconds": round(secs, 4)})
        print(f"model.generate custom_generate {spec}: equal {same}, {secs:.2f} s (generate() {plain_s:.2f} s)", flush=True)
    name = torch.cuda.get_device_name(device) if cuda else "cpu"
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps({"device": name, "torch": torch.__version__, "tokens": tokens, "batch": rows,
                                        "custom_generate": through, "generate_s": round(plain_s, 4)}, indent=1))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

"""Batches and model.generate on the device: a random-weight Llama-3.2-1B-shaped model in float32, prompts of
different lengths, each method's batch of B rows (one forward per step) against plain greedy decoding of each
prompt alone, and `model.generate(..., custom_generate=<this checkout>)` against plain `model.generate` for
esp, hybrid:bc=auto and pld, with tokens and wall times; then the app's per-step cost on the device: the app's
default run (ESP, k=2, BC=30) recording every view it draws (the Mask Lens, the verifier's eye, the alignment, the
attention pattern, phase timings) against the same run recording none, in bfloat16, medians of interleaved rounds.
No network, no download.

    python -m scripts.gpu_batch --json out/gpu_batch.json           # CUDA (scripts/gpu_check.sh runs it)
    python -m scripts.gpu_batch --tiny --json out/tiny_batch.json   # the same on CPU with a tiny shape (tests)

Exits 1 when a row's tokens differ from its greedy tokens.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from esp.bench.overhead import random_lm
from esp.bench.provenance import provenance
from esp.bench.shapes import llama_1b
from esp.decoding.batch import BatchDecoder
from esp.decoding.engine import Decoder
from esp.device import canonical
from esp.methods import build, build_batch

ROOT = Path(__file__).resolve().parents[1]  # this checkout: custom_generate/ for model.generate

METHODS = ["ar", "esp", "pld", "stand", "lade", "tr", "hybrid:bc=60", "hybrid:bc=auto"]
THROUGH_GENERATE = ["esp", "hybrid:bc=auto", "pld"]
APP_SPEC = "esp:k=2:bc=30"  # the page's default run
# What the app's run records (explorer.worker.run_steps) against a run that records no view.
VIEWS = {"app views": dict(align=True, lens=True, trace_mask=True, timings=True),
         "no views": dict(align=False, lens=False, trace_mask=False, timings=False)}


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


def views_cost(lm, ids: list[int], tokens: int, rounds: int) -> dict:
    """ms per step of the app's default run with and without its views, ABBA-interleaved rounds (medians)."""
    per_step: dict[str, list[float]] = {name: [] for name in VIEWS}
    for r in range(rounds):
        for name in (VIEWS if r % 2 == 0 else reversed(list(VIEWS))):
            dec = Decoder(lm, build(APP_SPEC), max_new_tokens=tokens, **VIEWS[name])
            gen, secs = timed(lambda: dec.generate(ids))
            per_step[name].append(1e3 * secs / len(gen.steps))
    med = {name: statistics.median(v) for name, v in per_step.items()}
    out = {"spec": APP_SPEC, "dtype": str(lm.dtype).removeprefix("torch."), "tokens": tokens, "rounds": rounds,
           "ms_per_step": {name: round(v, 3) for name, v in med.items()},
           "ratio": round(med["app views"] / med["no views"], 4)}
    print(f"views on {lm.device} ({out['dtype']}): {out['ms_per_step']} ms/step, ratio {out['ratio']:.2f}", flush=True)
    return out


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
    # The app computes in bfloat16 on a GPU (esp.device): its views are timed in that dtype.
    views = views_cost(lm if a.tiny else random_lm(llama_1b(), device, torch.bfloat16, "random-llama-1b bf16"),
                       batch[0], tokens, 2 if a.tiny else 6)
    name = torch.cuda.get_device_name(device) if cuda else "cpu"
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps({"provenance": provenance(None, "python -m scripts.gpu_batch"), "device": name, "torch": torch.__version__, "tokens": tokens, "batch": rows,
                                        "custom_generate": through, "generate_s": round(plain_s, 4),
                                        "views": views}, indent=1))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

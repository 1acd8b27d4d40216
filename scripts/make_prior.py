"""Write a model's calibration prior (esp/budget/prior.py) from development questions: what a fresh hybrid
drafter starts from, so that its first prompt is drafted as if it had seen these.

    python -m scripts.make_prior [--model embedded] [--questions ../shared/data/spec_bench/question.jsonl]
        [--skip 1] [--per-category 2] [--max-new-tokens 96] [--methods hybrid:bc=auto,...] [--save | --out F]

Each method runs once, hot (`start=hot`, `prior=none`), over the questions in file order; what the
drafters learned is merged (counts add up per key) and written. By default the file goes where the code
ships it (`esp/budget/priors/<model>.json`, read for that model by default); `--save` writes this machine's
prior instead (the cache, read before the shipped one). Only the development split is read, and by
default its first question of each category is skipped: those are the questions `esp.bench
--per-category 1` measures on, so a measured first prompt is never one the prior has seen.
The shipped prior for the embedded model is regenerated with the defaults (about 5 minutes on 2 cores).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from esp.bench.questions import DEV_QUESTIONS, load_questions
from esp.budget.prior import SHIPPED, Prior, model_key, save
from esp.cli import add_model_args
from esp.decoding.engine import Decoder
from esp.methods import build
from esp.models.loader import load

METHODS = "hybrid:bc=auto,hybrid:bc=auto:sources=esp,hybrid:bc=auto:sources=table"
MIN_SEEN = 3  # keys labelled fewer times are left out: the coarser keys already say as much


def merge(priors: list[Prior]) -> Prior:
    """One prior from several drafters': counts summed per key, per-source books side by side."""
    out = Prior()
    for p in priors:
        for k, (a, s) in p.counts.items():
            hit = out.counts.setdefault(k, [0.0, 0.0])
            hit[0] += a
            hit[1] += s
        out.mask_value.update(p.mask_value)
        out.reliability.update(p.reliability)
    out.counts = {k: v for k, v in out.counts.items() if v[1] >= MIN_SEEN}
    return out


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m scripts.make_prior", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_args(p)
    p.set_defaults(max_new_tokens=96)
    p.add_argument("--questions", default=str(DEV_QUESTIONS))
    p.add_argument("--skip", type=int, default=1, help="questions of each category left out first")
    p.add_argument("--per-category", type=int, default=2)
    p.add_argument("--methods", default=METHODS, help="hybrid specs whose learning is merged (esp:bc=auto and stand:bc=auto read the sources=esp and sources=table parts)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--save", action="store_true", help="this machine's prior (the cache), not the shipped one")
    where.add_argument("--out", help="write here instead")
    return p.parse_args(argv)


def questions(a: argparse.Namespace) -> list[dict]:
    """The development questions the prior learns from: of each category, the first `--skip` left out."""
    return load_questions(a.questions, a.per_category, skip=a.skip)


def main() -> None:
    a = arguments()
    lm = load(a.model, dtype=a.dtype)
    qs = questions(a)
    learned = []
    for spec in a.methods.split(","):
        d = build(f"{spec}:start=hot:prior=none")
        for q in qs:
            Decoder(lm, d, max_new_tokens=a.max_new_tokens, trace_mask=False, timings=False).generate(lm.chat_ids(q["turns"][0]))
        learned.append(d.learned())
        print(f"{spec}: {len(qs)} questions, {len(d.memory.calibrator.counts)} keys", file=sys.stderr)
    prior = merge(learned)
    out = None if a.save else Path(a.out) if a.out else SHIPPED / f"{model_key(lm)}.json"
    print(save(lm, prior, out))


if __name__ == "__main__":
    main()

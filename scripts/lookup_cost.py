"""Per-step cost of the hybrid's lookup (index growth + `continuations`) at several text lengths, on a real
answer: the `ar` tokens of a bench JSON written with its tokens (`python -m esp.bench ... --json F`).

    python scripts/lookup_cost.py F [--lengths 300,1000,2300] [--steps 40]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from esp.drafters.pld import NgramIndex  # noqa: E402

MATCH, DRAFT, LIMIT = 8, 32, 4  # HybridDrafter's defaults: match, draft, continuations per step


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("json")
    p.add_argument("--lengths", default="300,1000,2300")
    p.add_argument("--steps", type=int, default=40)
    a = p.parse_args()
    tokens = next(r["tokens"] for r in json.loads(Path(a.json).read_text())["records"] if r["method"] == "ar")
    lengths = [int(x) for x in a.lengths.split(",")]
    text = (tokens * (max(lengths) // len(tokens) + 1))[: max(lengths)]  # repeated past its end if short
    for length in lengths:
        index, grown = NgramIndex(MATCH), list(text[: length - a.steps])
        index.extend(grown)
        times = []
        for t in text[length - a.steps : length]:  # one token a step, as a plain step grows the text
            grown.append(t)
            t0 = time.perf_counter()
            index.extend(grown)
            index.continuations(grown, DRAFT, LIMIT)
            times.append(time.perf_counter() - t0)
        print(f"{length} tokens: {statistics.median(times) * 1e6:.1f} µs a step (median of {a.steps})")


if __name__ == "__main__":
    main()

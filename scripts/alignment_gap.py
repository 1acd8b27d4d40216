"""Side by side, the alignment-by-layer gap (accepted minus rejected masks, mean-centred cosine) of several
bench runs made with `--align`, at the same relative depths, so that models of different depth compare.

    python scripts/alignment_gap.py out/smollm2.json out/qwen05.json [--method esp:k=1:bc=60]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

DEPTHS = [0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0]


def at_depth(values: list[float], frac: float) -> tuple[int, float]:
    """(layer, value) nearest to relative depth `frac` (0 = embeddings, 1 = post-norm output)."""
    i = round(frac * (len(values) - 1))
    return i, values[i]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", help="esp.bench --align JSON files")
    p.add_argument("--method", action="append", help="methods to show (default: every method with masks)")
    a = p.parse_args()
    cols = []
    for path in a.runs:
        run = json.loads(Path(path).read_text())
        for m, r in run["results"].items():
            if r.get("alignment") and (not a.method or m in a.method):
                cols.append((f"{run['meta']['model'].split(' (')[0]} {m}", r["alignment"]))
    if not cols:
        raise SystemExit("error: none of these runs has alignment results (run esp.bench with --align).")
    print("| depth | " + " | ".join(c for c, _ in cols) + " |")
    print("|" + "---|" * (len(cols) + 1))
    for f in DEPTHS:
        cells = []
        for _, al in cols:
            i, gap = at_depth(al["gap"], f)
            cells.append(f"{gap:+.3f} (L{i}: {al['accepted'][i]:.2f} vs {al['rejected'][i]:.2f})")
        print(f"| {f:.0%} | " + " | ".join(cells) + " |")
    print("| mean over layers | " + " | ".join(f"{sum(al['gap']) / len(al['gap']):+.3f}" for _, al in cols) + " |")
    print("| masks acc / rej | " + " | ".join(f"{al['n_accepted']} / {al['n_rejected']}" for _, al in cols) + " |")


if __name__ == "__main__":
    main()

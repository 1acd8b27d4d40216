"""The hybrid's source ablation as a markdown table, from esp.bench JSON results of one model.

    python scripts/ablation.py docs/results/ablation_135m.json
    python scripts/ablation.py docs/results/ablation_q05_60.json docs/results/ablation_q05_auto.json --tau-only

Rows are the source subsets (all three, each one removed, each alone), columns each budget found in the
files with more than one subset (`hybrid:bc=60...`, `hybrid:bc=auto...`): tau, and the speed-up over the same run's `ar` unless
`--tau-only` (a run on a shared machine). A subset missing from the files is shown as "-". The last row
is what ESP adds: the full hybrid's tau over the hybrid without ESP (`sources=lookup+table`).
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

SUBSETS = ("esp+lookup+table", "lookup+table", "esp+table", "esp+lookup", "esp", "lookup", "table")
LABELS = {"esp+lookup+table": "all three", "lookup+table": "no ESP", "esp+table": "no lookup",
          "esp+lookup": "no table", "esp": "ESP alone", "lookup": "lookup alone", "table": "table alone"}
SPEC = re.compile(r"^hybrid:bc=(\w+)(?::sources=([a-z+]+))?$")


def collect(benches: list[dict]) -> dict[tuple[str, str], dict]:
    """(budget, sources) -> that method's overall results, from every file (a later file wins)."""
    out = {}
    for b in benches:
        for m, r in b["results"].items():
            hit = SPEC.match(m)
            if hit:
                out[hit.group(1), hit.group(2) or SUBSETS[0]] = r
    return out


def table(benches: list[dict], tau_only: bool = False) -> str:
    """The markdown table: one row per source subset, tau (and speed-up) per budget; lossless noted."""
    got = collect(benches)
    # A budget with one subset only (a width sweep such as hybrid:bc=4) is no ablation: left out.
    budgets = [b for b in sorted({b for b, _ in got}, key=lambda b: (b == "auto", int(b) if b.isdigit() else 0))
               if sum(key[0] == b for key in got) > 1]
    cols = [f"{h} (bc={b})" for b in budgets for h in (("tau",) if tau_only else ("tau", "speed-up"))]
    lines = ["| sources | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    lossy = []
    for s in SUBSETS:
        cells = []
        for b in budgets:
            r = got.get((b, s))
            if r is not None and not r["lossless"]:
                lossy.append(f"bc={b} sources={s}")
            cells.append("-" if r is None else f"{r['tau']:.2f}")
            if not tau_only:
                cells.append("-" if r is None else f"{r['speedup']:.2f}x")
        lines.append(f"| {LABELS[s]} (`{s}`) | " + " | ".join(cells) + " |")
    adds = []
    for b in budgets:
        full, bare = got.get((b, SUBSETS[0])), got.get((b, "lookup+table"))
        adds.append("-" if not (full and bare) else f"{full['tau'] / bare['tau'] - 1:+.1%}")
        if not tau_only:
            adds.append("-" if not (full and bare) else f"{full['speedup'] / bare['speedup']:.2f}x")
    lines.append("| ESP adds (all over no ESP) | " + " | ".join(adds) + " |")
    lines.append("")
    lines.append("Lossless: " + ("every run." if not lossy else "NOT " + ", ".join(lossy)))
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("bench", nargs="+", help="esp.bench --json result files of one model")
    p.add_argument("--tau-only", action="store_true", help="leave speed-ups out (the machine was shared)")
    a = p.parse_args()
    benches = [json.loads(Path(f).read_text()) for f in a.bench]
    models = {b["meta"]["model"] for b in benches}
    if len(models) > 1:
        raise SystemExit(f"One model per table, these files hold {sorted(models)}.")
    print(f"{models.pop()}, {benches[0]['meta']['dtype']}\n")
    print(table(benches, a.tau_only))


if __name__ == "__main__":
    main()

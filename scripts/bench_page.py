"""The tables and the text figure of docs/BENCHMARKS.md, from esp.bench JSON results.

    python scripts/bench_page.py docs/results/ablation_q15.json --methods ar,hybrid:bc=60,hybrid:bc=auto
    python scripts/bench_page.py docs/results/auto26_dev.json docs/results/tau26_dev.json   # runs merged
    python scripts/bench_page.py --figure docs/results/size_*.json    # tau per category, one block per run
    python scripts/bench_page.py --figure --overall docs/results/size_*.json          # overall tau alone

With several runs a table takes each method's column from the first run that has it, as that run
summarised it: every speed-up is against the `ar` of the method's own run (the runs must share their
questions).

A table: tau / speed-up per category (rows) and method (columns), overall, and the lossless verdict. The
figure: one bar per method and category, its length the tau, so that the categories where drafting pays
stand out at a glance (a fenced text block: it reads the same on GitHub, in a terminal and in a diff).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from esp.bench.run import table  # noqa: E402

BAR = 12  # characters for a tau of 1.0


def compact(results: dict) -> str:
    """The bench's Markdown table cut to the rows this page shows: categories, overall, lossless, verdicts."""
    keep = ("overall", "lossless", "exact / near-tie / failure")
    lines = table(results, markdown=True).splitlines()
    cats = len(next(iter(results.values()))["per_category"])
    return "\n".join(lines[: 2 + cats] + [x for x in lines[2 + cats :] if x.split(" | ")[0].lstrip("| ") in keep])


def figure(runs: dict[str, dict], methods: list[str], overall: bool = False) -> str:
    """Per model and category (or overall alone), a bar per method of length tau x BAR characters."""
    out = []
    for model, results in runs.items():
        out.append(model)
        cats = ([] if overall else list(next(iter(results.values()))["per_category"])) + ["overall"]
        for c in cats:
            for i, m in enumerate(x for x in methods if x in results):
                r = results[m] if c == "overall" else results[m]["per_category"][c]
                label = "" if overall else f"{c if i == 0 else '':<15}"
                out.append(f"  {label}{m:<15}{'█' * round(r['tau'] * BAR)} {r['tau']:.2f}")
        out.append("")
    return "\n".join(out).rstrip()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", help="esp.bench --json files")
    p.add_argument("--figure", action="store_true", help="the text figure of tau per category instead of tables")
    p.add_argument("--overall", action="store_true", help="the figure's overall bars alone")
    p.add_argument("--methods", help="which methods, in this order (the figure's default: pld,tr,esp:k=1:bc=60,hybrid:bc=60)")
    a = p.parse_args()
    data = [json.loads(Path(f).read_text()) for f in a.runs]
    if a.figure:
        runs = {f"{d['meta']['model']} ({d['meta'].get('dtype') or 'float32'}), {d['meta']['questions']} questions, "
                f"{d['meta']['max_new_tokens']} tokens": d["results"] for d in data}
        print(figure(runs, (a.methods or "pld,tr,esp:k=1:bc=60,hybrid:bc=60").split(","), a.overall))
        return
    columns: dict = {}
    for d in data:
        for m, r in d["results"].items():
            columns.setdefault(m, r)
    order = a.methods.split(",") if a.methods else list(columns)
    missing = [m for m in order if m not in columns]
    if missing:
        sys.exit(f"error: no run holds {', '.join(missing)}.")
    print(compact({m: columns[m] for m in order}))


if __name__ == "__main__":
    main()

"""`python -m esp.bench table`: Markdown tables and the text figure from esp.bench JSON results, and the cell rules
docs/BENCHMARKS.md (esp.bench.report) is written with, so that a figure reads the same wherever it is printed.

    python -m esp.bench table docs/results/ablation_q15.json --methods ar,hybrid:bc=60,hybrid:bc=auto  # per category
    python -m esp.bench table docs/results/auto26_dev.json docs/results/tau26_dev.json --summary     # a row per method
    python -m esp.bench table --figure [--overall] docs/results/size_*.json      # tau per category as bars
    python -m esp.bench table --ablation [--tau-only] docs/results/ablation_135m.json   # the hybrid's source ablation
    python -m esp.bench table --alignment out/smollm2.json out/qwen05.json       # runs made with --align

With several runs a method's figures come from the first run that has it, as that run summarised them: every
speed-up is against the `ar` of the method's own run (the runs must share their questions).

A cell that is not a measurement is left blank: a missing or non-finite figure, and a speed-up over `ar` above
SLACK times the method's tau (a step emits tau tokens and costs at least a plain step, so more than that is a
broken timing, such as a run whose `ar` was stalled by another job).
"""
from __future__ import annotations

import argparse
import json
import math
import re
from pathlib import Path

from esp.bench.run import table as bench_table

SLACK = 1.5
# A figure as a reader quotes it: '1.53x', '90%', '+10.2%' (as '10.2%'), '1.59'; not a version (3.12.12) nor a size (0.5B).
RATE = re.compile(r"(?<![\w.])\d+(?:\.\d+)?[x%](?!\w|\.\d)")  # a speed-up or a share: what prose quotes
FIGURE = re.compile(RATE.pattern + r"|(?<![\w.])\d+\.\d+(?!\w|\.\d|%)")  # and a plain decimal such as a tau
BAR = 12  # characters of the figure for a tau of 1.0


def number(v) -> float | None:
    """`v` as a finite number, else None (missing, NaN, infinite, not a number)."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def tau(v) -> str:
    x = number(v)
    return "" if x is None or x <= 0 else f"{x:.2f}"


def ratio(v) -> str:
    """A speed-up or ratio of tokens per second: '1.53x', blank when not a positive finite number."""
    x = number(v)
    return "" if x is None or x <= 0 else f"{x:.2f}x"


def speedup(v, its_tau=None) -> str:
    """A speed-up over `ar`, blank unless valid (see the module's docstring)."""
    x, t = number(v), number(its_tau)
    return "" if x is None or x <= 0 or (t is not None and x > SLACK * max(t, 1.0)) else ratio(x)


def percent(v) -> str:
    x = number(v)
    return "" if x is None or x <= 0 else f"{x:.0%}"


def verdicts(v: dict | None) -> str:
    """'13 / 0 / 0': exact / near-tie / failure."""
    return "" if not v else "{exact} / {near_tie} / {failure}".format(**v)


def markdown(head: list[str], rows: list[list[str]]) -> str:
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows])


def columns(runs: list[dict], speed: list[bool] | None = None) -> dict[str, dict]:
    """Each method's results from the first run that has it, with `speed_valid` from that run's flag in `speed`
    (False for a run on a shared machine: its tau stands, its timings do not)."""
    out: dict[str, dict] = {}
    for i, run in enumerate(runs):
        for m, r in run["results"].items():
            out.setdefault(m, {**r, "speed_valid": speed[i] if speed else True})
    return out


def lowest(r: dict) -> str:
    """The category of lowest valid speed-up: '0.93x coding'; where the run was priced on its cost curve, also the
    lowest priced one (each category's fed rows on the sweep: what the drafter chose, without the machine's noise
    or the host's time): '0.93x coding · priced 0.99x rag'."""
    cats = r.get("per_category", {})
    cells = [(number(c.get("speedup")), name) for name, c in cats.items() if speedup(c.get("speedup"), c.get("tau"))]
    if not cells or len(cells) < 2:
        return ""
    x, name = min(cells)
    priced = [(p, name) for name, c in cats.items() if (p := number(c.get("curve_speedup")) or 0) > 0]
    return f"{x:.2f}x {name}" + (" · priced {:.2f}x {}".format(*min(priced)) if len(priced) == len(cats) else "")


BASES = ("ar", "generate")  # the rows every speed-up is measured against: no lowest category of their own
SUMMARY_HEAD = ["method", "tau", "speed-up vs `ar`", "vs `generate()`", "oracle (fraction reached)", "lowest category",
                "exact / near-tie / failure"]


def summary(cols: dict[str, dict], methods: list[str]) -> str:
    """One row per method: tau, speed-ups, the oracle and the fraction of it reached, the lowest category, verdicts."""
    rows = []
    for m in methods:
        r = cols[m]
        timed = r["speed_valid"]
        oracle = ratio(r.get("oracle_speedup")) if m != "ar" else ""
        frac = percent(r.get("fraction")) if oracle and timed else ""
        rows.append([f"`{m}`", tau(r.get("tau")), speedup(r.get("speedup"), r.get("tau")) if timed else "",
                     ratio(r.get("speedup_vs_generate")) if timed else "",
                     f"{oracle} ({frac})" if oracle and frac else oracle, lowest(r) if timed and m not in BASES else "",
                     verdicts(r.get("verdict"))])
    return markdown(SUMMARY_HEAD, rows)


def compact(results: dict) -> str:
    """The bench's Markdown table cut to the rows a page shows: categories, overall, lossless, verdicts."""
    keep = ("overall", "lossless", "exact / near-tie / failure")
    lines = bench_table(results, markdown=True).splitlines()
    cats = len(next(iter(results.values()))["per_category"])
    return "\n".join(lines[: 2 + cats] + [x for x in lines[2 + cats :] if x.split(" | ")[0].lstrip("| ") in keep])


def figure(runs: dict[str, dict], methods: list[str], overall: bool = False) -> str:
    """Per run (its label) and category (or overall alone), a bar per method of length tau x BAR characters."""
    out = []
    for label, results in runs.items():
        out.append(label)
        cats = ([] if overall else list(next(iter(results.values()))["per_category"])) + ["overall"]
        for c in cats:
            for i, m in enumerate(x for x in methods if x in results):
                r = results[m] if c == "overall" else results[m]["per_category"][c]
                head = "" if overall else f"{c if i == 0 else '':<15}"
                out.append(f"  {head}{m:<15}{'█' * round(r['tau'] * BAR)} {r['tau']:.2f}")
        out.append("")
    return "\n".join(out).rstrip()


def run_label(run: dict) -> str:
    meta = run["meta"]
    return f"{meta['model']} ({meta.get('dtype') or 'float32'}), {meta['questions']} questions, {meta['max_new_tokens']} tokens"


SUBSETS = ("esp+lookup+table", "lookup+table", "esp+table", "esp+lookup", "esp", "lookup", "table")
LABELS = {"esp+lookup+table": "all three", "lookup+table": "no ESP", "esp+table": "no lookup",
          "esp+lookup": "no table", "esp": "ESP alone", "lookup": "lookup alone", "table": "table alone"}
HYBRID = re.compile(r"^hybrid:bc=(\w+)(?::sources=([a-z+]+))?$")


def by_sources(benches: list[dict]) -> dict[tuple[str, str], dict]:
    """(budget, sources) -> that hybrid's overall results, from every file (a later file wins)."""
    out = {}
    for b in benches:
        for m, r in b["results"].items():
            hit = HYBRID.match(m)
            if hit:
                out[hit.group(1), hit.group(2) or SUBSETS[0]] = r
    return out


def ablation(benches: list[dict], tau_only: bool = False) -> str:
    """The source ablation of one model: a row per source subset, tau (and speed-up) per budget with more than one
    subset (a width sweep such as hybrid:bc=4 is no ablation), the lossless verdict, and what ESP adds."""
    got = by_sources(benches)
    budgets = [b for b in sorted({b for b, _ in got}, key=lambda b: (b == "auto", int(b) if b.isdigit() else 0))
               if sum(key[0] == b for key in got) > 1]
    cols = [f"{h} (bc={b})" for b in budgets for h in (("tau",) if tau_only else ("tau", "speed-up"))]
    rows, lossy = [], []
    for s in SUBSETS:
        cells = []
        for b in budgets:
            r = got.get((b, s))
            if r is not None and not r["lossless"]:
                lossy.append(f"bc={b} sources={s}")
            cells.append("-" if r is None else tau(r["tau"]))
            if not tau_only:
                cells.append("-" if r is None else speedup(r["speedup"], r["tau"]))
        rows.append([f"{LABELS[s]} (`{s}`)"] + cells)
    adds = []
    for b in budgets:
        full, bare = got.get((b, SUBSETS[0])), got.get((b, "lookup+table"))
        adds.append("-" if not (full and bare) else f"{full['tau'] / bare['tau'] - 1:+.1%}")
        if not tau_only:
            adds.append("-" if not (full and bare) else ratio(full["speedup"] / bare["speedup"]))
    rows.append(["ESP adds (all over no ESP)"] + adds)
    return markdown(["sources"] + cols, rows) + "\n\nLossless: " + ("every run." if not lossy else "NOT " + ", ".join(lossy))


DEPTHS = [0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0]


def alignment(runs: list[dict], methods: list[str] | None = None) -> str:
    """The alignment-by-layer gap (accepted minus rejected masks, mean-centred cosine) of runs made with `--align`,
    side by side at the same relative depths, so that models of different depth compare."""
    cols = [(f"{run['meta']['model'].split(' (')[0]} {m}", r["alignment"]) for run in runs
            for m, r in run["results"].items() if r.get("alignment") and (not methods or m in methods)]
    if not cols:
        raise ValueError("none of these runs has alignment results (run esp.bench with --align).")
    rows = []
    for f in DEPTHS:
        cells = []
        for _, al in cols:
            i = round(f * (len(al["gap"]) - 1))
            cells.append(f"{al['gap'][i]:+.3f} (L{i}: {al['accepted'][i]:.2f} vs {al['rejected'][i]:.2f})")
        rows.append([f"{f:.0%}"] + cells)
    rows.append(["mean over layers"] + [f"{sum(al['gap']) / len(al['gap']):+.3f}" for _, al in cols])
    rows.append(["masks acc / rej"] + [f"{al['n_accepted']} / {al['n_rejected']}" for _, al in cols])
    return markdown(["depth"] + [c for c, _ in cols], rows)


def main(argv: list[str] | None = None) -> None:
    from esp.cli import fail

    p = argparse.ArgumentParser(prog="python -m esp.bench table", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", help="esp.bench --json files")
    p.add_argument("--methods", help="which methods, in this order (the figure's default: pld,tr,esp:k=1:bc=60,hybrid:bc=60)")
    p.add_argument("--summary", action="store_true", help="a row per method (tau, speed-ups, oracle, verdicts)")
    p.add_argument("--figure", action="store_true", help="the text figure of tau per category")
    p.add_argument("--overall", action="store_true", help="the figure's overall bars alone")
    p.add_argument("--ablation", action="store_true", help="the hybrid's source ablation (one model's files)")
    p.add_argument("--tau-only", action="store_true", help="the ablation without speed-ups (a run on a shared machine)")
    p.add_argument("--alignment", action="store_true", help="the alignment gap by relative depth (runs made with --align)")
    a = p.parse_args(argv)
    try:
        runs = [json.loads(Path(f).read_text()) for f in a.runs]
    except (OSError, ValueError) as e:
        fail(f"cannot read a results file: {e}")
    order = a.methods.split(",") if a.methods else None
    if a.figure:
        print(figure({run_label(r): r["results"] for r in runs}, order or "pld,tr,esp:k=1:bc=60,hybrid:bc=60".split(","), a.overall))
    elif a.ablation:
        models = {r["meta"]["model"] for r in runs}
        if len(models) > 1:
            fail(f"one model per ablation table; these files hold {sorted(models)}.")
        print(f"{models.pop()}, {runs[0]['meta'].get('dtype', 'float32')}\n\n{ablation(runs, a.tau_only)}")
    elif a.alignment:
        try:
            print(alignment(runs, order))
        except ValueError as e:
            fail(str(e))
    else:
        cols = columns(runs)
        missing = [m for m in order or [] if m not in cols]
        if missing:
            fail(f"no run holds {', '.join(missing)}.")
        order = order or list(cols)
        print(summary(cols, order) if a.summary else compact({m: cols[m] for m in order}))

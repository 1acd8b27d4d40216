"""Compare our Token Recycling's tau with another implementation's, question by question.

    python -m esp.bench --questions ../shared/data/spec_bench/question.jsonl --methods ar,tr \\
        --per-category 1 --max-new-tokens 64 --json /tmp/tr_bench.json
    python scripts/tr_compare.py /tmp/tr_bench.json THEIRS.json [--method tr] [--mode NAME]

THEIRS.json is a list of per-question records {"qid", "tokens", "forwards"} (optionally "mode", to pick
one of several runs with --mode), from the other implementation run on the same prompt ids (the model's
chat template with the generation prompt) and the same token limit. tau counts the prefill forward on
both sides. Prints tau per question and overall, the ratio, and whether both emitted the same tokens.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def compare(ours: list[dict], theirs: list[dict]) -> tuple[list[tuple], float, float]:
    """Rows (category, our tau, their tau, same tokens) over the questions both ran; overall taus."""
    by_qid = {r["qid"]: r for r in theirs}
    rows, ot, of, tt, tf = [], 0, 0, 0, 0
    for r in ours:
        t = by_qid.get(r["qid"])
        if t is None:
            continue
        rows.append((r["category"], r["n_tokens"] / r["forwards"], len(t["tokens"]) / t["forwards"], r["tokens"] == t["tokens"]))
        ot, of, tt, tf = ot + r["n_tokens"], of + r["forwards"], tt + len(t["tokens"]), tf + t["forwards"]
    if not rows:
        raise SystemExit("No question is in both files (they are matched by qid).")
    return rows, ot / of, tt / tf


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("bench", help="python -m esp.bench --json output (with per-question records)")
    p.add_argument("theirs", help="the other implementation's per-question records")
    p.add_argument("--method", default="tr", help="our method spec in the bench file")
    p.add_argument("--mode", help="keep only their records with this 'mode'")
    a = p.parse_args(argv)
    try:
        bench = json.loads(Path(a.bench).read_text())
        theirs = json.loads(Path(a.theirs).read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"Cannot read the inputs: {e}") from None
    ours = [r for r in bench.get("records", []) if r["method"] == a.method]
    if not ours:
        raise SystemExit(f"{a.bench} has no records of method {a.method!r}.")
    if a.mode:
        theirs = [r for r in theirs if r.get("mode") == a.mode]
    rows, our_tau, their_tau = compare(ours, theirs)
    print(f"| category | ours ({a.method}) | theirs | same tokens |\n|---|---|---|---|")
    for cat, o, t, same in rows:
        print(f"| {cat} | {o:.2f} | {t:.2f} | {'yes' if same else 'no'} |")
    print(f"| overall | {our_tau:.3f} | {their_tau:.3f} | {sum(r[3] for r in rows)}/{len(rows)} |")
    print(f"ours / theirs = {our_tau / their_tau:.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])

"""What bc=auto leaves out: per step, the candidates its own best-first tree held but did not feed, that the
target would have accepted (known afterwards: greedy output is fixed, so the rest of the run says which
continuation was right).

    python scripts/auto_missed.py [--spec hybrid:bc=auto] [--questions F] [--per-category 1] [--limit 6]
        [--max-new-tokens 64] [--json F]

For every drafted step: the rows fed, the tokens accepted, and in the full candidate tree the drafter grew
(up to its cap, before the budget cut it) the longest path the output follows, with the best-first index
of its deepest node (the rows a prefix feed would have needed) and each missed node's calibrated P (path
probability times the drafter's reliability factor, as the budget saw it) and sources. Summed: the tokens
the cut lost, and how many of them sat within 1, 2, 4, 8 more rows. A fresh drafter per question (cold),
float32.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from esp.bench.run import load_questions  # noqa: E402
from esp.decoding.engine import Decoder  # noqa: E402
from esp.methods import build  # noqa: E402
from esp.models.loader import load  # noqa: E402


def spy(spec: str):
    """A drafter of `spec` that keeps, per drafted step, its full grown tree (from the step's record,
    Proposal.plan) and the budget's choice."""
    d = build(spec)
    propose = d.propose
    d.log = []

    def proposed(ctx):
        prop = propose(ctx)
        draft = prop.plan.draft
        if draft is not None:  # a drafted step (a backed-off one grows nothing)
            d.log.append({"pos": len(ctx.tokens), "step": ctx.step, "tree": draft.tree, "fed": len(prop.tree) - 1,
                          "gain": draft.gain, "masks": prop.k if prop.masked else 0})
        return prop

    d.propose = proposed
    return d


def follow(tree, future: list[int]) -> list[int]:
    """Node indices of the longest path from the root whose tokens are `future`'s first ones."""
    kids: dict[int, dict[int, int]] = {}
    for v in range(1, len(tree)):
        kids.setdefault(tree.parents[v], {})[tree.tokens[v]] = v
    path, v = [], 0
    for tok in future:
        v = kids.get(v, {}).get(tok)
        if v is None:
            break
        path.append(v)
    return path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--spec", default="hybrid:bc=auto")
    p.add_argument("--questions", default=str(ROOT.parent / "shared/data/spec_bench/question.jsonl"))
    p.add_argument("--per-category", type=int, default=1)
    p.add_argument("--limit", type=int, default=6)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--json")
    a = p.parse_args()
    lm = load("embedded")
    steps = []
    for q in load_questions(a.questions, a.per_category)[: a.limit]:
        ids = lm.chat_ids(q["turns"][0])
        d = spy(a.spec)
        g = Decoder(lm, d, max_new_tokens=a.max_new_tokens, trace_mask=False, timings=False).generate(ids)
        text = ids + g.tokens
        curve = d.curve
        for e in d.log:
            if e["step"] == 0 or "fed" not in e:
                continue
            path = follow(e["tree"], text[e["pos"] :])
            got = sum(1 for v in path if v <= e["fed"])
            need = max(path) if path else 0
            missed = [v for v in path if v > e["fed"]]
            cp = e["tree"].cum_probs
            steps.append({"category": q["category"], "fed": e["fed"], "accepted": got, "possible": len(path),
                          "extra_rows": max(need - e["fed"], 0), "grown": len(e["tree"]) - 1, "masks": e["masks"],
                          "missed_p": [round(min(cp[v] * e["gain"], 1.0), 4) for v in missed],
                          "missed_sources": ["+".join(e["tree"].sources[v]) for v in missed],
                          "t_ratio_fed": curve.predict(1 + e["fed"] + e["masks"]) / curve.predict(1),
                          "t_ratio_need": curve.predict(1 + max(need, e["fed"]) + e["masks"]) / curve.predict(1)})
        print(q["category"], f"tau {g.summary.tau:.2f}", flush=True)
    lost = sum(s["possible"] - s["accepted"] for s in steps)
    within = {k: sum(s["possible"] - s["accepted"] for s in steps if 0 < s["extra_rows"] <= k) for k in (1, 2, 4, 8)}
    ps = [x for s in steps for x in s["missed_p"]]
    srcs = Counter(x for s in steps for x in s["missed_sources"])
    out = {"spec": a.spec, "steps": len(steps), "accepted": sum(s["accepted"] for s in steps), "lost": lost,
           "lost_within_rows": within, "missed_p_median": statistics.median(ps) if ps else None,
           "missed_p_quartiles": statistics.quantiles(ps, n=4) if len(ps) > 3 else None,
           "missed_sources": dict(srcs.most_common()), "fed_mean": statistics.mean(s["fed"] for s in steps) if steps else 0,
           "grown_mean": statistics.mean(s["grown"] for s in steps) if steps else 0, "records": steps}
    print(json.dumps({k: v for k, v in out.items() if k != "records"}, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

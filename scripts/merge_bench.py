"""Merge esp.bench JSON results of runs over disjoint question chunks and/or disjoint method sets into one
result, as if one run had made them: per-question records pooled (the first record of a question and
method wins, e.g. `ar` measured in two passes), then the bench's own aggregation and tables.

    python scripts/merge_bench.py out/a1.json out/a2.json out/b1.json --json out/all.json --markdown out/all.md
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from esp.bench.run import aggregate, alignment_table, table  # noqa: E402


def merge(runs: list[dict], order: list[str] | None = None) -> dict:
    """One bench result from several (methods in `order`, default: as they first appear); meta keeps the
    first run's and lists every run's methods and the protocol each ran under."""
    records, seen, methods, protocols = [], set(), {}, {}
    for run in runs:
        methods.update(run["meta"]["methods"])
        for m, protocol in (run["meta"].get("protocols") or {}).items():
            protocols.setdefault(m, protocol)  # like its records: the first run of a method wins
        for r in run["records"]:
            if (r["qid"], r["method"]) not in seen:
                seen.add((r["qid"], r["method"]))
                records.append(r)
    order = order or list(methods)
    records = [r for r in records if r["method"] in order]
    methods = {m: methods[m] for m in order}
    qids = list(dict.fromkeys(r["qid"] for r in records))
    records.sort(key=lambda r: (qids.index(r["qid"]), order.index(r["method"])))
    meta = dict(runs[0]["meta"], methods=methods, questions=len(qids), merged_from=len(runs))
    if protocols:
        meta["protocols"] = {m: protocols[m] for m in order if m in protocols}
    return {"results": aggregate(records, order, meta.get("dtype", "float32")), "meta": meta, "records": records}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+")
    p.add_argument("--methods", help="comma list: which methods to keep, in this order (default: all)")
    p.add_argument("--json")
    p.add_argument("--markdown")
    a = p.parse_args()
    out = merge([json.loads(Path(f).read_text()) for f in a.runs], a.methods.split(",") if a.methods else None)
    print(table(out["results"]))
    if a.json:
        Path(a.json).write_text(json.dumps(out))
    if a.markdown:
        gaps = alignment_table(out["results"])
        Path(a.markdown).write_text(table(out["results"], markdown=True) + "\n" + (f"\n{gaps}\n" if gaps else ""))


if __name__ == "__main__":
    main()

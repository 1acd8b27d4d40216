"""`python -m esp.bench merge`: runs over disjoint question chunks and/or disjoint method sets pooled into one result,
as if one run had made them: per-question records pooled (the first record of a question and method wins, e.g. `ar`
measured in two passes), then the bench's own aggregation and tables.

    python -m esp.bench merge out/a1.json out/a2.json out/b1.json --json out/all.json --markdown out/all.md
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from esp.bench.provenance import command
from esp.bench.run import aggregate, alignment_table, table


def merge(runs: list[dict], order: list[str] | None = None) -> dict:
    """One bench result from several (methods in `order`, default: as they first appear); meta keeps the first
    run's and lists every run's methods, the protocol each ran under, and every run's provenance."""
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
    sources = [run["meta"]["provenance"] for run in runs if run["meta"].get("provenance")]
    if sources:
        meta["merged_provenance"] = sources
    return {"results": aggregate(records, order, meta.get("dtype", "float32")), "meta": meta, "records": records}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m esp.bench merge", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+")
    p.add_argument("--methods", help="comma list: which methods to keep, in this order (default: all)")
    p.add_argument("--json")
    p.add_argument("--markdown")
    a = p.parse_args(argv)
    out = merge([json.loads(Path(f).read_text()) for f in a.runs], a.methods.split(",") if a.methods else None)
    print(table(out["results"]))
    if a.json:
        # The measurements' provenance stays the first run's (every part's is in merged_provenance).
        out["meta"]["merged_by"] = command(argv, "python -m esp.bench merge")
        Path(a.json).write_text(json.dumps(out))
    if a.markdown:
        gaps = alignment_table(out["results"])
        Path(a.markdown).write_text(table(out["results"], markdown=True) + "\n" + (f"\n{gaps}\n" if gaps else ""))

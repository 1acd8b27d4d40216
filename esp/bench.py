"""`python -m esp.bench`: the Spec-Bench protocol for every method through one engine.

First turn of each question, the model's chat template with the generation prompt, greedy decoding.
tau = all generated tokens / all target forwards (prefill counted); speed-up = mean tokens/s of the
method over the mean of `ar` (Spec-Bench's ratio of means); lossless = no question's output is a failure
against ar's under esp.verdict (exact, or a flip at a rounding near-tie in bf16 / fp16).
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

from .cli import add_esp_args, add_model_args, check_model_args, esp_defaults, fail, require, run_main
from .engine import Decoder, Generation
from .errors import ESPError
from .methods import build
from .shard import Shard, start
from .verdict import EXACT, FAILURE, NEAR_TIE, Verdict, classify, dtype_name, tally


def load_questions(path: str, per_category: int | None) -> list[dict]:
    """Questions in file order, the first `per_category` of each category."""
    p = Path(path)
    if not p.is_file():
        raise ESPError(f"Questions file {path!r} not found (Spec-Bench's question.jsonl, one JSON object a line).")
    seen: dict[str, int] = defaultdict(int)
    out = []
    for n, line in enumerate(p.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            q = json.loads(line)
            q["turns"][0], q["category"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise ESPError(f"{path}:{n} is not a Spec-Bench question (needs 'category' and 'turns').") from None
        if per_category is None or seen[q["category"]] < per_category:
            seen[q["category"]] += 1
            out.append(q)
    if not out:
        raise ESPError(f"{path} holds no questions.")
    return out


def aggregate(rows: list[dict], methods: list[str], dtype: str = "float32") -> dict:
    """Per-question records -> the contract's results dict; `dtype` is the run's (its rounding sets what
    counts as a near-tie)."""
    by = defaultdict(list)
    for r in rows:
        by[r["method"]].append(r)
    ar = {r["qid"]: r for r in by["ar"]}

    def stats(rs: list[dict], base: list[dict]) -> dict:
        tps = sum(r["tokens_per_s"] for r in rs) / len(rs)
        base_tps = sum(r["tokens_per_s"] for r in base) / len(base)
        return {"tau": sum(r["n_tokens"] for r in rs) / sum(r["forwards"] for r in rs),
                "tokens_per_s": tps, "speedup": tps / base_tps if base_tps else 0.0, "n": len(rs)}

    results = {}
    for m in methods:
        rs = by[m]
        overall = stats(rs, by["ar"])
        cats = {}
        for cat in dict.fromkeys(r["category"] for r in rs):
            sub = [r for r in rs if r["category"] == cat]
            s = stats(sub, [r for r in by["ar"] if r["category"] == cat])
            cats[cat] = {"tau": s["tau"], "speedup": s["speedup"], "n": s["n"]}
        verdict = tally([against(ar.get(r["qid"]), r, dtype) for r in rs])
        results[m] = {"tau": overall["tau"], "tokens_per_s": overall["tokens_per_s"], "speedup": overall["speedup"],
                      "lossless": verdict["failure"] == 0, "verdict": verdict, "per_category": cats}
        gap = alignment_gap(rs)
        if gap:
            results[m]["alignment"] = gap
    return results


def against(base: dict | None, r: dict, dtype: str):
    """The verdict of record `r` against the `ar` record of its question (a failure when there is none)."""
    if base is None:
        return Verdict(FAILURE, reason="no ar run of this question to compare with")
    return classify(base["tokens"], base.get("top2"), r["tokens"], r.get("top2"), dtype)


def table(results: dict, markdown: bool = False) -> str:
    """Paper-style table: tau / speed-up per category (rows) and method (columns)."""
    methods = list(results)
    cats = list(next(iter(results.values()))["per_category"])
    head = ["category"] + methods
    body = [[c] + [f"{results[m]['per_category'][c]['tau']:.2f} / {results[m]['per_category'][c]['speedup']:.2f}x"
                   for m in methods] for c in cats]
    body.append(["overall"] + [f"{results[m]['tau']:.2f} / {results[m]['speedup']:.2f}x" for m in methods])
    body.append(["lossless"] + ["yes" if results[m]["lossless"] else "NO" for m in methods])
    body.append(["exact / near-tie / failure"] + [
        "{exact} / {near_tie} / {failure}".format(**results[m]["verdict"]) for m in methods])
    body.append(["largest gap (rounding units)"] + [f"{results[m]['verdict']['max_gap']:.2f}" for m in methods])
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in body])
    widths = [max(len(r[i]) for r in [head] + body) for i in range(len(head))]
    fmt = lambda r: "  ".join(x.ljust(w) for x, w in zip(r, widths))
    return "\n".join([fmt(head), fmt(["-" * w for w in widths])] + [fmt(r) for r in body])


def chart(results: dict, path: str) -> None:
    """A standalone HTML bar chart of tau and speed-up per category."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=2, cols=1, subplot_titles=("tau (tokens per forward)", "speed-up over ar"),
                        shared_xaxes=True, vertical_spacing=0.12)
    for m, r in results.items():
        cats = list(r["per_category"]) + ["overall"]
        tau = [r["per_category"][c]["tau"] for c in cats[:-1]] + [r["tau"]]
        sp = [r["per_category"][c]["speedup"] for c in cats[:-1]] + [r["speedup"]]
        fig.add_bar(x=cats, y=tau, name=m, legendgroup=m, row=1, col=1)
        fig.add_bar(x=cats, y=sp, name=m, legendgroup=m, showlegend=False, row=2, col=1)
    fig.update_layout(barmode="group", height=700, title="Spec-Bench: ESP and training-free baselines")
    fig.write_html(path, include_plotlyjs=True)


def record(q: dict, method: str, g: Generation, align: bool) -> dict:
    """One question's result for one method: the only place records are built."""
    r = {"qid": q.get("question_id"), "category": q["category"], "method": method, "tokens": g.tokens,
         "n_tokens": g.summary.tokens, "forwards": g.summary.forwards, "seconds": g.summary.seconds,
         "tokens_per_s": g.summary.tokens_per_s, "top2": [t for s in g.steps for t in s.top2], **widths(g)}
    if align:
        r["align"] = alignment_sums(g)
    return r


def alignment_sums(g: Generation) -> dict:
    """Per-layer sums of the mean-centred mask/real cosines, accepted and rejected apart (sums, so that
    questions pool exactly)."""
    out = {"accepted_sum": None, "accepted_n": 0, "rejected_sum": None, "rejected_n": 0}
    for st in g.steps:
        for al in st.alignment or []:
            key = "accepted" if al.accepted else "rejected"
            prev = out[f"{key}_sum"]
            out[f"{key}_sum"] = list(al.cos) if prev is None else [x + y for x, y in zip(prev, al.cos)]
            out[f"{key}_n"] += 1
    return out


def alignment_gap(rows: list[dict]) -> dict | None:
    """Pooled per-layer mean cosine of accepted and rejected masks and their gap (accepted - rejected)."""
    acc = [r["align"] for r in rows if r.get("align") and r["align"]["accepted_n"]]
    rej = [r["align"] for r in rows if r.get("align") and r["align"]["rejected_n"]]
    if not acc or not rej:
        return None

    def mean(parts: list[dict], key: str) -> list[float]:
        n = sum(p[f"{key}_n"] for p in parts)
        return [sum(col) / n for col in zip(*(p[f"{key}_sum"] for p in parts))]

    a, r = mean(acc, "accepted"), mean(rej, "rejected")
    return {"accepted": a, "rejected": r, "gap": [x - y for x, y in zip(a, r)],
            "n_accepted": sum(p["accepted_n"] for p in acc), "n_rejected": sum(p["rejected_n"] for p in rej)}


def alignment_table(results: dict) -> str:
    """Markdown: per layer, the accepted - rejected cosine gap of every method that has masks."""
    gaps = {m: r["alignment"] for m, r in results.items() if r.get("alignment")}
    if not gaps:
        return ""
    n_layers = len(next(iter(gaps.values()))["gap"])
    lines = ["| layer | " + " | ".join(gaps) + " |", "|" + "---|" * (len(gaps) + 1)]
    for i in range(n_layers):
        name = "emb" if i == 0 else "out" if i == n_layers - 1 else str(i)
        lines.append(f"| {name} | " + " | ".join(f"{g['gap'][i]:+.3f}" for g in gaps.values()) + " |")
    lines.append("| masks (acc / rej) | " + " | ".join(f"{g['n_accepted']} / {g['n_rejected']}" for g in gaps.values()) + " |")
    return "\n".join(lines)


def widths(g) -> dict:
    """Block rows fed per step after the prefill: their mean and a summary of their spread."""
    w = sorted(len(s.positions) for s in g.steps if not s.prefill) or [1]
    pick = lambda f: w[min(len(w) - 1, int(f * len(w)))]
    return {"width_mean": sum(w) / len(w), "width": {"min": w[0], "median": pick(0.5), "p90": pick(0.9), "max": w[-1]}}


def reference(lm, ids: list[int], max_new_tokens: int) -> tuple[list[int], list[list]]:
    """transformers' own greedy decoding, the ground truth for losslessness: its tokens and, per token, the
    top-2 [id1, logit1, id2, logit2] of the logits that chose it (for esp.verdict)."""
    import torch

    out = lm.model.generate(torch.tensor([ids], device=lm.device), max_new_tokens=max_new_tokens, do_sample=False,
                            output_logits=True, return_dict_in_generate=True)
    vals, top = torch.stack(out.logits)[:, 0].float().topk(2, -1)
    top2 = [[a, x, b, y] for (a, b), (x, y) in zip(top.tolist(), vals.tolist())]
    return out.sequences[0, len(ids):].tolist(), top2


def run_share(lm, drafters: dict, questions: list[dict], shard: Shard,
              a: argparse.Namespace) -> list[tuple[int, list[dict], dict | None]]:
    """This process's questions: (question index, its records for every method, the verdict of ar against
    model.generate as a dict when --reference)."""
    from tqdm import tqdm

    mine = shard.mine(len(questions))
    prompts = {i: lm.chat_ids(questions[i]["turns"][0]) for i in mine}
    for d in drafters.values():
        for w in range(a.warmup if mine else 0):
            Decoder(lm, d, max_new_tokens=min(32, a.max_new_tokens), trace_mask=False,
                    timings=False).generate(prompts[mine[w % len(mine)]])
    out = []
    with tqdm(total=len(mine) * len(drafters) * a.repeats, desc="bench", unit="gen", file=sys.stderr, disable=not shard.main) as bar:
        for i in mine:
            runs: dict[str, list[dict]] = {s: [] for s in drafters}
            for _ in range(a.repeats):
                for s, d in drafters.items():  # interleaved, so drift in machine speed hits every method alike
                    # No per-phase syncs: the run is timed as a whole (one sync at each end).
                    g = Decoder(lm, d, max_new_tokens=a.max_new_tokens, trace_mask=False, align=a.align,
                                timings=False).generate(prompts[i])
                    runs[s].append(record(questions[i], s, g, a.align))
                    bar.update()
            # The run of median time stands for the question (the tokens are the same in every run).
            rows = [sorted(rs, key=lambda r: r["seconds"])[len(rs) // 2] for rs in runs.values()]
            ref = None
            if a.reference:
                ar = next(r for r in rows if r["method"] == "ar")
                tokens, top2 = reference(lm, prompts[i], a.max_new_tokens)
                ref = classify(tokens, top2, ar["tokens"], ar["top2"], dtype_name(lm.dtype)).to_dict()
            out.append((i, rows, ref))
    return out


def report(a: argparse.Namespace, model: str, questions: list[dict], drafters: dict, parts: list,
           dtype: str = "float32") -> None:
    """Print the table of every rank's records and write the files that the arguments ask for."""
    done = sorted((x for part in parts for x in part), key=lambda x: x[0])  # back in question order
    rows = [r for _, rs, _ in done for r in rs]
    refs = [(questions[i].get("question_id"), ref) for i, _, ref in done if ref is not None]
    mismatched = [qid for qid, ref in refs if ref["kind"] == FAILURE]
    results = aggregate(rows, list(drafters), dtype)
    print(f"model {model} ({dtype}), {len(questions)} questions, {a.max_new_tokens} new tokens, greedy; tau / speed-up")
    print(table(results))
    kinds = Counter(ref["kind"] for _, ref in refs)
    if a.reference:
        print(f"ar against model.generate: {kinds[EXACT]} exact, {kinds[NEAR_TIE]} near-tie, {kinds[FAILURE]} failure"
              + (f" (failures: {mismatched})" if mismatched else ""))
    if a.json:
        meta = {"model": model, "dtype": dtype, "reference_mismatches": mismatched if a.reference else None,
                "reference_verdicts": dict(refs) if a.reference else None,
                "methods": {s: d.describe() for s, d in drafters.items()},
                "max_new_tokens": a.max_new_tokens, "questions": len(questions), "repeats": a.repeats}
        Path(a.json).write_text(json.dumps({"results": results, "meta": meta, "records": rows}))
    if a.markdown:
        gaps = alignment_table(results)
        Path(a.markdown).write_text(table(results, markdown=True) + "\n"
                                    + (f"\nAlignment gap by layer (accepted - rejected, mean-centred cosine)\n\n{gaps}\n" if gaps else ""))
    if a.html:
        chart(results, a.html)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m esp.bench", description=__doc__)
    p.add_argument("--questions", required=True, help="Spec-Bench question.jsonl")
    p.add_argument("--methods", default="ar,esp",
                   help="comma list of methods, each with optional settings: ar,pld,stand,lade:n=5:w=7:g=7,esp:k=2:bc=30")
    p.add_argument("--per-category", type=int, default=None, help="first N questions of each category")
    add_model_args(p)
    add_esp_args(p)
    p.add_argument("--reference", action="store_true",
                   help="also check that ar's tokens equal transformers' model.generate(do_sample=False)")
    p.add_argument("--device-map", choices=["auto"], default=None,
                   help="spread the model over the visible GPUs (under torchrun: over this process's share of them)")
    p.add_argument("--align", action="store_true",
                   help="record per-layer alignment of mask states (accepted vs rejected) for methods with masks")
    p.add_argument("--warmup", type=int, default=1, help="untimed warm-up generations per method")
    p.add_argument("--repeats", type=int, default=1,
                   help="generations per question and method, interleaved; each keeps its run of median time")
    p.add_argument("--json", help="write the results (and per-question records) here")
    p.add_argument("--markdown", help="write the table as Markdown here")
    p.add_argument("--html", help="write a Plotly bar chart here")
    a = p.parse_args(argv)
    if a.per_category is not None and a.per_category < 1:
        fail("--per-category must be at least 1.")
    check_model_args(a)
    if a.html:
        require("plotly", "--html")
    if a.repeats < 1:
        fail("--repeats must be at least 1.")
    specs = [s.strip() for s in a.methods.split(",") if s.strip()]
    if len(set(specs)) != len(specs):
        fail(f"--methods lists a method twice: {a.methods}")
    if "ar" not in specs:
        specs.insert(0, "ar")  # every speed-up and the lossless check are relative to ar
    drafters = {s: build(s, esp_defaults(a)) for s in specs}
    questions = load_questions(a.questions, a.per_category)

    from .models import load

    shard = start()
    try:
        lm = load(a.model, device=shard.device(), dtype=a.dtype, gpus=shard.gpus() if a.device_map == "auto" else None)
        done = run_share(lm, drafters, questions, shard, a)
        parts = shard.gather(done)
    finally:
        shard.close()
    if shard.main:
        report(a, lm.name, questions, drafters, parts, dtype_name(lm.dtype))
    shard.leave()


if __name__ == "__main__":
    run_main(main)

"""`python -m esp.bench`: the Spec-Bench protocol for every method through one engine.

Every turn of each question in one conversation (`--turns first`: the first alone), the model's chat
template with the generation prompt, greedy decoding; the second turn's prompt holds the method's own
first answer, as Spec-Bench's eval.py keeps it. tau = all generated tokens / all target forwards
(prefill counted, every turn); speed-up = mean over questions of the method's tokens/s (all turns) over
the mean of `ar` (Spec-Bench's ratio of means); lossless = no question's output is a failure against
ar's under esp.bench.verdict (exact, or a flip at a rounding near-tie in bf16 / fp16). `--answers DIR` writes
Spec-Bench's answer files there a question at a time, and a run started again resumes (esp.bench.answers).

Protocol (`--protocol`, or a method's own `start=`): cold builds a fresh drafter for every generation, so
nothing learnt on one question reaches the next (what a caller with one prompt gets); hot keeps one
drafter per method across all questions (as the Token Recycling authors evaluate) and passes start=hot to
the methods that take it. Oracle (esp.bench.oracle): every step's cheapest feed for the same tokens with the
same drafts, priced like `ar`'s feed on this machine's measured cost curve; the fraction is the measured
speed-up over the oracle's. `--reference` adds transformers' own greedy `model.generate()` as a timed row.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import esp.bench.batch as batch
import esp.bench.lens as lens
import esp.bench.nodes as nodes
from esp.bench.answers import RunFolder, answer_line, answer_text, model_slug
from esp.bench.commands import listing
from esp.cli import add_esp_args, add_model_args, check_model_args, esp_defaults, fail, load_model, require
from esp.budget.cost import SWEEP_REPEATS, CostCurve, curve_for, curve_of
from esp.decoding.drafter import Drafter
from esp.decoding.engine import Decoder, Generation
from esp.decoding.layout import BUILDERS
from esp.errors import ESPError
from esp.methods import build, parse
from esp.models.timing import GRID, samples
from esp.bench.oracle import feeds, oracle_width, price
from esp.bench.provenance import note_kernels, provenance
from esp.bench.questions import load_questions
from esp.bench.shard import Shard, start
from esp.decoding.timer import Phases
from esp.decoding.verify import ranked
from esp.trace import StepTrace, acceptance, pooled_acceptance
from esp.bench.verdict import EXACT, FAILURE, NEAR_TIE, Verdict, classify, dtype_name, tally

COLD, HOT = "cold", "hot"
ALL, FIRST = "all", "first"  # --turns
TURNS = {ALL: "every turn", FIRST: "first turn only"}
PROTOCOLS = {COLD: "a fresh drafter for every question", HOT: "one drafter per method kept across questions"}
GENERATE = "generate"  # the reference row: transformers' own greedy model.generate()
ORACLE_NOTE = ("Oracle: each step fed only the root, the accepted path and the masks on its last node, with the "
               "drafts the method proposed, priced on this machine's measured cost curve (padded to a wider block "
               "where the curve makes that cheaper) against ar's one row a step priced alike; the fraction is the "
               "measured speed-up over the oracle's. The curve pools paired timings taken before the questions and "
               "after each one. Flat curve (rows free): every decoding step costs t(1).")


def aggregate(rows: list[dict], methods: list[str], dtype: str = "float32") -> dict:
    """Per-question records -> the contract's results dict; `dtype` is the run's (its rounding sets what
    counts as a near-tie). Records priced on the cost curve add the oracle figures (`limit`), and a
    `generate` reference row adds every method's speed-up against it."""
    by = defaultdict(list)
    for r in rows:
        by[r["method"]].append(r)
    ar = {r["qid"]: r for r in by["ar"]}

    def stats(rs: list[dict], cat: str | None = None) -> dict:
        pick = lambda m: [r for r in by[m] if cat is None or r["category"] == cat]  # noqa: E731
        tps = mean_tps(rs)
        base_tps = mean_tps(pick("ar"))
        out = {"tau": sum(r["n_tokens"] for r in rs) / sum(r["forwards"] for r in rs),
               "tokens_per_s": tps, "speedup": tps / base_tps if base_tps else 0.0, "n": len(rs)}
        if by[GENERATE]:
            gen_tps = mean_tps(pick(GENERATE))
            out["speedup_vs_generate"] = tps / gen_tps if gen_tps else 0.0
        return {**out, **limit(rs, pick("ar"), out["speedup"])}

    results = {}
    for m in methods:
        rs = by[m]
        overall = stats(rs)
        cats = {}
        for cat in dict.fromkeys(r["category"] for r in rs):
            s = stats([r for r in rs if r["category"] == cat], cat)
            cats[cat] = {k: v for k, v in s.items() if k != "tokens_per_s"}
        verdict = tally([against(ar.get(r["qid"]), r, dtype) for r in rs])
        results[m] = {**{k: v for k, v in overall.items() if k != "n"},
                      "lossless": verdict["failure"] == 0, "verdict": verdict, "per_category": cats}
        if "oracle_speedup" in overall:
            results[m]["per_question"] = [one for r in rs if (one := question_limit(r, ar.get(r["qid"])))]
        gap = alignment_gap(rs)
        if gap:
            results[m]["alignment"] = gap
        counted = [r["speculative_decoding"] for r in rs if "speculative_decoding" in r]
        if counted:
            results[m]["speculative_decoding"] = pooled_acceptance(counted)
        ranks = lens.pooled(rs)
        if ranks:
            results[m]["lens"] = ranks
    return results


def question_limit(r: dict, base: dict | None) -> dict | None:
    """One question's measured speed-up, oracle speed-up and fraction reached (None without its ar run)."""
    if base is None or not base["tokens_per_s"]:
        return None
    speedup = r["tokens_per_s"] / base["tokens_per_s"]
    got = limit([r], [base], speedup)
    return {"qid": r["qid"], "category": r["category"], "speedup": speedup,
            **{k: got[k] for k in ("oracle_speedup", "fraction", "flat_speedup")}} if got else None


def mean_tps(rs: list[dict], priced: str | None = None) -> float:
    """Mean over questions of tokens per second: measured, or with the seconds a curve gave under key
    `priced` (0 for no records)."""
    if not rs:
        return 0.0
    return sum(r["tokens_per_s"] if priced is None else r["n_tokens"] / r[priced] for r in rs) / len(rs)


def limit(rs: list[dict], base: list[dict], speedup: float) -> dict:
    """The oracle figures of records priced on the cost curve (empty when some are not): the oracle
    speed-up (the method's oracle feed over `ar`'s, which is ar's own feed unless a noisy curve makes a
    wider row cheaper than one), the method's own feed over `ar`'s (drafting for free), the flat curve
    (rows free), and the measured speed-up's fraction of the oracle's."""
    if not rs or not base or not all("oracle_s" in r for r in rs + base):
        return {}
    oracle = mean_tps(rs, "oracle_s") / mean_tps(base, "oracle_s")
    return {"oracle_speedup": oracle, "fraction": speedup / oracle,
            "curve_speedup": mean_tps(rs, "fed_s") / mean_tps(base, "fed_s"),
            "flat_speedup": mean_tps(rs, "flat_s") / mean_tps(base, "flat_s"),
            "width_mean": sum(r["width_mean"] for r in rs) / len(rs),
            "oracle_width_mean": sum(r["oracle_width_mean"] for r in rs) / len(rs)}


def against(base: dict | None, r: dict, dtype: str):
    """The verdict of record `r` against the `ar` record of its question (a failure when there is none)."""
    if base is None:
        return Verdict(FAILURE, reason="no ar run of this question to compare with")
    return classify(base["tokens"], base.get("top2"), r["tokens"], r.get("top2"), dtype)


# Rows of the table that only some runs have: (label, the results key that must be there, its cell).
EXTRA_ROWS = (
    ("speed-up vs generate()", "speedup_vs_generate", lambda r: f"{r['speedup_vs_generate']:.2f}x"),
    ("oracle speed-up (fraction reached)", "oracle_speedup", lambda r: f"{r['oracle_speedup']:.2f}x ({r['fraction']:.0%})"),
    ("its widths, drafting free", "curve_speedup", lambda r: f"{r['curve_speedup']:.2f}x"),
    ("mean width: fed / oracle", "oracle_width_mean", lambda r: f"{r['width_mean']:.1f} / {r['oracle_width_mean']:.1f}"),
    ("flat curve (rows free)", "flat_speedup", lambda r: f"{r['flat_speedup']:.2f}x"),
)


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
    for label, key, fmt in EXTRA_ROWS:
        if any(key in r for r in results.values()):
            body.append([label] + [fmt(results[m]) if key in results[m] else "-" for m in methods])
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


@dataclass
class Turn:
    """One turn's generation: its tokens and text, seconds, and the engine's run (None for transformers'
    generate(), which makes one forward a token)."""

    tokens: list[int]
    top2: list
    seconds: float
    text: str
    run: Generation | None = None

    @property
    def accept(self) -> list[int]:
        """Tokens each target forward emitted, the prefill first (Spec-Bench's accept_lengths)."""
        return [len(s.emitted) for s in self.run.steps] if self.run else [1] * len(self.tokens)

    def answer(self) -> dict:
        return {"text": self.text, "tokens": len(self.tokens), "seconds": self.seconds, "accept": self.accept}

    @classmethod
    def of(cls, lm, g: Generation) -> "Turn":
        """The turn an engine run made."""
        return cls(g.tokens, [t for s in g.steps for t in s.top2], g.summary.seconds,
                   answer_text(lm.tokenizer, g.tokens, lm.eos_ids), g)


def converse(lm, turns: list[str], one: Callable[[list[int]], Turn]) -> list[Turn]:
    """Every turn of a question in one conversation: each prompt holds the earlier turns and the answers
    given to them (the answer's text as Spec-Bench keeps it)."""
    messages, out = [], []
    for text in turns:
        messages.append({"role": "user", "content": text})
        out.append(one(lm.conversation_ids(messages)))
        messages.append({"role": "assistant", "content": out[-1].text})
    return out


def engine_turn(lm, drafter: Drafter, ids: list[int], a: argparse.Namespace, builder: str = BUILDERS[0]) -> Turn:
    """One turn through the engine, timed as a whole (no per-phase syncs: one sync at each end), its block masks
    made by `builder` (esp.decoding.layout)."""
    return Turn.of(lm, Decoder(lm, drafter, max_new_tokens=a.max_new_tokens, layouts=builder, trace_mask=False,
                               align=a.align, timings=False, lens=a.lens).generate(ids))


def generate_turn(lm, ids: list[int], max_new_tokens: int) -> Turn:
    """One turn through transformers' model.generate (the reference row)."""
    tokens, top2, seconds = reference(lm, ids, max_new_tokens)
    return Turn(tokens, top2, seconds, answer_text(lm.tokenizer, tokens, lm.eos_ids))


def record(q: dict, method: str, turns: list[Turn], align: bool, by_position: bool = False,
           lensed: bool = False) -> dict:
    """One question's result for one method, all its turns pooled: the only place records are built. An
    engine run keeps its steps' `feeds` (as fed, as the oracle would feed, on the flat curve), priced once the
    run's curve is known (`priced`). `by_position` keeps every decoding step's [answer position, tokens
    emitted, seconds, host seconds]."""
    tokens = [x for turn in turns for x in turn.tokens]
    seconds = sum(turn.seconds for turn in turns)
    r = {"qid": q.get("question_id"), "category": q["category"], "method": method, "tokens": tokens,
         "n_tokens": len(tokens), "forwards": sum(len(turn.accept) for turn in turns), "seconds": seconds,
         "tokens_per_s": len(tokens) / seconds if seconds > 0 else 0.0, "top2": [x for turn in turns for x in turn.top2],
         "turn_tokens": [len(turn.tokens) for turn in turns]}
    if any(turn.run is None for turn in turns):
        return r
    steps = [s for turn in turns for s in turn.run.steps]
    r.update(widths(steps))
    r["speculative_decoding"] = acceptance(steps)
    r["nodes"] = nodes.kinds(steps)
    if align:
        r["align"] = alignment_sums(steps)
        r["align_masks"] = alignment_masks(steps)
    if lensed:
        r["lens"] = lens.lens_ranks(steps)
    drafted = [s for s in steps if not s.prefill] or steps
    r.update(feeds=feeds(steps), oracle_width_mean=sum(map(oracle_width, drafted)) / len(drafted))
    if by_position:
        r["steps"] = [row for turn in turns for row in position_rows(turn.run.steps)]
    return r


def priced(rows: list[dict], curve: CostCurve) -> None:
    """Every engine record of `rows` priced on `curve` (in place): as fed, as the oracle feed, on the flat curve."""
    for r in rows:
        if "feeds" in r:
            got = price(r["feeds"], curve.predict, max(curve.q))
            r.update(fed_s=got.fed_s, oracle_s=got.oracle_s, flat_s=got.flat_s)


def pooled(rounds: list[dict[int, list[tuple[float, float]]]]) -> CostCurve:
    """The curve of every round of paired timings (`samples`) pooled per width."""
    return curve_of({q: [x for got in rounds for x in got[q]] for q in rounds[0]})[0]


def position_rows(steps: list[StepTrace]) -> list[list]:
    """[tokens of the answer before the step, tokens it emitted, its seconds, its host seconds (all but
    the forward)] of every decoding step after the prefill. With timings off the phase times are when
    the host queued the work: exact on a CPU, the host's share alone on a GPU."""
    out, pos = [], 0
    for s in steps:
        if not s.prefill:
            total = s.timings.get("total", 0.0)
            out.append([pos, len(s.emitted), total, total - s.timings.get("forward", 0.0)])
        pos += len(s.emitted)
    return out


BUCKET = 128  # answer positions per row of the position table


def position_table(rows: list[dict], methods: list[str]) -> str:
    """Markdown: per bucket of answer positions, every method's tau over its decoding steps there, the
    seconds per step and the host's milliseconds per step (records made with by_position)."""
    steps = {m: [x for r in rows if r["method"] == m for x in r.get("steps", [])] for m in methods}
    steps = {m: v for m, v in steps.items() if v}
    if not steps:
        return ""
    top = max(x[0] for v in steps.values() for x in v) // BUCKET + 1
    head = "| positions | " + " | ".join(f"{m}: tau / s per step / host ms" for m in steps) + " |"
    lines = [head, "|" + "---|" * (len(steps) + 1)]
    for b in range(top):
        cells = []
        for v in steps.values():
            got = [x for x in v if b * BUCKET <= x[0] < (b + 1) * BUCKET]
            cells.append(f"{sum(x[1] for x in got) / len(got):.2f} / {sum(x[2] for x in got) / len(got):.4f} / "
                         f"{1000 * sum(x[3] for x in got) / len(got):.1f} ({len(got)})" if got else "-")
        lines.append(f"| {b * BUCKET}-{(b + 1) * BUCKET} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def alignment_sums(steps: list[StepTrace]) -> dict:
    """Per-layer sums of the mean-centred mask/real cosines, accepted and rejected apart (sums, so that
    questions pool exactly)."""
    out = {"accepted_sum": None, "accepted_n": 0, "rejected_sum": None, "rejected_n": 0}
    for st in steps:
        for al in st.alignment or []:
            key = "accepted" if al.accepted else "rejected"
            prev = out[f"{key}_sum"]
            out[f"{key}_sum"] = list(al.cos) if prev is None else [x + y for x, y in zip(prev, al.cos)]
            out[f"{key}_n"] += 1
    return out


def alignment_masks(steps: list[StepTrace]) -> dict[str, list[list[list[float]]]]:
    """Per resolved mask, its per-layer [mean-centred, raw] cosines to the real token (4 decimals), accepted and
    rejected apart: what a band over masks needs (the sums above give the means alone)."""
    out: dict[str, list] = {"accepted": [], "rejected": []}
    for st in steps:
        for al in st.alignment or []:
            out["accepted" if al.accepted else "rejected"].append(
                [[round(c, 4) for c in al.cos], [round(c, 4) for c in al.cos_raw]])
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


def widths(steps: list[StepTrace]) -> dict:
    """Block rows fed per step after the prefill: their mean and a summary of their spread."""
    w = sorted(len(s.positions) for s in steps if not s.prefill) or [1]
    pick = lambda f: w[min(len(w) - 1, int(f * len(w)))]
    return {"width_mean": sum(w) / len(w), "width": {"min": w[0], "median": pick(0.5), "p90": pick(0.9), "max": w[-1]}}


def reference(lm, ids: list[int], max_new_tokens: int) -> tuple[list[int], list[list], float]:
    """transformers' own greedy decoding, the ground truth for losslessness: its tokens, per token the
    best [id1, logit1, id2, logit2, ...] of the logits that chose it, its choice first (for esp.bench.verdict), and the seconds of the
    `generate` call alone (a device sync at each end)."""
    import torch

    clock = Phases(lm.device)
    t0 = clock.now()
    out = lm.model.generate(torch.tensor([ids], device=lm.device), max_new_tokens=max_new_tokens, do_sample=False,
                            output_logits=True, return_dict_in_generate=True)
    seconds = clock.now() - t0
    return out.sequences[0, len(ids):].tolist(), ranked(torch.stack(out.logits)[:, 0]), seconds


def protocol_line(default: str, protocols: dict[str, str]) -> str:
    """One sentence: which protocol ran, and the methods whose own start= set the other."""
    other = [s for s, p in protocols.items() if p != default]
    return (f"Protocol: {default} ({PROTOCOLS.get(default, default)})"
            + (f"; {', '.join(other)} by their own start=" if other else "") + ".")


def protocol_of(spec: str, default: str) -> str:
    """A method's protocol: the start= its spec sets, else the run's --protocol."""
    return parse(split_builder(spec)[0])[1].get("start", default)


BUILDER = "builder="  # a bench setting of any method's spec: the mask builder of its decoder


def split_builder(spec: str) -> tuple[str, str]:
    """'esp:k=2:bc=60:builder=naive' -> ('esp:k=2:bc=60', 'naive'): the method's own spec and the mask builder
    its runs use (esp.decoding.layout; efficient unless the spec names one). The builder is the decoder's, not
    the drafter's, so the bench takes it off before the method is built."""
    parts = spec.split(":")
    named = [p[len(BUILDER):] for p in parts if p.startswith(BUILDER)]
    if len(named) > 1 or (named and named[0] not in BUILDERS):
        raise ESPError(f"{spec}: builder= takes one of {', '.join(BUILDERS)}, once.")
    return ":".join(p for p in parts if not p.startswith(BUILDER)), named[0] if named else BUILDERS[0]


class Drafters:
    """Where a method's drafter for each generation comes from, as its protocol says. Cold: a fresh one
    every time. Hot: one per repeat, kept across the questions in order (so that no drafter sees a
    question twice), built with start=hot for the methods that take it. `builder`: the mask builder its
    decoder uses (a spec's `builder=`)."""

    def __init__(self, spec: str, defaults: dict, protocol: str, repeats: int):
        self.spec, self.builder = split_builder(spec)
        self.protocol, self.defaults = protocol, {**defaults, "start": protocol}
        self.kept = [self.fresh() for _ in range(repeats)] if protocol == HOT else None
        self.description = (self.kept[0] if self.kept else self.fresh()).describe() + (
            f", {self.builder} mask builder" if self.builder != BUILDERS[0] else "")

    def fresh(self) -> Drafter:
        return build(self.spec, self.defaults)

    def get(self, repeat: int) -> Drafter:
        return self.kept[repeat] if self.kept else self.fresh()


def turns_of(q: dict, which: str) -> list[str]:
    """The turns a question is asked in: all of them, or the first alone (`--turns first`)."""
    return q["turns"] if which == ALL else q["turns"][:1]


def turned(names: list[str], rep: int) -> list[str]:
    """Round `rep`'s order: every method once, interleaved so that drift in machine speed hits them alike, each round
    starting one method later so that none always takes the same place (ar against a second ar, 13 development
    questions on the 2-core EPYC: the first took 0.99x the second's time in the median category with the order fixed,
    1.00x with it turning)."""
    j = rep % len(names)
    return names[j:] + names[:j]


def run_share(lm, drafters: dict[str, Drafters], questions: list[dict], shard: Shard, a: argparse.Namespace,
              rounds: list | None = None, folder: RunFolder | None = None,
              done: set[int] = frozenset()) -> list[tuple[int, list[dict], dict | None]]:
    """This process's questions not `done` yet: (question index, its records for every method, the verdict of ar
    against model.generate as a dict when --reference). `rounds` gets a round of paired timings (`samples`) after
    each question; a run `folder`, each question's answer lines and records as it ends."""
    from tqdm import tqdm

    mine = [i for i in shard.mine(len(questions)) if i not in done]
    names = list(drafters) + ([GENERATE] if a.reference else [])
    model_id = model_slug(lm.name)
    for s in names:
        # Warm-ups run on a drafter of their own, so a hot one starts the timed questions empty.
        d = None if s == GENERATE else drafters[s].fresh()
        for w in range(a.warmup if mine else 0):
            ids = lm.chat_ids(questions[mine[w % len(mine)]]["turns"][0])
            if d is None:
                reference(lm, ids, min(a.warmup_tokens, a.max_new_tokens))
            else:
                Decoder(lm, d, max_new_tokens=min(a.warmup_tokens, a.max_new_tokens), layouts=drafters[s].builder,
                        trace_mask=False, timings=False).generate(ids)
    out = []
    with tqdm(total=len(mine) * len(names) * a.repeats, desc="bench", unit="gen", file=sys.stderr, disable=not shard.main) as bar:
        for i in mine:
            q = questions[i]
            runs: dict[str, list[tuple[dict, list[Turn]]]] = {s: [] for s in names}
            for rep in range(a.repeats):
                for s in turned(names, rep):
                    if s == GENERATE:
                        turns = converse(lm, turns_of(q, a.turns), lambda ids: generate_turn(lm, ids, a.max_new_tokens))
                        runs[s].append((record(q, s, turns, False), turns))
                    else:
                        turns = converse(lm, turns_of(q, a.turns),
                                         lambda ids: engine_turn(lm, drafters[s].get(rep), ids, a, drafters[s].builder))
                        runs[s].append((record(q, s, turns, a.align, a.by_position, a.lens), turns))
                    bar.update()
            # The run of median time stands for the question (the tokens are the same in every run).
            kept = {s: sorted(rs, key=lambda x: x[0]["seconds"])[len(rs) // 2] for s, rs in runs.items()}
            rows = [r for r, _ in kept.values()]
            ref = None
            if a.reference:
                ar, gen = kept["ar"][0], kept[GENERATE][0]
                ref = classify(gen["tokens"], gen["top2"], ar["tokens"], ar["top2"], dtype_name(lm.dtype)).to_dict()
            if folder is not None:
                folder.write(i, q["question_id"], {s: answer_line(q, model_id, [t.answer() for t in turns])
                                                   for s, (_, turns) in kept.items()}, {"rows": rows, "ref": ref})
            out.append((i, rows, ref))
            if rounds is not None:
                rounds.append(samples(lm, GRID, repeats=1))
    return out


def report(a: argparse.Namespace, model: str, questions: list[dict], drafters: dict[str, Drafters], parts: list,
           dtype: str = "float32", curve: CostCurve | None = None, made: dict | None = None, rounds: int = 0) -> None:
    """Print the table of every rank's records and write the files that the arguments ask for; the JSON's meta
    holds `made` (esp.bench.provenance: machine, date, command)."""
    done = sorted((x for part in parts for x in part), key=lambda x: x[0])  # back in question order
    rows = [r for _, rs, _ in done for r in rs]
    refs = [(questions[i].get("question_id"), ref) for i, _, ref in done if ref is not None]
    mismatched = [qid for qid, ref in refs if ref["kind"] == FAILURE]
    results = aggregate(rows, list(drafters) + ([GENERATE] if a.reference else []), dtype)
    protocols = {s: d.protocol for s, d in drafters.items()}
    said = protocol_line(a.protocol, protocols)
    print(f"model {model} ({dtype}), {len(questions)} questions, {TURNS[a.turns]}, {a.max_new_tokens} new tokens "
          f"a turn, greedy; tau / speed-up")
    print(said)
    print(table(results))
    print(ORACLE_NOTE)
    by_position = position_table(rows, list(results)) if a.by_position else ""
    ranks = lens.table(results)
    if ranks:
        print(f"Mask Lens (raw logit lens), the real token's rank by layer:\n{ranks}")
    if by_position:
        print(f"By answer position (decoding steps after the prefill):\n{by_position}")
    kinds = Counter(ref["kind"] for _, ref in refs)
    if a.reference:
        print(f"ar against model.generate: {kinds[EXACT]} exact, {kinds[NEAR_TIE]} near-tie, {kinds[FAILURE]} failure"
              + (f" (failures: {mismatched})" if mismatched else ""))
    if a.json:
        meta = {"provenance": made, "model": model, "dtype": dtype, "reference_mismatches": mismatched if a.reference else None,
                "reference_verdicts": dict(refs) if a.reference else None,
                "methods": {**{s: d.description for s, d in drafters.items()},
                            **({GENERATE: "transformers model.generate(do_sample=False)"} if a.reference else {})},
                "protocol": a.protocol, "protocols": protocols, "oracle": ORACLE_NOTE,
                "curve": curve.to_dict() if curve else None, "oracle_curve": a.oracle_curve, "curve_rounds": rounds,
                "max_new_tokens": a.max_new_tokens, "turns": a.turns, "questions": len(questions), "repeats": a.repeats}
        Path(a.json).write_text(json.dumps({"results": results, "meta": meta, "records": rows}))
    if a.markdown:
        gaps = alignment_table(results)
        Path(a.markdown).write_text(table(results, markdown=True) + f"\n\n{said}\n\n{ORACLE_NOTE}\n"
                                    + (f"\nAlignment gap by layer (accepted - rejected, mean-centred cosine)\n\n{gaps}\n" if gaps else "")
                                    + (f"\nMask Lens (raw logit lens), the real token's rank by layer\n\n{ranks}\n" if ranks else "")
                                    + (f"\nBy answer position (decoding steps after the prefill)\n\n{by_position}\n" if by_position else ""))
    if a.html:
        chart(results, a.html)


def main(argv: list[str] | None = None) -> None:
    a = parser().parse_args(argv)
    made = provenance(argv)
    specs, drafters, questions = _checked(a)
    if a.batch is not None:
        _throughput(a, specs, questions, made)
    else:
        _bench(a, specs, drafters, questions, made)


def parser() -> argparse.ArgumentParser:
    """The bench's command line."""
    p = argparse.ArgumentParser(prog="python -m esp.bench", description=__doc__, epilog=listing(),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--questions", required=True, help="Spec-Bench question.jsonl")
    p.add_argument("--methods", default="ar,esp",
                   help="comma list of methods, each with optional settings: ar,pld,stand,lade:n=5:w=7:g=7,esp:k=2:bc=30; "
                        "builder=naive on any of them builds its block masks the naive way (the paper's ablation)")
    p.add_argument("--per-category", type=int, default=None, help="first N questions of each category")
    p.add_argument("--ids", help="only the questions with these question_ids, comma-separated (e.g. 81,121)")
    add_model_args(p)
    add_esp_args(p)
    p.add_argument("--reference", action="store_true",
                   help="also time transformers' model.generate(do_sample=False) as a row, report every speed-up "
                        "against it too, and check that ar's tokens equal its")
    p.add_argument("--protocol", choices=list(PROTOCOLS), default=COLD,
                   help="cold: a fresh drafter for every question; hot: one per method kept across questions, "
                        "with start=hot for the methods that take it (a method's own start= wins)")
    p.add_argument("--device-map", choices=["auto"], default=None,
                   help="spread the model over the visible GPUs (under torchrun: over this process's share of them)")
    p.add_argument("--align", action="store_true",
                   help="record per-layer alignment of mask states (accepted vs rejected) for methods with masks")
    p.add_argument("--lens", action="store_true",
                   help="record the Mask Lens (raw logit lens of every mask at every layer) and report, per layer, the "
                        "rank of the real token for accepted against rejected masks (slower: off for timing runs)")
    p.add_argument("--oracle-curve", choices=["prior", "sweep"], default="sweep",
                   help="the cost curve the oracle and every feed are priced on: sweep (the default), this machine's "
                        "curve timed in rounds of paired forwards before the questions and after each one, pooled "
                        "(seconds a round on a CPU, kept for pricing only: the drafters still start from their prior); "
                        "prior, the one bc=auto drafters start from (a stored curve, else a default shape: another "
                        "machine's guess, which misprices the oracle)")
    p.add_argument("--warmup", type=int, default=1, help="untimed warm-up generations per method")
    p.add_argument("--warmup-tokens", type=int, default=32,
                   help="new tokens of each warm-up generation (at most --max-new-tokens)")
    p.add_argument("--repeats", type=int, default=1,
                   help="generations per question and method, interleaved; each keeps its run of median time")
    p.add_argument("--turns", choices=list(TURNS), default=ALL,
                   help="all: every turn of a question in one conversation (the second prompt holds the first "
                        "answer), as Spec-Bench runs it; first: the first turn alone (quick runs)")
    p.add_argument("--answers", metavar="DIR",
                   help="write Spec-Bench's answer file per method, DIR/<model>-<method>.jsonl, a question at a time; "
                        "a run started again with the same arguments resumes there")
    p.add_argument("--by-position", action="store_true",
                   help="also report tau and seconds per step by answer position (buckets of 128 tokens)")
    add_batch_args(p)
    return p


def add_batch_args(p: argparse.ArgumentParser) -> None:
    """The throughput options (--batch, --rounds, --static) and where the results go."""
    p.add_argument("--batch", metavar="B[,B...]",
                   help="throughput instead: the questions' first turns B at a time, in question order, every method "
                        "beside transformers' batched generate() at the same B (e.g. 1,4,16); tau stays per row")
    p.add_argument("--rounds", type=int, default=batch.ROUNDS,
                   help="with --batch: rounds over every prompt per batch size, interleaved ABBA with generate(); the "
                        f"table and the JSON give the median ratio and its range over rounds (default {batch.ROUNDS})")
    p.add_argument("--static", action="store_true",
                   help="with --batch: the engine gets generate()'s static batches of B, each run to its end, as "
                        "esp.decode and custom_generate take a batch (default: B prompts in flight, the next "
                        "joining as a row ends)")
    p.add_argument("--json", help="write the results (and per-question records) here")
    p.add_argument("--markdown", help="write the table as Markdown here")
    p.add_argument("--html", help="write a Plotly bar chart here")


def _checked(a: argparse.Namespace) -> tuple[list[str], dict[str, "Drafters"], list[dict]]:
    """The methods (ar first), their drafters and the questions the arguments ask for; a bad argument exits
    with one line."""
    if a.per_category is not None and a.per_category < 1:
        fail("--per-category must be at least 1.")
    check_model_args(a)
    if a.html:
        require("plotly", "--html")
    if a.repeats < 1:
        fail("--repeats must be at least 1.")
    if a.warmup_tokens < 1:
        fail("--warmup-tokens must be at least 1.")
    if a.rounds < 1:
        fail("--rounds must be at least 1.")
    specs = [s.strip() for s in a.methods.split(",") if s.strip()]
    if len(set(specs)) != len(specs):
        fail(f"--methods lists a method twice: {a.methods}")
    if "ar" not in specs:
        specs.insert(0, "ar")  # every speed-up and the lossless check are relative to ar
    drafters = {s: Drafters(s, esp_defaults(a), protocol_of(s, a.protocol), a.repeats) for s in specs}
    try:
        ids = None if a.ids is None else [int(x) for x in a.ids.split(",") if x.strip()]
    except ValueError:
        fail(f"--ids takes question ids separated by commas, not {a.ids!r}.")
    questions = load_questions(a.questions, a.per_category, ids)
    if a.answers and any("question_id" not in q for q in questions):
        fail(f"--answers needs a question_id on every question of {a.questions}.")
    return specs, drafters, questions


def _throughput(a: argparse.Namespace, specs: list[str], questions: list[dict], made: dict) -> None:
    """`--batch`: the questions' first turns B at a time, every method beside batched generate()."""
    try:
        sizes = batch.parse_batches(a.batch)
    except ValueError as e:
        fail(str(e))
    lm = load_model(a)
    note_kernels(made, lm)
    prompts = [lm.chat_ids(q["turns"][0]) for q in questions]
    runs = batch.report(lm, prompts, specs, sizes, a.max_new_tokens, a.json, {"provenance": made, "questions": a.questions},
                        rounds=a.rounds, static=a.static)
    if a.markdown:
        Path(a.markdown).write_text(batch.table(runs) + "\n")


def _bench(a: argparse.Namespace, specs: list[str], drafters: dict[str, "Drafters"], questions: list[dict],
           made: dict) -> None:
    """The Spec-Bench protocol on this process's share of the questions; the main process reports."""
    shard = start()
    try:
        lm = load_model(a, device=shard.device(), gpus=shard.gpus() if a.device_map == "auto" else None)
        note_kernels(made, lm)
        folder = before = None
        if a.answers:
            names = specs + ([GENERATE] if a.reference else [])
            folder = RunFolder(a.answers, model_slug(lm.name), names, run_arguments(a), shard.rank, shard.world)
            before = folder.open()
        # Every feed and the oracle are priced on this machine's curve as the run finds it: paired timings taken
        # before the questions and after each one, every rank's pooled. A one-row forward's time moves with the
        # moment (on the 2-core EPYC, 19-28 ms as other tenants' memory traffic comes and goes) while a wide one's
        # holds, so one sweep's ratios are its moment's: three runs of one engine read 86%, 87% and 92% of an
        # oracle priced on a sweep before each (docs/history.md). Or (asked for) on the prior bc=auto drafters start
        # from, copied so that their online corrections do not move it; a prior that is only a shipped shape prices
        # the oracle on another machine's curve (on the AVX512 EPYC it put 4-8 rows at 1.4-1.45 plain steps where this
        # machine's forwards take 1.67).
        # Rank 0 alone times the rounds before the questions (a sweep's worth), so that a run pools as many rounds
        # however it is split; one more after each question.
        sweeping = a.oracle_curve == "sweep"
        rounds = ([samples(lm, GRID, repeats=SWEEP_REPEATS)] if shard.main else []) if sweeping else None
        done = run_share(lm, drafters, questions, shard, a, rounds, folder, set(before or ()))
        parts = shard.gather((done, rounds))
    finally:
        shard.close()
    if shard.main:
        rounds = [got for _, rs in parts for got in rs or ()]
        parts = [done for done, _ in parts]
        if before:  # questions an earlier run finished, as it recorded them (a rank may have been quicker)
            ran = {i for part in parts for i, _, _ in part}
            parts.append([(i, r["rows"], r["ref"]) for i, r in before.items() if i not in ran])
        if folder is not None:
            folder.merge({q["question_id"]: i for i, q in enumerate(questions)})
        curve = pooled(rounds) if rounds else CostCurve.from_dict(curve_for(lm).to_dict())
        priced([r for part in parts for _, rs, _ in part for r in rs], curve)
        report(a, lm.name, questions, drafters, parts, dtype_name(lm.dtype), curve, made, len(rounds))
    shard.leave()


OUTPUTS = ("json", "markdown", "html", "answers")  # where results go; the run folder's arguments leave them out


def run_arguments(a: argparse.Namespace) -> dict:
    """What a run folder's arguments must match to resume: every argument but the outputs, the questions
    file by its content (so that a path written another way is the same file)."""
    out = {k: v for k, v in vars(a).items() if k not in OUTPUTS}
    out["questions"] = hashlib.sha256(Path(a.questions).read_bytes()).hexdigest()
    return out

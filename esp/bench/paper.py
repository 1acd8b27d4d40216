"""`python -m esp.bench paper`: the paper's ablations (arXiv 2603.17942, its ablation table and alignment figure)
read from two bench runs per model, a timed one over every arm and an untimed one with `--align --lens`.

    python -m esp.bench paper --methods            # the arms, as the bench's --methods (--methods align: the lens run's)
    python -m esp.bench paper TIMED.json ALIGN.json   # one model's tables, as BENCHMARKS.md shows them

Every arm changes one thing of the base arm, the paper's full method in its ablation table: mean initialisation,
lambda 0.1, k = 2 at BC = 60 with its static shape [15, 4] (its "Mean" row equals its "2 mask tokens [15,4]" row).
Each arm's difference from the base is paired by question (esp.bench.paired): "equal" when the 95% interval holds
zero. The explanations are measured on the same runs: where each tree spends its nodes and how often each kind is
accepted (esp.bench.nodes), the masks' alignment and Mask Lens layer by layer (esp.bench.lens), and how much of the
accepted / rejected gap is already there at layer 0, where a step's masks are one embedding (easy tokens).
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from esp.bench import nodes, paired
from esp.bench.paired import BETTER, EQUAL, WORSE, Paired
from esp.bench.run import split_builder
from esp.bench.tables import markdown, speedup, tau
from esp.drafters.esp import ESPConfig
from esp.methods import parse

BASE = "esp:k=2:bc=60"
# The paper's alignment figure (LLaMA-3 on Dolly): accepted masks' cosine to the real token rises from layer 15 of 32
# to about 0.45, rejected ones stay near 0.35.
PAPER_PART, PAPER_LAYERS, PAPER_COS = 15, 32, (0.45, 0.35)
INIT_NAMES = {"mean": "mean", "sample": "sampled", "lastk": "last-k"}


@dataclass(frozen=True)
class Arm:
    """One row of the ablation: the part of the method it changes, and its bench spec."""

    group: str
    spec: str

    @property
    def config(self) -> ESPConfig:
        return ESPConfig(**parse(split_builder(self.spec)[0])[1])

    @property
    def label(self) -> str:
        """What the arm is, from its own settings: 'k=1, BC 60, static [29]'."""
        c, builder = self.config, split_builder(self.spec)[1]
        tree = f"dynamic, {c.n_nodes} nodes" if c.tree == "dynamic" else f"static {c.static_shape}"
        shape = f"k={c.k}, BC {c.bc}, {tree}"
        return {"base": f"base: mean, λ 0.1, {shape}", "init": f"init {INIT_NAMES[c.init]}",
                "lambda": f"λ {c.lam:g}" + (" (no EMA)" if c.lam == 0 else ""),
                "builder": f"{builder} mask builder"}.get(self.group, shape)


ARMS = (
    Arm("base", BASE),
    *(Arm("init", f"{BASE}:init={i}") for i in ("sample", "lastk")),
    *(Arm("lambda", f"{BASE}:lam={x}") for x in ("0", "0.05", "0.2")),
    *(Arm("k", f"esp:k={k}:bc={bc}") for bc in (60, 30) for k in (1, 2, 3, 4) if (k, bc) != (2, 60)),
    *(Arm("k", f"esp:k={k}:bc=10") for k in (1, 2)),
    *(Arm("tree", f"esp:k=2:bc={bc}:tree=dynamic") for bc in (10, 30, 60)),
    Arm("builder", f"{BASE}:builder=naive"),
)
ALIGN = (BASE, f"{BASE}:lam=0", f"{BASE}:init=sample", f"{BASE}:init=lastk")  # the --align --lens run's arms
BY_SPEC = {a.spec: a for a in ARMS}


def methods(which: str = "timed") -> str:
    """The bench's --methods for the timed run (`ar` and every arm) or the lens run."""
    return ",".join(["ar", *(a.spec for a in ARMS)] if which == "timed" else ALIGN)


def paired_to_base(run: dict, spec: str) -> tuple[Paired, Paired] | None:
    """(tau, time) of `spec` against the base arm, question by question; None for the base itself."""
    return None if spec == BASE else paired.paired(run["records"], spec, BASE)


def static_at(run: dict, bc: int) -> list[str]:
    """The static shapes the run has at budget `bc` (the k arms and the base: default init, lambda, builder)."""
    return [a.spec for a in ARMS if a.group in ("base", "k") and a.config.bc == bc and a.spec in run["results"]]


def best_static(run: dict, bc: int) -> str:
    """The static arm of highest tau at `bc` (chosen on these questions, as the paper's 'best static shape')."""
    return max(static_at(run, bc), key=lambda s: run["results"][s]["tau"])


# ------------------------------------------------------------------ the masks, layer by layer

def quartiles(xs: list[float]) -> tuple[float, float, float]:
    """(Q1, median, Q3); a single value is all three."""
    if len(xs) < 2:
        return (xs[0],) * 3
    q1, q2, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    return q1, q2, q3


def masks(run: dict, spec: str) -> dict[str, dict[str, list[list[float]]]]:
    """Per kind (accepted, rejected), per measure (cos: mean-centred, raw, rank: the Mask Lens rank of the real
    token), every resolved mask's per-layer values, pooled over the run's questions."""
    out = {k: {"cos": [], "raw": [], "rank": []} for k in ("accepted", "rejected")}
    for r in run["records"]:
        if r["method"] != spec:
            continue
        for kind, got in out.items():
            for cen, raw in r.get("align_masks", {}).get(kind, []):
                got["cos"].append(cen)
                got["raw"].append(raw)
            got["rank"] += r.get("lens", {}).get(kind, [])
    return out


def bands(groups: dict) -> dict[str, dict[str, list[tuple[float, float, float]]]]:
    """Per kind and measure, per layer: (Q1, median, Q3) over masks."""
    return {kind: {m: [quartiles(list(col)) for col in zip(*rows)] for m, rows in got.items() if rows}
            for kind, got in groups.items()}


def parting(b: dict, measure: str) -> int | None:
    """The first layer from which, at every deeper layer, the accepted masks' median lies outside the rejected
    masks' interquartile range on the better side (higher cosine, lower rank); None if the groups never part."""
    acc, rej = b["accepted"][measure], b["rejected"][measure]
    apart = [a[1] > r[2] if measure != "rank" else a[1] < r[0] for a, r in zip(acc, rej)]
    if not apart[-1]:
        return None
    first = len(apart) - 1
    while first > 0 and apart[first - 1]:
        first -= 1
    return first


def matched_gap(groups: dict, layer: int, strata: int = 8) -> tuple[float, float]:
    """(raw, matched): how many times the rejected masks' median Mask Lens rank of the real token exceeds the
    accepted masks' at `layer`, over all masks, and within strata of the real token's rank at layer 0 (where a
    step's masks are one embedding, so that rank says how easy the token is, not how aligned the mask is): a
    geometric mean of the strata's ratios weighted by their accepted masks."""
    acc, rej = groups["accepted"]["rank"], groups["rejected"]["rank"]
    ratio = lambda a, r: statistics.median(x[layer] for x in r) / statistics.median(x[layer] for x in a)  # noqa: E731
    cuts = statistics.quantiles([m[0] for m in acc + rej], n=strata, method="inclusive")
    stratum = lambda m: sum(m[0] > c for c in cuts)  # noqa: E731
    logs, weights = [], []
    for s in range(strata):
        a, r = [m for m in acc if stratum(m) == s], [m for m in rej if stratum(m) == s]
        if a and r:
            logs.append(math.log(ratio(a, r)))
            weights.append(len(a))
    matched = math.exp(sum(x * w for x, w in zip(logs, weights)) / sum(weights)) if weights else float("nan")
    return ratio(acc, rej), matched


def top5(groups: dict, layer: int) -> float:
    """The share of all masks (accepted and rejected) whose real token is in the lens's top 5 at `layer`."""
    ranks = [m[layer] for kind in groups.values() for m in kind["rank"]]
    return sum(x <= 5 for x in ranks) / len(ranks)


def at_depth(n_layers: int, eighth: int) -> int:
    """The layer at `eighth`/8 of a model's depth (0 = embeddings, n_layers - 1 = output)."""
    return round(eighth * (n_layers - 1) / 8)


# ------------------------------------------------------------------ the tables

def _cell(run: dict, spec: str) -> tuple[str, str]:
    """(tau with its paired difference from the base, x ar with its paired time ratio to the base)."""
    r = run["results"].get(spec)
    if r is None:
        return "", ""
    got = paired_to_base(run, spec)
    x_ar = speedup(r["speedup"], r["tau"])
    if got is None:
        return f"{tau(r['tau'])} (base)", f"{x_ar} (base)"
    return f"{tau(r['tau'])}, {paired.difference(got[0])}", f"{x_ar}, {paired.ratio(got[1])}"


def arms_table(models: list[tuple[str, dict]]) -> str:
    """A row per arm: per model, tau and its paired difference from the base arm (95% CI, over questions), and
    the speed-up over `ar` with the arm's paired time ratio to the base."""
    head = ["arm"] + [h for label, _ in models for h in (f"{label}: tau, − base [95% CI]", "x `ar`, time / base")]
    rows = [[BY_SPEC[s].label] + [c for _, run in models for c in _cell(run, s)] for s in BY_SPEC]
    return markdown(head, rows)


def alignment_table(models: list[tuple[str, dict]]) -> str:
    """Per eighth of each model's depth: the mean-centred cosine of each mask's state to the real token's and the
    real token's Mask Lens rank, accepted / rejected masks, medians with interquartile ranges."""
    head = ["depth"] + [h for label, _ in models for h in (f"{label}: cosine, accepted / rejected", "lens rank")]
    got = [bands(masks(run, BASE)) for _, run in models]
    rows = []
    for eighth in range(9):
        row = [{0: "0 (embeddings)", 8: "8/8 (output)"}.get(eighth, f"{eighth}/8")]
        for b in got:
            i = at_depth(len(b["accepted"]["cos"]), eighth)
            cos = [f"{q[1]:.2f} [{q[0]:.2f}, {q[2]:.2f}]" for q in (b["accepted"]["cos"][i], b["rejected"]["cos"][i])]
            rank = [f"{q[1]:.0f} [{q[0]:.0f}, {q[2]:.0f}]" for q in (b["accepted"]["rank"][i], b["rejected"]["rank"][i])]
            row += [f"L{i}: " + " / ".join(cos), " / ".join(rank)]
        rows.append(row)
    return markdown(head, rows)


# The paper's claims: (what it says, the arm, the base or the arm it is compared with, the words that uphold it).
CLAIMS = (
    ("mean init beats sampled masks", f"{BASE}:init=sample", BASE, {WORSE}),
    ("mean init beats last-k masks", f"{BASE}:init=lastk", BASE, {WORSE}),
    ("the EMA pays (λ 0.1 over λ 0)", f"{BASE}:lam=0", BASE, {WORSE}),
    ("k = 1 is as good as k = 2 (BC 60)", "esp:k=1:bc=60", BASE, {EQUAL, BETTER}),
    ("k = 3 drops (BC 60)", "esp:k=3:bc=60", BASE, {WORSE}),
    ("the dynamic tree matches the paper's best static shape, BC 30 ([7, 2])", "esp:k=2:bc=30:tree=dynamic",
     "esp:k=2:bc=30", {EQUAL, BETTER}),
    ("the dynamic tree matches the paper's best static shape, BC 60 ([15, 4])", "esp:k=2:bc=60:tree=dynamic", BASE,
     {EQUAL, BETTER}),
)


def claim(run: dict, arm: str, against: str, upheld: set[str]) -> tuple[bool, str] | None:
    """(whether the run upholds the claim, the tau difference arm - compared arm that decides it, paired by question
    with its 95% CI); None when the run lacks an arm."""
    if arm not in run["results"] or against not in run["results"]:
        return None
    d = paired.paired(run["records"], arm, against)[0]
    return d.word in upheld, paired.difference(d, word=d.word not in upheld)


def claims(run: dict, lens: dict | None = None) -> list[tuple[str, tuple[bool, str] | None]]:
    """Each of the paper's claims with `claim`'s answer on this run; then the mask builder's, about time (the naive
    builder's time over the efficient one's), and with the lens run, the alignment figure's (the layer from which
    accepted masks' cosine stays above the rejected masks' interquartile range, `parting`)."""
    out = [(text, claim(run, arm, against, upheld)) for text, arm, against, upheld in CLAIMS]
    naive = f"{BASE}:builder=naive"
    slow = paired.paired(run["records"], naive, BASE)[1] if naive in run["results"] else None
    out.append(("the efficient mask builder is faster (time, naive / efficient)",
                (slow.word == WORSE, paired.ratio(slow, word=slow.word != WORSE)) if slow else None))
    if lens is not None:
        b = bands(masks(lens, BASE))
        at, n = parting(b, "cos"), len(b["accepted"]["cos"]) - 1
        said = ("accepted masks' cosine parts from rejected ones' "
                f"(the paper: from the middle layers, L{PAPER_PART} of {PAPER_LAYERS})")
        where = f"from L{at} of {n} ({at / n:.0%} of the depth)" if at is not None else "never"
        out.append((said, (at is not None, where)))
    return out


def claims_table(models: list[tuple[str, dict, dict]]) -> str:
    """The paper's claims, each on each model (label, timed run, lens run): upheld or not, with the figure that
    decides it."""
    answers = [claims(run, lens) for _, run, lens in models]
    rows = [[text] + [f"{'holds' if got[0] else 'does not'}: {got[1]}" if got else "" for got in (a[i][1] for a in answers)]
            for i, (text, _) in enumerate(answers[0])]
    return markdown(["the paper's claim (tau: arm − compared arm)"] + [label for label, *_ in models], rows)


def shipped(results: Path) -> list[tuple[str, dict, dict]]:
    """(label, timed run, lens run) per model of the results manifest's `paper` table (what BENCHMARKS.md shows);
    ValueError (one line) when there is none or a file is missing or unreadable."""
    try:
        manifest = json.loads((results / "manifest.json").read_text())
        entry = next(e for e in manifest["tables"] if e.get("kind") == "paper")
        return [(m["label"], *(json.loads((results / f).read_text()) for f in m["files"])) for m in entry["models"]]
    except StopIteration:
        raise ValueError("The results manifest names no paper ablation yet.") from None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"The paper ablation's results cannot be read ({str(e).splitlines()[0][:100]}).") from None


# ------------------------------------------------------------------ the measured explanations

def _nodes_line(run: dict, spec: str) -> str:
    """'d1 10.9 → 0.44, d2 4.4 → 0.09, d2 side 3.7 → 0.04': an arm's nodes a drafting step by kind (esp.bench.nodes)
    and how many of them a step accepts."""
    got = nodes.pooled([r for r in run["records"] if r["method"] == spec])
    return ", ".join(f"d{k.replace(':main', '').replace(':', ' ')} {v['per_step']:.1f} → {v['per_step'] * v['accepted']:.2f}"
                     for k, v in got.items())


def tree_lines(label: str, run: dict) -> list[str]:
    """At BC 30 and 60 (the paper's), the dynamic tree against the paper's best static [K1, K2] and against the best
    static shape of any k here: tau, the paired differences, and where each spends its nodes."""
    out = []
    for bc in (30, 60):
        dyn = f"esp:k=2:bc={bc}:tree=dynamic"
        shapes = dict.fromkeys([f"esp:k=2:bc={bc}", best_static(run, bc)])
        against = "; ".join(f"{BY_SPEC[s].config.static_shape} {tau(run['results'][s]['tau'])} "
                            f"({paired.difference(paired.paired(run['records'], dyn, s)[0])})" for s in shapes)
        spend = "; ".join(f"{name} {_nodes_line(run, s)}"
                          for name, s in [("dynamic", dyn)] + [(str(BY_SPEC[s].config.static_shape), s) for s in shapes])
        out.append(f"{label}, BC {bc}: dynamic {tau(run['results'][dyn]['tau'])} against static {against}; nodes a step "
                   f"by depth → accepted a step: {spend}")
    return out


def lens_summary(groups: dict, eighth: int = 6) -> str:
    """'0% / 4% / 31%, 900': over all masks of an arm, the share whose real token is in the lens's top 5 at layer 0,
    at `eighth`/8 of the depth and at the output, and its median rank at `eighth`/8."""
    n = len(groups["accepted"]["rank"][0])
    i = at_depth(n, eighth)
    ranks = [m[i] for kind in groups.values() for m in kind["rank"]]
    return f"{top5(groups, 0):.0%} / {top5(groups, i):.0%} / {top5(groups, n - 1):.0%}, {statistics.median(ranks):.0f}"


def mask_line(label: str, timed: dict, lens: dict) -> str:
    """What the EMA and the initialisation change in the masks' lens (every mask of each arm, the lens run), beside
    each arm's tau difference from the base (the timed run)."""
    arms = [f"{BY_SPEC[spec].label} ({paired.difference(paired.paired(timed['records'], spec, BASE)[0], word=False)})"
            f" {lens_summary(masks(lens, spec))}" for spec in ALIGN[1:]]
    return (f"{label}, the masks' lens (real token in the top 5 at layer 0 / 6/8 / the output, median rank at 6/8; "
            f"tau − base): base {lens_summary(masks(lens, BASE))}; " + "; ".join(arms))


def easy_line(label: str, lens: dict) -> str:
    """At layer 0 and at 6/8 depth, accepted / rejected median Mask Lens ranks, and the 6/8 gap matched on the
    layer-0 rank."""
    g = masks(lens, BASE)
    i = at_depth(len(g["accepted"]["rank"][0]), 6)
    raw0, _ = matched_gap(g, 0)
    raw, matched = matched_gap(g, i)
    return (f"{label}: at layer 0 the rejected masks' real token ranks {raw0:.1f}x the accepted's (easy tokens: one "
            f"embedding for every mask); at 6/8 {raw:.1f}x, and {matched:.1f}x within eighths of the layer-0 rank")


def k_line(label: str, run: dict) -> str:
    """At BC 60, each k's static shape: its nodes a drafting step by depth and the share accepted (what a deeper
    shape gives up at depth 1, and what its deep nodes return)."""
    return f"{label}, BC 60, nodes a step by depth → accepted a step: " + "; ".join(
        f"k={k} {_nodes_line(run, f'esp:k={k}:bc=60')}" for k in (1, 2, 3, 4))


def builder_line(label: str, run: dict) -> str:
    """The naive builder: equal tokens per question, and its extra milliseconds per step (paired)."""
    recs = run["records"]
    naive, base = paired.per_question(recs, f"{BASE}:builder=naive"), paired.per_question(recs, BASE)
    same = sum(naive[q]["tokens"] == base[q]["tokens"] for q in naive if q in base)
    ms = paired.interval([1000 * (naive[q]["seconds"] / naive[q]["forwards"] - base[q]["seconds"] / base[q]["forwards"])
                          for q in naive if q in base])
    step = statistics.fmean(1000 * base[q]["seconds"] / base[q]["forwards"] for q in base)
    return (f"{label}: tokens equal on {same} / {len(naive)} questions; {ms.mean:+.1f} ms a step "
            f"[{ms.lo:+.1f}, {ms.hi:+.1f}] on a {step:.0f} ms step")


def part_line(label: str, lens: dict) -> str:
    """Where the groups part (cosine, lens rank) and the raw cosines at the output, beside the paper's."""
    b = bands(masks(lens, BASE))
    n = len(b["accepted"]["cos"]) - 1
    at = {m: parting(b, m) for m in ("cos", "rank")}
    words = "; ".join(f"{'cosine' if m == 'cos' else 'lens rank'} from L{x} of {n} ({x / n:.0%} of depth)"
                      if x is not None else f"{'cosine' if m == 'cos' else 'lens rank'} never" for m, x in at.items())
    raw = [b[kind]["raw"][n - 1][1] for kind in ("accepted", "rejected")]
    return (f"{label}: the groups part ({words}); raw cosine before the final norm, accepted {raw[0]:.2f}, "
            f"rejected {raw[1]:.2f} (the paper: from L{PAPER_PART} of {PAPER_LAYERS}, "
            f"{PAPER_PART / PAPER_LAYERS:.0%} of the depth, about {PAPER_COS[0]} against {PAPER_COS[1]})")


def section(models: list[tuple[str, dict, dict]]) -> str:
    """BENCHMARKS.md's body for the paper's ablations: the claims, the arms, the alignment figure, then the
    measured explanations, from (label, timed run, lens run) per model."""
    timed = [(label, t) for label, t, _ in models]
    lens = [(label, a) for label, _, a in models]
    why = ([x for label, t, _ in models for x in tree_lines(label, t)]
           + [mask_line(label, t, a) for label, t, a in models]
           + [k_line(label, t) for label, t, _ in models] + [easy_line(label, a) for label, _, a in models]
           + [part_line(label, a) for label, _, a in models] + [builder_line(label, t) for label, t, _ in models])
    return "\n\n".join([claims_table(models), arms_table(timed),
                        "The alignment figure (base arm; median and interquartile range over masks):",
                        alignment_table(lens), "Measured, on the same runs:\n\n" + "\n".join(f"- {x}" for x in why)])


def main(argv: list[str] | None = None) -> None:
    from esp.cli import fail

    p = argparse.ArgumentParser(prog="python -m esp.bench paper", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="*", help="a timed run over every arm and its --align --lens run, one model")
    p.add_argument("--methods", nargs="?", const="timed", choices=["timed", "align"],
                   help="print the arms as the bench's --methods (align: the lens run's) and stop")
    a = p.parse_args(argv)
    if a.methods:
        print(methods(a.methods))
        return
    if len(a.runs) != 2:
        fail("give two files: the timed run over every arm, then its --align --lens run.")
    try:
        timed, lens = (json.loads(Path(f).read_text()) for f in a.runs)
        print(section([(timed["meta"]["model"].split(" (")[0], timed, lens)]))
    except (OSError, ValueError, KeyError, StopIteration) as e:
        fail(f"cannot read the paper's ablation from {' and '.join(a.runs)}: {e!r}")

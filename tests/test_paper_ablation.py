"""The paper's ablations (esp.bench.paper, issue 50): each arm's difference from the base arm is computed from paired
per-question figures with a t interval (a known difference is reported as such, a known null as "equal"); the naive
and efficient mask builders feed equal masks and give equal tokens; node kinds, the layer where the groups part and
the easy-token matching measure what they say; and the report renders the section from results files."""
from __future__ import annotations

import json
import math
import statistics
from argparse import Namespace
from types import SimpleNamespace

import plotly.graph_objects as go
import pytest
import torch

from esp.bench import nodes, paired, paper, report
from esp.bench.paired import BETTER, EQUAL, WORSE
from esp.bench.run import Drafters, aggregate, engine_turn, protocol_of, split_builder
from esp.decoding.engine import Decoder
from esp.drafters.esp import ESPConfig, ESPDrafter
from esp.errors import ESPError
from esp.trace import NodeTrace

QIDS = list(range(81, 94))  # 13 questions, as the shipped runs
BASE_TAU = [1.30, 1.55, 1.42, 1.61, 1.38, 1.47, 1.70, 1.35, 1.52, 1.44, 1.66, 1.39, 1.58]
WOBBLE = [0.01, -0.01] * 6 + [0.0]  # sums to zero: a known null, a known difference plus it is that difference


def test_t_quantiles_are_the_table_s():
    for df, t in [(1, 12.706), (2, 4.303), (5, 2.571), (12, 2.179), (30, 2.042)]:
        assert paired.t_quantile(0.95, df) == pytest.approx(t, abs=5e-4)


def record(qid: int, method: str, tau: float, tps: float, **extra) -> dict:
    n = 1000
    return {"qid": qid, "category": f"c{qid}", "method": method, "tokens": [qid] * 4, "n_tokens": round(tau * n),
            "forwards": n, "seconds": n * tau / tps, "tokens_per_s": tps, "top2": [],
            "speculative_decoding": {"num_spec_steps": 10, "num_draft_tokens": 40,
                                     "acceptance_histogram_by_draft_length": {"2": [5, 3, 2]}}, **extra}


def fake_run(taus: dict[str, list[float]], speed: dict[str, float] | None = None, **extra) -> dict:
    """A bench result whose methods have these per-question taus (tokens/s: base 10, times `speed`)."""
    recs = [record(q, m, t[i], 10.0 * (speed or {}).get(m, 1.0) * (1 + WOBBLE[i] / 2), **extra)
            for m, t in taus.items() for i, q in enumerate(QIDS)]
    return {"results": aggregate(recs, list(taus)), "records": recs, "meta": {"model": "Fake (bfloat16)"}}


def test_a_known_difference_is_reported_and_a_known_null_is_equal():
    base = BASE_TAU
    run = fake_run({"ar": [1.0] * 13, "b": base, "up": [t + 0.2 + w for t, w in zip(base, WOBBLE)],
                    "null": [t + 5 * w for t, w in zip(base, WOBBLE)], "down": [t - 0.1 + w for t, w in zip(base, WOBBLE)]},
                   speed={"up": 0.8, "null": 1.0, "down": 1.0})
    up_tau, up_time = paired.paired(run["records"], "up", "b")
    assert up_tau.mean == pytest.approx(0.2, abs=1e-3) and up_tau.word == BETTER and up_tau.lo < 0.2 < up_tau.hi
    half = paired.t_quantile(0.95, 12) * statistics.stdev(WOBBLE) / math.sqrt(13)  # the interval is the t interval
    assert up_tau.hi - up_tau.mean == pytest.approx(half, abs=1e-3)
    assert math.exp(up_time.mean) == pytest.approx(0.8, rel=1e-3) and up_time.word == WORSE  # slower is worse
    null_tau, null_time = paired.paired(run["records"], "null", "b")
    assert abs(null_tau.mean) < 1e-3 and null_tau.word == EQUAL and null_tau.lo < 0 < null_tau.hi
    assert null_time.word == EQUAL
    assert paired.paired(run["records"], "down", "b")[0].word == WORSE
    assert paired.difference(up_tau).endswith("better") and "0.80x [" in paired.ratio(up_time)


def test_the_difference_is_of_the_pooled_figures_with_a_paired_interval():
    """Questions of different lengths: the difference is of Spec-Bench's pooled taus (a long question weighs more);
    with every question's difference the same, the interval is that difference alone; shuffling which question got
    which difference widens it (the pairing is what narrows it)."""
    run = fake_run({"b": BASE_TAU, "a": [t + 0.1 for t in BASE_TAU]})
    for i, r in enumerate(run["records"]):
        r["forwards"] *= 1 + i % 13
        r["n_tokens"] *= 1 + i % 13
    a = [r for r in run["records"] if r["method"] == "a"]
    b = [r for r in run["records"] if r["method"] == "b"]
    got = paired.paired(run["records"], "a", "b")[0]
    assert got.mean == pytest.approx(paired.pooled_tau(a) - paired.pooled_tau(b)) == pytest.approx(0.1, abs=1e-3)
    assert got.hi - got.lo < 1e-2
    for r, q in zip(a, reversed(QIDS)):
        r["qid"] = q
    shuffled = paired.paired(run["records"], "a", "b")[0]
    assert shuffled.hi - shuffled.lo > 0.1


def test_pairing_is_by_question_not_by_order():
    run = fake_run({"b": BASE_TAU, "a": [t + 0.1 for t in BASE_TAU]})
    run["records"] = [r for r in run["records"] if r["method"] == "b"] + list(
        reversed([r for r in run["records"] if r["method"] == "a"]))
    got = paired.paired(run["records"], "a", "b")[0]
    assert got.mean == pytest.approx(0.1, abs=1e-3) and got.hi - got.lo < 1e-2
    with pytest.raises(ValueError, match="share no question"):
        paired.paired([r for r in run["records"] if r["qid"] < 85 and r["method"] == "a"]
                      + [r for r in run["records"] if r["qid"] >= 85 and r["method"] == "b"], "a", "b")


def test_node_kinds_tell_the_main_line_from_side_branches():
    def node(i, parent, depth, status, row=0):
        return NodeTrace(i, 0, "", parent, depth, 0.5, 0.5, status, row, 0)
    step = SimpleNamespace(prefill=False, nodes=[
        node(0, -1, 0, "root"), node(1, 0, 1, "accepted"), node(2, 0, 1, "rejected"), node(3, 1, 2, "accepted"),
        node(4, 2, 2, "rejected"), node(5, 3, 3, "rejected"), node(6, 1, 2, "pruned", row=None)])
    got = nodes.kinds([SimpleNamespace(prefill=True, nodes=step.nodes), step])
    assert got == {"1:main": [2, 1], "2:main": [1, 1], "2:side": [1, 0], "3:main": [1, 0]}
    pooled = nodes.pooled([{"nodes": got, "speculative_decoding": {"num_spec_steps": 1}}] * 2)
    assert pooled["1:main"] == {"per_step": 2.0, "accepted": 0.5} and pooled["2:side"]["accepted"] == 0.0


def test_the_builder_is_a_bench_setting_of_the_spec():
    assert split_builder("esp:k=2:bc=60") == ("esp:k=2:bc=60", "efficient")
    assert split_builder("esp:k=2:builder=naive:bc=60") == ("esp:k=2:bc=60", "naive")
    for bad in ("esp:builder=fast", "esp:builder=naive:builder=naive"):
        with pytest.raises(ESPError, match="builder= takes one of efficient, naive"):
            split_builder(bad)
    d = Drafters("esp:k=2:bc=30:builder=naive", {}, "cold", 1)
    assert d.builder == "naive" and d.spec == "esp:k=2:bc=30" and d.description.endswith("naive mask builder")
    assert protocol_of("hybrid:bc=60:start=hot:builder=naive", "cold") == "hot"


@pytest.mark.parametrize("tree", ["static", "dynamic"])
def test_naive_and_efficient_builders_feed_equal_masks_and_give_equal_tokens(tiny_lm, tree):
    lm = tiny_lm("llama")
    prompt = [5, 9, 14, 3, 7, 5, 9, 14, 3, 7, 5, 9]
    fed = {}
    for builder in ("efficient", "naive"):
        masks, forward = [], lm.forward

        def spy(embeds, positions, mask, *args, **kw):
            masks.append(mask.clone())
            return forward(embeds, positions, mask, *args, **kw)
        lm.forward = spy
        try:
            run = Decoder(lm, ESPDrafter(ESPConfig(k=2, bc=60, tree=tree)), max_new_tokens=24, layouts=builder).generate(prompt)
        finally:
            del lm.forward
        fed[builder] = (run.tokens, masks, [s.mask for s in run.steps])
    (tok_e, masks_e, vis_e), (tok_n, masks_n, vis_n) = fed["efficient"], fed["naive"]
    assert tok_e == tok_n and vis_e == vis_n and len(masks_e) == len(masks_n) > 3
    assert all(torch.equal(a, b) for a, b in zip(masks_e, masks_n))
    args = Namespace(max_new_tokens=24, align=False, lens=False)
    turns = [engine_turn(lm, ESPDrafter(ESPConfig(k=2, bc=60, tree=tree)), prompt, args, b) for b in ("efficient", "naive")]
    assert turns[0].tokens == turns[1].tokens == tok_e


def test_the_layer_where_groups_part_and_the_easy_token_matching():
    q = lambda lo, mid, hi: (lo, mid, hi)  # noqa: E731
    b = {"accepted": {"cos": [q(0, .1, .2), q(0, .3, .5), q(.5, .6, .7), q(.6, .7, .8)]},
         "rejected": {"cos": [q(0, .1, .2), q(0, .2, .4), q(.1, .2, .3), q(.7, .8, .9)]}}
    assert paper.parting(b, "cos") is None  # the last layer does not part: never
    b["rejected"]["cos"][-1] = q(.1, .2, .3)
    assert paper.parting(b, "cos") == 2
    # Ranks at depth that follow the layer-0 rank alone: accepted masks look 10x better only because their tokens
    # are easier; matched on layer 0 the gap is gone. Add a 10x gap within every layer-0 rank: matched finds it.
    easy, hard = [1, 3], [100, 300]
    groups = {"accepted": {"rank": [easy] * 6 + [hard] * 2}, "rejected": {"rank": [easy] * 2 + [hard] * 6}}
    raw, matched = paper.matched_gap(groups, 1)
    assert raw == pytest.approx(100.0) and matched == pytest.approx(1.0)
    groups["rejected"]["rank"] = [[r0, 10 * r1] for r0, r1 in groups["accepted"]["rank"]]
    assert paper.matched_gap(groups, 1)[1] == pytest.approx(10.0)


LAYERS = 5


def lens_run() -> dict:
    """A lens run of the align arms: accepted masks' cosine rises and their rank falls with depth, rejected ones not."""
    def masks_of(ok: bool, i: int):
        cos = [round((0.1 + 0.1 * layer * ok) + 0.01 * i, 4) for layer in range(LAYERS)]
        rank = [max(1, (1000 - 240 * layer * ok) // (1 + i % 3)) for layer in range(LAYERS)]
        return [cos, [c + 0.3 for c in cos]], rank
    recs = []
    for m in ("ar",) + paper.ALIGN:
        for i, qid in enumerate(QIDS):
            extra = {}
            if m != "ar":
                got = {k: [masks_of(k == "accepted", j) for j in range(i, i + 4)] for k in ("accepted", "rejected")}
                extra = {"align_masks": {k: [a for a, _ in v] for k, v in got.items()},
                         "lens": {k: [r for _, r in v] for k, v in got.items()}}
            recs.append(record(qid, m, 1.5 if m != "ar" else 1.0, 10.0, **extra))
    return {"results": aggregate(recs, ["ar", *paper.ALIGN]), "records": recs, "meta": {"model": "Fake"}}


def timed_run() -> dict:
    taus = {"ar": [1.0] * 13}
    for n, a in enumerate(paper.ARMS):
        shift = {"init": -0.05, "lambda": -0.02, "k": -0.01 * a.config.k}.get(a.group, 0.0)
        taus[a.spec] = [t + shift + (WOBBLE[i] if n % 2 else 0) for i, t in enumerate(BASE_TAU)]
    run = fake_run(taus, speed={a.spec: 0.6 if "naive" not in a.spec else 0.55 for a in paper.ARMS},
                   nodes={"1:main": [30, 6], "2:main": [10, 1], "2:side": [4, 0], "3:main": [3, 0]})
    return run


def test_the_report_renders_the_section_from_results_files(tmp_path):
    made = {"machine": {"cpu": "C", "flags": ["avx512_bf16"], "cores": 2}, "date": "2026-12-04T10:00:00Z",
            "command": "python -m esp.bench --ids 81 (a chunk)"}
    files = {}
    for tag in ("a", "b"):
        timed, lens = timed_run(), lens_run()
        timed["meta"].update(provenance=made, merged_from=3)
        lens["meta"].update(provenance=made)
        files[f"t_{tag}.json"], files[f"l_{tag}.json"] = timed, lens
    entry = {"kind": "paper", "title": "The paper's ablations",
             "models": [{"label": "A", "files": ["t_a.json", "l_a.json"]}, {"label": "B", "files": ["t_b.json", "l_b.json"]}],
             "command": "python -m esp.bench --methods \"$(python -m esp.bench paper --methods)\" ...", "note": "Paper: 0.45."}
    manifest = {"machines": {}, "tables": [entry]}
    for name, data in {**files, "manifest.json": manifest}.items():
        (tmp_path / name).write_text(json.dumps(data))
    page = report.render(tmp_path)
    assert "### The paper's ablations · C, 2 cores, class unknown (avx512_bf16) · 2026-12-04 10:00:00 UTC" in page
    assert "python -m esp.bench paper --methods" in page and "(a chunk)" not in page  # merged: the manifest's command
    lines = page.splitlines()
    arms = [x for x in lines if x.startswith("| ") and any(x.startswith(f"| {a.label} |") for a in paper.ARMS)]
    assert len(arms) == len(paper.ARMS)
    assert "| base: mean, λ 0.1, k=2, BC 60, static [15, 4] | 1.49 (base) |" in page
    lastk = next(x for x in lines if x.startswith("| init last-k |"))
    assert "| 1.44, -0.05 [-0.05, -0.05] worse |" in lastk  # a constant shift: its interval is the shift itself
    assert "| mean init beats last-k masks | holds: -0.05 [-0.05, -0.05] | holds: " in page
    assert "| mean init beats sampled masks | holds: -0.05 [-0.06, -0.04] |" in page
    assert "| the EMA pays (λ 0.1 over λ 0) | holds: -0.02 [" in page
    naive = next(x for x in lines if x.startswith("| the efficient mask builder is faster"))
    assert "holds: 0.92x [" in naive
    assert "- A: tokens equal on 13 / 13 questions" in page
    rows = [x for x in lines if x.startswith(("| 0 (embeddings)", "| 4/8", "| 8/8 (output)"))]
    assert len(rows) == 3 and rows[0].startswith("| 0 (embeddings) | L0: ")
    assert "the groups part (cosine from L1 of 4" in page and "Paper: 0.45." in page


def test_the_command_prints_the_arms(capsys):
    paper.main(["--methods"])
    specs = capsys.readouterr().out.strip().split(",")
    assert specs[:2] == ["ar", paper.BASE] and len(specs) == len(paper.ARMS) + 1
    assert {s for s in specs if s != "ar"} == set(paper.BY_SPEC)
    paper.main(["--methods", "align"])
    assert capsys.readouterr().out.strip().split(",") == list(paper.ALIGN)
    with pytest.raises(SystemExit):
        paper.main(["only-one.json"])


def test_the_model_size_tab_draws_each_arm_s_difference_and_says_which_claims_hold(tmp_path):
    from components.size_view import _paper, ablation_figure, ablation_sentences

    entry = {"kind": "paper", "models": [{"label": "A", "files": ["t.json", "l.json"]}]}
    for name, data in {"t.json": timed_run(), "l.json": lens_run(), "manifest.json": {"tables": [entry]}}.items():
        (tmp_path / name).write_text(json.dumps(data))
    fig = ablation_figure(tmp_path)
    go_fig = go.Figure(fig.to_dict()).to_dict()  # valid for Plotly (the builders skip its validation)
    (trace,) = go_fig["data"]
    arms = [a for a in paper.ARMS if a.spec != paper.BASE]
    assert trace["name"] == "A" and len(trace["x"]) == len(arms)
    lastk = [a.spec for a in arms].index(f"{paper.BASE}:init=lastk")
    assert trace["x"][lastk] == pytest.approx(-0.05, abs=1e-3) and trace["error_x"]["array"][lastk] == pytest.approx(0, abs=1e-3)
    assert go_fig["layout"]["yaxis"]["ticktext"] == [a.label for a in arms]
    words = ablation_sentences(tmp_path)
    assert "On A these hold: mean init beats sampled masks; mean init beats last-k masks;" in words
    assert "These do not: k = 1 is as good as k = 2 (BC 60)." in words
    _paper.cache_clear()
    missing = tmp_path / "nothing"
    missing.mkdir()
    assert "cannot be read" in ablation_sentences(missing) and not ablation_figure(missing).data
    (missing / "manifest.json").write_text(json.dumps({"tables": []}))
    _paper.cache_clear()
    assert "names no paper ablation" in ablation_sentences(missing)


@pytest.mark.parametrize("args, says", [
    (["--warmup-tokens", "0"], "--warmup-tokens must be at least 1."),
    (["--methods", "ar,esp:builder=slow"], "builder= takes one of efficient, naive, once."),
])
def test_bad_bench_settings_are_refused_with_one_line(args, says, capsys):
    from conftest import QUESTIONS
    from esp.bench.commands import main
    from esp.cli import run_main

    with pytest.raises(SystemExit):
        run_main(lambda: main(["--questions", str(QUESTIONS), *args]))
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err and len(err.strip().splitlines()) == 1

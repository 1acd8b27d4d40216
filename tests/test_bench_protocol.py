"""esp.bench: the oracle columns, the cold / hot protocols and transformers' generate() as a reference row."""
from __future__ import annotations

import json

import pytest

from conftest import spec_bench
import esp.bench.run as bench
from esp.bench.run import COLD, HOT, Drafters, protocol_line, protocol_of
from esp.bench.answers import main as answers_main
from esp.bench.answers import speed
from esp.errors import ESPError

LIMIT_KEYS = {"oracle_speedup", "fraction", "curve_speedup", "flat_speedup", "oracle_width_mean"}


def _questions(tmp_path, qs: list[dict]) -> str:
    f = tmp_path / "q.jsonl"
    f.write_text("\n".join(json.dumps(q) for q in qs))
    return str(f)


@pytest.mark.model
def test_bench_json_holds_the_oracle_the_protocol_and_the_generate_row(lm, tmp_path, capsys):
    qs = [q for q in spec_bench(1) if q["category"] in ("translation", "coding")]
    out, md = tmp_path / "r.json", tmp_path / "t.md"
    bench.main(["--questions", _questions(tmp_path, qs), "--methods", "ar,esp:k=1:bc=10,pld", "--max-new-tokens", "16",
                "--warmup", "1", "--reference", "--json", str(out), "--markdown", str(md)])
    data = json.loads(out.read_text())
    res, meta = data["results"], data["meta"]
    assert list(res) == ["ar", "esp:k=1:bc=10", "pld", bench.GENERATE]
    assert meta["protocol"] == COLD and set(meta["protocols"].values()) == {COLD}
    assert meta["curve"]["q"][0] == 1 and bench.GENERATE in meta["methods"]
    made = meta["provenance"]  # where, when and how (esp.bench.provenance), for docs/BENCHMARKS.md's headings
    assert made["command"].startswith("python -m esp.bench --questions ") and "--reference" in made["command"]
    assert made["date"].endswith("Z") and made["machine"]["cores"] >= 1 and made["machine"]["torch"]
    for m, r in res.items():
        assert "speedup_vs_generate" in r and r["lossless"]
        if m == bench.GENERATE:
            assert not LIMIT_KEYS & set(r) and r["tau"] == 1.0
            continue
        assert LIMIT_KEYS <= set(r)
        assert r["fraction"] == pytest.approx(r["speedup"] / r["oracle_speedup"])
        assert r["oracle_width_mean"] <= r["width_mean"]
        for c in r["per_category"].values():
            assert LIMIT_KEYS <= set(c) and "speedup_vs_generate" in c
        assert [(x["qid"], x["fraction"]) for x in r["per_question"]] == [
            (q["question_id"], pytest.approx(x["speedup"] / x["oracle_speedup"])) for q, x in zip(qs, r["per_question"])]
    assert res["ar"]["oracle_speedup"] == 1.0 and res["ar"]["flat_speedup"] == 1.0
    assert res["esp:k=1:bc=10"]["oracle_width_mean"] > 1.0  # its masks are part of the oracle feed
    by = {(r["method"], r["qid"]): r for r in data["records"]}
    for r in data["records"]:  # the oracle feeds a subset of the rows fed, at its cheapest width
        assert r["method"] == bench.GENERATE or r["oracle_s"] <= r["fed_s"]
    for q in qs:  # generate()'s tokens are ar's, and its time is its own
        gen, ar = by[bench.GENERATE, q["question_id"]], by["ar", q["question_id"]]
        assert gen["tokens"] == ar["tokens"] and gen["seconds"] > 0
        assert meta["reference_verdicts"][str(q["question_id"])]["kind"] == "exact"
    printed = capsys.readouterr().out
    assert "Protocol: cold" in printed and "oracle speed-up (fraction reached)" in printed
    assert "speed-up vs generate()" in printed
    text = md.read_text()
    assert "Protocol: cold" in text and "| flat curve (rows free) |" in text


@pytest.mark.model
def test_the_oracle_is_priced_on_timings_spread_through_the_run_and_the_drafters_still_start_from_their_prior(
        lm, tmp_path, monkeypatch):
    """A shipped shape is another machine's guess, and one sweep's ratios are its moment's: the oracle and every feed
    are priced on rounds of paired timings taken before the questions and after each one, pooled per width."""
    import esp.budget.cost as cost
    from esp.bench.oracle import price

    moments = iter([(0.05, 1.8, 1.2), (0.04, 1.4, 1.1), (0.06, 1.6, 1.3)])  # t(1), t(2) / t(1), t(4) / t(1) a round

    def timed(model, grid, repeats=1):  # one pair a width, whatever the repeats: each round weighs alike
        one, two, four = next(moments)
        return {1: [(one, one)], 2: [(two * one, one)], 4: [(four * one, one)]}

    monkeypatch.setattr(bench, "samples", timed)
    monkeypatch.setattr(cost, "cache_dir", lambda: tmp_path / "costs")  # no stored curve (the converted model stays)
    monkeypatch.setattr(cost, "_CURVES", {})
    out = tmp_path / "r.json"
    qs = [q for q in spec_bench(1) if q["category"] in ("translation", "writing")]
    args = ["--questions", _questions(tmp_path, qs), "--methods", "ar,hybrid:bc=auto", "--max-new-tokens", "8",
            "--warmup", "0", "--json", str(out)]
    bench.main(args)
    got = json.loads(out.read_text())
    meta, curve = got["meta"], cost.CostCurve.from_dict(got["meta"]["curve"])
    assert meta["oracle_curve"] == "sweep" and meta["curve_rounds"] == 3 and len(qs) == 2
    # per width the median over the rounds (1.6 at 2 rows: no one round's), at the median one-row time
    assert curve.t == pytest.approx([0.05, 0.05 * 1.6, 0.05 * 1.2])
    for r in got["records"]:
        if r["method"] != bench.GENERATE:
            want = price(r["feeds"], curve.predict, 4)
            assert (r["fed_s"], r["oracle_s"], r["flat_s"]) == pytest.approx((want.fed_s, want.oracle_s, want.flat_s))
    assert not (tmp_path / "costs").exists()  # kept for pricing only: nothing stored for the drafters
    assert all(not c.scaled for c in cost._CURVES.values())  # ... which started from the default shape
    bench.main(args + ["--oracle-curve", "prior"])
    meta = json.loads(out.read_text())["meta"]
    assert meta["oracle_curve"] == "prior" and meta["curve_rounds"] == 0 and meta["curve"]["t"][0] == 1.0  # the shape


def _forwards(path) -> list[tuple[int, int]]:
    return [(r["qid"], r["forwards"]) for r in json.loads(path.read_text())["records"] if r["method"] == "tr"]


@pytest.mark.model
def test_hot_keeps_one_drafter_across_questions_and_cold_a_fresh_one_for_each(lm, tmp_path):
    """The same question twice: a cold tr drafts it the same way both times, a hot one has learnt it."""
    q = next(q for q in spec_bench(1) if q["category"] == "coding")
    qfile = _questions(tmp_path, [q, dict(q, question_id=-1)])
    runs = {}
    for protocol in (COLD, HOT):
        out = tmp_path / f"{protocol}.json"
        # The first turn alone: a hot drafter also learns from a question's first turn for its second.
        bench.main(["--questions", qfile, "--methods", "ar,tr", "--max-new-tokens", "24", "--warmup", "1",
                    "--protocol", protocol, "--turns", "first", "--json", str(out)])
        runs[protocol] = _forwards(out)
        assert json.loads(out.read_text())["meta"]["methods"]["tr"].endswith(f"start={protocol}")
    (_, cold1), (_, cold2) = runs[COLD]
    (_, hot1), (_, hot2) = runs[HOT]
    assert cold1 == cold2 == hot1  # the warm-up taught the hot drafter nothing
    assert hot2 < hot1


def test_a_method_s_own_start_overrides_the_protocol():
    assert protocol_of("tr:start=hot", COLD) == HOT and protocol_of("tr", HOT) == HOT and protocol_of("esp", COLD) == COLD
    assert protocol_line(COLD, {"ar": COLD, "tr:start=hot": HOT}) == (
        "Protocol: cold (a fresh drafter for every question); tr:start=hot by their own start=.")
    hot, cold = Drafters("tr", {}, HOT, repeats=2), Drafters("tr", {}, COLD, repeats=2)
    assert hot.get(0) is hot.get(0) and hot.get(0) is not hot.get(1) and hot.get(0).start_mode == HOT
    assert cold.get(0) is not cold.get(0) and cold.get(0).start_mode == COLD
    assert Drafters("tr:start=cold", {}, COLD, 1).get(0).start_mode == COLD
    with pytest.raises(ESPError, match="unknown setting"):
        protocol_of("esp:start=hot", COLD)  # a method without cross-prompt state has no start=


def _two_turn_and_one(n_two: int = 1, n_one: int = 1) -> list[dict]:
    """Development questions: `n_two` of writing (two turns), `n_one` of translation (one turn)."""
    qs = spec_bench(2)
    return ([q for q in qs if q["category"] == "writing"][:n_two]
            + [q for q in qs if q["category"] == "translation"][:n_one])


@pytest.mark.model
def test_every_turn_runs_in_one_conversation_and_the_answer_files_are_spec_bench_s(lm, tmp_path, monkeypatch, capsys):
    qs = _two_turn_and_one()
    prompts: list[list[int]] = []
    turn = bench.engine_turn
    monkeypatch.setattr(bench, "engine_turn", lambda lm_, d, ids, a, *b: prompts.append(ids) or turn(lm_, d, ids, a, *b))
    out, answers = tmp_path / "r.json", tmp_path / "answers"
    bench.main(["--questions", _questions(tmp_path, qs), "--methods", "ar,pld", "--max-new-tokens", "12",
                "--warmup", "0", "--json", str(out), "--answers", str(answers)])
    data = json.loads(out.read_text())
    assert len(prompts) == 2 * 3 and data["meta"]["turns"] == "all"  # ar's two turns, pld's, then one each
    files = {m: answers / f"smollm2-135m-{m}.jsonl" for m in ("ar", "pld")}
    lines = {m: [json.loads(x) for x in f.read_text().splitlines()] for m, f in files.items()}
    for m, (a1, a2) in zip(("ar", "pld"), ((prompts[0], prompts[1]), (prompts[2], prompts[3]))):
        text = lm.tokenizer.decode(a2)
        answer = lines[m][0]["choices"][0]["turns"][0]
        # The second prompt holds the first question, this method's first answer, then the second question.
        assert a2[: len(a1)] == a1 and answer and answer in text and text.index(answer) < text.index(qs[0]["turns"][1][:40])
    by = {(r["method"], r["qid"]): r for r in data["records"]}
    for m, rows in lines.items():
        assert [x["question_id"] for x in rows] == [q["question_id"] for q in qs]
        for x, q in zip(rows, qs):
            c = x["choices"][0]
            assert set(x) == {"question_id", "category", "answer_id", "model_id", "choices", "tstamp"}
            assert x["category"] == q["category"] and x["model_id"] == "smollm2-135m" and c["index"] == 0
            assert len(c["turns"]) == len(c["new_tokens"]) == len(c["wall_time"]) == len(q["turns"])
            r = by[m, q["question_id"]]
            assert c["new_tokens"] == r["turn_tokens"] and sum(c["decoding_steps"]) == len(c["accept_lengths"]) == r["forwards"]
            assert sum(c["accept_lengths"]) == r["n_tokens"] and sum(c["wall_time"]) == pytest.approx(r["seconds"])
    count = lambda text: len(lm.tokenizer(text).input_ids)  # noqa: E731
    for m, res in data["results"].items():  # Spec-Bench's formula on the files, against our summary
        got = speed(files[m], files["ar"], count)
        assert got["mean_accepted"] == pytest.approx(res["tau"]) and got["tokens_per_s"] == pytest.approx(res["tokens_per_s"])
    # Its base counts the ar texts again: no stop token in the text, and one token less per turn (its "- 1"
    # drops a BOS that this tokenizer does not add).
    for x in lines["ar"]:
        c = x["choices"][0]
        r = by["ar", x["question_id"]]
        ends = [t for t in (r["tokens"][: c["new_tokens"][0]], r["tokens"][c["new_tokens"][0]:]) if t]
        for text, n, toks in zip(c["turns"], c["new_tokens"], ends):
            assert count(text) - 1 == n - 1 - (toks[-1] in lm.eos_ids)
    capsys.readouterr()
    answers_main([str(answers)])  # the same formula from the command line, per task
    printed = capsys.readouterr().out.splitlines()
    pld = speed(files["pld"], files["ar"], count)
    assert f"pld | overall | {pld['mean_accepted']:.3f} | {pld['tokens_per_s']:.2f}" in "\n".join(printed)
    assert any(x.startswith("pld | mt_bench |") for x in printed) and any(x.startswith("ar | translation |") for x in printed)


def _kill_after_first_question(argv: list[str], records) -> None:
    """Start the bench in a process of its own and kill it as soon as it has finished one question."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from conftest import NARROW_BENCH, ROOT

    p = subprocess.Popen([sys.executable, str(NARROW_BENCH), *argv], cwd=ROOT,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ, OMP_NUM_THREADS="1"))
    try:
        deadline = time.monotonic() + 300
        while not (records.is_file() and records.read_text().count("\n") >= 1):
            assert p.poll() is None and time.monotonic() < deadline, "the bench ended before a question was written"
            time.sleep(0.02)
        p.send_signal(signal.SIGKILL)
    finally:
        p.wait()


@pytest.mark.slow
@pytest.mark.model
def test_a_killed_run_started_again_writes_each_question_once_with_the_same_tokens(lm, tmp_path):
    qs = _two_turn_and_one(1, 2)
    qfile = _questions(tmp_path, qs)
    # float32 named: dtype=auto decides per thread count, and the killed child runs on one thread (on a CPU with
    # native bf16 it may pick bf16 where this process, on two, picks float32: other tokens).
    common = ["--questions", qfile, "--methods", "ar,pld", "--max-new-tokens", "16", "--warmup", "0", "--dtype", "float32"]
    whole = tmp_path / "whole.json"
    bench.main(common + ["--json", str(whole)])
    answers, out = tmp_path / "answers", tmp_path / "resumed.json"
    argv = common + ["--answers", str(answers), "--json", str(out)]
    _kill_after_first_question(argv, answers / "smollm2-135m.esp.jsonl")
    done = len((answers / "smollm2-135m.esp.jsonl").read_text().splitlines())
    assert 1 <= done < len(qs)
    with open(answers / "smollm2-135m-pld.jsonl", "a") as f:  # as if killed while writing a line
        f.write('{"question_id": 99')
    bench.main(argv)
    for m in ("ar", "pld"):
        rows = [json.loads(x) for x in (answers / f"smollm2-135m-{m}.jsonl").read_text().splitlines()]
        assert [x["question_id"] for x in rows] == [q["question_id"] for q in qs]
    tokens = lambda path: [(r["method"], r["qid"], r["tokens"]) for r in json.loads(path.read_text())["records"]]  # noqa: E731
    assert tokens(out) == tokens(whole)
    with pytest.raises(ESPError, match="holds a run with other arguments .*max_new_tokens 16 there, 12 here"):
        bench.main(common[:-4] + ["--max-new-tokens", "12", "--warmup", "0", "--answers", str(answers)])

"""esp.bench.run: the oracle columns, the cold / hot protocols and transformers' generate() as a reference row."""
from __future__ import annotations

import json

import pytest

from conftest import spec_bench
import esp.bench.run as bench
from esp.bench.run import COLD, HOT, Drafters, protocol_line, protocol_of
from esp.errors import ESPError

LIMIT_KEYS = {"oracle_speedup", "fraction", "curve_speedup", "flat_speedup", "oracle_width_mean"}


def _questions(tmp_path, qs: list[dict]) -> str:
    f = tmp_path / "q.jsonl"
    f.write_text("\n".join(json.dumps(q) for q in qs))
    return str(f)


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


def _forwards(path) -> list[tuple[int, int]]:
    return [(r["qid"], r["forwards"]) for r in json.loads(path.read_text())["records"] if r["method"] == "tr"]


def test_hot_keeps_one_drafter_across_questions_and_cold_a_fresh_one_for_each(lm, tmp_path):
    """The same question twice: a cold tr drafts it the same way both times, a hot one has learnt it."""
    q = next(q for q in spec_bench(1) if q["category"] == "coding")
    qfile = _questions(tmp_path, [q, dict(q, question_id=-1)])
    runs = {}
    for protocol in (COLD, HOT):
        out = tmp_path / f"{protocol}.json"
        bench.main(["--questions", qfile, "--methods", "ar,tr", "--max-new-tokens", "24", "--warmup", "1",
                    "--protocol", protocol, "--json", str(out)])
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

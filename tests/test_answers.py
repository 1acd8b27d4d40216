"""esp.bench.answers: Spec-Bench's answer-file names and lines, the run folder's repair, refusal and merge, and
the reader of Spec-Bench's speed.py formula (no model)."""
from __future__ import annotations

import json

import pytest

from esp.bench.answers import RunFolder, answer_line, method_slug, model_slug, read_lines, speed
from esp.errors import ESPError

ARGS = {"max_new_tokens": 8, "methods": "ar,pld"}


def _line(qid: int, category: str = "writing", turns=(("a b", 3, 1.0, [1, 1, 1]),)) -> dict:
    return answer_line({"question_id": qid, "category": category}, "m",
                       [{"text": t, "tokens": n, "seconds": s, "accept": acc} for t, n, s, acc in turns])


def _write(folder: RunFolder, i: int) -> None:
    folder.write(i, 100 + i, {m: _line(100 + i) for m in folder.methods}, {"rows": [i], "ref": None})


def test_names_follow_spec_bench():
    assert method_slug("hybrid:bc=auto") == "hybrid-bc-auto" and method_slug("ar") == "ar"
    assert model_slug("SmolLM2-135M-Instruct (embedded GGUF)") == "smollm2-135m"
    assert model_slug("meta-llama/Llama-3.1-8B-Instruct") == "llama-3.1-8b"
    f = RunFolder("/tmp/unused-esp-answers", "smollm2-135m", ["hybrid:bc=auto"], ARGS)
    assert f.answers("hybrid:bc=auto").name == "smollm2-135m-hybrid-bc-auto.jsonl"


def test_an_answer_line_holds_spec_bench_s_fields():
    line = _line(7, turns=(("one", 3, 0.5, [1, 2]), ("two", 4, 0.25, [1, 1, 2])))
    assert set(line) == {"question_id", "category", "answer_id", "model_id", "choices", "tstamp"}
    choice = line["choices"][0]
    assert choice == {"index": 0, "turns": ["one", "two"], "decoding_steps": [2, 3], "new_tokens": [3, 4],
                      "wall_time": [0.5, 0.25], "accept_lengths": [1, 2, 1, 1, 2]}


def test_a_reopened_folder_knows_what_is_done_and_repairs_a_cut_off_question(tmp_path):
    folder = RunFolder(str(tmp_path), "m", ["ar", "pld"], ARGS)
    assert folder.open() == {}
    _write(folder, 0)
    _write(folder, 1)
    # Killed while writing question 2: its ar line is whole, pld's half written, no record yet.
    with open(folder.answers("ar"), "a") as f:
        f.write(json.dumps(_line(102)) + "\n")
    with open(folder.answers("pld"), "a") as f:
        f.write(json.dumps(_line(102))[:20])
    again = RunFolder(str(tmp_path), "m", ["ar", "pld"], ARGS)
    assert sorted(again.open()) == [0, 1]
    for m in ("ar", "pld"):
        text = again.answers(m).read_text()
        assert [x["question_id"] for x in read_lines(again.answers(m))] == [100, 101] and text.endswith("}\n")
    _write(again, 2)
    assert [x["question_id"] for x in read_lines(again.answers("pld"))] == [100, 101, 102]


def test_other_arguments_are_refused_with_one_line(tmp_path):
    RunFolder(str(tmp_path), "m", ["ar"], ARGS).open()
    with pytest.raises(ESPError, match=r"other arguments \(max_new_tokens 8 there, 16 here\)") as e:
        RunFolder(str(tmp_path), "m", ["ar"], dict(ARGS, max_new_tokens=16)).open()
    assert "\n" not in str(e.value)


def test_ranks_write_parts_that_rank_0_merges_in_question_order(tmp_path):
    ranks = [RunFolder(str(tmp_path), "m", ["ar"], ARGS, rank=r, world=2) for r in range(2)]
    for r in ranks:
        r.open()
    _write(ranks[1], 1)
    _write(ranks[0], 2)
    _write(ranks[0], 0)
    assert not ranks[0].answers("ar").exists() and len(ranks[0].parts(ranks[0].answers("ar"))) == 2
    # A rerun in a world of three sees every rank's work as done.
    assert sorted(RunFolder(str(tmp_path), "m", ["ar"], ARGS, rank=2, world=3).open()) == [0, 1, 2]
    # Killed before the merge: a world of one repairs what the ranks left and merges it at its end.
    with open(ranks[1].part(ranks[1].answers("ar")), "a") as f:
        f.write(json.dumps(_line(109)) + "\n")  # an answer line whose record was never written
    alone = RunFolder(str(tmp_path), "m", ["ar"], ARGS)
    assert sorted(alone.open()) == [0, 1, 2]
    assert [x["question_id"] for x in read_lines(alone.part(alone.answers("ar"), 1))] == [101]
    ranks[0].merge({100: 0, 101: 1, 102: 2})
    assert [x["question_id"] for x in read_lines(ranks[0].answers("ar"))] == [100, 101, 102]
    assert [x["index"] for x in read_lines(ranks[0].records)] == [0, 1, 2]
    assert not list(tmp_path.glob("*.rank*"))


def test_speed_reads_the_formula_mean_over_questions_and_the_base_counted_from_its_texts(tmp_path):
    method, base = tmp_path / "x.jsonl", tmp_path / "ar.jsonl"
    # question 1: 6 tokens in 1 s over two turns; question 2 (qa): 4 tokens in 2 s.
    method.write_text(json.dumps(_line(1, turns=(("a", 2, 0.5, [1, 1]), ("b", 4, 0.5, [1, 3])))) + "\n"
                      + json.dumps(_line(2, "qa", turns=(("c", 4, 2.0, [2, 2]),))) + "\n")
    # The base's texts: 5 words (count 5, so 4 tokens) in 1 s, and 3 words (2 tokens) in 1 s.
    base.write_text(json.dumps(_line(1, turns=(("w w w w w", 9, 1.0, [1]),))) + "\n"
                    + json.dumps(_line(2, "qa", turns=(("w w w", 9, 1.0, [1]),))) + "\n")
    count = lambda text: len(text.split())  # noqa: E731
    got = speed(method, base, count)
    assert got["mean_accepted"] == pytest.approx(10 / 6)
    assert got["tokens_per_s"] == pytest.approx((6 + 2) / 2) and got["base_tokens_per_s"] == pytest.approx(3)
    assert got["speedup"] == pytest.approx(4 / 3)
    assert speed(method, base, count, "mt_bench")["speedup"] == pytest.approx(6 / 4)
    with pytest.raises(ESPError, match="no answers for task 'rag'"):
        speed(method, base, count, "rag")

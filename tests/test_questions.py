"""The one question loader (esp.bench.questions): the bench, the prior script and the tests select Spec-Bench
questions through it, so that "the first question of each category" means the same everywhere."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import script_module
from esp.bench.questions import load_questions
from esp.errors import ESPError


def write(tmp_path, rows) -> Path:
    path = tmp_path / "q.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    return path


ROWS = [{"question_id": i, "category": c, "turns": [f"{c} {i}"]} for i, c in enumerate("aabbbac")]


make_prior = script_module("make_prior")


def ids(qs: list[dict]) -> list[int]:
    return [q["question_id"] for q in qs]


def test_per_category_ids_and_skip_select_in_file_order(tmp_path):
    path = write(tmp_path, ROWS)
    assert ids(load_questions(path)) == list(range(7))
    assert ids(load_questions(path, 1)) == [0, 2, 6]
    assert ids(load_questions(path, 2, ids=[1, 3, 4, 5, 6])) == [1, 3, 4, 5, 6]
    assert ids(load_questions(str(path), 1, ids=[5, 3])) == [3, 5]


def test_the_prior_s_questions_are_never_the_ones_the_bench_measures(tmp_path):
    """The bench measures `--per-category 1`; scripts/make_prior.py's defaults pick none of those."""
    path = write(tmp_path, ROWS)
    prior = ids(make_prior.questions(make_prior.arguments(["--questions", str(path)])))
    assert prior == [1, 3, 4, 5]  # a: 1 and 5 (not 0), b: 3 and 4 (not 2), c has no second question
    assert not set(prior) & set(ids(load_questions(path, 1)))


@pytest.mark.parametrize("content, says", [
    (None, "not found"), ('{"turns": ["x"]}', ":1 is not a Spec-Bench question"), ("not json", "is not a Spec-Bench"),
    ("", "holds no questions")])
def test_a_bad_file_is_one_line(tmp_path, content, says):
    path = tmp_path / "q.jsonl"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ESPError, match=says) as e:
        load_questions(path)
    assert "\n" not in str(e.value)


def test_ids_that_match_nothing_are_named(tmp_path):
    with pytest.raises(ESPError, match=r"with the ids \[99\]"):
        load_questions(write(tmp_path, ROWS), ids=[99])

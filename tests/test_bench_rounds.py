"""The bench's --batch rounds: ABBA interleaving with generate(), the median ratio and its range per batch size,
in the table, the JSON and BENCHMARKS' batch table (esp.bench.report); fake runs on a fake clock, no model."""
from __future__ import annotations

import json

import pytest

import esp.bench.batch as batch
from esp.bench import report

G, A, H = batch.GENERATE, "ar", "hybrid:bc=auto"


class _LM:
    name, dtype = "fake", "float32"


@pytest.fixture
def fake(monkeypatch):
    """Each run of a part is recorded and advances a fake clock: generate() 2 s a prompt, a method 1 s a prompt
    times `pace[0](i)`, i counting the method's runs (a test slows some down)."""
    calls, now, pace = [], [0.0], [lambda i: 1.0]

    def generate(lm, group, n):
        calls.append(G)
        now[0] += 2.0 * len(group)
        return [([1, 2, 3], 3) for _ in group]

    def engine(lm, part, spec, b, n, static=False):
        now[0] += pace[0](calls.count(spec)) * len(part)
        calls.append(spec)
        return [([1, 2, 3], 2) for _ in part]

    monkeypatch.setattr(batch, "_generate", generate)
    monkeypatch.setattr(batch, "_engine", engine)
    monkeypatch.setattr(batch.time, "perf_counter", lambda: now[0])
    return calls, pace


def test_rounds_interleave_abba_and_give_each_rounds_ratio(fake):
    calls, _ = fake
    runs = batch.throughput(_LM(), [[1]] * 4, [A, H], 1, 8, rounds=3)  # B = 1: a part per prompt
    assert calls == [G, A, H, H, A, G] * 6  # part after part the order reverses: ABBA across parts and rounds
    assert [len(r.rounds) for r in runs.values()] == [3, 3, 3] and runs[A].tokens == [[1, 2, 3]] * 4
    assert runs[A].ratios(runs[G]) == pytest.approx([2.0, 2.0, 2.0])
    calls.clear()
    odd = batch.throughput(_LM(), [[1]] * 3, [A], 1, 8, rounds=2)  # an odd number of parts: the next round goes on
    assert calls == [G, A, A, G, G, A, A, G, G, A, A, G] and len(odd[A].rounds) == 2
    calls.clear()
    batch.throughput(_LM(), [[1]] * 16, [A], 2, 8, rounds=1)  # B = 2: parts of CHUNK batches, generate() per batch
    assert calls == [G] * 4 + [A, A] + [G] * 4


def test_the_report_gives_the_median_and_range_in_the_table_and_the_json(fake, tmp_path, capsys):
    calls, pace = fake
    pace[0] = lambda i: 1.5 if 4 <= i <= 6 else 1.0  # run 0 is the warm-up; 3 parts a round: round 2 is 1.5x slower
    runs = batch.report(_LM(), [[1]] * 24, [A], [2], 8, json_path=str(tmp_path / "b.json"), rounds=3)
    data = json.loads((tmp_path / "b.json").read_text())
    assert data["meta"]["rounds"] == 3
    x = data["runs"][0][A]["x_generate"]
    assert x["rounds"] == pytest.approx([2.0, 1.3333, 2.0], abs=1e-4)
    assert x["median"] == pytest.approx(2.0) and x["min"] == pytest.approx(1.3333, abs=1e-4) and x["max"] == 2.0
    assert "x_generate" not in data["runs"][0][G]
    for key in ("method", "batch", "tokens", "seconds", "tokens_per_s", "tau", "per_prompt"):  # what report.py reads
        assert key in data["runs"][0][A]
    assert "| 2 | ar |" in capsys.readouterr().out and "| 2.000 | 1.333-2.000 |" in batch.table(runs)
    assert "2.00x [1.33-2.00]" in report.batch_table({"methods": [A]}, [data])


def test_static_batches_are_generates_groups_each_run_to_its_end(monkeypatch):
    """--static: the engine decodes the groups generate() gets (a group of one alone, as esp.decode does); by
    default every prompt of the part is handed over at once, `batch` of them in flight."""
    from types import SimpleNamespace

    made = []

    class Alone:
        def __init__(self, lm, drafter, **kw):
            made.append(("alone", None))

        def generate(self, prompt):
            return SimpleNamespace(tokens=prompt, summary=SimpleNamespace(forwards=len(prompt)))

    class Together:
        def __init__(self, lm, drafters, batch_size=None, **kw):
            made.append(("batch", len(drafters), batch_size))

        def generate(self, prompts):
            return [SimpleNamespace(tokens=p, summary=SimpleNamespace(forwards=len(p))) for p in prompts]

    monkeypatch.setattr(batch, "Decoder", Alone)
    monkeypatch.setattr(batch, "BatchDecoder", Together)
    prompts = [[i] for i in range(7)]
    assert batch._engine(None, prompts, "ar", 3, 8, static=True) == [([i], 1) for i in range(7)]
    assert made == [("batch", 3, 3), ("batch", 3, 3), ("alone", None)]
    made.clear()
    assert batch._engine(None, prompts, "ar", 3, 8) == [([i], 1) for i in range(7)]
    assert made == [("batch", 7, 3)]


def test_a_batch_table_of_two_files_stacks_them_with_their_dtype():
    def run(dtype, x):
        return {"meta": {"dtype": f"torch.{dtype}"}, "runs": [{G: {"batch": 2, "tokens_per_s": 10.0, "tau": 1.0, "per_prompt": [[1]]},
                                                               A: {"batch": 2, "tokens_per_s": 10.0 * x, "tau": 1.0, "per_prompt": [[1]]}}]}
    page = report.batch_table({"methods": [A]}, [run("float32", 1.1), run("bfloat16", 0.9)])
    assert "| dtype | B |" in page and "| float32 | 2 | 10.0 | 1.10x" in page and "| bfloat16 | 2 | 10.0 | 0.90x" in page
    assert "dtype" not in report.batch_table({"methods": [A]}, [run("float32", 1.1)])


def test_old_batch_files_without_rounds_still_render():
    old = {"runs": [{G: {"batch": 4, "tokens_per_s": 10.0, "tau": 1.0, "per_prompt": [[1]]},
                     A: {"batch": 4, "tokens_per_s": 9.7, "tau": 1.0, "per_prompt": [[1]]}}]}
    assert "0.97x (1.00)" in report.batch_table({"methods": [A]}, [old])


def test_rounds_below_one_are_refused_with_one_line(capsys):
    from conftest import QUESTIONS
    import esp.bench.run as bench

    with pytest.raises(SystemExit):
        bench.main(["--questions", str(QUESTIONS), "--batch", "2", "--rounds", "0"])
    assert "--rounds must be at least 1." in capsys.readouterr().err

"""The command lines: their contract, and one clear line for every bad input."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import QUESTIONS, ROOT, spec_bench
import esp.bench.run as bench
from esp.bench.run import record
from esp.decoding.engine import Decoder
from esp.errors import ESPError
from esp.methods import build


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args,needle", [
    (["esp.bench", "--questions", str(QUESTIONS), "--methods", "ar,warp"], "Unknown method 'warp'"),
    (["esp.bench", "--questions", str(QUESTIONS), "--methods", "esp:k=9"], "k (mask tokens)"),
    (["esp.bench", "--questions", str(QUESTIONS), "--methods", "esp:depth=3"], "unknown setting"),
    (["esp.bench", "--questions", str(QUESTIONS), "--methods", "esp:bc=ten"], "must be an integer or 'auto'"),
    (["esp.bench", "--questions", "/nonexistent.jsonl"], "not found"),
    (["esp.bench", "--questions", str(QUESTIONS), "--per-category", "0"], "--per-category"),
    (["esp.bench", "--questions", str(QUESTIONS), "--repeats", "0"], "--repeats"),
    (["esp.bench", "--questions", str(QUESTIONS), "--k", "2", "--bc", "5"], "too small"),
    (["esp.generate", "--prompt", "hi", "--lam", "2"], "lambda"),
    (["esp.generate", "--prompt", "hi", "--model", "no such model"], "Unknown model"),
    (["esp.bench", "--questions", str(QUESTIONS), "--dtype", "float8"], "--dtype must be one of auto, float32, bfloat16, float16"),
    (["esp.generate", "--prompt", "hi", "--dtype", "half"], "--dtype must be one of"),
])
def test_bad_arguments_exit_nonzero_with_one_line(args, needle, capsys):
    """In this process (each command's `main` through `run_main`, as `python -m` runs it), to keep the suite's
    time; the next test runs two of them as real processes."""
    import esp.generate
    from esp.cli import run_main

    main = {"esp.bench": bench.main, "esp.generate": esp.generate.main}[args[0]]
    with pytest.raises(SystemExit) as e:
        run_main(lambda: main(args[1:]))
    assert e.value.code not in (0, None)
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in err, err


@pytest.mark.parametrize("args,needle", [
    (["esp.bench", "--questions", str(QUESTIONS), "--methods", "ar,warp"], "Unknown method 'warp'"),
    (["esp.generate", "--prompt", "hi", "--dtype", "half"], "--dtype must be one of"),
])
@pytest.mark.slow
def test_bad_arguments_exit_nonzero_with_one_line_from_the_command(args, needle):
    r = _run(*args)
    assert r.returncode != 0
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in r.stderr, r.stderr


@pytest.mark.model
def test_bench_contract_on_the_embedded_model(lm, tmp_path, capsys):
    picked = [q for q in spec_bench(1) if q["category"] in ("translation", "coding")]
    qfile = tmp_path / "q.jsonl"
    qfile.write_text("\n".join(json.dumps(q) for q in picked))
    out = tmp_path / "r.json"
    bench.main(["--questions", str(qfile), "--methods", "ar,esp:k=1:bc=10", "--max-new-tokens", "16",
                "--warmup", "0", "--dtype", "float32", "--json", str(out), "--markdown", str(tmp_path / "t.md")])
    res = json.loads(out.read_text())["results"]
    assert set(res) == {"ar", "esp:k=1:bc=10"}
    for m, r in res.items():
        assert set(r) >= {"tau", "tokens_per_s", "speedup", "lossless", "per_category"}
        assert r["lossless"] is True
        assert set(r["per_category"]) == {"translation", "coding"}
        assert all(c["n"] == 1 for c in r["per_category"].values())
    assert res["ar"]["tau"] == 1.0 and res["ar"]["speedup"] == 1.0
    assert res["esp:k=1:bc=10"]["tau"] > 1.0
    for r in res.values():  # float32: exact on every question, not merely "no failure"
        assert r["verdict"] == {"exact": 2, "near_tie": 0, "failure": 0, "max_gap": 0.0}
    data = json.loads(out.read_text())
    assert data["meta"]["dtype"] == "float32"
    for rec in data["records"]:  # the top-2 of the row that chose every emitted token, the chosen one first
        assert len(rec["top2"]) == rec["n_tokens"]
        assert [t[0] for t in rec["top2"]] == rec["tokens"] and all(t[1] >= t[3] for t in rec["top2"])
    printed = capsys.readouterr().out
    assert "overall" in printed and "esp:k=1:bc=10" in printed
    assert "exact / near-tie / failure" in printed and "2 / 0 / 0" in printed
    assert (tmp_path / "t.md").read_text().startswith("| category |")


@pytest.mark.model
def test_bench_repeats_keep_each_question_s_median_run(lm, tmp_path, monkeypatch):
    qfile = tmp_path / "q.jsonl"
    qfile.write_text(json.dumps(spec_bench(1)[0]))
    made = []
    monkeypatch.setattr(bench, "record", lambda *a: made.append(record(*a)) or made[-1])
    out = tmp_path / "r.json"
    bench.main(["--questions", str(qfile), "--methods", "ar,pld", "--max-new-tokens", "8", "--warmup", "0",
                "--repeats", "3", "--json", str(out)])
    kept = json.loads(out.read_text())["records"]
    assert [r["method"] for r in made] == ["ar", "pld", "pld", "ar", "ar", "pld"]  # interleaved, the order turning
    for r in kept:
        times = sorted(m["seconds"] for m in made if m["method"] == r["method"])
        assert r["seconds"] == times[1]


def test_aggregate_is_pooled_tau_and_ratio_of_means():
    rows = [
        {"qid": 1, "category": "a", "method": "ar", "tokens": [1, 2], "n_tokens": 2, "forwards": 2, "tokens_per_s": 10.0},
        {"qid": 2, "category": "b", "method": "ar", "tokens": [3], "n_tokens": 4, "forwards": 4, "tokens_per_s": 30.0},
        {"qid": 1, "category": "a", "method": "x", "tokens": [1, 2], "n_tokens": 2, "forwards": 1, "tokens_per_s": 30.0},
        {"qid": 2, "category": "b", "method": "x", "tokens": [9], "n_tokens": 4, "forwards": 3, "tokens_per_s": 30.0},
    ]
    r = bench.aggregate(rows, ["ar", "x"])["x"]
    assert r["tau"] == pytest.approx(6 / 4)
    assert r["speedup"] == pytest.approx(30 / 20)
    assert r["per_category"]["a"] == {"tau": 2.0, "speedup": 3.0, "n": 1}
    assert r["lossless"] is False


def test_aggregate_counts_exact_near_tie_and_failure_in_the_run_s_dtype():
    """bf16 at logits in [16, 32) has a rounding unit of 0.125: a flip between two tokens 0.25 apart is a
    near-tie (2 units); a flip to a token 2.0 behind (16 units) is a failure, as is one outside the top 2."""
    ar_top2 = [[5, 20.0, 6, 19.75], [7, 20.0, 8, 18.0], [1, 20.0, 2, 10.0]]
    base = {"category": "a", "method": "ar", "n_tokens": 3, "forwards": 3, "tokens_per_s": 1.0}
    rows = [dict(base, qid=q, tokens=[5, 7, 1], top2=ar_top2) for q in range(4)]
    x = dict(base, method="x")
    rows += [dict(x, qid=0, tokens=[5, 7, 1], top2=ar_top2),
             dict(x, qid=1, tokens=[6, 7, 1], top2=[[6, 20.0, 5, 19.875]] + ar_top2[1:]),
             dict(x, qid=2, tokens=[5, 8, 1], top2=[ar_top2[0], [8, 20.0, 7, 19.0], ar_top2[2]]),
             dict(x, qid=3, tokens=[5, 7, 3], top2=ar_top2[:2] + [[3, 20.0, 1, 19.9]])]
    r = bench.aggregate(rows, ["ar", "x"], "bfloat16")
    assert r["ar"]["verdict"] == {"exact": 4, "near_tie": 0, "failure": 0, "max_gap": 0.0} and r["ar"]["lossless"]
    assert r["x"]["verdict"] == {"exact": 1, "near_tie": 1, "failure": 2, "max_gap": 16.0}
    assert r["x"]["lossless"] is False
    only_tie = bench.aggregate(rows[:6], ["ar", "x"], "bfloat16")["x"]
    assert only_tie["lossless"] is True and only_tie["verdict"]["near_tie"] == 1
    assert bench.aggregate(rows[:6], ["ar", "x"], "float32")["x"]["verdict"]["failure"] == 1  # fp32: 2^16 units
    table = bench.table(r)
    assert "1 / 1 / 2" in table and "16.00" in table


@pytest.mark.model
def test_engine_rejects_empty_and_overlong_prompts(lm):
    dec = Decoder(lm, build("esp"), max_new_tokens=16)
    with pytest.raises(ESPError, match="empty"):
        dec.check_prompt([])
    with pytest.raises(ESPError, match="context"):
        list(dec.stream([1] * lm.max_context))
    with pytest.raises(ESPError, match="max new tokens"):
        Decoder(lm, max_new_tokens=0)


def test_unknown_model_names_fail_fast():
    from esp.models.loader import load

    with pytest.raises(ESPError, match="Unknown model"):
        load("definitely not a model")
    with pytest.raises(ESPError, match="Could not load model"):
        load("nobody-here/no-such-model-xyz")

"""Sharded benchmark: round-robin shares, and a 2-process torchrun (gloo, CPU) equal to a 1-process run."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import NARROW_BENCH, ROOT, spec_bench
from esp.bench.shard import Shard, start

TIMED = ("seconds", "tokens_per_s", "fed_s", "oracle_s", "flat_s")  # the last three: priced on a curve swept per run


def test_shares_are_round_robin_and_cover_every_question():
    shards = [Shard(r, 3) for r in range(3)]
    assert [s.mine(7) for s in shards] == [[0, 3, 6], [1, 4], [2, 5]]
    assert Shard(4, 5).mine(3) == []  # more processes than questions: an idle rank
    assert sorted(i for s in shards for i in s.mine(7)) == list(range(7))


def test_without_a_launcher_it_is_a_world_of_one(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    shard = start()
    assert (shard.rank, shard.world, shard.main, shard.device()) == (0, 1, True, None)
    assert shard.gather({"x": 1}) == [{"x": 1}]
    shard.leave()  # a world of one returns (a launched rank would end here, and pytest with it)


def _bench(tmp_path, name: str, launcher: list[str], extra: tuple[str, ...] = ()) -> dict:
    out = tmp_path / f"{name}.json"
    args = [str(NARROW_BENCH), "--questions", str(tmp_path / "q.jsonl"),
            "--methods", "ar,pld,esp:k=1:bc=10", "--max-new-tokens", "8", "--warmup", "0", "--turns", "first",
            "--json", str(out), "--markdown", str(tmp_path / f"{name}.md"), *extra]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, *launcher, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "[transformers]" not in r.stderr, r.stderr[-3000:]  # loading one model per rank stays quiet
    return json.loads(out.read_text())


@pytest.mark.slow
def test_two_processes_give_the_single_process_records(tmp_path):
    qs = spec_bench(1)[:3]  # three questions: the ranks get unequal shares
    (tmp_path / "q.jsonl").write_text("\n".join(json.dumps(q) for q in qs))
    one = _bench(tmp_path, "one", [])
    torchrun = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    answers = tmp_path / "answers"
    two = _bench(tmp_path, "two", torchrun, ("--answers", str(answers)))
    strip = lambda rows: [{k: v for k, v in r.items() if k not in TIMED} for r in rows]  # noqa: E731
    assert [r["qid"] for r in two["records"]] == [q["question_id"] for q in qs for _ in range(3)]  # question order
    assert strip(two["records"]) == strip(one["records"])
    unmade = lambda meta: {k: v for k, v in meta.items() if k not in ("provenance", "curve")}  # noqa: E731 (its command differs; each run swept its curve)
    assert unmade(two["meta"]) == unmade(one["meta"])
    for m, r in one["results"].items():
        assert (two["results"][m]["tau"], two["results"][m]["lossless"]) == (r["tau"], r["lossless"])
    assert (tmp_path / "two.md").read_text().startswith("| category |")
    # Each rank wrote its share apart; rank 0 merged them into one file per method, in question order.
    assert not list(answers.glob("*.rank*"))
    for m in ("ar", "pld", "esp-k-1-bc-10"):
        lines = (answers / f"smollm2-135m-{m}.jsonl").read_text().splitlines()
        assert [json.loads(x)["question_id"] for x in lines] == [q["question_id"] for q in qs]
    # Started again, every rank finds its share done: nothing runs, the same records come back.
    again = _bench(tmp_path, "again", torchrun, ("--answers", str(answers)))
    assert strip(again["records"]) == strip(two["records"])
    assert [r["seconds"] for r in again["records"]] == [r["seconds"] for r in two["records"]]

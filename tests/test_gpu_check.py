"""The prepared GPU check (scripts/gpu_check.sh) on a CPU: each of its parts, `python -m esp.bench costs` and
`verdict --random`, `python -m scripts.gpu_batch`, finishes with tiny shapes and writes the fields the docs name
(docs/space_and_gpu.md); the script refuses a machine without CUDA."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from conftest import ROOT

pytestmark = pytest.mark.slow  # subprocesses that build models

SIZES = ["1", "2", "4", "8", "16", "32", "48", "64", "96", "128"]
CONFIGS = {"k=1 bc=60 static", "k=2 bc=60 static", "k=2 bc=60 dynamic", "hybrid bc=60"}
TREES = {"k=1 static [29]", "k=2 static [15,4]", "k=2 dynamic N=19"}


def test_costs_tiny_writes_the_documented_json(tmp_path):
    out = tmp_path / "gpu.json"
    r = subprocess.run([sys.executable, "-m", "esp.bench", "costs", "--tiny", "--json", str(out)], cwd=ROOT,
                       env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(out.read_text())
    assert set(res) >= {"provenance", "device", "torch", "transformers", "dtype", "tiny", "context", "repeats", "prompts",
                        "tokens", "models", "builders_us", "seconds"}
    assert res["provenance"]["command"] == f"python -m esp.bench costs --tiny --json {out}"
    assert res["tiny"] is True and set(res["models"]) == {"llama-3.1-8b", "qwen3-8b"}
    for name, m in res["models"].items():
        assert set(m) >= {"config", "params", "build_s", "curve_ms", "curve_ratio", "overhead", "peak_gib"}
        assert list(m["curve_ms"]) == SIZES and all(v > 0 for v in m["curve_ms"].values())
        assert m["curve_ratio"]["1"] == 1.0
        assert set(m["overhead"]) == CONFIGS
        for o in m["overhead"].values():
            assert set(o) >= {"mean_ms", "median_ms", "engine_share", "steps"} and 0 < o["engine_share"] < 1
            assert set(o["mean_ms"]) >= {"draft", "mask", "forward", "verify", "commit", "trace", "total"}
    assert {m["config"]["model_type"] for m in res["models"].values()} == {"llama", "qwen3"}
    assert set(res["builders_us"]) == TREES
    for b in res["builders_us"].values():
        assert b["naive"] > 0 and b["efficient"] > 0 and b["ratio"] == b["naive"] / b["efficient"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without CUDA")
def test_costs_refuses_a_cpu_without_tiny(tmp_path):
    r = subprocess.run([sys.executable, "-m", "esp.bench", "costs", "--json", str(tmp_path / "x.json")], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode != 0 and len(lines) == 1 and "no CUDA device" in lines[0]


def test_verdict_random_tiny_runs_every_method_alone_and_batched_through_the_verdict(tmp_path):
    out = tmp_path / "verdict.json"
    r = subprocess.run([sys.executable, "-m", "esp.bench", "verdict", "--random", "--tiny", "--batch", "2", "--json", str(out)],
                       cwd=ROOT, env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    res = json.loads(out.read_text())
    assert res["ok"] is True and set(res["dtypes"]) == {"float32", "bfloat16"} and res["device"] == "cpu"
    methods = {"esp", "pld", "stand", "lade", "tr", "hybrid:bc=auto", "hybrid:bc=60"}
    for name, d in res["dtypes"].items():
        assert set(d["verdicts"]) == methods | {f"{m} B=2" for m in methods} and d["ok"] is True
        assert set(d["tau"]) == methods and all(t >= 1.0 for t in d["tau"].values())
        for v in d["verdicts"].values():
            assert v["failure"] == 0 and v["exact"] + v["near_tie"] == res["questions"]
    assert all(v["exact"] == res["questions"] for v in res["dtypes"]["float32"]["verdicts"].values())


def test_gpu_batch_tiny_checks_every_method_in_a_batch_and_through_model_generate(tmp_path):
    out = tmp_path / "batch.json"
    r = subprocess.run([sys.executable, "-m", "scripts.gpu_batch", "--tiny", "--batch", "4", "--json", str(out)], cwd=ROOT,
                       env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    res = json.loads(out.read_text())
    assert res["device"] == "cpu" and {row["method"] for row in res["batch"]} >= {"ar", "esp", "hybrid:bc=auto"}
    assert all(row["same_as_alone"] == 4 for row in res["batch"])
    assert [c["equal_to_generate"] for c in res["custom_generate"]] == [True, True, True]
    views = res["views"]
    assert views["spec"] == "esp:k=2:bc=30" and set(views["ms_per_step"]) == {"app views", "no views"}
    assert all(v > 0 for v in views["ms_per_step"].values())
    assert views["ratio"] == pytest.approx(views["ms_per_step"]["app views"] / views["ms_per_step"]["no views"], rel=1e-2)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without CUDA")
def test_gpu_check_script_refuses_a_machine_without_cuda(tmp_path):
    r = subprocess.run(["bash", "scripts/gpu_check.sh"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHON=sys.executable, OUT=str(tmp_path)))
    assert r.returncode == 1 and "no CUDA" in r.stderr and not list(tmp_path.iterdir())

"""The model-size view: built from the shipped results with no model, a message for a missing or odd file,
and the file `python -m esp.bench model-size` writes agreeing with the bench results it was made from."""
from __future__ import annotations

import json

import plotly.graph_objects as go
import pytest

from components.size_view import ESP, RESULTS, load_sizes, size_figure, size_sentences
from conftest import ROOT
from esp.bench import model_size

BENCH = {"embedded": ROOT / "docs" / "results" / "size_smollm2_135m.json",
         "qwen2.5-coder-0.5b": ROOT / "docs" / "results" / "size_qwen05_bf16.json",
         "qwen2.5-coder-1.5b": ROOT / "docs" / "results" / "size_qwen15_bf16.json"}


def test_shipped_results_match_the_bench_files():
    runs = {r["model"]: r for r in load_sizes()["runs"]}
    assert set(BENCH) <= set(runs)
    for model, path in BENCH.items():
        bench = json.loads(path.read_text())
        assert runs[model]["questions"] == bench["meta"]["questions"]
        for method, r in bench["results"].items():
            assert runs[model]["results"][method]["tau"] == pytest.approx(r["tau"], abs=1e-4)
            assert runs[model]["results"][method]["lossless"] == r["lossless"]


def test_figure_and_sentence_from_the_shipped_file():
    fig = size_figure()
    go.Figure(fig.to_dict())
    runs = sorted(load_sizes()["runs"], key=lambda r: r["params_m"])
    esp = next(t for t in fig.data if t.name.startswith("ESP"))
    assert list(esp.x) == [r["label"] for r in runs]
    assert list(esp.y) == [r["results"][ESP]["tau"] for r in runs]
    assert {t.name for t in fig.data} >= {"PLD", "STAND", "LADE"}
    words = size_sentences()
    assert "SmolLM2-135M ESP reaches τ 1.30, below" in words and "Qwen2.5-Coder-0.5B ESP reaches τ 1.54, above" in words
    assert "Why the margin grows" in words


@pytest.mark.parametrize("content, says", [
    (None, "No model-size results"),
    ("{not json", "is not a model-size results file"),
    ('{"runs": [{"label": "x"}]}', "no 'params_m' field"),
    ('{"runs": []}', "holds no runs"),
    ('[1, 2]', "is not a model-size results file"),
])
def test_missing_or_odd_file_gives_a_message(tmp_path, content, says):
    path = tmp_path / "sizes.json"
    if content is not None:
        path.write_text(content)
    fig = size_figure(path)
    assert not fig.data and says in fig.layout.annotations[0].text
    assert says in size_sentences(path)


def test_the_command_adds_and_replaces_runs(tmp_path):
    bench = json.loads(BENCH["embedded"].read_text())
    first = model_size.update(None, [bench], "cmd", "here")
    assert [r["label"] for r in first["runs"]] == ["SmolLM2-135M"] and first["runs"][0]["params_m"] == 135
    qwen = json.loads(BENCH["qwen2.5-coder-0.5b"].read_text())
    both = model_size.update(first, [qwen], "cmd2", "there")
    assert [r["params_m"] for r in both["runs"]] == [135, 500] and both["command"] == "cmd2"
    bench["results"]["pld"]["tau"] = 9.0  # a re-run of the same model replaces its run
    again = model_size.update(both, [bench], "cmd3", "there")
    assert len(again["runs"]) == 2 and again["runs"][0]["results"]["pld"]["tau"] == 9.0
    path = tmp_path / "sizes.json"
    path.write_text(json.dumps(again))
    assert size_figure(path).data  # the view reads what the script writes
    with pytest.raises(ValueError, match="Cannot tell the size"):
        model_size.model_of("some-model")
    assert model_size.model_of("Qwen2.5-Coder-1.5B-Instruct (offline GGUF)") == ("qwen2.5-coder-1.5b", "Qwen2.5-Coder-1.5B", 1500)
    assert RESULTS.exists()

"""docs/BENCHMARKS.md is written from docs/results/ by `python -m esp.bench.report`: regenerated, it is the same page;
every table names its machine, date and command; invalid cells are blank; and every figure the README quotes is one
the results give."""
from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest

from conftest import ROOT
from esp.bench import report
from esp.bench.provenance import FLAGS, cpu, note_kernels, provenance

PAGE = ROOT / "docs" / "BENCHMARKS.md"


@pytest.fixture(scope="module")
def page() -> str:
    return report.render()


def test_regenerated_benchmarks_equal_the_committed_page(tmp_path):
    out = tmp_path / "BENCHMARKS.md"
    report.main(["--out", str(out)])
    assert out.read_text() == PAGE.read_text(), f"docs/BENCHMARKS.md drifted from docs/results/: run {report.COMMAND}"
    with pytest.raises(SystemExit) as done:
        report.main(["--out", str(out), "--check"])
    assert done.value.code == 0
    text = out.read_text()
    figure = re.search(r"\b\d\.\d\dx", text).group()  # any measured figure, changed by a hundredth
    out.write_text(text.replace(figure, f"{float(figure[:-1]) + 0.01:.2f}x", 1))
    with pytest.raises(SystemExit) as done:
        report.main(["--out", str(out), "--check"])
    assert done.value.code == 1


def test_the_page_is_short_names_its_command_and_every_table_its_machine_date_and_command(page):
    lines = page.splitlines()
    assert len(lines) < 300 and report.COMMAND in "\n".join(lines[:5])
    manifest = json.loads((report.RESULTS / "manifest.json").read_text())
    heads = [i for i, line in enumerate(lines) if line.startswith("### ")]
    titles = [lines[i][4:].split(" · ")[0] for i in heads]  # grouped by machine class, the manifest's order within
    assert sorted(titles) == sorted(entry["title"] for entry in manifest["tables"])
    for i in heads:
        title, machine, date = lines[i][4:].split(" · ")
        assert "cores" in machine and re.match(r"20\d\d-\d\d-\d\d", date)
        assert lines[i + 2] == "```" and lines[i + 3].startswith(("python ", "OMP_NUM_THREADS=1 python "))


def test_a_bench_table_s_title_states_the_questions_tokens_and_rounds_its_file_ran():
    """A title is written by hand; where it counts the questions, the new tokens or the rounds, the file must agree
    (the budget tables once kept a title from an earlier protocol)."""
    manifest = json.loads((report.RESULTS / "manifest.json").read_text())
    checked = 0
    for entry in manifest["tables"]:
        if entry["kind"] != "bench":
            continue
        for name in entry["files"]:
            meta = json.loads((report.RESULTS / name).read_text()).get("meta", {})
            for pattern, key in ((r"(\d+) questions", "questions"), (r"(\d+) tokens", "max_new_tokens"),
                                 (r"(\d+) interleaved rounds", "repeats")):
                said = re.search(pattern, entry["title"])
                if said and key in meta:
                    assert int(said.group(1)) == meta[key], (entry["title"], name, key, meta[key])
                    checked += 1
    assert checked >= 9  # the three budget tables' questions, tokens and rounds at least


def test_invalid_cells_are_blank_not_printed(page):
    assert "111.54x" not in page and "95.12x" not in page  # the 1.5B run's broken summarization timings
    for cell in (c.strip() for line in page.splitlines() if line.startswith("|") for c in line.split("|")):
        assert not re.search(r"\b(nan|inf|None)\b", cell, re.I), cell


def test_every_figure_the_readme_quotes_is_in_a_results_file(page):
    quoted = report.quoted((ROOT / "README.md").read_text())
    assert {"1.60x", "1.65x", "90%"} <= quoted  # the headline is there to be checked
    assert quoted <= report.figures(page), f"figures not in any results file: {sorted(quoted - report.figures(page))}"


def test_what_counts_as_a_quoted_figure():
    text = ("---\ntitle: x 1.5x\n---\nPython 3.10+, arXiv 2603.17942: 1.53x and 90% in prose, tau 1.59 not.\n"
            "```\n2.5x in code\n```\n| a | 1.59 | 0.5B |\n")
    assert report.quoted(text) == {"1.53x", "90%", "1.59"}


def results(tmp_path, files: dict[str, dict], entry: dict) -> str:
    manifest = {"machines": {"old": {"cpu": "Old CPU", "flags": None, "cores": 2}},
                "tables": [{"kind": "bench", "title": "t", "files": list(files), "machine": "old", "date": "2026-01-01",
                            "command": "python -m esp.bench --old", **entry}]}
    for name, data in {**files, "manifest.json": manifest}.items():
        (tmp_path / name).write_text(json.dumps(data))
    return report.render(tmp_path)


def bench_file(made: dict | None) -> dict:
    r = {"tau": 1.5, "speedup": 1.2, "verdict": {"exact": 1, "near_tie": 0, "failure": 0}}
    return {"meta": {"provenance": made} if made else {}, "results": {"ar": {**r, "tau": 1.0, "speedup": 1.0}, "x": r}}


def test_a_file_s_own_provenance_wins_over_the_manifest(tmp_path):
    old = results(tmp_path, {"a.json": bench_file(None)}, {})
    assert "### t · Old CPU, 2 cores, class unknown (flags not recorded) · 2026-01-01" in old
    assert "## Machine class unknown" in old and "python -m esp.bench --old" in old
    made = {"machine": {"cpu": "New CPU", "flags": ["avx2", "amx_bf16"], "isa": "AMX", "emulated": False, "cores": 16},
            "date": "2026-12-03T10:00:00Z", "command": "python -m esp.bench --new"}
    new = results(tmp_path, {"a.json": bench_file(made)}, {})
    assert "## AMX CPUs\n\n### t · New CPU, 16 cores, class AMX (avx2 amx_bf16) · 2026-12-03 10:00:00 UTC" in new
    assert "python -m esp.bench --new" in new and "--old" not in new and "unknown" not in new
    other = {**made, "machine": {**made["machine"], "cpu": "Other CPU"}}
    with pytest.raises(ValueError, match="one machine per table"):
        results(tmp_path, {"a.json": bench_file(made), "b.json": bench_file(other)}, {})


def test_a_table_s_machine_line_names_the_packed_kernels_its_file_ran_on(tmp_path):
    made = {"machine": {"cpu": "New CPU", "flags": ["avx2"], "isa": "AVX2", "emulated": False, "cores": 2},
            "date": "2026-12-05T10:00:00Z", "command": "python -m esp.bench --new"}
    note_kernels(made, SimpleNamespace(packed=True))
    page = results(tmp_path, {"a.json": bench_file(made)}, {})
    assert "### t · New CPU, 2 cores, class AVX2 (avx2), oneDNN packed kernels · 2026-12-05" in page
    note_kernels(made, SimpleNamespace(packed=False))
    assert made["machine"]["kernels"] == "default" and "packed" not in results(tmp_path, {"a.json": bench_file(made)}, {})


def test_a_table_s_machine_line_and_its_group_come_from_its_results_file(tmp_path, monkeypatch):
    """The class a table is grouped under and named with is the one its file recorded: a run held to AVX2 on an
    AVX512-BF16 CPU says it is emulated and what held it; files of two classes make two groups."""
    import esp.bench.provenance as provenance
    import esp.device

    monkeypatch.setattr(esp.device, "hardware_flags", lambda: {"avx2", "avx512f", "avx512_bf16"})
    monkeypatch.setattr(provenance, "hardware_flags", esp.device.hardware_flags)
    monkeypatch.setattr(esp.device, "cpu_capability", lambda: "AVX2")  # what ATEN_CPU_CAPABILITY=avx2 makes torch say
    for hold in esp.device.HOLDS:
        monkeypatch.delenv(hold, raising=False)
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    made = provenance.provenance(["--x"])
    assert made["machine"]["isa"] == "AVX2" and made["machine"]["emulated"]
    assert made["machine"]["isa_hardware"] == "AVX512-BF16" and made["machine"]["held"] == {"ATEN_CPU_CAPABILITY": "avx2"}
    native = {**made, "machine": {**made["machine"], "isa": "AVX512-BF16", "emulated": False, "cpu": "Native CPU"}}
    for name, data in {"a.json": bench_file(made), "b.json": bench_file(native)}.items():
        (tmp_path / name).write_text(json.dumps(data))
    entry = {"kind": "bench", "date": "2026-01-01", "command": "python -m esp.bench --old", "machine": "old"}
    manifest = {"machines": {"old": {"cpu": "Old CPU", "flags": None, "cores": 2}},
                "tables": [{**entry, "title": "held", "files": ["a.json"]}, {**entry, "title": "native", "files": ["b.json"]}]}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    page = report.render(tmp_path)
    held = next(line for line in page.splitlines() if line.startswith("### held"))
    assert "class AVX2 (emulated) on an AVX512-BF16 CPU held by ATEN_CPU_CAPABILITY=avx2" in held
    assert page.index("## AVX2 (emulated) CPUs") < page.index("### held") < page.index("## AVX512-BF16 CPUs") < page.index(
        "### native")


def test_a_run_on_a_shared_machine_keeps_its_tau_and_loses_its_timings(tmp_path):
    page = results(tmp_path, {"a.json": bench_file(None)}, {"tau_only": ["a.json"]})
    assert "| `x` | 1.50 |  |" in page and "1.20x" not in page


def test_provenance_names_the_machine_the_date_and_the_command():
    name, flags = cpu("model name\t: Some CPU\nflags\t\t: fpu avx2 avx512f amx_bf16 sse\n")
    assert name == "Some CPU" and flags == ["avx2", "avx512f", "amx_bf16"] and set(flags) <= set(FLAGS)
    made = provenance(["--questions", "q file.jsonl"], "python -m esp.bench")
    assert made["command"] == "python -m esp.bench --questions 'q file.jsonl'"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", made["date"])
    assert {"cpu", "flags", "isa", "emulated", "cores", "threads", "gpu", "python", "torch", "transformers"} <= set(
        made["machine"])
    assert made["machine"]["isa"] in ("AVX2", "AVX512", "AVX512-BF16", "AMX", "other")


def test_the_verdict_command_s_file_makes_a_table(tmp_path):
    tally = lambda e, n, g: {"exact": e, "near_tie": n, "failure": 0, "max_gap": g}  # noqa: E731
    verdict = {"provenance": {"machine": {"cpu": "C", "flags": [], "cores": 2}, "date": "2026-12-03T00:00:00Z",
                              "command": "python -m esp.bench verdict --json v.json"},
               "dtypes": {"bfloat16": {"verdicts": {"ar vs generate()": tally(2, 1, 1.0), "pld": tally(3, 0, 0.0),
                                                    "pld B=4": tally(1, 2, 2.0)}, "ok": True}}}
    page = results(tmp_path, {"v.json": verdict}, {"kind": "lossless"})
    assert "### t · C, 2 cores, class unknown (none of avx2, avx512f, avx512_bf16, amx_bf16) · 2026-12-03 00:00:00 UTC" in page
    assert "| bfloat16 | `pld` | 3 / 0 / 0 | 0.0 | 1 / 2 / 0 | 2.0 |" in page and "batches of 4" in page
    assert "| bfloat16 | `ar vs generate()` | 2 / 1 / 0 | 1.0 |  |  |" in page


def test_the_lens_table_reads_each_model_at_its_own_eighths_of_depth(tmp_path):
    """Two models of 8 and 16 layers: each row takes the layer at that fraction of its own depth; both commands."""
    def lens_file(layers: int, model: str) -> dict:
        kinds = {k: {"n": n, "median_rank": [100 * i + base for i in range(layers + 1)],
                     "top5_rate": [i / layers for i in range(layers + 1)]} for k, n, base in (("accepted", 3, 1), ("rejected", 5, 2))}
        made = {"machine": {"cpu": "C", "flags": [], "cores": 2}, "date": "2026-12-03T00:00:00Z",
                "command": f"python -m esp.bench --lens --model {model}"}
        return {"meta": {"model": f"{model} (offline GGUF)", "provenance": made}, "results": {"esp": {"lens": kinds}}}

    page = results(tmp_path, {"a.json": lens_file(8, "small"), "b.json": lens_file(16, "big")}, {"kind": "lens"})
    assert "| depth | small (8 layers) | big (16 layers) |" in page and "| masks, accepted / rejected | 3 / 5 | 3 / 5 |" in page
    assert "| 4/8 | 401 / 402 (50% / 50%) | 801 / 802 (50% / 50%) |" in page  # layer 4 of 8, layer 8 of 16
    assert "| 8/8 (output) | 801 / 802 (100% / 100%) | 1601 / 1602 (100% / 100%) |" in page
    assert "--lens --model small\npython -m esp.bench --lens --model big" in page


def test_the_gpu_table_projects_from_a_cpu_tau_and_the_gpu_s_measured_step(tmp_path):
    """The GPU check's files make one table: the curve as ratios, each step with its engine share, and the projection
    tau x t(1) / step, whose tau comes from a CPU run's file (cited, not the table's machine); a file written before its
    script recorded provenance takes the manifest's command."""
    made = {"machine": {"cpu": "Host", "flags": [], "cores": 16, "gpu": "Some GPU"}, "date": "2026-12-04T00:00:00Z",
            "command": "python -m esp.bench costs --json c.json"}
    step = lambda total, share: {"mean_ms": {"total": total}, "median_ms": {}, "engine_share": share, "steps": 9}  # noqa: E731
    model = {"curve_ms": {"1": 20.0, "64": 25.0}, "curve_ratio": {"1": 1.0, "64": 1.25},
             "overhead": {"k=1 bc=60 static": step(25.0, 0.05), "hybrid bc=60": step(40.0, 0.1)}}
    costs = {"provenance": made, "models": {"shape-a": model}, "builders_us": {"k=1 static [29]": {"efficient": 50.0, "naive": 2500.0}}}
    batch = {"tokens": 64, "batch": [{"method": "esp", "batch": 8, "same_as_alone": 8}],
             "custom_generate": [{"method": "esp", "equal_to_generate": True}],
             "views": {"spec": "esp:k=2:bc=30", "dtype": "bfloat16", "rounds": 6,
                       "ms_per_step": {"app views": 24.0, "no views": 20.0}, "ratio": 1.2}}
    cpu_run = {"results": {"esp:k=1:bc=60": {"tau": 1.5}, "hybrid:bc=60": {"tau": 2.4}}}
    page = results(tmp_path, {"c.json": costs, "b.json": batch, "tau.json": cpu_run},
                   {"kind": "gpu", "files": ["c.json", "b.json"], "command": "python -m scripts.gpu_batch --json b.json",
                    "projection": {"file": "tau.json", "label": "a CPU run",
                                   "methods": {"esp:k=1:bc=60": "k=1 bc=60 static", "hybrid:bc=60": "hybrid bc=60"}}})
    assert "### t · Some GPU (host: Host, 16 cores," in page
    assert "python -m esp.bench costs --json c.json\npython -m scripts.gpu_batch --json b.json" in page
    assert "| shape-a (t(1) = 20.0 ms) | 1.00 | 1.25 |" in page and "| hybrid bc=60 | 40.0, 10.0% |" in page
    assert "| `esp:k=1:bc=60` | 1.50 | 25.0, 1.20x |" in page  # 1.5 x 20 / 25
    assert "| `hybrid:bc=60` | 2.40 | 40.0, 1.20x |" in page  # 2.4 x 20 / 40
    assert "`esp` 8/8" in page and "`esp` yes" in page and "24.0 against 20.0 ms per step without them, 1.20x" in page
    assert "[tau.json](results/tau.json)" in page

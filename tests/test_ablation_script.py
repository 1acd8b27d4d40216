"""scripts/ablation.py: bench results -> the source ablation table of docs/BENCHMARKS.md."""
from __future__ import annotations

import pytest

from conftest import script_module


@pytest.fixture(scope="module")
def ablation():
    return script_module("ablation")


def bench(results: dict) -> dict:
    return {"meta": {"model": "m", "dtype": "float32"},
            "results": {m: {"tau": t, "speedup": s, "lossless": ok} for m, (t, s, ok) in results.items()}}


def row(text: str, label: str) -> list[str]:
    line = next(l for l in text.splitlines() if l.startswith(f"| {label}"))
    return [c.strip() for c in line.strip("|").split("|")][1:]


def test_rows_per_subset_and_what_esp_adds(ablation):
    b = bench({"ar": (1.0, 1.0, True), "hybrid:bc=60": (2.4, 1.2, True),
               "hybrid:bc=60:sources=lookup+table": (2.0, 1.5, True), "hybrid:bc=auto": (1.5, 1.3, True),
               "hybrid:bc=60:sources=esp": (1.3, 0.5, True), "hybrid:bc=auto:sources=esp": (1.0, 0.9, True),
               "hybrid:bc=4": (1.4, 1.0, True)})
    text = ablation.table([b])
    assert row(text, "all three") == ["2.40", "1.20x", "1.50", "1.30x"]  # bc=60 columns before bc=auto
    assert row(text, "no ESP") == ["2.00", "1.50x", "-", "-"]
    assert row(text, "ESP alone") == ["1.30", "0.50x", "1.00", "0.90x"]
    assert "bc=4" not in text  # a width sweep point is not an ablation column
    assert row(text, "ESP adds") == ["+20.0%", "0.80x", "-", "-"]
    assert "Lossless: every run." in text
    assert "1.00" not in row(text, "table alone")  # ar is not a hybrid row


def test_tau_only_and_a_lossy_run_is_named(ablation):
    b = bench({"hybrid:bc=60:sources=table": (1.8, 0.9, False), "hybrid:bc=60": (2.0, 1.0, True)})
    text = ablation.table([b], tau_only=True)
    assert row(text, "table alone") == ["1.80"]
    assert "NOT bc=60 sources=table" in text


def test_later_file_wins(ablation):
    first = bench({"hybrid:bc=60": (2.0, 1.0, True), "hybrid:bc=60:sources=esp": (1.2, 0.5, True)})
    second = bench({"hybrid:bc=60": (2.5, 1.1, True)})
    assert row(ablation.table([first, second], tau_only=True), "all three") == ["2.50"]

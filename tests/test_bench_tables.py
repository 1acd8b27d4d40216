"""esp.bench.tables: bench results -> the tables of docs/BENCHMARKS.md and `python -m esp.bench table`, and the rule
that leaves a cell that is not a measurement blank."""
from __future__ import annotations

import math

import pytest

from esp.bench import tables


def bench(results: dict) -> dict:
    return {"meta": {"model": "m", "dtype": "float32"},
            "results": {m: {"tau": t, "speedup": s, "lossless": ok} for m, (t, s, ok) in results.items()}}


def row(text: str, label: str) -> list[str]:
    line = next(l for l in text.splitlines() if l.startswith(f"| {label}"))
    return [c.strip() for c in line.strip("|").split("|")][1:]


def test_rows_per_subset_and_what_esp_adds():
    b = bench({"ar": (1.0, 1.0, True), "hybrid:bc=60": (2.4, 1.2, True),
               "hybrid:bc=60:sources=lookup+table": (2.0, 1.5, True), "hybrid:bc=auto": (1.5, 1.3, True),
               "hybrid:bc=60:sources=esp": (1.3, 0.5, True), "hybrid:bc=auto:sources=esp": (1.0, 0.9, True),
               "hybrid:bc=4": (1.4, 1.0, True)})
    text = tables.ablation([b])
    assert row(text, "all three") == ["2.40", "1.20x", "1.50", "1.30x"]  # bc=60 columns before bc=auto
    assert row(text, "no ESP") == ["2.00", "1.50x", "-", "-"]
    assert row(text, "ESP alone") == ["1.30", "0.50x", "1.00", "0.90x"]
    assert "bc=4" not in text  # a width sweep point is not an ablation column
    assert row(text, "ESP adds") == ["+20.0%", "0.80x", "-", "-"]
    assert "Lossless: every run." in text
    assert "1.00" not in row(text, "table alone")  # ar is not a hybrid row


def test_tau_only_and_a_lossy_run_is_named():
    b = bench({"hybrid:bc=60:sources=table": (1.8, 0.9, False), "hybrid:bc=60": (2.0, 1.0, True)})
    text = tables.ablation([b], tau_only=True)
    assert row(text, "table alone") == ["1.80"]
    assert "NOT bc=60 sources=table" in text


def test_later_file_wins():
    first = bench({"hybrid:bc=60": (2.0, 1.0, True), "hybrid:bc=60:sources=esp": (1.2, 0.5, True)})
    second = bench({"hybrid:bc=60": (2.5, 1.1, True)})
    assert row(tables.ablation([first, second], tau_only=True), "all three") == ["2.50"]


@pytest.mark.parametrize("value, tau, cell", [
    (1.53, 1.59, "1.53x"), (0.49, 1.41, "0.49x"),
    (111.54, 2.91, ""),  # a stalled ar: far above what tau allows
    (math.nan, 1.0, ""), (math.inf, 1.0, ""), (None, 1.0, ""), (0.0, 1.0, ""), ("1.2", 1.0, ""), (True, 1.0, ""),
    (1.24, 1.0, "1.24x"),  # timing noise within the slack
])
def test_a_speedup_cell_is_blank_unless_it_is_a_measurement(value, tau, cell):
    assert tables.speedup(value, tau) == cell


def test_the_summary_takes_each_method_from_its_first_run_and_drops_timings_of_a_shared_run():
    idle = {"results": {"ar": {"tau": 1.0, "speedup": 1.0, "verdict": {"exact": 2, "near_tie": 0, "failure": 0}},
                        "x": {"tau": 2.0, "speedup": 1.5, "oracle_speedup": 1.8, "fraction": 0.83,
                              "per_category": {"a": {"tau": 2.0, "speedup": 1.2}, "b": {"tau": 2.0, "speedup": 1.8}}}}}
    shared = {"results": {"x": {"tau": 9.0, "speedup": 9.0}, "y": {"tau": 1.3, "speedup": 1.2}}}
    text = tables.summary(tables.columns([idle, shared], [True, False]), ["ar", "x", "y"])
    assert row(text, "`x`") == ["2.00", "1.50x", "", "1.80x (83%)", "1.20x a", ""]
    assert row(text, "`y`") == ["1.30", "", "", "", "", ""]  # tau stands, the shared run's timing does not
    assert row(text, "`ar`")[-1] == "2 / 0 / 0"


def test_the_lowest_category_adds_the_lowest_priced_one_where_every_category_was_priced():
    cats = {"a": {"tau": 2.0, "speedup": 0.95, "curve_speedup": 1.10}, "b": {"tau": 1.0, "speedup": 1.20, "curve_speedup": 0.98}}
    assert tables.lowest({"per_category": cats}) == "0.95x a · priced 0.98x b"  # the two can name different categories
    cats["b"]["curve_speedup"] = math.nan  # a category not priced: no priced figure to compare
    assert tables.lowest({"per_category": cats}) == "0.95x a"
    del cats["a"]["curve_speedup"], cats["b"]["curve_speedup"]
    assert tables.lowest({"per_category": cats}) == "0.95x a"


def test_figures_are_read_as_a_reader_quotes_them():
    text = "1.53x. (90%) +10.2% tau 1.59, Python 3.12.12, the 0.5B model, 16 rows, v5.24"
    assert tables.FIGURE.findall(text) == ["1.53x", "90%", "10.2%", "1.59"]

"""`python -m esp.bench` (and `esp-bench`): the benchmark, or one of its subcommands named first.

    python -m esp.bench --questions Q.jsonl --methods ar,hybrid:bc=auto ...   # the Spec-Bench run (esp.bench.run)
    python -m esp.bench report | table | merge | paper | model-size | verdict | costs | first-call [...]

Each subcommand is a module of this package with its own `--help`.
"""
from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "report": ("esp.bench.report", "write docs/BENCHMARKS.md from docs/results/ (--check: is it up to date?)"),
    "table": ("esp.bench.tables", "Markdown tables, the ablation, the alignment gap or the text figure from results files"),
    "merge": ("esp.bench.merge", "pool runs over question chunks or method sets into one result"),
    "paper": ("esp.bench.paper", "the paper's ablations and alignment figure from a timed run and a lens run (--methods: the arms)"),
    "model-size": ("esp.bench.model_size", "docs/results/model_size.json (the app's Model size view) from bench files"),
    "verdict": ("esp.bench.lossless", "every method lossless in a dtype, alone and batched (--random: a 1B shape on a GPU)"),
    "costs": ("esp.bench.costs", "the forward cost curve, the engine's overhead per step and the mask builders"),
    "first-call": ("esp.bench.first_call", "the first esp.decode of a fresh process against the same call again and generate()"),
    "views": ("esp.bench.views", "what recording the explorer's views (views=True) costs esp.decode"),
}


def listing() -> str:
    """The subcommands, one line each (the bench's --help ends with it)."""
    return "subcommands (python -m esp.bench NAME --help):\n" + "\n".join(
        f"  {name:<11} {text}" for name, (_, text) in COMMANDS.items())


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in COMMANDS:
        importlib.import_module(COMMANDS[argv[0]][0]).main(argv[1:])
        return
    importlib.import_module("esp.bench.run").main(argv)  # by name: run imports this module for its --help

"""`python -m esp.bench model-size`: build or update docs/results/model_size.json (the app's Model size view) from
esp.bench JSON results, one run per model.

    python -m esp.bench model-size docs/results/size_smollm2_135m.json docs/results/size_qwen05_bf16.json \
        docs/results/size_qwen15_bf16.json
    python -m esp.bench model-size out/qwen15.json --machine "1 H200"   # adds or replaces that model's run

Each bench file becomes one run: the model, its size, the protocol (new tokens, questions) and per method the
overall tau and losslessness. A model already in the output file is replaced; the others are kept, ordered by size.
"""
from __future__ import annotations

import argparse
import json
import re
import shlex
import time
from pathlib import Path

from esp.bench.provenance import cpu
from esp.models.offline import MODELS

OUT = Path(__file__).resolve().parents[2] / "docs" / "results" / "model_size.json"


def model_of(display: str) -> tuple[str, str, int]:
    """(model name, short label, parameters in millions) from a bench file's meta['model'] display name."""
    known = next((m for m in MODELS.values() if m.label == display), None)
    hub = known.hub_id if known else display
    size = re.search(r"(\d+(?:\.\d+)?)([MB])\b", hub)
    if size is None:
        raise ValueError(f"Cannot tell the size of model {display!r}: its name has no '135M' / '0.5B' part.")
    params = float(size.group(1)) * (1000 if size.group(2) == "B" else 1)
    label = re.sub(r"-Instruct$", "", hub.split("/")[-1].split(" ")[0])
    return (known.name if known else display), label, int(round(params))


def run_of(bench: dict) -> dict:
    """One model_size.json run from one bench result."""
    meta = bench["meta"]
    name, label, params = model_of(meta["model"])
    return {"model": name, "label": label, "params_m": params, "max_new_tokens": meta["max_new_tokens"],
            "questions": meta["questions"],
            "results": {m: {"tau": round(r["tau"], 4), "lossless": bool(r["lossless"])} for m, r in bench["results"].items()}}


def update(current: dict | None, benches: list[dict], command: str, machine: str) -> dict:
    """`current` (or a new file) with one run per bench result, replacing runs of the same model."""
    runs = {r["model"]: r for r in (current or {}).get("runs", [])}
    runs.update((r["model"], r) for r in map(run_of, benches))
    return {"command": command, "date": time.strftime("%Y-%m-%d"), "machine": machine,
            "runs": sorted(runs.values(), key=lambda r: r["params_m"])}


def main(argv: list[str] | None = None) -> None:
    from esp.cli import fail

    p = argparse.ArgumentParser(prog="python -m esp.bench model-size", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("bench", nargs="+", help="esp.bench --json result files, one per model")
    p.add_argument("--out", default=str(OUT))
    p.add_argument("--machine", default=None, help="where the bench ran (default: the files' own record, else this CPU)")
    a = p.parse_args(argv)
    out = Path(a.out)
    current = json.loads(out.read_text()) if out.exists() else None
    benches = [json.loads(Path(f).read_text()) for f in a.bench]
    made = benches[0]["meta"].get("provenance")
    machine = a.machine or (made["machine"]["cpu"] if made else cpu()[0])
    command = "python -m esp.bench model-size " + " ".join(shlex.quote(f) for f in a.bench)
    try:
        out.write_text(json.dumps(update(current, benches, command, machine), indent=1) + "\n")
    except ValueError as e:
        fail(str(e))
    print(f"{out}: " + ", ".join(r["label"] for r in json.loads(out.read_text())["runs"]))

"""Build or update docs/results/model_size.json (the app's "model size" view) from esp.bench JSON results.

    python scripts/model_size.py docs/results/size_smollm2_135m.json docs/results/size_qwen05_bf16.json \
        docs/results/size_qwen15_bf16.json
    python scripts/model_size.py out/qwen15.json --machine "1 H200"   # adds or replaces that model's run

Each bench file (`python -m esp.bench --json`, or scripts/merge_bench.py's output) becomes one run: the model,
its size, the protocol (new tokens, questions) and per method the overall tau and losslessness. A model
already in the output file is replaced; the others are kept, ordered by size.
"""
from __future__ import annotations

import argparse
import json
import platform
import re
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from esp.models.offline import MODELS  # noqa: E402

OUT = ROOT / "docs" / "results" / "model_size.json"


def model_of(display: str) -> tuple[str, str, int]:
    """(model name, short label, parameters in millions) from a bench file's meta['model'] display name."""
    known = next((m for m in MODELS.values() if m.label == display), None)
    hub = known.hub_id if known else display
    size = re.search(r"(\d+(?:\.\d+)?)([MB])\b", hub)
    if size is None:
        raise SystemExit(f"Cannot tell the size of model {display!r}: its name has no '135M' / '0.5B' part.")
    params = float(size.group(1)) * (1000 if size.group(2) == "B" else 1)
    label = re.sub(r"-Instruct$", "", hub.split("/")[-1].split(" ")[0])
    return (known.name if known else display), label, int(round(params))


def run_of(bench: dict) -> dict:
    """One model_size.json run from one bench result."""
    meta = bench["meta"]
    name, label, params = model_of(meta["model"])
    return {"model": name, "label": label, "params_m": params, "max_new_tokens": meta["max_new_tokens"],
            "questions": meta["questions"],
            "results": {m: {"tau": round(r["tau"], 4), "lossless": bool(r["lossless"])}
                        for m, r in bench["results"].items()}}


def update(current: dict | None, benches: list[dict], command: str, machine: str) -> dict:
    """`current` (or a new file) with one run per bench result, replacing runs of the same model."""
    runs = {r["model"]: r for r in (current or {}).get("runs", [])}
    runs.update((r["model"], r) for r in map(run_of, benches))
    return {"command": command, "date": time.strftime("%Y-%m-%d"), "machine": machine,
            "runs": sorted(runs.values(), key=lambda r: r["params_m"])}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("bench", nargs="+", help="esp.bench --json result files, one per model")
    p.add_argument("--out", default=str(OUT))
    p.add_argument("--machine", default=f"{platform.machine()} CPU ({platform.system()})",
                   help="where the bench ran (tau does not depend on it; speed-ups would)")
    a = p.parse_args()
    out = Path(a.out)
    current = json.loads(out.read_text()) if out.exists() else None
    benches = [json.loads(Path(f).read_text()) for f in a.bench]
    command = "python scripts/model_size.py " + " ".join(shlex.quote(f) for f in a.bench)
    out.write_text(json.dumps(update(current, benches, command, a.machine), indent=1) + "\n")
    print(f"{out}: " + ", ".join(f"{r['label']}" for r in json.loads(out.read_text())["runs"]))


if __name__ == "__main__":
    main()

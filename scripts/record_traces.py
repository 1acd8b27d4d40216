"""Record the traces shipped in assets/ (shown by the app before any model is warm) with the embedded model.

    python scripts/record_traces.py

One prompt where copying from the input dominates (the hybrid when the engine has it, else PLD), one where
ESP's masks do best (counting). Short runs keep the files small while every view, masks included, works.
"""
from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import app  # noqa: E402
from components.export import write_trace_json  # noqa: E402
from components.settings import RunSettings  # noqa: E402
from esp import methods  # noqa: E402
from esp.engine import Decoder  # noqa: E402
from esp.models import EMBEDDED, load  # noqa: E402

COPY_PROMPT = ("Fix the typo in this sentence and write it again: The cat sat on teh mat and looked at the "
               "birds in the garden.")
MASK_PROMPT = "Count from 1 to 30, separated by commas."
MAX_NEW = 48


def record(prompt: str, settings: RunSettings, path: Path) -> None:
    lm = load(EMBEDDED)
    ids = lm.chat_ids(prompt)
    gen = Decoder(lm, settings.drafter(), settings.sampling(), settings.max_new_tokens, align=True).generate(ids)
    meta = {"model": lm.name, "model_name": EMBEDDED, "prompt": prompt, "prompt_ids": ids,
            "method": settings.method, "spec": settings.spec(), "settings": settings.describe(),
            "sampling": asdict(settings.sampling()), "max_new_tokens": settings.max_new_tokens,
            "layouts": settings.layouts, "curve": app.machine_curve(lm), "text": gen.text}
    write_trace_json(gen.steps, meta, path)
    print(f"{path.name}: {len(gen.steps)} steps, tau {gen.summary.tau:.2f}, {path.stat().st_size // 1024} KB")


def main() -> None:
    copier = "hybrid" if "hybrid" in methods.available() else "pld"
    record(COPY_PROMPT, RunSettings(method=copier, k=1, bc=30, max_new_tokens=MAX_NEW), app.TRACES[next(iter(app.TRACES))])
    record(MASK_PROMPT, RunSettings(method="esp", k=2, bc=30, max_new_tokens=MAX_NEW), list(app.TRACES.values())[1])


if __name__ == "__main__":
    main()

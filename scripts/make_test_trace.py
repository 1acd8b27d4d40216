"""Regenerate tests/data/trace_k2_bc30.json: a short real ESP run on the embedded model.

    python -m scripts.make_test_trace
"""
from __future__ import annotations

from pathlib import Path

from components.export import write_trace_json
from esp.decoding.engine import Decoder
from esp.methods import build
from esp.models.loader import load

ROOT = Path(__file__).resolve().parents[1]

SPEC = "esp:k=2:bc=30"
# Counting drafts well, so the trace holds accepted paths and accepted alignment records.
PROMPT = "Count from 1 to 20, separated by commas."
MAX_NEW = 20


def main() -> None:
    lm = load()
    gen = Decoder(lm, build(SPEC), max_new_tokens=MAX_NEW, align=True).generate(lm.chat_ids(PROMPT))
    meta = {"model": lm.name, "spec": SPEC, "prompt": PROMPT, "max_new_tokens": MAX_NEW, "text": gen.text}
    out = write_trace_json(gen.steps, meta, ROOT / "tests" / "data" / "trace_k2_bc30.json")
    print(f"{out}: {len(gen.steps)} steps, tau {gen.summary.tau:.2f}, text {gen.text!r}")


if __name__ == "__main__":
    main()

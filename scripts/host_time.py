"""The hybrid's host-side time per step: drafting (`propose`) and learning (`observe`) at the widths the
drafter picks, without the device work a GPU would run asynchronously.

    python scripts/host_time.py [--model embedded] [--method hybrid:bc=auto] [--prompts 4] [--max-new-tokens 64] [--json F]

CPU time of this thread (`time.thread_time`), so that other work on a shared machine inflates it less
than wall time. The torch calls made inside `propose` and `observe` (the softmax and top-k over the
vocabulary for the fed rows, ESP's mask update, the one read back: what a GPU runs as kernels or waits
for once) are timed apart through a TorchFunctionMode; the host side is the rest: candidates, calibration,
labels, the table's merges, the width choice, the trace's records. The mode's own dispatch counts as host
time, so the host figure is an upper bound. Development questions, first turn, one warm-up prompt.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from torch.overrides import TorchFunctionMode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from esp.bench.run import load_questions  # noqa: E402
from esp.cli import add_model_args  # noqa: E402
from esp.decoding.engine import Decoder  # noqa: E402
from esp.methods import build  # noqa: E402
from esp.models.loader import load  # noqa: E402


class TorchTime(TorchFunctionMode):
    """Thread CPU seconds spent inside torch calls (a call made within one is not counted twice)."""

    def __init__(self):
        super().__init__()
        self.seconds = 0.0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        t = time.thread_time()
        try:
            return func(*args, **(kwargs or {}))
        finally:
            self.seconds += time.thread_time() - t


def timed(book: list[float], torch_book: list[float], fn):
    """`fn`, adding each call's thread CPU seconds to `book` and those inside torch calls to `torch_book`."""
    def wrapper(*a, **k):
        mode = TorchTime()
        t = time.thread_time()
        try:
            with mode:
                return fn(*a, **k)
        finally:
            book.append(time.thread_time() - t)
            torch_book.append(mode.seconds)
    return wrapper


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_args(p)
    p.set_defaults(max_new_tokens=64)
    p.add_argument("--method", default="hybrid:bc=auto")
    p.add_argument("--questions", default=str(ROOT.parent / "shared/data/spec_bench/question.jsonl"))
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--json")
    a = p.parse_args()
    lm = load(a.model, dtype=a.dtype)
    qs = load_questions(a.questions, 1)[: a.prompts + 1]
    d = build(a.method)
    books = {"propose": [], "observe": [], "torch": []}
    Decoder(lm, d, max_new_tokens=16, timings=False).generate(lm.chat_ids(qs[-1]["turns"][0]))  # warm-up
    d.propose = timed(books["propose"], books["torch"], d.propose)
    d.observe = timed(books["observe"], books["torch"], d.observe)
    widths = []
    for q in qs[: a.prompts]:
        run = Decoder(lm, d, max_new_tokens=a.max_new_tokens, trace_mask=False, timings=False).generate(lm.chat_ids(q["turns"][0]))
        widths += [len(s.positions) for s in run.steps[1:]]
    n = len(books["propose"])
    ms = {k: 1000 * sum(v) / n for k, v in books.items()}  # per step
    host = ms["propose"] + ms["observe"] - ms["torch"]
    out = {"model": lm.name, "method": a.method, "steps": n, "rows_mean": statistics.mean(widths),
           "rows_median": statistics.median(widths), "propose_ms": ms["propose"], "observe_ms": ms["observe"],
           "torch_ms": ms["torch"], "host_ms": host}
    print(f"{a.method}: {n} steps, rows mean {out['rows_mean']:.2f}; per step (thread CPU ms): propose {ms['propose']:.3f}, "
          f"observe {ms['observe']:.3f}; inside torch calls {ms['torch']:.3f}; host-side {host:.3f} ms")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

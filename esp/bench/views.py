"""`python -m esp.bench views`: what recording the explorer's views costs a run (issue 48's bar: at most 1.15x). The
same prompt decoded by `esp.decode` with `views=True` (the attention pattern, the alignment, the Mask Lens and the
verifier's eye in every step's trace, as the app records them) and with `views=False`, in interleaved rounds, after
one warm-up of each; the ratio of the medians, and both runs' tokens (equal: the views change no token).

    python -m esp.bench views [--model embedded] [--method esp:k=2:bc=30] [--max-new-tokens 16] [--rounds 5] [--json F]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import esp
from esp.bench.provenance import provenance
from esp.models.loader import load

PROMPT = "Explain in simple words why the sky is blue during the day."  # one of the page's examples


def timed(lm, prompt: str, method: str, tokens: int, views: bool) -> tuple[float, list[int], int]:
    """Seconds, tokens and forwards of one `esp.decode` call."""
    start = time.perf_counter()
    out = esp.decode(lm.model, lm.tokenizer, prompt, method=method, max_new_tokens=tokens, views=views)
    return time.perf_counter() - start, out.tokens, out.summary.forwards


def measure(lm, prompt: str, method: str, tokens: int, rounds: int) -> dict:
    """Interleaved rounds of the call with and without views (each round in turn starts with the other)."""
    for views in (False, True):
        timed(lm, prompt, method, tokens, views)
    seconds: dict[str, list[float]] = {"off": [], "on": []}
    got = {}
    for r in range(rounds):
        for views in ((False, True) if r % 2 == 0 else (True, False)):
            s, toks, forwards = timed(lm, prompt, method, tokens, views)
            name = "on" if views else "off"
            seconds[name].append(s)
            got[name] = (toks, forwards)
    off, on = statistics.median(seconds["off"]), statistics.median(seconds["on"])
    return {"method": method, "max_new_tokens": tokens, "rounds": rounds, "prompt": prompt,
            "forwards": got["on"][1], "same_tokens": got["on"][0] == got["off"][0],
            "seconds_off": seconds["off"], "seconds_on": seconds["on"], "median_off": off, "median_on": on,
            "ratio": on / off}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m esp.bench views", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="embedded")
    p.add_argument("--method", default="esp:k=2:bc=30")
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--prompt", default=PROMPT)
    p.add_argument("--json")
    a = p.parse_args(argv)
    made = provenance(argv, "python -m esp.bench views")
    lm = load(a.model)
    out = {"provenance": made, "model": lm.name,
           **measure(lm, a.prompt, a.method, a.max_new_tokens, a.rounds)}
    print(f"{lm.name}, {a.method}, {a.max_new_tokens} tokens ({out['forwards']} forwards): views off "
          f"{out['median_off']:.2f} s, on {out['median_on']:.2f} s (medians of {a.rounds}): {out['ratio']:.3f}x; "
          f"same tokens: {out['same_tokens']}")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1) + "\n")

"""`python -m esp.generate --prompt TEXT`: decode one prompt and print the text and its summary."""
from __future__ import annotations

import argparse
import json

from esp.cli import add_esp_args, add_model_args, check_model_args, esp_defaults, fail, load_model, run_main
from esp.decoding.engine import Decoder
from esp.methods import build
from esp.sampling import Sampling


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m esp.generate", description=__doc__)
    p.add_argument("--prompt", required=True)
    p.add_argument("--method", default="esp", help="esp, ar, or a spec such as esp:k=1:bc=60 (see esp.bench.run)")
    add_model_args(p)
    add_esp_args(p)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--mask-builder", default="efficient", choices=["efficient", "naive"])
    p.add_argument("--trace", help="write every step's trace to this JSON file")
    a = p.parse_args(argv)
    check_model_args(a)
    if not a.prompt.strip():
        fail("The prompt is empty: type some text first.")
    drafter = build(a.method, esp_defaults(a))
    sampling = Sampling(a.temperature, a.top_p, a.top_k, a.seed)
    lm = load_model(a)
    dec = Decoder(lm, drafter, sampling, a.max_new_tokens, layouts=a.mask_builder)
    out = dec.generate(lm.chat_ids(a.prompt))
    s = out.summary
    print(out.text)
    print(f"\n[{drafter.describe()}] {s.tokens} tokens in {s.forwards} forwards: tau {s.tau:.2f}, "
          f"{s.tokens_per_s:.1f} tokens/s, accepted lengths {s.accept_hist}")
    if a.trace:
        with open(a.trace, "w") as f:
            json.dump({"summary": s.to_dict(), "steps": [st.to_dict() for st in out.steps]}, f)


if __name__ == "__main__":
    run_main(main)

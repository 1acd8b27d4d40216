"""Record the traces shipped in assets/ (shown by the app before any model is warm).

    python scripts/record_traces.py                  # all of them
    python scripts/record_traces.py trace_qwen05     # one, by its file stem
    python scripts/record_traces.py --shrink         # only rewrite the shipped files compactly (no model)

With the embedded model: one prompt where copying from the input dominates (the hybrid when the engine has it,
else PLD), one where ESP's masks do best (counting). With Qwen2.5-Coder-0.5B (`make qwen` first): the same
counting prompt, where ESP alone out-drafts PLD, STAND and LADE (tau 1.85 for esp:k=2:bc=30 against 1.17,
1.60 and 1.37 at 48 tokens), the paper's point that ESP needs a model that already knows its future. With
Qwen2.5-Coder-1.5B (`make qwen15`): ESP alone on an everyday question, the page's first screen. Every trace
records the Mask Lens and the verifier's eye. Short
runs keep the files small while every view, masks included, works; `shrink` then keeps 4 significant digits of
the cosines, draft probabilities and timings (what the views print, at most 3) and drops JSON's spaces.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from components.export import write_trace_json  # noqa: E402
from components.settings import RunSettings  # noqa: E402
from esp import methods  # noqa: E402
from esp.budget.cost import curve_for  # noqa: E402
from esp.decoding.engine import Decoder  # noqa: E402
from esp.models.loader import EMBEDDED, load  # noqa: E402

ASSETS = ROOT / "assets"
COPY_PROMPT = ("Fix the typo in this sentence and write it again: The cat sat on teh mat and looked at the "
               "birds in the garden.")
MASK_PROMPT = "Count from 1 to 30, separated by commas."
QWEN05 = "qwen2.5-coder-0.5b"
QWEN15 = "qwen2.5-coder-1.5b"
# Where the embedded model's masks rarely win (tau 1.07 for ESP alone) and the 1.5B model's often do: the first screen.
SKY_PROMPT = "Explain in simple words why the sky is blue during the day."
MAX_NEW = 48
DIGITS = 4  # significant digits a shipped trace keeps of the floats `shrink` rounds


def record(model: str, prompt: str, settings: RunSettings, path: Path) -> None:
    lm = load(model)
    ids = lm.chat_ids(prompt)
    gen = Decoder(lm, settings.drafter(), settings.sampling(), settings.max_new_tokens, align=True,
                  lens=True).generate(ids)
    meta = {"model": lm.name, "model_name": model, "prompt": prompt, "prompt_ids": ids,
            "method": settings.method, "spec": settings.spec(), "settings": settings.describe(),
            "sampling": asdict(settings.sampling()), "max_new_tokens": settings.max_new_tokens,
            "layouts": settings.layouts, "curve": curve_for(lm).to_dict(), "text": gen.text}
    write_trace_json(gen.steps, meta, path)
    shrink(path)
    print(f"{path.name}: {len(gen.steps)} steps, tau {gen.summary.tau:.2f}, {path.stat().st_size // 1024} KB")


def _round(x: object) -> object:
    return float(f"{x:.{DIGITS}g}") if isinstance(x, float) and math.isfinite(x) else x


def shrink(path: Path) -> None:
    """Rewrite a recorded trace with DIGITS significant digits in its alignment cosines, draft probabilities,
    timings and mask state, and no spaces between JSON's tokens: about a fifth smaller, every view the same
    (each prints at most 3 digits). Token ids, logits (top2) and the lens (already 3 digits) are kept as they are."""
    data = json.loads(path.read_text())
    for step in data["steps"]:
        for a in step.get("alignment", []):
            a["cos"], a["cos_raw"] = [_round(x) for x in a["cos"]], [_round(x) for x in a["cos_raw"]]
        for n in step["nodes"]:
            n.update({k: _round(n[k]) for k in ("prob", "cum_prob", "p", "target_p") if k in n})
        for key in ("timings", "ema"):
            if step.get(key):
                step[key] = {k: _round(v) for k, v in step[key].items()}
    path.write_text(json.dumps(data, ensure_ascii=False, separators=(",", ":")))


def recordings() -> dict[str, tuple]:
    """File stem -> (model, prompt, settings) of every shipped trace."""
    copier = "hybrid" if "hybrid" in methods.available() else "pld"
    esp = RunSettings(method="esp", k=2, bc=30, max_new_tokens=MAX_NEW)
    return {"trace_copy": (EMBEDDED, COPY_PROMPT, RunSettings(method=copier, k=1, bc=30, max_new_tokens=MAX_NEW)),
            "trace_masks": (EMBEDDED, MASK_PROMPT, esp),
            "trace_qwen05": (QWEN05, MASK_PROMPT, esp),
            "trace_qwen15": (QWEN15, SKY_PROMPT, esp)}


def main() -> None:
    todo = recordings()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("names", nargs="*", choices=[[], *todo], help="file stems to record (default: all)")
    p.add_argument("--shrink", action="store_true", help="only shrink the shipped files (no model, no recording)")
    a = p.parse_args()
    for name in a.names or todo:
        if a.shrink:
            shrink(ASSETS / f"{name}.json")
        else:
            record(*todo[name], ASSETS / f"{name}.json")


if __name__ == "__main__":
    main()

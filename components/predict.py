"""Guess first: per step, the draft tree without its verdict (what the learner marks before the reveal), the
drafts the verifier kept (what a guess is scored against, in the player's script), and what a good guesser
could have noticed there, each said only where the trace shows it: the kept draft had the highest cumulative
probability of its level, its word was already in the text, its mask's lens had it on top before the last
layer."""
from __future__ import annotations

from typing import Mapping, Sequence

from esp.trace import PRUNED, ROOT, StepTrace

from .common import accepted_nodes, as_steps, own_kind, show_ws
from .lens_view import commit_layer, resolved
from .story import fed_level, quote, word

CONTEXT_CHARS = 60  # the text before the step shown above the guess tree, its last characters
MIN_PHRASE = 5  # a phrase shorter than this ("of a") is in most texts: no hint
# Said once, before the first guess: where the trace's own evidence sits.
NOTICE = ("Good guessers look at the number under each draft (how sure the masks were: the product along its "
          "branch), at words the text already used, and at the Mask Lens of the step before.")


def guess_tree(step: StepTrace) -> list[dict]:
    """The tree as the learner sees it before the verdict: the root, then every fed draft (only those can be
    kept; a pruned candidate was never checked), each with its index, text (whitespace shown, as on the tree),
    word (as the sentences quote it), depth, parent and cumulative probability, in the tree's order."""
    return [{"i": n.index, "text": show_ws(n.text), "word": word(n.text), "depth": n.depth, "parent": n.parent,
             "cum": round(n.cum_prob, 4)}
            for n in step.nodes if n.status == ROOT or (n.status != PRUNED and n.row is not None)]


def _text_before(steps: list[StepTrace], i: int) -> str:
    text = "".join(t for s in steps[:i] for t in s.emitted_text)
    return ("…" + text[-CONTEXT_CHARS:]) if len(text) > CONTEXT_CHARS else text


def hints(steps: Sequence[StepTrace | dict], i: int, meta: Mapping | None = None) -> list[str]:
    """What a good guesser could have noticed at step i, in plain sentences; only what the trace shows."""
    steps = as_steps(steps)
    step, meta = steps[i], meta or {}
    out = []
    first = fed_level(step, 1)
    kept = accepted_nodes(step)
    if first:
        best = max(first, key=lambda n: n.cum_prob)
        if kept and kept[0] is best:
            out.append(f"The kept {quote(best.text)} was the likeliest of the {len(first)} first-level drafts "
                       f"({best.cum_prob:.2f}).")
        elif kept:
            out.append(f"The kept {quote(kept[0].text)} ({kept[0].cum_prob:.2f}) was not the masks' favourite: "
                       f"{quote(best.text)} had {best.cum_prob:.2f}.")
        else:
            out.append(f"Even the masks' favourite, {quote(best.text)} ({best.cum_prob:.2f}), lost: the model "
                       f"wanted {quote(step.emitted_text[0])}." if step.emitted_text else "")
    # A phrase the text already holds (the kept draft with the token before it): drafts often copy.
    before = str(meta.get("prompt", "")) + "".join(t for s in steps[:i] for t in s.emitted_text)
    phrases = [(step.nodes[n.parent].text + n.text).strip() for n in kept]
    copied = [p for p in phrases if len(p) >= MIN_PHRASE and p in before]
    if copied:
        out.append(f"“{copied[0]}” was already in the text before this step.")
    if i > 0:
        lens = resolved(steps, i - 1)
        for n in kept:
            real = lens.get(n.depth)
            layer = commit_layer(real) if real is not None and real.accepted else None
            if layer is not None and layer < len(real.rank) - 1:
                out.append(f"Mask {n.depth}'s lens had {quote(n.text)} on top from layer {layer} of "
                           f"{len(real.rank) - 1}.")
    return [o for o in out if o]


def predict_data(steps: Sequence[StepTrace | dict], meta: Mapping) -> dict:
    """The player's data for guessing: per step (None where nothing was fed to check: the prefill, plain
    decoding) the tree without its verdict, the kept drafts (node indices), the model's own token after them
    (None where the run ended first) and its kind (components.common.own_kind), the text before the step and
    the hints; and the one sentence on what to look at."""
    steps = as_steps(steps)
    out = []
    for i, s in enumerate(steps):
        if s.prefill or not any(n.row is not None and n.status != ROOT for n in s.nodes):
            out.append(None)
            continue
        kept = accepted_nodes(s)
        own = s.emitted_text[len(kept)] if len(s.emitted_text) > len(kept) else None
        out.append({"nodes": guess_tree(s), "kept": [n.index for n in kept], "own": own and word(own),
                    "kind": own_kind(s), "before": _text_before(steps, i), "hints": hints(steps, i, meta)})
    return {"steps": out, "notice": NOTICE}

"""Text equivalents of a step's figures, for screen readers (the player sets each as its view's label): what
the draft tree, the attention pattern, the verifier's eye and the Mask Lens show, in one or two plain
sentences made from the trace, never from the drawing."""
from __future__ import annotations

from typing import Sequence

from esp.trace import ACCEPTED, PRUNED, REJECTED, StepTrace

from .common import accepted_nodes, as_steps, own_kind, walk_end
from .cost_view import step_width
from .eye_view import NO_EYE, eye_pairs, token_texts
from .lens_view import NO_LENS, resolved
from .story import quote

MAX_NAMED = 12  # nodes or tokens named in one description; the rest are counted


def _names(items: list[str]) -> str:
    shown = ", ".join(items[:MAX_NAMED])
    return shown + (f" and {len(items) - MAX_NAMED} more" if len(items) > MAX_NAMED else "")


def tree_text(step: StepTrace) -> str:
    """The tree's drafts, verdicts and levels: 'Draft tree, step 7: 9 drafts fed, 2 accepted (“way”,
    “sunlight”), then the bonus “interacts”. Level 1: “way” 0.38 kept, …'"""
    head = f"Draft tree, step {step.step}"
    if step.prefill:
        return f"{head}: the prefill, no draft yet."
    fed = [n for n in step.nodes if n.status in (ACCEPTED, REJECTED)]
    if not fed:
        return f"{head}: nothing drafted; the model's own token {quote(step.emitted_text[0])}." if step.emitted_text \
            else f"{head}: nothing drafted."
    kept = accepted_nodes(step)
    out = f"{head}: {len(fed)} drafts fed, {len(kept)} accepted"
    out += f" ({', '.join(quote(n.text) for n in kept)})" if kept else ""
    if len(step.emitted) > len(kept):
        out += f", then the {own_kind(step)} {quote(step.emitted_text[len(kept)])}"
    levels = []
    for depth in range(1, max(n.depth for n in fed) + 1):
        level = [f"{quote(n.text)} {n.cum_prob:.2f} {'kept' if n.status == ACCEPTED else 'rejected'}"
                 for n in fed if n.depth == depth]
        levels.append(f"Level {depth}: {_names(level)}")
    pruned = sum(n.status == PRUNED for n in step.nodes)
    return out + ". " + ". ".join(levels) + "." + (f" {pruned} pruned, never fed." if pruned else "")


def mask_text(step: StepTrace) -> str:
    """The attention pattern's rows and which of them the cache kept."""
    head = f"Attention pattern, step {step.step}"
    if not step.mask:
        return f"{head}: not recorded in this trace."
    if step.prefill:
        masks = step.row_kinds.count("mask")
        return f"{head}: the prompt and {masks} mask rows read in one forward; only the prompt enters the cache."
    kept = [quote(step.nodes[0].text)] + [quote(n.text) for n in accepted_nodes(step)]
    return (f"{head}: {step_width(step)} rows read in one forward; each sees the cache, its own branch and "
            f"itself, never a sibling. Kept in the cache: {', '.join(kept)}.")


def eye_text(step: StepTrace) -> str:
    """The verifier's top choices where the walk stopped (the eye figure's row)."""
    path = [step.nodes[0]] + accepted_nodes(step)
    row = len(step.accepted)
    pairs = eye_pairs(step, row)
    if not pairs:
        why = NO_EYE if not step.eye else "no record where the walk stopped."
        return f"The verifier's eye, step {step.step}: {why}"
    texts = token_texts(step)
    top = [f"{quote(texts[t]) if t in texts else f'token #{t}'} {p:.2f}" for t, p in pairs]
    where = quote(path[row].text) if row < len(path) else f"row {row}"
    return f"The verifier's eye, step {step.step}, after {where}: the model's top choices {_names(top)}."


def lens_text(steps: Sequence[StepTrace], i: int) -> str:
    """Each mask's top token at the output, and the token that came at its position where known."""
    step = steps[i]
    if not step.lens:
        return f"Mask Lens, step {step.step}: {NO_LENS if not any(s.lens for s in steps) else 'no mask fed.'}"
    real = resolved(steps, i)
    parts = []
    for rec in sorted(step.lens, key=lambda r: r.j):
        top = quote(rec.texts.get(rec.tokens[-1][0], "?"))
        came = f", the token that came: {quote(real[rec.j].text)}" if rec.j in real else ""
        parts.append(f"mask {rec.j} ends on {top}{came}")
    return (f"Mask Lens, step {step.step}, masks fed after {quote(walk_end(step).text)}, read at every layer: "
            + "; ".join(parts) + ".")


def step_texts(steps: Sequence[StepTrace | dict]) -> list[dict]:
    """Per step, the text equivalent of each figure view of the player (its `data-figure` keys)."""
    steps = as_steps(steps)
    return [{"tree": tree_text(s), "mask": mask_text(s), "eye": eye_text(s), "lens": lens_text(steps, i)}
            for i, s in enumerate(steps)]

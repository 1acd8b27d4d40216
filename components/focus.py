"""Linked focus: one node of a step chosen across the views (tree, mask, text, alignment), the choices for
a Focus box, and a note on what the node was (or that it was never fed)."""
from __future__ import annotations

from typing import Sequence

from esp.trace import ACCEPTED, PRUNED, ROOT, AlignmentTrace, NodeTrace, StepTrace

from . import palette
from . import sources as src
from .common import as_step, as_steps, md_text, show_ws, walk_end

# Outline of the focused node and of its rows, in every view (components/palette.py: a deep pink, apart from
# every status and source colour, that reads on light and dark).
FOCUS_COLOR = palette.FOCUS


def focus_node(step: StepTrace | dict, i: int | None) -> NodeTrace | None:
    """Node i of the step, or None when no focus is set or i is not one of its nodes."""
    step = as_step(step)
    if i is None or not 0 <= int(i) < len(step.nodes):
        return None
    return step.nodes[int(i)]


def focus_choices(step: StepTrace | dict) -> list[tuple[str, int]]:
    """(label, node index) pairs for a Focus dropdown, e.g. ('3 · ␣on · accepted', 3), in node order."""
    step = as_step(step)
    return [(f"{n.index} · {show_ws(n.text)} · {'never fed' if n.row is None else n.status}", n.index)
            for n in step.nodes]


def mask_rows(step: StepTrace | dict, i: int) -> list[int]:
    """Block rows of node i's mask tokens (labelled 'mask <row>.<j>' by the engine, keyed by the node's
    block row); none for a node that was never fed."""
    step = as_step(step)
    node = focus_node(step, i)
    if node is None or node.row is None:
        return []
    prefix = f"mask {node.row}."
    return [r for r, label in enumerate(step.row_labels) if label.startswith(prefix)]


def mask_records(steps: Sequence[StepTrace | dict], upto: int, i: int) -> list[AlignmentTrace]:
    """Alignment records of node i's masks at step `upto`: only the node where the walk stopped keeps
    its masks (they draft the next step), and their records resolve in later steps."""
    steps = as_steps(steps)
    node = focus_node(steps[upto], i)
    if node is None or node.index != walk_end(steps[upto]).index:
        return []
    return [r for s in steps[upto + 1:] for r in s.alignment if r.source_step == steps[upto].step]


def focus_note(step: StepTrace | dict, i: int | None) -> str:
    """One line on the focused node: what it was, where it sits, and why a pruned one shows nowhere."""
    step = as_step(step)
    node = focus_node(step, i)
    if node is None:
        return "" if i is None else f"Step {step.step} has no node {i} (its nodes are 0-{len(step.nodes) - 1})."
    name = f"Node {node.index} {md_text(repr(show_ws(node.text)))}"
    if node.status == ROOT:
        return f"{name} is the root: the last token emitted, fed first in block row {node.row}."
    via = src.describe(node.sources)
    if node.row is None or node.status == PRUNED:
        return (f"{name} was never fed: pruned before the forward (a child equal to its parent, or over the "
                f"budget), so it has no row in the mask and no place in the text.")
    said = "accepted: it is in the text" if node.status == ACCEPTED else "rejected: the model chose otherwise"
    return (f"{name}, drafted by {via} with p = {node.prob:.3f} at depth {node.depth}, fed in block row "
            f"{node.row} with {len(mask_rows(step, node.index))} mask rows; {said}.")

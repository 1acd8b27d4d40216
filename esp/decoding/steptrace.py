"""A step's trace: what the engine records of one verified step (esp.trace.StepTrace), from its records."""
from __future__ import annotations

from esp.decoding.drafter import Drafter, Notes, StepResult
from esp.models.lm import LM
from esp.trace import ACCEPTED, PRUNED, REJECTED, ROOT, NodeTrace, StepTrace


def step_trace(lm: LM, drafter: Drafter, res: StepResult, *, step: int, past: int, notes: Notes, prefill: bool,
               top2: list[list], trace_mask: bool) -> StepTrace:
    """Step `step`'s trace: its tree and rows as fed (`past` tokens committed before it), what was accepted and
    emitted, and the drafter's `notes`; `top2` per emitted row (see StepTrace.top2); the block's visibility
    when `trace_mask`."""
    tree, lay, extra = res.proposal.tree, res.layout, res.proposal.extra
    labels = ["root"] + [f"node {i}:{lm.text(t)}" for i, t in enumerate(tree.tokens[1:], 1)]
    labels += [f"mask {v}.{j}" for v in lay.owners for j in range(1, lay.k + 1)]
    kinds = lay.kinds()
    if extra is not None:
        labels += [f"{extra.kind} {i}:{lm.text(t)}" for i, t in enumerate(extra.ids)]
        kinds = kinds[: len(kinds) - lay.n_extra] + [extra.kind] * lay.n_extra
    offsets, visible = lay.host()
    mask = [[True] + row for row in visible] if trace_mask else []
    return StepTrace(
        step=step, method=drafter.name, n_past=past, root=tree.tokens[0], nodes=_nodes(lm, drafter, res),
        accepted=[tree.tokens[i] for i in res.path[1:]], bonus=res.bonus, emitted=res.emitted,
        emitted_text=[lm.text(t) for t in res.emitted], row_labels=labels, row_kinds=kinds,
        positions=[res.root_pos + o for o in offsets], mask=mask, accepted_rows=list(res.path), shape=tree.shape(),
        timings={}, ema=notes.ema, alignment=notes.alignment, prefill=prefill, cost=notes.cost, top2=top2,
    )


def _nodes(lm: LM, drafter: Drafter, res: StepResult) -> list[NodeTrace]:
    """The tree's nodes as fed (root first), then the candidates the drafter pruned."""
    tree = res.proposal.tree
    on_path = set(res.path)
    depths = tree.depths
    own = [drafter.source] if drafter.source else []
    srcs = [list(x) for x in tree.sources] if tree.sources else [[]] + [own] * (len(tree) - 1)
    ps = tree.p or [None] * len(tree)
    nodes = [
        NodeTrace(i, tok, lm.text(tok), tree.parents[i], depths[i], tree.probs[i], tree.cum_probs[i],
                  ROOT if i == 0 else ACCEPTED if i in on_path else REJECTED, i, res.root_pos + depths[i],
                  srcs[i], ps[i])
        for i, tok in enumerate(tree.tokens)
    ]
    for parent, tok, p, cum in tree.pruned:
        nodes.append(NodeTrace(len(nodes), tok, lm.text(tok), parent, depths[parent] + 1, p, cum, PRUNED, None, None))
    return nodes

"""The verifier's eye: at a row of a step's accepted path, the model's top choices there (StepTrace.eye, the
distribution the verifier decided from), each draft checked there with its rank in it, and the token the
row emitted (an accepted draft, or the model's own token: a correction or a bonus). As a figure for the
focused node and as text bars in the tree's hover (Plotly's hover text cannot draw a chart)."""
from __future__ import annotations

from typing import Mapping, Sequence

import plotly.graph_objects as go

from esp.trace import ACCEPTED, ROOT, NodeTrace, StepTrace

from . import palette
from .common import (BONUS, CORRECTION, INK, as_step, base_layout, figure, message_figure, own_kind, plot_text,
                     show_ws)
from .focus import focus_node

TITLE = "The verifier's eye"
NO_EYE = ("No verifier's eye in this trace: it is recorded with the Mask Lens on (runs made on this page, "
          "and traces shipped with it); older traces and library runs leave it out.")
# Text bars: BAR_CELLS full blocks for p = 1, eighths for the rest.
BAR_CELLS = 10
_EIGHTHS = " ▏▎▍▌▋▊▉"
OWN_NAMES = {CORRECTION: "correction", BONUS: "bonus"}


def eye_pairs(step: StepTrace, row: int) -> list[tuple[int, float]]:
    """(token id, probability) of the verifier's top choices at eye row `row` (the row that chose emitted
    token `row`), best first; empty without a record."""
    if not 0 <= row < len(step.eye):
        return []
    flat = step.eye[row]
    return [(int(flat[i]), float(flat[i + 1])) for i in range(0, len(flat) - 1, 2)]


def path_nodes(step: StepTrace) -> list[NodeTrace]:
    """The root, then the accepted drafts in path order: path node d is the row that chose emitted token d."""
    return [step.nodes[0]] + sorted((n for n in step.nodes if n.status == ACCEPTED), key=lambda n: n.depth)


def row_drafts(step: StepTrace, row: int) -> list[NodeTrace]:
    """The drafts checked at eye row `row`: the fed children of path node `row`, in draft order."""
    path = path_nodes(step)
    if row >= len(path):
        return []
    return [n for n in step.nodes if n.parent == path[row].index and n.row is not None]


def decided_row(step: StepTrace, node: NodeTrace) -> int | None:
    """The eye row that decided `node` (its parent's, when the parent is on the accepted path and the node
    was fed); row 0 for the root (what the model wanted after it); None for a node never checked."""
    if node.status == ROOT:
        return 0
    path = {n.index for n in path_nodes(step)}
    return node.depth - 1 if node.row is not None and node.parent in path else None


def token_texts(step: StepTrace) -> dict[int, str]:
    """Every token text the step's trace names (nodes, emitted tokens, its Mask Lens): the eye records ids."""
    texts = {n.token: n.text for n in step.nodes}
    texts.update(zip(step.emitted, step.emitted_text))
    for rec in step.lens:
        texts.update(rec.texts)
    return texts


def rank_of(node: NodeTrace, pairs: list[tuple[int, float]]) -> tuple[int | None, float | None]:
    """The draft's rank and probability in the verifier's distribution: as recorded, else from the top list."""
    if node.target_rank is not None:
        return node.target_rank, node.target_p
    for r, (t, p) in enumerate(pairs, 1):
        if t == node.token:
            return r, p
    return None, None


def text_bar(p: float) -> str:
    """A probability as a bar of unicode blocks (BAR_CELLS full blocks = 1)."""
    eighths = round(max(0.0, min(1.0, p)) * BAR_CELLS * 8)
    return "█" * (eighths // 8) + (_EIGHTHS[eighths % 8] if eighths % 8 else "")


def _name(texts: Mapping[int, str], t: int) -> str:
    return show_ws(texts[t]) if t in texts else f"#{t}"


def eye_text(step: StepTrace, node: NodeTrace) -> str:
    """The tree hover's view of `node` through the verifier's eye (Plotly hover markup, texts escaped): its
    rank and probability, then the top choices as text bars, the node's own marked; "" without a record."""
    row = decided_row(step, node)
    pairs = eye_pairs(step, row) if row is not None else []
    if node.status == ROOT:
        if not pairs:
            return ""
        head = "<br><br><b>the verifier after the root</b> (decides depth 1):"
    else:
        rank, p = rank_of(node, pairs)
        if rank is None:
            return ""
        if row is None:
            return f"<br><br>verifier: rank {rank}, p = {p:.3f} (never checked: its parent was rejected)"
        mark = palette.ACCEPT_MARK if node.status == ACCEPTED else palette.REJECT_MARK
        head = f"<br><br><b>verifier: this draft is rank {rank}</b> (p = {p:.3f}) {mark}"
    texts = token_texts(step)
    lines = [f"{p:.2f} {text_bar(p)} {plot_text(_name(texts, t))}"
             + ("  ◀ this draft" if t == node.token and node.status != ROOT else "") for t, p in pairs]
    return head + "<br>" + "<br>".join(lines)


def node_eyes(step: StepTrace) -> dict[int, str]:
    """eye_text for every node that has one (node index -> hover text)."""
    if not step.eye and not any(n.target_rank is not None for n in step.nodes):
        return {}
    out = {n.index: eye_text(step, n) for n in step.nodes}
    return {i: t for i, t in out.items() if t}


def sampling_note(meta: Mapping) -> str:
    """What the engine decided from, in the run's decoding mode."""
    s = meta.get("sampling") or {}
    if not s.get("temperature"):
        return "Greedy: the bars are the softmax of the model's logits; a draft is accepted when it is the top choice."
    how = f"temperature {s['temperature']:g}" + (f", top-p {s['top_p']:g}" if s.get("top_p", 1) < 1 else "")
    how += f", top-k {s['top_k']}" if s.get("top_k") else ""
    return (f"Sampling ({how}, seed {s.get('seed', 0)}): the bars are the tempered, truncated distribution the "
            "engine drew from; a draft is accepted when it equals the token drawn.")


def shown_row(step: StepTrace, focus: int | None) -> tuple[int | None, NodeTrace | None]:
    """(eye row, focused draft) for the figure: the row that decided the focused node, or, with no focus,
    the row where the walk stopped (the model's own token: why the walk ended there)."""
    node = focus_node(step, focus)
    if node is None:
        return len(step.accepted), None
    return decided_row(step, node), (None if node.status == ROOT else node)


def eye_figure(step: StepTrace | dict, meta: Mapping | None = None, focus: int | None = None,
               height: int = 300) -> go.Figure:
    """The verifier's top choices at one row of the step's accepted path as horizontal bars: each draft
    checked there coloured by its verdict (✓ / ✗ and its rank in the label), the token the row emitted
    named (an accepted draft, a correction or a bonus), drafts outside the top list in a note. The row is the
    one that decided node `focus`, or where the walk stopped. customdata per bar: [step, row, token id, node
    index of the draft or -1]."""
    step, meta = as_step(step), meta or {}
    if not step.eye:
        return message_figure(f"{TITLE} · step {step.step}", NO_EYE, height)
    row, node = shown_row(step, focus)
    if row is None:
        return message_figure(f"{TITLE} · step {step.step}", f"Node {focus} was never checked: its parent was not "
                              "on the accepted path (or it was pruned), so the verifier never decided it.", height)
    return eye_row_figure(step, meta, row, node, height)


def eye_rows(step: StepTrace, meta: Mapping) -> list[go.Figure]:
    """eye_row_figure for every row of the step's accepted path (the root's, then each accepted draft's), with
    no draft outlined; none without a record."""
    return [eye_row_figure(step, meta, row) for row in range(len(step.accepted) + 1)] if step.eye else []


def eye_row_figure(step: StepTrace, meta: Mapping, row: int, node: NodeTrace | None = None,
                   height: int = 300) -> go.Figure:
    """eye_figure at eye row `row`, with draft `node` (one checked there) outlined."""
    title = f"{TITLE} · step {step.step}"
    pairs = eye_pairs(step, row)
    if not pairs:
        return message_figure(title, f"No verifier's record at row {row} of step {step.step} (the run ended "
                                     "there).", height)
    texts, drafts = token_texts(step), row_drafts(step, row)
    by_token = {d.token: d for d in drafts}
    chosen = step.emitted[row] if row < len(step.emitted) else None
    own = OWN_NAMES.get(own_kind(step), "model's own token") if row == len(step.accepted) else "accepted draft"
    names, probs, colors, labels, custom, lines = [], [], [], [], [], []
    for r, (t, p) in enumerate(pairs, 1):
        d = by_token.get(t)
        names.append(plot_text(f"{r} · {_name(texts, t)}"))
        probs.append(p)
        colors.append(palette.ACCEPTED if d and d.status == ACCEPTED else palette.REJECTED if d else palette.NEUTRAL)
        words = []
        if d is not None:
            words.append(f"{palette.ACCEPT_MARK if d.status == ACCEPTED else palette.REJECT_MARK} draft, rank {r}")
        if t == chosen:
            words.append(f"◀ emitted ({own})")
        labels.append(f"{p:.2f} " + " · ".join(words))
        custom.append([step.step, row, t, d.index if d else -1])
        lines.append(2 if node is not None and d is node else 0)
    bars = {"type": "bar", "orientation": "h", "y": names, "x": probs, "text": labels, "textposition": "outside",
            "cliponaxis": False, "marker": {"color": colors, "line": {"color": palette.FOCUS, "width": lines}},
            "customdata": custom, "name": "verifier's top choices", "showlegend": False,
            "hovertemplate": "%{y}: p = %{x:.3f}<extra>%{text}</extra>"}
    path = path_nodes(step)
    where = f"after {plot_text(repr(show_ws(path[row].text)))}" if row < len(path) else f"row {row}"
    notes = [_outside(pairs, drafts, texts), sampling_note(meta)]
    # Under the axis's tick labels, one line each (pixel offsets: the plot's height varies).
    annotations = [{"text": plot_text(n), "x": 0, "xref": "paper", "y": 0, "yref": "paper", "yshift": -26 - 16 * i,
                    "xanchor": "left", "yanchor": "top", "showarrow": False, "font": {"size": 10, "color": INK}}
                   for i, n in enumerate(n for n in notes if n)]
    layout = base_layout(f"{title} · {where}", height, showlegend=False, annotations=annotations,
                         xaxis={"range": [0, 1.35], "tickformat": ".1f"},
                         yaxis={"autorange": "reversed", "type": "category"})
    layout["margin"]["b"] = 30 + 16 * len(annotations)
    return figure([bars], layout)


def _outside(pairs: Sequence[tuple[int, float]], drafts: Sequence[NodeTrace], texts: Mapping[int, str]) -> str:
    """One line on the drafts checked at the row that are not among the top choices shown."""
    top = {t for t, _ in pairs}
    out = []
    for d in drafts:
        if d.token in top:
            continue
        rank, p = rank_of(d, [])
        where = f"rank {rank}, p = {p:.4f}" if rank is not None else f"below the top {len(pairs)}"
        mark = palette.ACCEPT_MARK if d.status == ACCEPTED else palette.REJECT_MARK
        out.append(f"{_name(texts, d.token)} ({where}) {mark}")
    return f"Also drafted here: {', '.join(out)}." if out else ""

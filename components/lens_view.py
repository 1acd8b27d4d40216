"""The Mask Lens: a raw logit lens over ESP's mask tokens (each layer's hidden state read through the model's
final norm and LM head, no trained translator; StepTrace.lens), against the token that really came at each
mask's position (StepTrace.lens_real, resolved on a later step). Three views: a step's layers x masks grid of
decoded tokens, the commitment strip over the generated text (from which layer each accepted ESP draft was
its mask's top-1 for good), and the run so far (where the real token ranks, layer by layer, for accepted
against rejected masks)."""
from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from esp.trace import ESP, LensReal, LensTrace, StepTrace

from . import palette
from .common import (INK, accepted_nodes, as_steps, base_layout, figure, message_figure, plot_text, show_ws,
                     two_panels, walk_end)
from .eye_view import text_bar

RAW = "raw logit lens: each layer's state through the final norm and the LM head, no trained translator"
NO_LENS = ("No Mask Lens in this trace: it is recorded with the lens on (runs made on this page, and traces "
           "shipped with it); older traces and library runs leave it out.")
CELL_CHARS = 7  # a grid cell's token text, cut with …
WRAP = 16  # tokens per line of the commitment strip
STRIP_TOKENS = 192  # the strip shows the newest tokens only, so its payload stays bounded
# Below this height a one-line strip leaves its colour bar no room once the page adds its margins (Plotly then
# throws "axis scaling" in the browser and draws nothing).
COMMIT_MIN_HEIGHT = 240
TOP = 5  # the rank chart's top-k rate


def has_lens(steps: Sequence[StepTrace]) -> bool:
    return any(s.lens for s in steps)


def resolved(steps: Sequence[StepTrace], i: int) -> dict[int, LensReal]:
    """The lens records of step i's masks resolved by later steps (mask j -> record)."""
    step = steps[i].step
    return {r.j: r for s in steps[i + 1 :] for r in s.lens_real if r.source_step == step}


def _cell(text: str) -> str:
    t = show_ws(text)
    return plot_text(t if len(t) <= CELL_CHARS else t[: CELL_CHARS - 1] + "…")


def _hover(rec: LensTrace, layer: int, real: LensReal | None) -> str:
    lines = [f"<b>mask {rec.j} · layer {layer}</b> (raw logit lens)"]
    lines += [f"{p:.2f} {text_bar(p)} {plot_text(show_ws(rec.texts.get(t, f'#{t}')))}"
              for t, p in zip(rec.tokens[layer], rec.probs[layer])]
    if real is None:
        lines.append("the token at this mask's position has not come yet")
    else:
        lines.append(f"real token {plot_text(repr(show_ws(real.text)))}: p = {real.prob[layer]:.3g}, "
                     f"rank {real.rank[layer]}")
    return "<br>".join(lines)


def lens_figure(steps: Sequence[StepTrace | dict], i: int | None = None, height: int | None = None) -> go.Figure:
    """Step i's Mask Lens as a layers x masks grid (layer 0, the embeddings, at the bottom; the top row is the
    model's own output, which ESP drafts the next tree from): each cell the layer's top-1 token (bold where
    it is the token that really came), shaded by the probability of that real token (masks not resolved yet
    are left clear, with a note); hover lists the top tokens and the real token's probability and rank.
    customdata per cell: [step, node index where the masks sit, mask j, layer]."""
    steps = as_steps(steps)
    i = len(steps) - 1 if i is None else i
    step = steps[i]
    title = f"Mask Lens · step {step.step}"
    if not step.lens:
        note = NO_LENS if not has_lens(steps) else (f"Step {step.step} fed no mask at the end of its accepted "
                                                    "path, so it has no lens.")
        return message_figure(title, note, height or 320)
    lens = sorted(step.lens, key=lambda r: r.j)
    real = resolved(steps, i)
    layers = min(len(r.tokens) for r in lens)
    end = walk_end(step)
    xs = [_column(r, real.get(r.j)) for r in lens]
    z, text, hover, custom = [], [], [], []
    for layer in range(layers):
        z.append([real[r.j].prob[layer] if r.j in real else None for r in lens])
        text.append([_cell_text(r, layer, real.get(r.j)) for r in lens])
        hover.append([_hover(r, layer, real.get(r.j)) for r in lens])
        custom.append([[step.step, end.index, r.j, layer] for r in lens])
    scale = {"zmin": 0, "zmax": 1, "colorscale": palette.PROBABILITY_SCALE, "name": "mask lens",
             "colorbar": {"title": {"text": "p(real<br>token)", "font": {"size": 10}}, "thickness": 12, "len": 0.7}}
    data = cells(z, text, hover, custom, scale, x=xs, y=list(range(layers)))
    open_masks = [r.j for r in lens if r.j not in real]
    notes = [f"{RAW}."]
    if open_masks:
        notes.append(f"Clear: mask {', '.join(map(str, open_masks))} — the token at its position has not "
                     "come yet.")
    annotations = [{"text": n, "x": 0, "xref": "paper", "y": -0.06 - 0.05 * k, "yref": "paper", "xanchor": "left",
                    "yanchor": "top", "showarrow": False, "font": {"size": 9, "color": INK}}
                   for k, n in enumerate(notes)]
    where = plot_text(repr(show_ws(end.text)))
    layout = base_layout(f"{title} · masks fed after {where}", height or max(320, 130 + 17 * layers),
                         annotations=annotations,
                         xaxis={"type": "category", "side": "top", "tickfont": {"size": 10}},
                         yaxis={"title": {"text": "layer (0 = embeddings, top = output)", "font": {"size": 10}},
                                "dtick": 5 if layers > 12 else 1, "range": [-0.5, layers - 0.5]})
    layout["margin"].update(t=70, b=30 + 16 * len(annotations))
    return figure(data, layout)


def cells(z: list[list], text: list[list], hover: list[list], custom: list[list], scale: dict,
          x: list | None = None, y: list | None = None) -> list[dict]:
    """A grid as a heatmap shaded on `scale` at palette.SHADE opacity (None cells left clear: the page shows
    through), with each cell's text drawn over it in the page's own text colour, which then reads on every
    cell on a light page and a dark one. Hover and customdata are the heatmap's, per cell."""
    xs = x if x is not None else list(range(max(map(len, z), default=0)))
    ys = y if y is not None else list(range(len(z)))
    heat = {"type": "heatmap", "z": z, "x": xs, "y": ys, "hovertext": hover, "customdata": custom, "xgap": 2,
            "ygap": 2, "opacity": palette.SHADE, "hoverongaps": True, "hovertemplate": "%{hovertext}<extra></extra>",
            **scale}
    points = [(xs[c], ys[r], t) for r, row in enumerate(text) for c, t in enumerate(row) if t]
    labels = {"type": "scatter", "mode": "text", "x": [p[0] for p in points], "y": [p[1] for p in points],
              "text": [p[2] for p in points], "textfont": {"size": 9}, "hoverinfo": "skip", "showlegend": False,
              "name": "labels"}
    return [heat, labels]


def _column(rec: LensTrace, real: LensReal | None) -> str:
    """A mask's column name: the mask, then the token that came at its position and the draft's verdict."""
    if real is None:
        return f"mask {rec.j} → ?"
    mark = palette.ACCEPT_MARK if real.accepted else palette.REJECT_MARK
    return f"mask {rec.j} → {_cell(real.text)} {mark}"


def _cell_text(rec: LensTrace, layer: int, real: LensReal | None) -> str:
    top = rec.tokens[layer][0] if rec.tokens[layer] else None
    if top is None:
        return ""
    name = _cell(rec.texts.get(top, f"#{top}"))
    return f"<b>{name}</b>" if real is not None and top == real.token else name


def commit_layer(real: LensReal) -> int | None:
    """The first layer from which the real token is the lens's top-1 at every later layer; None when it is
    not the top-1 at the last layer (the mask drafted it as a lower choice)."""
    layer = None
    for k in range(len(real.rank) - 1, -1, -1):
        if real.rank[k] != 1:
            break
        layer = k
    return layer


def commitments(steps: Sequence[StepTrace], upto: int) -> dict[int, tuple[LensReal, int | None]]:
    """Text index -> (record, commitment layer) for every token accepted from an ESP mask whose lens was
    resolved by step `upto`. The mask at position P drafted the token at P + 1, text index P - (the
    prompt's last position)."""
    if not steps or not steps[0].positions:
        return {}
    start = steps[0].positions[0]
    by_step = {s.step: s for s in steps}
    out = {}
    for s in steps[: upto + 1]:
        for r in s.lens_real:
            source, after = by_step.get(r.source_step), by_step.get(r.source_step + 1)
            lens = next((x for x in source.lens if x.j == r.j), None) if source else None
            if not r.accepted or lens is None or after is None:
                continue
            path = accepted_nodes(after)
            if len(path) < r.j or (path[r.j - 1].sources and ESP not in path[r.j - 1].sources):
                continue
            out[lens.position - start] = (r, commit_layer(r))
    return out


def commit_figure(steps: Sequence[StepTrace | dict], upto: int | None = None, height: int | None = None) -> go.Figure:
    """The generated text of steps 0..upto as lines of WRAP tokens (the newest STRIP_TOKENS), each token accepted
    from an ESP mask shaded by the layer from which it was that mask's top-1 for good (written under it);
    other tokens clear. customdata per cell: [step that emitted it, text index, mask's step, mask j]."""
    steps = as_steps(steps)
    upto = len(steps) - 1 if upto is None else upto
    title = "Commitment strip: from which layer each accepted ESP draft was its mask's top-1"
    if not has_lens(steps[: upto + 1]):
        return message_figure(title, NO_LENS, height or 240)
    found = commitments(steps, upto)
    if not found:
        return message_figure(title, "No draft from an ESP mask accepted yet (with its lens resolved).", height or 240)
    tokens = [(s.step, t) for s in steps[: upto + 1] for t in s.emitted_text]
    first = strip_start(len(tokens))
    layers = max(len(r.rank) for r, _ in found.values())
    z, text, hover, custom = [], [], [], []
    for line in range(first, len(tokens), WRAP):
        zl, tl, hl, cl = [], [], [], []
        for k in range(line, min(line + WRAP, len(tokens))):
            emitted_by, tok = tokens[k]
            rec, layer = found.get(k, (None, None))
            zl.append(layer if rec is not None and layer is not None else None)
            tl.append(_cell(tok) + ("" if rec is None else f"<br>L{layer}" if layer is not None else "<br>–"))
            hl.append(_strip_hover(tok, k, emitted_by, rec, layer, layers))
            cl.append([emitted_by, k, rec.source_step if rec else -1, rec.j if rec else -1])
        z.append(zl), text.append(tl), hover.append(hl), custom.append(cl)
    scale = {"zmin": 0, "zmax": layers - 1, "colorscale": palette.PROBABILITY_SCALE, "name": "commitment",
             "colorbar": {"title": {"text": "layer", "font": {"size": 10}}, "thickness": 12, "len": 0.8}}
    data = cells(z, text, hover, custom, scale)
    note = (f"{len(found)} accepted ESP drafts; darker = its mask's top-1 from an earlier layer; L = that layer, "
            f"– = never its mask's top-1 (drafted as a lower choice).<br>{RAW}.")
    layout = base_layout(title, height or max(COMMIT_MIN_HEIGHT, 120 + 34 * len(z)), annotations=[
        {"text": note, "x": 0, "xref": "paper", "y": 0, "yref": "paper", "yshift": -6, "xanchor": "left",
         "yanchor": "top", "align": "left", "showarrow": False, "font": {"size": 9, "color": INK}}],
        xaxis={"visible": False}, yaxis={"visible": False, "autorange": "reversed"})
    layout["margin"]["b"] = 44
    return figure(data, layout)


def strip_start(tokens: int) -> int:
    """The text index of the strip's first token for a text of `tokens` tokens: the newest STRIP_TOKENS, from the
    start of a line of WRAP, so that each token keeps its column as the window slides."""
    first = max(0, tokens - STRIP_TOKENS)
    return first - first % WRAP


def _strip_hover(tok: str, k: int, step: int, rec: LensReal | None, layer: int | None, layers: int) -> str:
    head = f"<b>{plot_text(repr(show_ws(tok)))}</b> · token {k}, emitted by step {step}"
    if rec is None:
        return head + "<br>not an accepted ESP draft"
    when = (f"its mask's top-1 from layer {layer} of {layers - 1} on" if layer is not None
            else f"never its mask's top-1 (rank {rec.rank[-1]} at the output)")
    return f"{head}<br>drafted by mask {rec.j} of step {rec.source_step}: {when}"


def rank_stats(records: Sequence[LensReal], top: int = TOP) -> dict[str, dict]:
    """Per group (accepted / rejected): per-layer mean and median rank of the real token, the rate at which it
    is in the lens's top `top`, and the record count. Records of another depth than the most common are
    left out (one model has one depth)."""
    if not records:
        return {}
    depth = Counter(len(r.rank) for r in records).most_common(1)[0][0]
    out = {}
    for group in ("accepted", "rejected"):
        rows = [r.rank for r in records if len(r.rank) == depth and r.accepted == (group == "accepted")]
        if rows:
            a = np.asarray(rows, dtype=float)
            out[group] = {"mean": a.mean(0), "median": np.median(a, 0), "top": (a <= top).mean(0), "n": len(rows)}
    return out


STYLE = {"accepted": {"color": palette.ACCEPTED, "dash": "solid", "symbol": "circle"},
         "rejected": {"color": palette.REJECTED, "dash": "dash", "symbol": "x"}}


def rank_figure(steps: Sequence[StepTrace | dict], upto: int | None = None, height: int = 340) -> go.Figure:
    """The run so far (steps 0..upto): per layer, the mean rank of the real token under the lens (log axis)
    and how often it is in the top TOP, for masks whose draft was accepted against rejected ones."""
    steps = as_steps(steps)
    upto = len(steps) - 1 if upto is None else upto
    title = "Mask Lens, run so far: the real token's rank per layer"
    if not has_lens(steps[: upto + 1]):
        return message_figure(title, NO_LENS, height)
    stats = rank_stats([r for s in steps[: upto + 1] for r in s.lens_real])
    if not stats:
        return message_figure(title, "No mask resolved yet: a mask's record comes once the token at its position "
                                     "is emitted.", height)
    data = []
    for group, st in stats.items():
        style, layers = STYLE[group], list(range(len(st["mean"])))
        common = {"type": "scatter", "x": layers, "mode": "lines+markers", "legendgroup": group,
                  "line": {"color": style["color"], "dash": style["dash"], "width": 2},
                  "marker": {"symbol": style["symbol"], "size": 6, "color": style["color"]}}
        data += [
            {**common, "y": st["mean"].tolist(), "name": f"{group} (n={st['n']})", "customdata": st["median"].tolist(),
             "hovertemplate": f"{group}, layer %{{x}}: mean rank %{{y:.1f}}, median %{{customdata:.0f}}"
                              "<extra></extra>"},
            {**common, "y": st["top"].tolist(), "xaxis": "x2", "yaxis": "y2", "showlegend": False,
             "name": f"{group} top-{TOP}",
             "hovertemplate": f"{group}, layer %{{x}}: in the top {TOP} %{{y:.0%}}<extra></extra>"},
        ]
    layout = base_layout(title, height, **two_panels(("mean rank (log; 1 = the lens's top choice)",
                                                      f"share in the lens's top {TOP}")))
    layout["margin"]["t"] = 60
    axis_title = {"text": "layer (0 = embeddings)", "font": {"size": 10}}
    layout["xaxis"]["title"] = layout["xaxis2"]["title"] = axis_title
    layout["yaxis"].update(type="log", autorange="reversed", title={"text": "rank", "font": {"size": 10}})
    layout["yaxis2"].update(range=[0, 1.02], tickformat=".0%")
    return figure(data, layout)


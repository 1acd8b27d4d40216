"""A step's draft tree: a networkx graph, a crossing-free tidy layout, and its Plotly figure."""
from __future__ import annotations

import networkx as nx
import plotly.graph_objects as go

from esp.trace import ACCEPTED, PRUNED, REJECTED, ROOT, StepTrace

from . import palette
from . import sources as src
from .common import FAINT, STATUS_COLORS, as_step, base_layout, figure, message_figure, plot_text, show_ws
from .eye_view import node_eyes
from .focus import FOCUS_COLOR, focus_node

# Drawing order (later on top): the accepted path last.
STATUS_ORDER = (PRUNED, REJECTED, ROOT, ACCEPTED)
# A label is up to 6 characters at 10 px (~36 px) plus a gap; the tree panel is ~400 px wide or more on a
# 1280 px page. Labels closer than that on one level would overlap, so only some are drawn.
LABEL_PX, MIN_PANEL_PX, LABEL_CHARS = 40, 400, 6
# Deeper than this (PLD's and LADE's chains), levels are too close for two-line labels below the nodes:
# labels go on one line to the right of their node, so they need more room across.
DEEP, DEEP_LABEL_PX = 5, 72
# The verdict said twice: by colour and by this mark after the label (components/palette.py).
MARKS = {ACCEPTED: " " + palette.ACCEPT_MARK, REJECTED: " " + palette.REJECT_MARK}


def tree_graph(step: StepTrace | dict) -> nx.DiGraph:
    """The step's tree as a DiGraph (node = trace index, attributes = the NodeTrace fields)."""
    step = as_step(step)
    g = nx.DiGraph()
    for n in step.nodes:
        g.add_node(n.index, token=n.token, text=n.text, prob=n.prob, cum_prob=n.cum_prob,
                   status=n.status, row=n.row, position=n.position, sources=list(n.sources), p=n.p)
    g.add_edges_from((n.parent, n.index) for n in step.nodes if n.parent >= 0)
    return g


def accepted_path(g: nx.DiGraph, root: int = 0) -> list[int]:
    """Root first, then the accepted nodes in order (they form one root-to-node path)."""
    accepted = [n for n, s in g.nodes(data="status") if s == ACCEPTED]
    if not accepted:
        return [root]
    depth = nx.single_source_shortest_path_length(g, root)
    return nx.shortest_path(g, root, max(accepted, key=depth.__getitem__))


def tidy_layout(g: nx.DiGraph, root: int = 0) -> dict[int, tuple[float, float]]:
    """Top-down tidy layout: leaves at consecutive x in DFS order, each parent centred over its
    children, y = -depth. DFS order gives every subtree a contiguous x-interval, so no edges cross."""
    depth = nx.single_source_shortest_path_length(g, root)
    x: dict[int, float] = {}
    leaf = 0
    for n in nx.dfs_postorder_nodes(g, root):  # children (in draft-rank order) before their parent
        kids = list(g.successors(n))
        if kids:
            x[n] = (x[kids[0]] + x[kids[-1]]) / 2
        else:
            x[n] = float(leaf)
            leaf += 1
    return {n: (x[n], -float(depth[n])) for n in x}


def is_deep(pos: dict[int, tuple[float, float]]) -> bool:
    return -min(y for _, y in pos.values()) > DEEP


def x_range(pos: dict[int, tuple[float, float]]) -> list[float]:
    """The x axis range: the leaf slots, plus room on the right for the labels of a deep tree."""
    slots = max(x for x, _ in pos.values()) + 1
    return [-0.5, slots - 0.5 + (max(1.0, slots / 4) if is_deep(pos) else 0.0)]


def labelled_nodes(g: nx.DiGraph, pos: dict[int, tuple[float, float]], panel_px: int = MIN_PANEL_PX) -> set[int]:
    """The nodes whose label is drawn: per level, root and accepted nodes first, then the others by
    cumulative probability, each only if it is at least a label's width from every label already drawn on
    that level. The rest keep their label on hover."""
    lo, hi = x_range(pos)
    gap = (DEEP_LABEL_PX if is_deep(pos) else LABEL_PX) * (hi - lo) / panel_px  # a label's width in x units
    order = sorted(g.nodes, key=lambda n: (g.nodes[n]["status"] not in (ROOT, ACCEPTED), -g.nodes[n]["cum_prob"]))
    drawn: dict[float, list[float]] = {}
    out = set()
    for n in order:
        x, y = pos[n]
        level = drawn.setdefault(y, [])
        if all(abs(x - other) >= gap for other in level):
            level.append(x)
            out.add(n)
    return out


def short(text: str) -> str:
    """A token's visible text cut to LABEL_CHARS characters (… marks the cut)."""
    t = show_ws(text)
    return plot_text(t if len(t) <= LABEL_CHARS else t[: LABEL_CHARS - 1] + "…")


def tree_figure(step: StepTrace | dict, height: int = 420, focus: int | None = None) -> go.Figure:
    """The draft tree coloured by status, marked by source, labelled with token and cumulative probability
    where labels fit (hover shows every node); node `focus` (an index of step.nodes) outlined thick."""
    step = as_step(step)
    title = f"Draft tree · step {step.step}"
    if step.prefill:
        return message_figure(title, "Prefill: the prompt is fed with k mask tokens; no draft yet.", height)
    g = tree_graph(step)
    pos = tidy_layout(g)
    path = accepted_path(g)
    # All edges in one trace (None breaks the line), then the accepted path drawn thick on top.
    ex, ey = _segments(pos, g.edges())
    px, py = _segments(pos, zip(path, path[1:]))
    data = [
        {"type": "scatter", "x": ex, "y": ey, "mode": "lines", "line": {"color": FAINT, "width": 1},
         "hoverinfo": "skip", "showlegend": False, "name": "edges"},
        {"type": "scatter", "x": px, "y": py, "mode": "lines", "hoverinfo": "skip", "name": "accepted path",
         "line": {"color": STATUS_COLORS[ACCEPTED], "width": 4}, "showlegend": len(path) > 1},
    ]
    by_status: dict[str, list[int]] = {}
    for n, status in g.nodes(data="status"):
        by_status.setdefault(status, []).append(n)
    shown, eye = labelled_nodes(g, pos), node_eyes(step)
    data += [_node_trace(g, pos, by_status[s], s, shown, is_deep(pos), eye) for s in STATUS_ORDER if s in by_status]
    data += _source_legend(g)
    if focus_node(step, focus) is not None:
        x, y = pos[int(focus)]
        data.append({"type": "scatter", "x": [x], "y": [y], "mode": "markers", "name": f"focus: node {int(focus)}",
                     "marker": {"size": 28, "symbol": "circle-open", "line": {"width": 4, "color": FOCUS_COLOR}},
                     "hoverinfo": "skip"})
    low = min(y for _, y in pos.values())
    layout = base_layout(f"{title} · accepted {len(path) - 1} of {g.number_of_nodes() - 1}", height,
                         xaxis={"visible": False, "range": x_range(pos)},
                         yaxis={"visible": False, "range": [low - 0.6, 0.4]},
                         # Below the tree (it has no x axis there), so the plot keeps the panel's width.
                         legend={"orientation": "h", "x": 0, "y": -0.02, "yanchor": "top", "font": {"size": 10}})
    return figure(data, layout)


def _source_legend(g: nx.DiGraph) -> list[dict]:
    """One legend-only marker per source used in this tree: its symbol, outlined in its colour."""
    marks: dict[str, tuple[str, str]] = {}
    for n, d in g.nodes(data=True):
        if d["status"] in (ACCEPTED, REJECTED) and d["sources"]:
            label = "agreed" if len(d["sources"]) > 1 else d["sources"][0]  # short: the caption says more
            marks[label] = src.symbol(d["sources"]), _outline(d["status"], d["sources"])
    return [{"type": "scatter", "x": [None], "y": [None], "mode": "markers", "name": f"source: {label}",
             "legendgroup": "sources", "hoverinfo": "skip",
             "marker": {"symbol": sym, "color": "rgba(0,0,0,0)", "size": 10, "line": {"width": 2, "color": color}}}
            for label, (sym, color) in sorted(marks.items())]


def _segments(pos: dict[int, tuple[float, float]], edges) -> tuple[list, list]:
    xs: list = []
    ys: list = []
    for a, b in edges:
        xs += [pos[a][0], pos[b][0], None]
        ys += [pos[a][1], pos[b][1], None]
    return xs, ys


def _symbol(status: str, sources: list[str]) -> str:
    if status == ROOT:
        return "square"
    if status == PRUNED:
        return "circle-open"
    return src.symbol(sources)


def _node_trace(g: nx.DiGraph, pos: dict, ids: list[int], status: str, shown: set[int], deep: bool,
                eye: dict[int, str]) -> dict:
    """One marker trace per status (fill colour, and ✓ / ✗ in the label); the symbol and the outline colour
    mark each node's source; label = token + cumulative probability where it fits; hover adds draft p,
    calibrated P, the sources and, with the lens on, the verifier's view of the draft (`eye`: node -> text bars)."""
    data = [g.nodes[n] for n in ids]
    mark = MARKS.get(status, "")
    return {
        "type": "scatter", "x": [pos[n][0] for n in ids], "y": [pos[n][1] for n in ids],
        "mode": "markers+text", "name": status,
        "marker": {"size": 16 if status in (ROOT, ACCEPTED) else 12, "color": STATUS_COLORS[status],
                   "symbol": [_symbol(status, d["sources"]) for d in data],
                   "line": {"width": [2 if d["sources"] and status != PRUNED else 1 for d in data],
                            "color": [_outline(status, d["sources"]) for d in data]}},
        "text": [f"{short(d['text'])}{' ' if deep else '<br>'}{d['cum_prob']:.2f}{mark}" if n in shown else ""
                 for d, n in zip(data, ids)],
        "textposition": "middle right" if deep else "bottom center", "textfont": {"size": 10},
        # customdata: raw token text, draft p, depth, cumulative p, node index (the page's click reads it),
        # sources, calibrated P, the verifier's eye (text bars, or "")
        "customdata": [[plot_text(d["text"]), d["prob"], -pos[n][1], d["cum_prob"], n,
                        src.describe(d["sources"]) if status != ROOT else "the last emitted token",
                        "not calibrated" if d["p"] is None else f"{d['p']:.3f}", eye.get(n, "")]
                       for d, n in zip(data, ids)],
        "hovertemplate": ("<b>%{customdata[0]}</b><br>draft p = %{customdata[1]:.3f}<br>cumulative p = "
                          "%{customdata[3]:.3f}<br>calibrated P(accepted) = %{customdata[6]}<br>source: "
                          "%{customdata[5]}<br>depth %{customdata[2]} · node %{customdata[4]}%{customdata[7]}"
                          f"<extra>{status}{mark}</extra>"),
    }


def _outline(status: str, sources: list[str]) -> str:
    """A fed draft's outline in its source's colour (as in the text and the attention pattern)."""
    if status == PRUNED or not sources:
        return FAINT
    return palette.AGREED if len(sources) > 1 else palette.SOURCES.get(sources[0], FAINT)

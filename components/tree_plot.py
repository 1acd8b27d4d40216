"""A step's draft tree: a networkx graph, a crossing-free tidy layout, and its Plotly figure."""
from __future__ import annotations

import networkx as nx
import plotly.graph_objects as go

from esp.trace import ACCEPTED, PRUNED, REJECTED, ROOT, StepTrace

from .common import STATUS_COLORS, as_step, base_layout, figure, message_figure, show_ws

# Drawing order (later on top): the accepted path last.
STATUS_ORDER = (PRUNED, REJECTED, ROOT, ACCEPTED)
_SYMBOLS = {ROOT: "square", ACCEPTED: "circle", REJECTED: "circle", PRUNED: "circle-open"}


def tree_graph(step: StepTrace | dict) -> nx.DiGraph:
    """The step's tree as a DiGraph (node = trace index, attributes = the NodeTrace fields)."""
    step = as_step(step)
    g = nx.DiGraph()
    for n in step.nodes:
        g.add_node(n.index, token=n.token, text=n.text, prob=n.prob, cum_prob=n.cum_prob,
                   status=n.status, row=n.row, position=n.position)
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


def tree_figure(step: StepTrace | dict, height: int = 420) -> go.Figure:
    """The draft tree coloured by status, labelled with token and cumulative probability."""
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
        {"type": "scatter", "x": ex, "y": ey, "mode": "lines", "line": {"color": "#c8c8c8", "width": 1},
         "hoverinfo": "skip", "showlegend": False, "name": "edges"},
        {"type": "scatter", "x": px, "y": py, "mode": "lines", "hoverinfo": "skip", "name": "accepted path",
         "line": {"color": STATUS_COLORS[ACCEPTED], "width": 4}, "showlegend": len(path) > 1},
    ]
    by_status: dict[str, list[int]] = {}
    for n, status in g.nodes(data="status"):
        by_status.setdefault(status, []).append(n)
    data += [_node_trace(g, pos, by_status[s], s) for s in STATUS_ORDER if s in by_status]
    low = min(y for _, y in pos.values())
    layout = base_layout(f"{title} · accepted {len(path) - 1} of {g.number_of_nodes() - 1}", height,
                         xaxis={"visible": False}, yaxis={"visible": False, "range": [low - 0.6, 0.4]})
    return figure(data, layout)


def _segments(pos: dict[int, tuple[float, float]], edges) -> tuple[list, list]:
    xs: list = []
    ys: list = []
    for a, b in edges:
        xs += [pos[a][0], pos[b][0], None]
        ys += [pos[a][1], pos[b][1], None]
    return xs, ys


def _node_trace(g: nx.DiGraph, pos: dict, ids: list[int], status: str) -> dict:
    """One marker trace per status: label = token + cumulative probability; hover adds the rest."""
    data = [g.nodes[n] for n in ids]
    return {
        "type": "scatter", "x": [pos[n][0] for n in ids], "y": [pos[n][1] for n in ids],
        "mode": "markers+text", "name": status,
        "marker": {"size": 16 if status in (ROOT, ACCEPTED) else 12, "color": STATUS_COLORS[status],
                   "symbol": _SYMBOLS[status], "line": {"width": 1, "color": "white"}},
        "text": [f"{show_ws(d['text'])}<br>{d['cum_prob']:.2f}" for d in data],
        "textposition": "bottom center", "textfont": {"size": 10},
        # customdata: raw token text, draft p, depth, cumulative p, node index
        "customdata": [[d["text"], d["prob"], -pos[n][1], d["cum_prob"], n] for d, n in zip(data, ids)],
        "hovertemplate": ("<b>%{text}</b><br>draft p = %{customdata[1]:.3f}<br>cumulative p = "
                          "%{customdata[3]:.3f}<br>depth %{customdata[2]} · node %{customdata[4]}"
                          f"<extra>{status}</extra>"),
    }

"""A step's attention pattern (who sees whom in its one forward) as a heatmap: block rows x (one prefix column
+ block columns). Named so that "mask" means ESP's mask tokens only; the module keeps its old name."""
from __future__ import annotations

import plotly.graph_objects as go

from esp.trace import StepTrace

from . import palette
from . import sources as src
from .common import STATUS_COLORS, WASH, as_step, base_layout, figure, message_figure, plot_text, show_ws
from .focus import FOCUS_COLOR, focus_node, mask_rows

BLOCKED, VISIBLE, ON_PATH = 0, 1, 2
STATES = {BLOCKED: "blocked", VISIBLE: "visible", ON_PATH: "accepted path ✓"}
VISIBLE_COLOR = "rgba(128,128,128,0.5)"  # neutral: only the accepted path carries a verdict colour
# A stepped colour scale: each of the three integer values gets one flat band; the accepted path's cells also
# carry a ✓ (colour never works alone).
_SCALE = [[0.0, WASH], [1 / 3, WASH], [1 / 3, VISIBLE_COLOR], [2 / 3, VISIBLE_COLOR],
          [2 / 3, STATUS_COLORS["accepted"]], [1.0, STATUS_COLORS["accepted"]]]
TITLE = "Attention pattern"


def row_names(step: StepTrace | dict) -> list[str]:
    """Unique "i:token" names of the block rows (node rows by their token and source tag, other rows by
    their label)."""
    step = as_step(step)
    by_row = {n.row: n for n in step.nodes if n.row is not None}

    def name(i: int, label: str) -> str:
        if i not in by_row:
            return plot_text(f"{i}:{label}")
        node = by_row[i]
        tag = src.tag(node.sources)
        return plot_text(f"{i}:{show_ws(node.text)}") + (f" [{tag}]" if tag else "")

    return [name(i, label) for i, label in enumerate(step.row_labels)]


def prompt_length(step: StepTrace | dict) -> int:
    """Prefill only: the prompt tokens fed before the root (the root is the prompt's last token)."""
    step = as_step(step)
    return step.positions[0] - step.n_past if step.positions else 0


def mask_matrix(step: StepTrace | dict) -> list[list[int]]:
    """Cell states: blocked / visible / on the accepted path (visible, and both row and column were
    committed; the prefix column counts as committed)."""
    step = as_step(step)
    kept = set(step.accepted_rows)
    return [
        [ON_PATH if seen and r in kept and (c == 0 or c - 1 in kept) else VISIBLE if seen else BLOCKED
         for c, seen in enumerate(row)]
        for r, row in enumerate(step.mask)
    ]


def mask_figure(step: StepTrace | dict, height: int = 420, focus: int | None = None) -> go.Figure:
    """The step's attention pattern; at the prefill, the prompt's rows are summarised as one row and one column.
    With `focus` (a node index), that node's row and its mask rows are outlined. customdata per cell: the
    node index of its row (-1 for a mask, lookahead or prompt row), for the page's clicks."""
    step = as_step(step)
    title = f"{TITLE} · step {step.step}"
    if not step.mask:
        return message_figure(title, "This run did not record masks.", height)
    names, z = row_names(step), mask_matrix(step)
    if step.prefill:
        # The prefill fed the whole prompt: its rows (causal among themselves, blind to the block) are
        # committed, so they show as one accepted-path row seeing only the prompt column.
        n = prompt_length(step)
        prefix = f"prompt ×{n}"
        names = [f"prompt ({n} tokens)"] + names
        z = [[ON_PATH] + [BLOCKED] * (len(names) - 1)] + z
        title += f" (prefill) · prompt {n + 1} tokens + {len(names) - 2} rows"
    else:
        prefix = f"prefix ×{step.n_past}"
        title += f" · {len(names)} rows · prefix {step.n_past}"
    columns = [prefix] + (names[1:] if step.prefill else names)
    node_of = {n.row: n.index for n in step.nodes if n.row is not None}
    rows = ([-1] if step.prefill else []) + [node_of.get(r, -1) for r in range(len(step.row_labels))]
    heat = {
        "type": "heatmap", "z": z, "x": columns, "y": names,
        "zmin": 0, "zmax": 2, "colorscale": _SCALE, "xgap": 1, "ygap": 1,
        "text": [[palette.ACCEPT_MARK if v == ON_PATH else "" for v in row] for row in z], "texttemplate": "%{text}",
        "textfont": {"size": 8}, "customdata": [[r] * len(columns) for r in rows],
        "colorbar": {"tickvals": [1 / 3, 1, 5 / 3], "ticktext": list(STATES.values()), "thickness": 12, "len": 0.6},
        "hovertemplate": "row %{y}<br>sees %{x}: %{z}<extra>0 blocked · 1 visible · 2 accepted path</extra>",
    }
    # Rows top-down like a matrix; categorical axes keep every label even where tokens repeat.
    ticks = source_ticks(step, names)
    layout = base_layout(
        title, height,
        yaxis={"autorange": "reversed", "type": "category", "tickfont": {"size": 9}, **ticks},
        xaxis={"type": "category", "tickangle": -60, "tickfont": {"size": 9}, "side": "bottom",
               **(source_ticks(step, columns) if ticks else {})},
    )
    shapes = focus_shapes(step, focus)
    if shapes:
        layout["shapes"] = shapes
    return figure([heat], layout)


def source_ticks(step: StepTrace, names: list[str]) -> dict:
    """Axis keys that colour each node row's source tag ([E], [L], ...) as the text and the tree colour that
    source (components/palette.py); {} when no row names a source."""
    by_row = {n.row: n for n in step.nodes if n.row is not None and n.sources}
    coloured = {}
    for i, name in enumerate(row_names(step)):
        if i in by_row:
            sources = by_row[i].sources
            tag = src.tag(sources)
            coloured[name] = name[: -len(tag) - 3] + f' <span style="color:{_source_color(sources)}">[{tag}]</span>'
    if not coloured:
        return {}
    return {"tickmode": "array", "tickvals": names, "ticktext": [coloured.get(n, n) for n in names]}


def _source_color(sources: list[str]) -> str:
    return palette.AGREED if len(sources) > 1 else palette.SOURCES.get(sources[0], palette.NEUTRAL)


def focus_shapes(step: StepTrace, focus: int | None) -> list[dict]:
    """Outlines of the focused node's row (thick) and its mask rows (dashed) across the whole matrix; a
    category axis puts row r at y = r (the prefill's summary row shifts the block down by one)."""
    node = focus_node(step, focus)
    if node is None or node.row is None:
        return []
    shift = 1 if step.prefill else 0

    def outline(r: int, dash: str, width: int) -> dict:
        return {"type": "rect", "xref": "paper", "x0": 0, "x1": 1, "yref": "y", "y0": r + shift - 0.5,
                "y1": r + shift + 0.5, "line": {"color": FOCUS_COLOR, "width": width, "dash": dash}}

    return [outline(node.row, "solid", 3)] + [outline(r, "dash", 2) for r in mask_rows(step, node.index)]

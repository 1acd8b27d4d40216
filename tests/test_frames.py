"""The player's data (components/frames.py; issue 46): a step's frame holds its own views and what the player needs
to focus any node of it, to go from a token to the step and node that wrote it, and to mark the step on the run's
views; a run streamed in batches (Feed) gives the player exactly the frames of the whole run. No model, no server."""
from __future__ import annotations

import json
from pathlib import Path

import plotly.graph_objects as go
import pytest

from components.align_plot import align_run_figure
from components.common import plain_figures, walk_end
from components.export import read_trace_json
from components.eye_view import decided_row, eye_figure
from components.focus import focus_note, mask_rows
from components.frames import (HEIGHTS, LABELS, STYLE, Feed, figure_json, held as merged, markdown_html, run_data,
                               step_frames)
from components.lens_view import commit_figure, lens_figure
from components.mask_plot import mask_figure
from components.text_view import token_origin, token_sources
from components.tree_plot import tree_figure
from lens_trace import without_lens

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def masks():
    return read_trace_json(ROOT / "assets" / "trace_masks.json")


@pytest.fixture(scope="module")
def qwen15():
    return read_trace_json(ROOT / "assets" / "trace_qwen15.json")


def test_a_frame_holds_its_steps_own_views_and_words(masks):
    meta, steps = masks
    frames = step_frames(steps, meta)
    assert len(frames) == len(steps)
    for i, (f, s) in enumerate(zip(frames, steps)):
        assert f["step"] == s.step and f["tree"]["layout"]["title"]["text"].startswith(f"Draft tree · step {s.step}")
        assert f["mask"]["layout"]["title"]["text"].startswith(f"Attention pattern · step {s.step}")
        assert ("prefill" if i == 0 else f"<b>Step {i}</b>") in f["words"]
        assert [t[0] for t in f["tokens"]] == s.emitted_text
        assert f["cursor"]["accepted"] == (None if s.prefill else len(s.accepted))
        assert len(f["nodes"]) == len(s.nodes) and f["end"] == walk_end(s).index
        assert "<table>" in f["stats"] and f["shift"] == (1 if s.prefill else 0)
    assert frames[5]["eye"] and frames[5]["lens"]
    assert all(f["eye"] is None and f["lens"] is None  # recorded without the lens: the player says so instead
               for f in step_frames(without_lens(steps), meta))


def test_the_text_is_the_runs_text_token_by_token(masks):
    """The tokens of steps 0..i, with their labels, are what the text view showed at step i."""
    meta, steps = masks
    frames = step_frames(steps, meta)
    for i in (0, 7, len(steps) - 1):
        tokens = [(t[0], LABELS[t[1]]) for f in frames[: i + 1] for t in f["tokens"]]
        assert tokens == token_sources(steps, i, limit=None)


def test_a_token_names_the_step_and_node_that_wrote_it(masks):
    meta, steps = masks
    frames = step_frames(steps, meta)
    tokens = [(s, t) for s, f in enumerate(frames) for t in f["tokens"]]
    for index, node, note in ((23, 9, "Token <code>'5'</code> is an accepted draft of step 13."),
                              (24, 9, "Token '↵' is the model's own token of step 13, chosen at node 9's row."),
                              (0, 0, "the model's own token of step 0, chosen at node 0's row")):
        step, token = tokens[index]
        assert (step, index - sum(len(f["tokens"]) for f in frames[:step])) == token_origin(steps, len(steps) - 1,
                                                                                            index, limit=None)
        assert token[2] == node and note.replace("<code>", "").replace("</code>", "") in token[3].replace(
            "<code>", "").replace("</code>", "")


def test_every_node_carries_what_focusing_it_needs(masks):
    """Its Focus box label, its note, its block rows (its own, then its masks': what the attention figure outlines,
    a click on any of them focuses it), the eye row that decided it, and its token's place in the text."""
    meta, steps = masks
    s = steps[13]
    frame = step_frames(steps, meta)[13]
    start = sum(len(x.emitted_text) for x in steps[:13])
    for node in s.nodes:
        label, note, rows, eye_row, at = frame["nodes"][node.index]
        assert label.startswith(f"{node.index} · ") and note == markdown_html(focus_note(s, node.index))
        assert rows == ([node.row, *mask_rows(s, node.index)] if node.row is not None else [])
        assert eye_row == decided_row(s, node)
        focused = [j for j, (_, lab) in enumerate(token_sources(steps, 13, limit=None, focus=node.index))
                   if lab == "focused node"]
        assert focused == ([] if at is None else [start + at])
    labels = s.row_labels
    owner = lambda row: next(k for k, n in enumerate(frame["nodes"]) if row in n[2])  # noqa: E731 - the player's
    assert owner(labels.index("node 2:6")) == 2 and owner(labels.index("mask 4.1")) == 4


def test_the_runs_views_say_how_the_shown_step_is_marked(qwen15):
    meta, steps = qwen15
    data = run_data(steps, meta)
    views, frames = data["views"], data["frames"]
    assert set(views) == {"cost", "timing", "hist", "align", "lens_rank", "commit"} <= set(HEIGHTS)
    cost = views["cost"]
    marks = cost["cursor"]["marks"]
    assert [cost["figure"]["data"][t]["x"] for t in marks] == [[], [], []]  # empty until a step fills them
    assert frames[7]["cursor"]["marks"][0] == [[len(steps[7].positions)], [len(steps[7].emitted)]]
    assert frames[0]["cursor"]["marks"] == [[[], []]] * 3  # the prefill has no draft cost
    bar = views["hist"]["figure"]["data"][0]
    assert sum(bar["y"]) == len(steps) - 1 and views["hist"]["cursor"]["bar"]["text"] == "this step"
    assert views["timing"]["cursor"]["window"]["hi"] == steps[-1].step
    assert views["commit"]["cursor"]["cells"]["first"] == 0  # 48 tokens: the whole text fits the strip
    assert views["align"]["figure"]["layout"]["annotations"][1]["text"] == f"the run (steps 0-{len(steps) - 1})"
    assert all(t.get("xaxis", "x") == "x" for f in frames for t in f["bands"])  # a step's own: the left panel
    assert data["legend"] == STYLE["legend"] and [label for label, _ in data["legend"]] == LABELS


def test_a_run_fed_in_batches_gives_the_player_the_whole_runs_frames(qwen15):
    """Each step's frame is sent once; an earlier step is sent again only for what later steps resolved (its Mask
    Lens grid and its masks' curves); merged, they are the frames of the whole run."""
    meta, steps = qwen15
    feed, messages = Feed(), []
    for n in (1, 2, 5, 6, 13, 20, len(steps)):
        messages.append(feed.update(steps[:n], meta, views=n == len(steps)))
    full = run_data(steps, meta)
    assert merged(messages) == full["frames"]
    assert messages[-1]["views"] == full["views"] and "views" not in messages[0]
    sent_whole = [int(k) for m in messages for k, f in m["frames"].items() if "tree" in f]
    assert sent_whole == list(range(len(steps)))
    amended = [f for m in messages for f in m["frames"].values() if "tree" not in f]
    assert amended and all(set(f) == {"lens", "focus_bands"} for f in amended)
    assert all(isinstance(k, str) for m in messages for k in m["frames"])  # JSON's keys


def test_the_player_data_is_json(qwen15):
    meta, steps = qwen15
    data = run_data(steps[:4], meta)
    assert json.loads(json.dumps(data)) == data


@pytest.mark.parametrize("trace", ["masks", "qwen15"])
def test_plain_figures_are_the_json_their_go_figures_give(trace, request):
    """The frames skip Plotly's object model (components.common.plain_figures): each figure's JSON is still what
    the same builder's go.Figure gives, key for key."""
    meta, steps = request.getfixturevalue(trace)
    builders = [lambda: tree_figure(steps[-1]), lambda: mask_figure(steps[0]), lambda: lens_figure(steps, 1),
                lambda: eye_figure(steps[-1], meta), lambda: commit_figure(steps), lambda: align_run_figure(steps)]
    for build in builders:
        fig = build()
        with plain_figures():
            plain = build()
        assert isinstance(fig, go.Figure) and not isinstance(plain, go.Figure)
        assert figure_json(plain) == figure_json(fig)

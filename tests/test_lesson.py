"""The lesson's handlers called directly (no server, no model): a link's state, the controls set from an
opened trace or a link's recipe, a click on a token, a node or a row, Play / Pause, the tour, and the focus and
step words every step render carries."""
from __future__ import annotations

import json
from types import SimpleNamespace

import plotly.graph_objects as go
import pytest

from components.focus import FOCUS_COLOR
from components.tour import load_tour
from explorer import calls, lesson
from explorer.session import Session
from explorer.views import VIEWS

N = 2 + len(VIEWS)  # status, scrubber, *VIEWS


def link(**query) -> SimpleNamespace:
    return SimpleNamespace(query_params=query)  # what open_link reads of a gr.Request


def views(out: tuple) -> dict:
    return dict(zip(VIEWS, out[2:N]))


def test_link_opens_a_shipped_trace_at_its_step_and_tab():
    session = Session()
    out = lesson.open_link(session, link(trace="trace_masks", step="7", tab="whatif"))
    assert out[0].startswith("**Done** · step 7 of 24") and out[1]["value"] == 7
    assert out[-2].selected == "whatif" and session.meta["shipped"] == "trace_masks" and out[-1] is None
    assert "Step 7" in views(out)["words"]
    first = lesson.open_link(Session(), None)  # no link: the opening ESP run at its last step
    assert f"recorded: {calls.OPENING}.json" in first[0] and first[1]["value"] == len(first[-3].steps) - 1
    assert first[-3].meta["method"] == "esp" and any(s.alignment for s in first[-3].steps)


@pytest.mark.parametrize("query, says, step", [
    (dict(trace="trace_masks", step="999"), "trace_masks has steps 0-24, not 999", 24),
    (dict(trace="trace_masks", step="-3"), "not -3", 0),
    (dict(trace="trace_masks", step="seven"), "step 'seven' is not a number", 24),
    (dict(trace="../app", step="2"), "no shipped trace '../app'", 2),
    (dict(trace="trace_masks", step="3", tab="nowhere"), "no tab 'nowhere'", 3),
])
def test_bad_link_is_clamped_in_one_status_line(query, says, step):
    out = lesson.open_link(Session(), link(**query))
    assert out[0].startswith("⚠️") and says in out[0] and "\n" not in out[0]
    assert out[1]["value"] == step and out[-2].selected in lesson.TABS


def test_controls_show_the_opened_traces_settings():
    session = Session()
    calls.open_shipped("trace_copy", session)
    key, note, *values = lesson.shown_controls(session)
    got = dict(zip(lesson.CONTROLS, values))
    assert key == "trace=trace_copy" and note == ""
    assert got["method"] == "hybrid" and got["k"] == 1 and got["bc"] == 30 and got["init"] == "mean"
    assert got["mode"] == "greedy" and got["max_new"] == 48 and got["layouts"] == "efficient"
    assert got["model"] == "embedded" and got["dtype"] == "float32"
    assert got["prompt"] == session.meta["prompt"] and got["prompt"].startswith("Fix the typo")  # the prompt too
    calls.open_shipped("trace_qwen05", session)
    got = dict(zip(lesson.CONTROLS, lesson.shown_controls(session)[2:]))
    assert got["method"] == "esp" and got["k"] == 2 and got["tree"] == "static"
    offered = "qwen2.5-coder-0.5b" in calls.LIMITS.models  # a model the server does not offer is left as it is
    assert got["model"] == "qwen2.5-coder-0.5b" if offered else not isinstance(got["model"], str)


def test_an_uploaded_export_is_not_a_shipped_trace(tmp_path):
    session = Session()
    calls.open_shipped("trace_masks", session)
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"meta": session.meta, "steps": [s.to_dict() for s in session.steps]}))
    calls.open_trace(str(path), session)
    key, note, *_ = lesson.shown_controls(session)
    assert key == "" and "opened from a file" in note  # no link, and the page says why


def test_play_ticks_to_the_last_step_then_stops():
    session = Session()
    calls.open_shipped("trace_copy", session)  # 5 steps, opened at the last
    playing, timer, button, *shown = lesson.play(False, 4, session, 4)
    assert playing is True and timer.active and timer.value == 0.25 and button.value == lesson.PAUSE
    assert shown[1]["value"] == 0  # Play at the end starts again at step 0
    steps = []
    i = 0
    while True:
        out = lesson.tick(session, i)
        i = out[1]["value"]
        steps.append(i)
        if out[N] is False:
            break
    assert steps == [1, 2, 3, 4] and out[N + 1].active is False and out[N + 2].value == lesson.PLAY
    assert lesson.play(True, 2, session, 2)[0] is False  # Pause
    for speed in ("fast", 1000, 0, float("nan")):  # unreadable or out of range: one line, nothing plays
        out = lesson.play(False, speed, session, 2)
        assert out[3].startswith("⚠️ steps / s must be") and all(o is not True for o in out[:3])
    refused = lesson.play(False, 2, Session(), 0)
    assert refused[0] is False and refused[3].startswith("⚠️")


def test_tour_stops_open_their_trace_step_and_tab():
    stops = load_tour()
    session = Session()
    for n, stop in enumerate(stops):
        panel, text, shown_n, view, tabs, status, scrub, *_ = lesson.tour_move(None if n == 0 else 1)(n - 1, session)
        assert shown_n == n and view == stop.view and scrub["value"] == stop.step
        assert f"stop {n + 1} of {len(stops)}" in text and session.meta["shipped"] == stop.trace
        assert tabs.selected == lesson.VIEW_TABS.get(stop.view, "run") and panel.visible
    assert lesson.tour_move(1)(len(stops) - 1, session)[2] == len(stops) - 1  # Next at the end stays
    assert lesson.tour_move(-1)(0, session)[2] == 0


def test_focus_outlines_one_node_in_every_view_and_resets_per_step():
    session = Session()
    calls.open_shipped("trace_masks", session)
    plain = views(calls.show_step(session, 13))
    assert plain["focus"]["value"] is None and plain["focus_note"] == ""
    assert [c[1] for c in plain["focus"]["choices"]] == list(range(len(session.steps[13].nodes)))
    focused = views(calls.show_step(session, 13, 1))
    assert focused["focus"]["value"] == 1 and focused["focus_note"].startswith("Node 1")
    assert FOCUS_COLOR in json.dumps(focused["mask"].to_plotly_json()["layout"].get("shapes", []))
    assert FOCUS_COLOR not in json.dumps(plain["mask"].to_plotly_json()["layout"].get("shapes", []))
    assert focused["tree"].to_json() != plain["tree"].to_json() and focused["text"] != plain["text"]
    bad = views(calls.show_step(session, 13, 99))  # not a node of this step: said, nothing outlined
    assert "has no node 99" in bad["focus_note"] and bad["mask"].to_json() == plain["mask"].to_json()
    assert calls.show_step(session, 13, "x")[0] == "⚠️ focus node must be a number, not 'x'."


def test_every_step_render_carries_its_words():
    session = Session()
    calls.open_shipped("trace_masks", session)
    for i in (0, 5):
        out = views(calls.show_step(session, i))
        assert isinstance(out["tree"], go.Figure)
        assert ("prefill" if i == 0 else f"Step {i}") in out["words"]


def test_a_click_on_a_node_a_row_or_a_token_focuses_its_node():
    session = Session()
    calls.open_shipped("trace_masks", session)
    labels = session.steps[13].row_labels
    for click, node in (("node:2:1", 2), (f"row:{labels.index('node 2:6')}:1", 2),
                        (f"row:{labels.index('mask 4.1')}:1", 4)):
        got = views(lesson.clicked(session, 13, click))
        assert got["focus"]["value"] == node and got["focus_note"].startswith(f"Node {node} ")
    got = lesson.clicked(session, 24, "token:23:9")  # the whole text's token 23: step 13's second draft
    assert got[1]["value"] == 13 and views(got)["focus"]["value"] == 9
    assert views(got)["focus_note"].startswith("Token '5' is an accepted draft of step 13. Node 9 ")
    for bad in ("nodes:1:1", "row:x:1", "node:-1:1", "token:999:1", "<b>:1"):
        assert lesson.clicked(session, 13, bad)[0].startswith("⚠️"), bad
    assert views(lesson.clicked(session, 13, "row:99:1"))["focus"]["value"] is None  # no such row: no focus


def test_a_click_on_a_token_goes_to_its_step_and_node():
    session = Session()
    calls.open_shipped("trace_masks", session)
    select = lambda i: SimpleNamespace(index=i, value=["x", "y"])  # noqa: E731 - what gr.SelectData carries
    draft = lesson.token_clicked(session, 24, select(23))
    assert draft[1]["value"] == 13 and views(draft)["focus"]["value"] == 9
    own = lesson.token_clicked(session, 24, select(24))  # step 13's own token: chosen at its last draft's row
    assert own[1]["value"] == 13 and views(own)["focus"]["value"] == 9
    assert views(own)["focus_note"].startswith("Token '↵' is the model's own token of step 13, chosen at node 9")
    first = lesson.token_clicked(session, 24, select(0))  # the prefill's token: its root
    assert first[1]["value"] == 0 and views(first)["focus"]["value"] == 0
    for bad in (48, -1, "3", None, 2.5):
        assert lesson.token_clicked(session, 24, select(bad))[0].startswith("⚠️"), bad

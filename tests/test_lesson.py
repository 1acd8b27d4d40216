"""The lesson's handlers called directly (no server, no model): a link's state, the page as it opens (a room's
link too), the controls set from an opened trace or a link's recipe, a run's end showing the step its link named,
and the tour. Play, the keys and a click that focuses a node are the player's: tests/test_frames.py holds its
data, tests/test_browser_teach.py and tests/test_browser_links.py its behaviour."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from components.settings import RunSettings
from components.tour import load_tour
from explorer import calls, lesson
from explorer.session import Session


def link(**query) -> SimpleNamespace:
    return SimpleNamespace(query_params=query)  # what open_link reads of a gr.Request


def test_link_opens_a_shipped_trace_at_its_step_and_tab():
    session = Session()
    out = lesson.open_link(session, link(trace="trace_masks", step="7", tab="whatif"))
    assert out[0].startswith("**Done** · 25 steps") and out[1]["show"] == 7 and out[1]["reset"] is True
    assert len(out[1]["frames"]) == 25 and "Step 7" in out[1]["frames"][7]["words"]
    assert out[-2].selected == "whatif" and session.meta["shipped"] == "trace_masks" and out[-1] is None
    first = lesson.open_link(Session(), None)  # no link: the opening ESP run at its last step
    assert f"recorded: {calls.OPENING}.json" in first[0] and first[1]["show"] == len(first[-3].steps) - 1
    assert first[-3].meta["method"] == "esp" and any(s.alignment for s in first[-3].steps)
    again = lesson.open_link(Session(), link(trace="trace_masks", step="7"))
    assert again[1]["frames"] is out[1]["frames"] and again[1]["seq"] != out[1]["seq"]  # made once per server


def test_every_opened_run_brings_its_story_and_its_guesses():
    """The page's player data (explorer.views.player_data): the run's frames with its story (told on the first
    screen, closing on the page's two actions), predict mode's data and the figures' texts, for every step."""
    from components.story import story_step

    first = lesson.open_link(Session(), None)[1]
    steps = first["frames"]
    assert first["story"]["step"] == story_step(lesson.open_link(Session(), None)[-3].steps)
    assert [a["id"] for a in first["story"]["actions"]] == ["play", "prompt"]
    assert len(first["predict"]["steps"]) == len(first["alt"]) == len(steps)
    other = lesson.open_link(Session(), link(trace="trace_copy"))[1]  # another run: its own guesses
    assert len(other["predict"]["steps"]) == len(other["frames"]) != len(steps)
    json.dumps(first)  # the player takes it as JSON


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
    assert out[1]["show"] == step and out[-2].selected in lesson.TABS


def test_the_page_opens_with_its_link_and_its_controls_in_one_answer():
    """open_page: the link's run, the room controls (none here), and the controls showing the run."""
    out = lesson.open_page(Session(), link(trace="trace_copy", step="2"))
    status, player, session, tabs, held = out[:5]
    assert status.startswith("**Done**") and player["show"] == 2 and isinstance(session, Session) and held is None
    room, controls = out[5:12], dict(zip(("link", "note", *lesson.CONTROLS), out[12:]))
    assert all(c == {"__type__": "update"} for c in room)  # no room in the link
    assert controls["link"] == "trace=trace_copy" and controls["method"] == "hybrid"
    recipe = lesson.open_page(Session(), link(prompt="Count to 3", method="pld", max_new="8"))
    assert "press **Run**" in recipe[0] and recipe[1] == {"__type__": "update"}  # nothing to show until Run
    assert dict(zip(lesson.CONTROLS, recipe[14:]))["prompt"] == "Count to 3"


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


def test_tour_stops_open_their_trace_step_and_tab():
    stops = load_tour()
    session = Session()
    for n, stop in enumerate(stops):
        panel, text, shown_n, view, tabs, status, player, _ = lesson.tour_move(None if n == 0 else 1)(n - 1, session)
        assert shown_n == n and view == stop.view and player["show"] == stop.step
        assert f"stop {n + 1} of {len(stops)}" in text and session.meta["shipped"] == stop.trace
        assert tabs.selected == lesson.VIEW_TABS.get(stop.view, "run") and panel.visible
    assert lesson.tour_move(1)(len(stops) - 1, session)[2] == len(stops) - 1  # Next at the end stays
    assert lesson.tour_move(-1)(0, session)[2] == 0


def test_a_runs_end_shows_the_step_its_link_named_once():
    """After a Run of a link's recipe, the player shows the link's step (clamped to the run); once only."""
    session = Session()
    calls.open_shipped("trace_copy", session)  # 5 steps, standing in for the run just made
    recipe = lesson.links.Recipe("Count to 3", "embedded", RunSettings(method="pld"))
    session.meta = {**session.meta, "recipe": recipe.to_dict(), "shipped": None}
    query, _, held, player = lesson.after_run(session, {"recipe": recipe.to_dict(), "step": 9})
    assert query == recipe.query() and held is None and player["show"] == 4
    other = lesson.links.Recipe("Count to 4", "embedded", RunSettings(method="pld"))
    out = lesson.after_run(session, {"recipe": other.to_dict(), "step": 2})  # another recipe's link: no step
    assert out[3] == {"__type__": "update"} and out[2] is not None

"""The tour's data file: every stop names a shipped trace, one of its steps and a view on the page; a bad
file is refused in one line naming the stop."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from components.tour import MAX_STOPS, MIN_STOPS, TOUR, VIEWS, load_tour

ROOT = Path(__file__).resolve().parents[1]


def page_ids() -> set[str]:
    """The elem_ids of every component on the built page (no model is loaded to build it)."""
    import app

    return {b.elem_id for b in app.build_app().blocks.values() if getattr(b, "elem_id", None)}


def test_shipped_tour_is_valid():
    stops = load_tour()
    assert MIN_STOPS <= len(stops) <= MAX_STOPS
    for stop in stops:
        steps = json.loads((ROOT / "assets" / f"{stop.trace}.json").read_text())["steps"]
        assert 0 <= stop.step < len(steps) and stop.view in VIEWS
        assert 2 <= len(re.findall(r"[.?!](?:\s|$)", stop.text)) <= 3, stop  # two or three sentences
    assert len({s.view for s in stops}) >= 6  # a walk through the views, not one view many times


@pytest.mark.app
def test_views_are_on_the_page():
    ids = page_ids()
    assert set(VIEWS) <= ids, set(VIEWS) - ids


def _write(tmp_path, stops):
    path = tmp_path / "tour.json"
    path.write_text(json.dumps(stops))
    return path


@pytest.mark.parametrize("change, says", [
    ({"trace": "trace_nope"}, "tour stop 2: no shipped trace 'trace_nope'"),
    ({"trace": "../app"}, "no shipped trace"),
    ({"step": 999}, "tour stop 2: step 999 is not one of trace_masks's steps"),
    ({"step": "3"}, "step '3' is not one of"),
    ({"view": "nowhere"}, "tour stop 2: view 'nowhere' is not on the page"),
    ({"text": " "}, "tour stop 2: it has no text"),
    ({"tab": "run"}, "tour stop 2: needs exactly trace, step, view and text"),
])
def test_bad_stop_refused_in_one_line(tmp_path, change, says):
    stops = [dict(s.__dict__) for s in load_tour()]
    stops[1] = {**stops[1], "trace": "trace_masks", "step": 2, **change}
    with pytest.raises(ValueError) as e:
        load_tour(_write(tmp_path, stops))
    assert says in str(e.value) and "\n" not in str(e.value)


def test_bad_file_refused(tmp_path):
    stops = [dict(s.__dict__) for s in load_tour()]
    with pytest.raises(ValueError, match=f"a list of {MIN_STOPS}-{MAX_STOPS} stops"):
        load_tour(_write(tmp_path, stops[:3]))
    (tmp_path / "broken.json").write_text("[{")
    with pytest.raises(ValueError, match="cannot read the tour broken.json"):
        load_tour(tmp_path / "broken.json")
    assert TOUR.exists()


def test_the_tour_starts_on_the_run_the_page_opens_on():
    from explorer.calls import OPENING

    assert load_tour()[0].trace == OPENING

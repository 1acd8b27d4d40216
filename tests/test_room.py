"""Issue 38: the teacher's lesson room (explorer/room.py), through its handlers. Rooms are bounded in number,
per address and in lifetime, and their ids are unguessable; the presenter's page moves the room's step, and
nothing else does; a room link opens the room's run at the presenter's step, following it; a bad or ended
room is one line; the room's tick tells the room the presenter's step, and a follower's is told it only when
following and elsewhere (its player moves there with no other request), and comes back to the room's run. The browser test is tests/test_browser_room.py."""
from __future__ import annotations

from types import SimpleNamespace

import gradio as gr
import pytest

from components.limits import Limits
from esp.errors import ESPError
from explorer import room
from explorer.calls import open_shipped
from explorer.room import ROOM_ID, Pass, Rooms
from explorer.session import Session


@pytest.fixture(autouse=True)
def rooms(monkeypatch):
    """A fresh set of rooms for each test (the server's own is a module global)."""
    fresh = Rooms(room.LIMITS)
    monkeypatch.setattr(room, "ROOMS", fresh)
    return fresh


def page(address: str = "198.51.100.1", **query) -> SimpleNamespace:
    """What the handlers read of a gr.Request: the page's link and where it came from."""
    return SimpleNamespace(query_params=query, client=SimpleNamespace(host=address),
                           headers=SimpleNamespace(getlist=lambda name: []))


def shipped(name: str = "trace_masks") -> Session:
    return open_shipped(name, Session())[-1]


def presenting(session: Session, step: int = 3) -> Pass:
    out = room.start(session, None, step, page())
    assert isinstance(out[0], Pass) and out[0].presenter, out[2]
    return out[0]


def test_rooms_are_bounded_in_number_per_address_and_in_lifetime():
    now = [0.0]
    rooms = Rooms(Limits(rooms=3, visitor_rooms=2, room_ttl_s=600), clock=lambda: now[0])
    a = [rooms.open([], {}, "198.51.100.1", 0) for _ in range(2)]
    with pytest.raises(ESPError, match=r"^Your network \(one address\) already has 2 lesson rooms open, the most one "
                                       r"address may have: end one, or try again in 10 min, when the first ends\.$"):
        rooms.open([], {}, "198.51.100.1", 0)
    rooms.open([], {}, "203.0.113.1", 0)
    now[0] = 300.0
    with pytest.raises(ESPError, match=r"^This server already holds 3 lesson rooms, the most it keeps: try again in "
                                       r"5 min, when the first ends\.$"):
        rooms.open([], {}, "192.0.2.1", 0)
    rooms.end(a[0].id)
    assert rooms.get(a[0].id) is None and rooms.open([], {}, "192.0.2.1", 0)
    now[0] = 600.0  # the first rooms' lifetime is over
    assert rooms.get(a[1].id) is None and len(rooms) == 1


def test_a_room_id_is_unguessable(rooms):
    ids = {rooms.open([], {}, f"192.0.2.{n}", 0).id for n in range(rooms.limits.rooms)}
    assert len(ids) == rooms.limits.rooms and all(ROOM_ID.fullmatch(i) for i in ids)  # 128 random bits each


def test_only_the_presenters_page_moves_the_room_and_only_on_the_rooms_run(rooms):
    teacher = shipped()
    mine = presenting(teacher, step=3)
    shared = rooms.get(mine.room)
    assert shared.step == 3 and shared.steps is teacher.steps
    assert room.tick(mine, None, 7, teacher) == (gr.skip(), gr.skip(), gr.skip())  # the presenter's tick tells it
    assert shared.step == 7
    room.present(Pass(mine.room), teacher, 2)  # a follower's page cannot move it
    room.present(mine, teacher, "9; drop")  # nor a value that is no step
    assert shared.step == 7
    room.present(mine, shipped("trace_copy"), 1)  # the presenter's page on another run: the room stays
    assert shared.step == 7
    room.present(mine, teacher, 10**9)  # clamped to the run
    assert shared.step == len(teacher.steps) - 1
    again = room.start(teacher, mine, 0, page())[0]  # a second room from the same page ends the first
    assert rooms.get(mine.room) is None and rooms.get(again.room) is not None
    assert room.end(again)[0] is None and rooms.get(again.room) is None


def test_a_room_starts_only_from_a_recorded_run_that_is_not_streaming():
    out = room.start(Session(), None, 0, page())
    assert out[0] == gr.skip() and out[2].startswith("⚠️ Nothing to teach from yet")
    busy = shipped()
    busy.running = True
    assert room.start(busy, None, 0, page())[2].startswith("⚠️ A run is streaming")


def test_a_room_link_opens_the_rooms_run_at_the_presenters_step_following_it(rooms):
    teacher = shipped()
    mine = presenting(teacher, step=5)
    student = Session()
    out = room.join(student, page(room=mine.room))
    status, player, session, membership = out[0], out[1], out[-8], out[-7]
    assert status.startswith("**Done** · ") and player["show"] == 5 and player["room"] is True
    assert len(player["frames"]) == len(teacher.steps) and player["reset"] is True
    assert session.steps is teacher.steps and membership == Pass(mine.room)
    again = room.join(Session(), page(room=mine.room))[1]
    assert again["frames"] is player["frames"]  # made once, whoever joins
    follow, timer = out[-2], out[-1]
    assert follow.visible and follow.value is True and timer.active
    assert room.join(Session(), page()) == tuple(gr.skip() for _ in out)  # a link without a room: nothing


@pytest.mark.parametrize("bad, says", [
    ("../../etc/passwd", "is not a room id of this server"),
    ("<b>x</b>", "is not a room id of this server"),
    ("A" * 65, "The room is 65 characters; this server takes at most 64"),
    ("A" * 22, "is not open on this server: it has ended"),
])
def test_a_bad_or_ended_room_link_is_one_line_and_changes_nothing(bad, says):
    student = shipped()
    steps = student.steps
    out = room.join(student, page(room=bad))
    assert out[0].startswith("⚠️ ") and says in out[0].replace("\\", "") and "\n" not in out[0]
    assert all(o == gr.skip() for o in out[1:]) and student.steps is steps


def test_a_follower_is_told_the_presenters_step_only_when_following_and_elsewhere(rooms):
    teacher = shipped()
    mine = presenting(teacher, step=4)
    student = room.join(Session(), page(room=mine.room))[-8]
    theirs = Pass(mine.room)
    skip = (gr.skip(), gr.skip(), gr.skip())
    assert room.tick(theirs, True, 4, student) == skip  # already there
    room.tick(mine, None, 6, teacher)
    player, note, timer = room.tick(theirs, True, 4, student)
    assert player["show"] == 6 and player["room"] is True and "frames" not in player  # its player has the run
    assert room.tick(theirs, False, 4, student) == skip  # not following
    assert room.tick(theirs, "true", 4, student) == skip  # only the box's own value counts
    assert room.tick(theirs, True, "x", student)[0]["show"] == 6  # a step that is no step: told the room's
    assert room.tick(None, True, 4, student) == skip  # in no room
    # A follower that opened another run comes back to the room's when it follows again.
    open_shipped("trace_copy", student)
    player = room.tick(theirs, True, 4, student)[0]
    assert student.steps is teacher.steps and player["reset"] is True and player["show"] == 6
    assert len(player["frames"]) == len(teacher.steps)
    # The room ends: the tick says so once and stops.
    room.end(mine)
    player, note, timer = room.tick(theirs, True, 6, student)
    assert player == gr.skip() and note.startswith("⚠️ The lesson room") and timer.active is False

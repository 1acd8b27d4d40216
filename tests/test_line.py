"""The model's line (explorer.line, issue 48): runs get the model in the fair order (in turn across visitors and
their units), rows of one batch join from the head only, a run that needs the model alone waits for the batch to
empty and holds back the rows behind it, and a waiting run is told its place and an estimate from the run times
measured."""
from __future__ import annotations

import threading

import pytest

from explorer.line import ALONE, ROW, Line, Ticket, identity

A = ("m", "float32")
B = ("other", "float32")


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def joined(line: Line, *tickets: Ticket) -> list[Ticket]:
    for t in tickets:
        line.join(t)
        line.clock.t += 0.001  # joined one after another
    return list(tickets)


@pytest.fixture
def line() -> Line:
    return Line(clock=Clock())


def test_a_class_behind_one_address_takes_rows_in_the_order_it_pressed_run_and_a_lone_visitor_is_not_last(line):
    students = joined(line, *(Ticket("school", f"s{n}", key=A) for n in range(6)))
    other = joined(line, Ticket("home", "h", key=A))[0]
    assert line.place(other) == (2, 7)  # in turn across addresses: right after the first student
    assert line.take_rows(None, 3) == [students[0], other, students[1]]
    assert line.take_rows(A, 2) == students[2:4]
    assert line.take_rows(A, 10) == students[4:]
    assert line.rows == [students[0], other, *students[1:]] and not line.waiting


def test_rows_join_from_the_head_only_and_a_run_alone_waits_for_the_batch_to_empty(line):
    first = joined(line, Ticket("a", "a1", key=A))[0]
    assert line.take_rows(None, 4) == [first]
    compare, late = joined(line, Ticket("b", "b1"), Ticket("c", "c1", key=A))
    assert line.take_rows(A, 4) == []  # the run alone is first: nobody overtakes it
    assert not line.wait_alone(compare, 0.01)  # the batch still has a row
    line.done(first)
    assert line.wait_alone(compare, 0.01) and line.alone is compare
    assert line.take_rows(None, 4) == []  # while it has the model, no row joins
    line.done(compare)
    assert line.take_rows(None, 4) == [late]


def test_a_batch_of_one_model_holds_back_a_row_for_another_until_it_has_emptied(line):
    a1 = joined(line, Ticket("a", "a1", key=A))[0]
    assert line.take_rows(None, 4) == [a1]
    b1, a2 = joined(line, Ticket("b", "b1", key=B), Ticket("c", "c1", key=A))
    assert line.take_rows(A, 4) == []  # b1 is first and needs another batch
    line.done(a1)
    assert line.wait_rows(0) and line.take_rows(None, 4) == [b1]
    assert line.take_rows(B, 4) == []
    line.done(b1)
    assert line.take_rows(None, 4) == [a2]


def test_turn_alone_blocks_until_the_turn_has_come_and_gives_it_back(line):
    row = joined(line, Ticket("a", "a1", key=A))[0]
    line.take_rows(None, 1)
    held = threading.Event()

    def compare():
        with line.turn_alone(Ticket("b", "b1")):
            held.set()

    thread = threading.Thread(target=compare)
    thread.start()
    assert not held.wait(0.2)  # the row still runs
    line.done(row)
    assert held.wait(10)
    thread.join(10)
    assert line.alone is None and not line.waiting


def test_a_waiting_run_is_told_its_place_and_an_estimate_from_the_measured_run_times(line):
    line.capacity = 2
    ran = joined(line, Ticket("a", "a1", key=A), Ticket("b", "b1", key=A))
    line.take_rows(None, 2)
    waiting = joined(line, *(Ticket(f"v{n}", f"u{n}", key=A) for n in range(3)))
    assert line.place(waiting[1]) == (2, 3)
    said = line.waiting_line(waiting[1])
    assert said == "**Waiting for the model** · 2nd in line of 3 · no run has ended here yet to estimate from"
    line.clock.t = 10.0
    line.done(ran[0])  # a row took 10 s
    assert line.typical(ROW) == pytest.approx(10.0, abs=0.01)
    line.take_rows(A, 1)  # the first waiting run takes the free row
    # The batch is full (2 rows, one of them 10 s in): the next row frees in ~0 s for the first in line; the
    # second waits one row's time over the batch's width more.
    first, second = waiting[1], waiting[2]
    assert line.estimate(first) == pytest.approx(0.0, abs=0.1)
    assert line.estimate(second) == pytest.approx(5.0, abs=0.1)
    assert line.waiting_line(second) == ("**Waiting for the model** · 2nd in line of 2 · starts in about 5 s "
                                         "(runs here take about 10 s)")
    line.take_rows(A, 5)
    assert line.place(first) is None and line.waiting_line(first) is None


def test_a_run_alone_waits_for_the_longest_row_and_rows_for_a_run_alone_ahead(line):
    line.capacity = 4
    rows = joined(line, Ticket("a", "a1", key=A), Ticket("b", "b1", key=A))
    line.take_rows(None, 4)
    line.clock.t = 6.0
    line.done(rows[0])  # a row takes 6 s
    alone, row = joined(line, Ticket("c", "c1"), Ticket("d", "d1", key=A))
    line.clock.t = 8.0
    assert line.estimate(alone) == pytest.approx(0.0, abs=0.1)  # the other row is 8 s in, of 6 s typical
    line.rows[0].admitted = line.clock.t  # (had it just started, it would have 6 s to go)
    assert line.estimate(alone) == pytest.approx(6.0, abs=0.1)
    assert line.estimate(row) is None  # behind a run alone, and no run alone measured yet
    line.times[ALONE].append(20.0)
    assert line.estimate(row) == pytest.approx(26.0, abs=0.1)  # the row's 6 s to go, then the run alone


def test_identity_is_the_doors_visitor_and_unit():
    class Request:
        client = type("C", (), {"host": "10.1.2.3"})()
        headers = type("H", (), {"getlist": staticmethod(lambda name: ["198.51.100.7"])})()
        session_hash = "abc"
        username = None
        scope = {}

    assert identity(Request(), ("10.0.0.0/8",)) == ("198.51.100.7", "session:abc")
    assert identity(Request(), ()) == ("10.1.2.3", "session:abc")
    Request.username = "ada"
    assert identity(Request(), ()) == ("10.1.2.3", "user:ada")
    assert identity(None, ()) == ("local", "calls:local")

    class Wrapped:  # gr.Request in a handler: the connection's request inside it
        request = Request()
        session_hash = "abc"
        username = None

    assert identity(Wrapped(), ("10.0.0.0/8",)) == ("198.51.100.7", "session:abc")

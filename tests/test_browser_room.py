"""Issue 38: a teacher's lesson room in a real browser. Two pages on one in-process server: the presenter
opens a shipped trace and starts a room; the follower opens the class link and shows the presenter's step,
follows it as the presenter moves, stops following when it scrubs on its own, and follows again when its
Follow box is ticked. Timeouts are hang guards; the one wait is the follower's tick period, to show that an
unticked page stays where its student put it."""
from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.browser, pytest.mark.app,
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed")]
HANG_MS = 60_000
LINK = re.compile(r"\?room=[A-Za-z0-9_-]{22}$")


def new_page(browser, url: str):
    page = browser.new_context(viewport={"width": 1280, "height": 1000}).new_page()
    page.goto(url)
    page.wait_for_function("() => window.espExplorer !== undefined", timeout=HANG_MS)
    return page


def step_shown(page) -> int:
    return int(float(page.locator("#scrub input[type=range]").input_value()))


def expect_step(page, n: int) -> None:
    from playwright.sync_api import expect

    expect(page.locator("#tree-plot .gtitle")).to_contain_text(f"step {n}", timeout=HANG_MS)
    expect(page.locator("#scrub input[type=range]")).to_have_value(str(n), timeout=HANG_MS)


def go_to(page, n: int) -> None:
    """The presenter types a step into the Go-to box."""
    box = page.locator("#goto input[type=number]")
    box.fill(str(n))
    box.press("Enter")
    expect_step(page, n)


def test_a_follower_follows_the_presenters_step_until_it_scrubs(served):
    from playwright.sync_api import expect

    from explorer import room

    url, browser = served
    teacher = new_page(browser, url.rstrip("/") + "/?trace=trace_masks&step=10")
    expect_step(teacher, 10)
    teacher.click("#room-start")
    link = teacher.locator("#room-link input, #room-link textarea").first
    expect(link).to_have_value(LINK, timeout=HANG_MS)
    room_id = link.input_value().rsplit("=", 1)[1]

    student = new_page(browser, link.input_value())
    follow = student.locator("#follow input[type=checkbox]")
    expect(follow).to_be_checked(timeout=HANG_MS)
    expect_step(student, 10)  # the room's run at the presenter's step
    teacher.click("#next")
    expect_step(teacher, 11)
    expect_step(student, 11)  # the follower follows
    go_to(teacher, 5)
    expect_step(student, 5)

    student.click("#next")  # the student scrubs on its own: it stops following
    expect_step(student, 6)
    expect(follow).not_to_be_checked()
    go_to(teacher, 12)
    deadline = time.monotonic() + HANG_MS / 1000
    while room.ROOMS.get(room_id).step != 12 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert room.ROOMS.get(room_id).step == 12
    student.wait_for_timeout(3000 * room.FOLLOW_S)  # three of its ticks
    assert step_shown(student) == 6

    follow.check()  # ticked again: it follows the presenter again
    expect_step(student, 12)
    teacher.click("#room-end")
    expect(student.locator("#room-note")).to_contain_text("has ended", timeout=HANG_MS)


def test_each_student_guesses_on_the_presenters_step(served):
    """Predict mode in a room (issue 47): a follower's guesses are on the step the presenter shows, the verdict
    hidden until its own Reveal, the score its own; guessing does not let go of the presenter."""
    from playwright.sync_api import expect

    from components.export import read_trace_json
    from components.predict import predict_data

    url, browser = served
    meta, steps = read_trace_json(ROOT / "assets" / "trace_masks.json")
    guessable = [i for i, d in enumerate(predict_data(steps, meta)["steps"]) if d]
    a, b = guessable[3], guessable[4]
    teacher = new_page(browser, url.rstrip("/") + f"/?trace=trace_masks&step={a}")
    expect_step(teacher, a)
    teacher.click("#room-start")
    link = teacher.locator("#room-link input, #room-link textarea").first
    expect(link).to_have_value(LINK, timeout=HANG_MS)
    student = new_page(browser, link.input_value())
    follow = student.locator("#follow input[type=checkbox]")
    expect(follow).to_be_checked(timeout=HANG_MS)
    expect_step(student, a)
    student.click("#predict")
    expect(student.locator("#guess-ask")).to_contain_text(f"Step {a},")
    assert student.locator("#tree-plot").evaluate("el => getComputedStyle(el).visibility") == "hidden"
    go_to(teacher, b)
    expect(student.locator("#guess-ask")).to_contain_text(f"Step {b},", timeout=HANG_MS)  # the presenter's step
    expect(follow).to_be_checked()
    student.click("#reveal")
    expect(student.locator("#guess-score")).to_contain_text("of 1 steps exactly right")
    expect(student.locator("#guess-result")).to_contain_text("The verifier kept")
    teacher.click("#room-end")
    for page in (teacher, student):
        page.context.close()

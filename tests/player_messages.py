"""What a page's player holds after the server's messages (components/lecture.py feed, on the data of
explorer.views.payload): the tests' model of it, for runs read through the API."""
from __future__ import annotations

from components.frames import LABELS, message


def views(messages: list[str | dict]) -> dict:
    """The run's views after `messages` (the newest of each)."""
    out: dict = {}
    for m in map(message, messages):
        out = {} if m.get("reset") else out
        out.update(m.get("views") or {})
    return out


def text(frames: list[dict], upto: int | None = None) -> list[tuple[str, str]]:
    """(token, label) of every token of steps 0..upto, as the text view shows them."""
    shown = frames if upto is None else frames[: upto + 1]
    return [(t[0], LABELS[t[1]]) for f in shown for t in f["tokens"]]

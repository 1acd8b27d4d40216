"""The guided tour: stops kept in assets/tour.json, each naming a shipped trace, a step, one view of the page
and two or three sentences on what to look at there; checked when loaded, so a bad stop fails in one line."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

ASSETS = Path(__file__).resolve().parents[1] / "assets"
TOUR = ASSETS / "tour.json"
# The page's views a stop may point at (their elem_ids in app.py; tests/test_tour.py checks them there).
VIEWS = ("text-view", "stats", "tree-plot", "mask-plot", "cost-plot", "cost-note", "align-plot", "hist-plot",
         "timing-plot", "whatif-tab", "open-tab", "scrub-row", "controls", "step-words", "size-plot", "eye-plot",
         "mask-lens", "lens-plot", "lens-rank-plot", "commit-plot", "glossary")
MIN_STOPS, MAX_STOPS = 8, 12


@dataclass(frozen=True)
class Stop:
    """One stop: open `trace` (a file stem in assets/) at `step`, spotlight `view`, say `text`."""

    trace: str
    step: int
    view: str
    text: str


def trace_steps(stem: str, assets: Path = ASSETS) -> int:
    """How many steps the shipped trace `stem` has; ValueError when there is no such trace."""
    path = assets / f"{stem}.json"
    if not stem.startswith("trace_") or not path.is_file():
        shipped = ", ".join(sorted(p.stem for p in assets.glob("trace_*.json")))
        raise ValueError(f"no shipped trace {stem!r} (shipped: {shipped})")
    return len(json.loads(path.read_text())["steps"])


def load_tour(path: str | Path = TOUR, assets: Path = ASSETS) -> list[Stop]:
    """The tour's stops, each checked (a shipped trace, a step it has, a known view, some text); ValueError
    with the stop's number and the reason otherwise."""
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"cannot read the tour {Path(path).name}: {e}") from None
    if not isinstance(raw, list) or not MIN_STOPS <= len(raw) <= MAX_STOPS:
        raise ValueError(f"the tour must be a list of {MIN_STOPS}-{MAX_STOPS} stops")
    stops, sizes = [], {}
    for n, item in enumerate(raw, 1):
        try:
            stop = Stop(**item)
            if stop.trace not in sizes:
                sizes[stop.trace] = trace_steps(stop.trace, assets)
            if not isinstance(stop.step, int) or not 0 <= stop.step < sizes[stop.trace]:
                raise ValueError(f"step {stop.step!r} is not one of {stop.trace}'s steps 0-{sizes[stop.trace] - 1}")
            if stop.view not in VIEWS:
                raise ValueError(f"view {stop.view!r} is not on the page (views: {', '.join(VIEWS)})")
            if not isinstance(stop.text, str) or not stop.text.strip():
                raise ValueError("it has no text")
        except TypeError as e:
            raise ValueError(f"tour stop {n}: needs exactly trace, step, view and text ({e})") from None
        except ValueError as e:
            raise ValueError(f"tour stop {n}: {e}") from None
        stops.append(stop)
    return stops

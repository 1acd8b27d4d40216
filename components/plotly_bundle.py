"""The Plotly.js every player draws with, in all three homes (the page, the lecture file, the notebook):
plotly.js's cartesian bundle, kept in components/vendor/ as npm's plotly.js-cartesian-dist-min publishes it, at
the version plotly.py writes its figures for. It registers the 2-D trace types (scatter, bar, heatmap and nine
more), which are all our views draw, in 1.5 MB against the 4.8 MB of the full bundle plotly.py ships: a page
evaluates it in about a third of the time, and a lecture file carries a third of the bytes.

To move to another version: `npm pack plotly.js-cartesian-dist-min@V`, with V plotly.py's
`plotly.offline.get_plotlyjs_version()`, and copy its plotly-cartesian.min.js and LICENSE here
(tests/test_plotly_bundle.py fails until the two versions agree)."""
from __future__ import annotations

import re
from pathlib import Path

PATH = Path(__file__).resolve().parent / "vendor" / "plotly-cartesian.min.js"


def _version() -> str:
    """The version the bundle's header states ("plotly.js (cartesian - minified) vX.Y.Z")."""
    with PATH.open(encoding="utf-8") as f:
        return re.search(r"plotly\.js \(cartesian[^)]*\) v(\d+\.\d+\.\d+)", f.read(400)).group(1)


VERSION = _version()


def source() -> str:
    """The bundle's text (read on each call: the homes that pack it keep the packed copy, lecture.packed_plotly)."""
    return PATH.read_text(encoding="utf-8")

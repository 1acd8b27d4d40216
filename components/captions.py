"""One line under each figure on how to read it (the app guide, docs/app_guide.md, says more)."""
from __future__ import annotations

from . import sources

CAPTIONS = {
    "text": "Each token coloured by how it came: a draft accepted for free (by its source) or the model's own "
            "bonus token; ␣ = space, ↵ = newline.",
    "tree": "The step's candidates under the root (square): colour = accepted / rejected / pruned, thick line = "
            "accepted path, label = token and cumulative p (hover every node). Marks: " + sources.legend_line(),
    "mask": "Who sees whom in the step's one forward: rows attend to the blue columns; green = the accepted "
            "path, kept in the cache. Row tags [E/L/T/P] name the draft's source.",
    "align": "Cosine per layer between a mask's state and the real token that later took its place: green = "
             "accepted drafts, red = rejected; left this step, right the run so far.",
    "hist": "How many drafts each step accepted (0 = only the bonus token); the current step is green.",
    "timing": "Where each step's time went, by engine phase; the dotted line marks the shown step.",
    "cost": "Left: a step wins only above the red break-even line t(q)/t(1); dots are steps (green = this "
            "one, the open square = its oracle width: the fewest rows for the same tokens). Right: tokens per "
            "step (bars) against its time in one-row forwards (line).",
    "compare": "τ = tokens per forward; speed-up = tokens/s over plain decoding (the dotted line is 1).",
    "whatif": "The stored step (left) and the same step re-run with the settings on the left (right).",
}

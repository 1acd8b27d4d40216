"""One line under each figure on how to read it (the app guide, docs/app_guide.md, and the glossary,
docs/glossary.md, say more). Colours are named with their second cue (a glyph, a dash, a shape)."""
from __future__ import annotations

from . import sources

CAPTIONS = {
    "text": "Each token coloured by how it came: an accepted draft in its source's colour (as in the tree and the "
            "attention pattern), or the model's own token: a correction ✗ (vermillion, after a rejected draft) "
            "or a bonus ✓ (green, after every draft was accepted); grey = nothing was drafted. Hover a token for "
            "its label; ␣ = space, ↵ = newline.",
    "tree": "The step's candidates under the root (grey square): fill = accepted ✓ (green) / rejected ✗ "
            "(vermillion) / pruned (hollow grey), thick line = accepted path, label = token and cumulative p; "
            "shape and outline colour = source. Hover a node for the verifier's top choices there. Marks: "
            + sources.legend_line(),
    "mask": "Attention pattern, who sees whom in the step's one forward: rows attend to the grey columns; green ✓ "
            "= the accepted path, kept in the cache. Rows 'mask v.j' are ESP's mask tokens; tags [E/L/T/P] name "
            "a draft's source, in its colour.",
    "align": "Cosine per layer between a mask's state and the real token that later took its place: green solid "
             "(●) = accepted drafts, vermillion dashed (✗) = rejected; left this step, right the whole run.",
    "eye": "The verifier's eye: the model's top choices where the walk stopped, or where the focused node was "
           "decided; a draft checked there is green ✓ (accepted) or vermillion ✗ (rejected), with its rank.",
    "lens": "Mask Lens (a raw logit lens, no trained translator): each mask's layers read as tokens, the top-1 "
            "per cell (bold = the token that really came), shaded by that real token's probability; "
            "uncoloured = not known yet. Hover a cell for the top 5.",
    "commit": "Over the generated text: each token accepted from an ESP mask, shaded by the layer from which "
              "it was that mask's top-1 for good (L = that layer; darker = earlier); the shown step's tokens "
              "are outlined.",
    "lens_rank": "The whole run: where the real token ranks under the raw logit lens, layer by layer, for masks "
                 "whose draft was accepted (green solid ●) or rejected (vermillion dashed ✗).",
    "hist": "How many drafts each step accepted (0 = only the model's own token); the shown step's bar is dark "
            "and labelled.",
    "timing": "Where each step's time went, by engine phase (colour and hatch); the dotted line marks the shown "
              "step.",
    "cost": "Left: a step wins only above the dashed break-even line t(q)/t(1); grey dots are steps, the blue "
            "dot this one, the open square its oracle width (the fewest rows for the same tokens). Right: "
            "tokens per step (bars) against its time in one-row forwards (line).",
    "compare": "τ = tokens per forward; speed-up = tokens/s over plain decoding (the dotted line is 1).",
    "whatif": "The stored step (left) and the same step re-run with the settings on the left (right).",
}

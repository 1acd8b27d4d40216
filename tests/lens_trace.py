"""A recorded ESP trace given consistent Mask Lens and verifier's eye records, for the view tests until the
engine records them itself (Decoder(lens=True)).

The records follow the engine's rules: the eye's top choice at a row is the token the row emitted (greedy);
each fed draft's target rank is its place in its parent row's list; mask j at the walk's end sits at the end's
position + j and drafts the token at the next position; its last lens layer lists the drafts the next step
took from it (in draft order, with their draft probabilities); its record against the real token arrives on
the step that emitted that token, accepted when the next step accepted at least j drafts."""
from __future__ import annotations

import copy
import random
from typing import Sequence

from components.common import accepted_nodes, walk_end
from esp.trace import ESP, LENS_TOP, LensReal, LensTrace, StepTrace

FILLER = 40_000  # ids used for made-up tokens (inside the embedded model's vocabulary)


def _decreasing(rng: random.Random, n: int, top: float) -> list[float]:
    """n probabilities, the first `top`, each below the last, summing to at most 1."""
    out, left = [top], 1.0 - top
    for _ in range(n - 1):
        p = min(out[-1] * 0.9, left * rng.uniform(0.3, 0.7))
        out.append(p)
        left -= p
    return out


def with_lens(steps: Sequence[StepTrace], k: int = 2, layers: int = 8, seed: int = 0) -> list[StepTrace]:
    """Copies of `steps` carrying eye, target ranks, the Mask Lens at every walk's end and its resolved records."""
    rng = random.Random(seed)
    steps = [copy.deepcopy(s) for s in steps]
    texts = {n.token: n.text for s in steps for n in s.nodes}
    texts.update((t, x) for s in steps for t, x in zip(s.emitted, s.emitted_text))
    tokens = [t for s in steps for t in s.emitted]
    emitted_by = [s.step for s in steps for _ in s.emitted]
    start = steps[0].positions[0]

    def filler(avoid: set[int]) -> int:
        t = FILLER + rng.randrange(5000)
        while t in avoid:
            t += 1
        texts.setdefault(t, f"tok{t}")
        return t

    for s in steps:
        path = [s.nodes[0]] + accepted_nodes(s)
        s.eye = []
        for d, chosen in enumerate(s.emitted):
            rivals = [n.token for n in s.nodes if n.parent == path[d].index and n.row is not None
                      and n.token != chosen][: LENS_TOP - 2] if d < len(path) else []
            ids = [chosen, *rivals]
            while len(ids) < LENS_TOP:
                ids.append(filler(set(ids)))
            probs = _decreasing(rng, LENS_TOP, rng.uniform(0.35, 0.9))
            s.eye.append([v for pair in zip(ids, probs) for v in pair])
        on_path = {n.index: d for d, n in enumerate(path)}
        for n in s.nodes[1:]:
            if n.row is None:
                continue
            row = on_path.get(n.parent)
            flat = s.eye[row] if row is not None and row < len(s.eye) else []
            listed = dict(zip(flat[::2], range(1, LENS_TOP + 1)))
            n.target_rank = listed.get(n.token, LENS_TOP + 1 + rng.randrange(200))
            n.target_p = flat[2 * n.target_rank - 1] if n.token in listed else rng.uniform(1e-5, 1e-3)

    for i, s in enumerate(steps[:-1]):
        end, after = walk_end(s), steps[i + 1]
        s.lens = []
        for j in range(1, k + 1):
            drafted = [n for n in after.nodes if n.depth == j and n.row is not None
                       and (ESP in n.sources or not n.sources)]  # an unmarked draft (older traces) is a mask's
            last = [n.token for n in sorted(drafted, key=lambda n: -n.prob)][:LENS_TOP]
            position = end.position + j
            real = tokens[position - start] if position - start < len(tokens) else None
            rec = LensTrace(j=j, position=position, tokens=[], probs=[], texts={})
            for layer in range(layers):
                ids = list(last) if layer == layers - 1 else []
                if real is not None and layers // 2 <= layer < layers - 1:  # it comes up in the later layers
                    ids = [real] if rng.random() < 0.7 else [filler({real}), real]
                while len(ids) < LENS_TOP:
                    ids.append(filler(set(ids)))
                rec.tokens.append(ids[:LENS_TOP])
                rec.probs.append(_decreasing(rng, LENS_TOP, rng.uniform(0.2, 0.8)))
            rec.texts = {t: texts[t] for row in rec.tokens for t in row}
            s.lens.append(rec)
            if real is None:
                continue
            ranks = [row.index(real) + 1 if real in row else LENS_TOP + 1 + rng.randrange(500) for row in rec.tokens]
            probs = [rec.probs[layer][r - 1] if r <= LENS_TOP else rng.uniform(1e-6, 1e-3)
                     for layer, r in enumerate(ranks)]
            steps[emitted_by[position - start]].lens_real.append(LensReal(
                source_step=s.step, j=j, token=real, text=texts[real], accepted=len(after.accepted) >= j,
                prob=probs, rank=ranks))
    return steps


def without_lens(steps: Sequence[StepTrace]) -> list[StepTrace]:
    """Copies of `steps` as a run recorded without the lens keeps them: no eye, no Mask Lens, no target ranks."""
    steps = [copy.deepcopy(s) for s in steps]
    for s in steps:
        s.eye, s.lens, s.lens_real = [], [], []
        for n in s.nodes:
            n.target_rank = n.target_p = None
    return steps

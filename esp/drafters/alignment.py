"""Per-layer alignment: how close a mask's hidden state gets to the real token that later sits at its
position (the paper's evidence for why probing works)."""
from __future__ import annotations

import torch

from esp.trace import AlignmentTrace


class AlignmentTracker:
    """Pairs mask states with real-token states by position; labels them by the next step's acceptance.

    States are (L+1, H) stacks (embeddings first, post-norm last). Cosines are reported raw and
    mean-centred on the prompt's per-layer mean, since raw residuals share a large common component.
    """

    def __init__(self, center: torch.Tensor):
        self.center = center  # (L+1, H)
        self.waiting: list[tuple[int, int, int, torch.Tensor]] = []  # (step, j, position, state)
        self.real: dict[int, torch.Tensor] = {}
        self.accepted_after: dict[int, int] = {}  # step -> drafts accepted by the step after it

    def add_real(self, positions: list[int], states: torch.Tensor) -> None:
        for p, s in zip(positions, states.unbind(1)):
            self.real[p] = s

    def add_masks(self, step: int, positions: list[int], states: torch.Tensor) -> None:
        for j, (p, s) in enumerate(zip(positions, states.unbind(1)), 1):
            self.waiting.append((step, j, p, s))

    def label(self, step: int, n_accepted: int) -> None:
        self.accepted_after[step] = n_accepted

    def resolve(self) -> list[AlignmentTrace]:
        done, left = [], []
        for step, j, p, s in self.waiting:
            if p in self.real and step in self.accepted_after:
                real = self.real[p]
                raw = torch.cosine_similarity(s.float(), real.float(), dim=-1)
                cen = torch.cosine_similarity((s - self.center).float(), (real - self.center).float(), dim=-1)
                ok = self.accepted_after[step] >= j
                done.append(AlignmentTrace(step, j, p, ok, cen.tolist(), raw.tolist()))
            else:
                left.append((step, j, p, s))
        self.waiting = left
        low = min((p for _, _, p, _ in left), default=None)
        self.real = {p: s for p, s in self.real.items() if low is not None and p >= low}
        return done

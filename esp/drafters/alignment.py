"""Per-layer alignment: how close a mask's hidden state gets to the real token that later sits at its
position (the paper's evidence for why probing works)."""
from __future__ import annotations

import torch

from esp.device import read_all
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
        """The waiting masks whose real token and next step have come, each with its per-layer cosines (all of
        them in two tensor calls and one host read)."""
        done, left = [], []
        for step, j, p, s in self.waiting:
            if p in self.real and step in self.accepted_after:
                done.append((step, j, p, s))
            else:
                left.append((step, j, p, s))
        out = []
        if done:
            masks = torch.stack([s for *_, s in done])  # (n, L+1, H)
            real = torch.stack([self.real[p] for _, _, p, _ in done])
            raw, cen = read_all([torch.cosine_similarity(masks.float(), real.float(), dim=-1),
                                 torch.cosine_similarity((masks - self.center).float(), (real - self.center).float(),
                                                         dim=-1)])
            out = [AlignmentTrace(step, j, p, self.accepted_after[step] >= j, c, r)
                   for (step, j, p, _), c, r in zip(done, cen, raw)]
        self.waiting = left
        low = min((p for _, _, p, _ in left), default=None)
        self.real = {p: s for p, s in self.real.items() if low is not None and p >= low}
        return out

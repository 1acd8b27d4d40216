"""What a step shows beyond its tokens, recorded only when asked (`Decoder(lens=True)`), from the step's own
forward: the verifier's eye (its distribution at every row it decided from, and each draft's rank there) and
the Mask Lens (each mask's hidden state, layer by layer, read as tokens: a raw logit lens)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from esp.decoding.layout import Layout
from esp.decoding.tree import DraftTree
from esp.models.lm import LM
from esp.sampling import Sampling, probs
from esp.trace import LENS_TOP, LensReal, LensTrace


def _short(p: float) -> float:
    """A probability with 3 significant digits: enough to draw, small in a trace file."""
    return float(f"{p:.3g}")


@dataclass
class Eye:
    """The verifier's eye on one step: per emitted row, the best LENS_TOP of the distribution it decided from,
    and per fed node (index 1..), the draft's rank and probability at its parent's row."""

    rows: list[list]  # per path row: [id1, p1, id2, p2, ...]
    ranks: list[int]  # per node 1..N
    probs: list[float]


def eye(tree: DraftTree, logits: torch.Tensor, path: list[int], s: Sampling) -> Eye:
    """`logits` are the target's at the root and every node (N+1, V): greedy decides from their softmax, sampling
    from the tempered and truncated distribution it draws from (esp.sampling.probs); ranks order the logits."""
    logits = logits.float() if logits.dtype != torch.float64 else logits
    dist = torch.softmax(logits, -1) if s.greedy else probs(logits.double(), s).to(logits.dtype)
    top_p, top_i = dist[path].topk(min(LENS_TOP, dist.shape[-1]), -1)
    rows = [[x for i, p in zip(ids, ps) for x in (int(i), _short(p))] for ids, ps in zip(top_i.tolist(), top_p.tolist())]
    if len(tree) == 1:
        return Eye(rows, [], [])
    parents = torch.tensor(tree.parents[1:], device=logits.device)
    tokens = torch.tensor(tree.tokens[1:], device=logits.device)[:, None]
    at = logits[parents]
    ranks = ((at > at.gather(1, tokens)).sum(1) + 1).tolist()
    return Eye(rows, ranks, [_short(p) for p in dist[parents].gather(1, tokens)[:, 0].tolist()])


@dataclass
class _Pending:
    step: int
    j: int
    position: int  # the mask's own position: it drafts position + 1
    logits: torch.Tensor  # (layers, V) the lens's logits, kept until the token it drafted is known


class MaskLens:
    """The raw logit lens of the masks fed at the node where each step's accepted path ends: every layer's
    hidden state through the model's final norm and LM head (the last layer is already normed: the model's own
    logits, which ESP drafts from). Each mask is resolved once the token at the position it drafts is emitted
    and the next step's acceptance is known, usually one step later (`LensReal`, on that step's trace)."""

    def __init__(self, lm: LM):
        self.lm = lm
        self.pending: list[_Pending] = []
        self.tokens: dict[int, tuple[int, str]] = {}  # position -> (token, text), while a pending mask may need it
        self.accepted: dict[int, int] = {}  # step -> drafts it accepted

    def step(self, step: int, root_pos: int, lay: Layout, path: list[int], layers: tuple[torch.Tensor, ...],
             emitted: list[int], texts: list[str]) -> tuple[list[LensTrace], list[LensReal]]:
        """Book step `step` (its block's per-layer states `layers`, its accepted `path` and `emitted` tokens):
        the lens of the masks it fed at the path's end, and the earlier masks it resolves."""
        self.accepted[step] = len(path) - 1
        self.tokens.update((root_pos + 1 + i, (t, x)) for i, (t, x) in enumerate(zip(emitted, texts)))
        real = self._resolve()
        rows = lay.mask_rows(path[-1])
        if not rows:
            return [], real
        offsets = lay.host()[0]
        logits = self.logits(torch.stack([h[rows] for h in layers]))  # (layers, k, V)
        top_p, top_i = torch.softmax(logits, -1).topk(LENS_TOP, -1)
        out = []
        for j, row in enumerate(rows, 1):
            ids, ps = top_i[:, j - 1].tolist(), top_p[:, j - 1].tolist()
            texts_of = {i: self.lm.text(i) for layer in ids for i in layer}
            pos = root_pos + offsets[row]
            out.append(LensTrace(j, pos, ids, [[_short(p) for p in layer] for layer in ps], texts_of))
            self.pending.append(_Pending(step, j, pos, logits[:, j - 1]))
        return out, real

    def logits(self, states: torch.Tensor) -> torch.Tensor:
        """(layers, k, H) hidden states, embeddings first and the last post-norm -> (layers, k, V) logits."""
        inner = self.lm.final_norm(states[:-1])
        return self.lm.head(torch.cat([inner, states[-1:]]))

    def _resolve(self) -> list[LensReal]:
        done, left = [], []
        for m in self.pending:
            came = self.tokens.get(m.position + 1)
            if came is None or m.step + 1 not in self.accepted:
                left.append(m)
                continue
            token, text = came
            dist = torch.softmax(m.logits, -1)
            at = m.logits[:, token : token + 1]
            rank = ((m.logits > at).sum(-1) + 1).tolist()
            done.append(LensReal(m.step, m.j, token, text, self.accepted[m.step + 1] >= m.j,
                                 [_short(p) for p in dist[:, token].tolist()], rank))
        self.pending = left
        low = min((m.position + 1 for m in left), default=None)
        self.tokens = {p: t for p, t in self.tokens.items() if low is not None and p >= low}
        return done

"""What a step shows beyond its tokens, recorded only when asked (`Decoder(lens=True)`), from the step's own
forward: the verifier's eye (its distribution at every row it decided from, and each draft's rank there) and
the Mask Lens (each mask's hidden state, layer by layer, read as tokens: a raw logit lens)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from esp.decoding.layout import Layout
from esp.device import read_all
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
    from the tempered and truncated distribution it draws from (esp.sampling.probs); ranks order the logits.
    Greedy, a row's probabilities are exp(logit - logsumexp) of the rows read only (the path's and the parents'),
    and everything comes back in one host read."""
    logits = logits.float() if logits.dtype != torch.float64 else logits
    device, k = logits.device, min(LENS_TOP, logits.shape[-1])
    parents = tree.parents[1:]
    if s.greedy:
        rows = sorted(set(path) | set(parents))
        lse = torch.zeros(len(tree), dtype=logits.dtype, device=device)
        lse[rows] = logits[rows].logsumexp(-1)
        top_v, top_i = logits[path].topk(k, -1)
        top_p = (top_v - lse[path, None]).exp()
    else:
        dist = probs(logits.double(), s).to(logits.dtype)
        top_p, top_i = dist[path].topk(k, -1)
    parts = [top_i, top_p]
    if parents:
        at_parent = torch.tensor(parents, device=device)
        tokens = torch.tensor(tree.tokens[1:], device=device)[:, None]
        at = logits[at_parent]
        own = at.gather(1, tokens)
        p = (own[:, 0] - lse[at_parent]).exp() if s.greedy else dist[at_parent].gather(1, tokens)[:, 0]
        parts += [(at > own).sum(1) + 1, p]
    host = read_all(parts)
    rows_out = [[x for i, q in zip(ids, ps) for x in (int(i), _short(q))] for ids, ps in zip(host[0], host[1])]
    if not parents:
        return Eye(rows_out, [], [])
    return Eye(rows_out, [int(r) for r in host[2]], [_short(q) for q in host[3]])


@dataclass
class _Pending:
    step: int
    j: int
    position: int  # the mask's own position: it drafts position + 1
    logits: torch.Tensor  # (layers, V) the lens's logits, kept until the token it drafted is known
    lse: torch.Tensor  # (layers,) their log normaliser


class MaskLens:
    """The raw logit lens of the masks fed at the node where each step's accepted path ends: every layer's
    hidden state through the model's final norm and LM head (the last layer is already normed: the model's own
    logits, which ESP drafts from). Each mask is resolved once the token at the position it drafts is emitted
    and the next step's acceptance is known, usually one step later (`LensReal`, on that step's trace).

    A step's lens is one LM-head call over its k x (layers) rows (`read`, before the drafter learns from the
    step, which then takes its masks' logits from the lens's output layer instead of a call of its own), then
    one top-k and one log normaliser over them, and one host read per step for the lens and one for what it
    resolves."""

    def __init__(self, lm: LM):
        self.lm = lm
        self.pending: list[_Pending] = []
        self.tokens: dict[int, tuple[int, str]] = {}  # position -> (token, text), while a pending mask may need it
        self.accepted: dict[int, int] = {}  # step -> drafts it accepted

    def read(self, lay: Layout, path: list[int],
             layers: tuple[torch.Tensor, ...]) -> tuple[list[int], torch.Tensor] | None:
        """The block rows of the masks at the path's end and their lens logits (layers, k, V); None where the
        path's end carries no masks."""
        rows = lay.mask_rows(path[-1])
        if not rows:
            return None
        return rows, self.logits(torch.stack([h[rows] for h in layers]))

    def step(self, step: int, root_pos: int, lay: Layout, path: list[int], read: tuple[list[int], torch.Tensor] | None,
             emitted: list[int], texts: list[str]) -> tuple[list[LensTrace], list[LensReal]]:
        """Book step `step` (its accepted `path`, `emitted` tokens and the lens `read` of its masks): the lens of
        the masks it fed at the path's end, and the earlier masks it resolves."""
        self.accepted[step] = len(path) - 1
        self.tokens.update((root_pos + 1 + i, (t, x)) for i, (t, x) in enumerate(zip(emitted, texts)))
        real = self._resolve()
        if read is None:
            return [], real
        rows, logits = read
        lse = logits.logsumexp(-1)  # (layers, k)
        top_v, top_i = logits.topk(LENS_TOP, -1)
        ids, ps = read_all([top_i.transpose(0, 1).reshape(-1, LENS_TOP),
                            (top_v - lse[..., None]).exp().transpose(0, 1).reshape(-1, LENS_TOP)])
        layers, offsets = logits.shape[0], lay.host()[0]
        names = self.lm.texts({int(i) for row in ids for i in row})
        out = []
        for j, row in enumerate(rows, 1):
            mine = [[int(i) for i in r] for r in ids[(j - 1) * layers : j * layers]]
            pos = root_pos + offsets[row]
            out.append(LensTrace(j, pos, mine, [[_short(p) for p in r] for r in ps[(j - 1) * layers : j * layers]],
                                 {i: names[i] for layer in mine for i in layer}))
            self.pending.append(_Pending(step, j, pos, logits[:, j - 1], lse[:, j - 1]))
        return out, real

    def logits(self, states: torch.Tensor) -> torch.Tensor:
        """(layers, k, H) hidden states, embeddings first and the last post-norm -> (layers, k, V) logits."""
        inner = self.lm.final_norm(states[:-1])
        return self.lm.head(torch.cat([inner, states[-1:]]), views=True)

    def _resolve(self) -> list[LensReal]:
        """The pending masks whose drafted token came and whose next step is booked, each against that token:
        its probability and rank at every layer (all of them in one host read)."""
        done, left, parts = [], [], []
        for m in self.pending:
            came = self.tokens.get(m.position + 1)
            if came is None or m.step + 1 not in self.accepted:
                left.append(m)
                continue
            at = m.logits[:, came[0] : came[0] + 1]
            parts += [(m.logits > at).sum(-1) + 1, (at[:, 0] - m.lse).exp()]
            done.append((m, came))
        host = read_all(parts)
        out = [LensReal(m.step, m.j, token, text, self.accepted[m.step + 1] >= m.j,
                        [_short(p) for p in host[2 * n + 1]], [int(r) for r in host[2 * n]])
               for n, (m, (token, text)) in enumerate(done)]
        self.pending = left
        low = min((m.position + 1 for m in left), default=None)
        self.tokens = {p: t for p, t in self.tokens.items() if low is not None and p >= low}
        return out

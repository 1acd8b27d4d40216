"""What the tiny-model lossless tests share: the two decoding modes, a prompt that repeats itself, and the
check that every drafter emits exactly ar's tokens."""
from __future__ import annotations

from typing import Callable

import torch

from esp.decoding.drafter import Drafter
from esp.decoding.engine import Decoder
from esp.sampling import Sampling

SAMPLERS = {
    "greedy": lambda seed: Sampling(seed=seed),
    "sampling": lambda seed: Sampling(temperature=0.9, top_p=0.95, top_k=40, seed=seed),
}


def repeated_prompt(seed: int, vocab: int) -> list[int]:
    """A random 5-9 token phrase three times and a bit, so that drafts sometimes hit."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randint(0, vocab, (5 + seed % 5,), generator=g).tolist()
    return base * 3 + base[:2]


def accepted_if_lossless(lm, s: Sampling, prompt: list[int], drafters: dict[str, Callable[[], Drafter]],
                         label=None, max_new_tokens: int = 32) -> int:
    """Assert each drafter's run equals ar's on `prompt`; the drafts they got accepted, summed (a check that
    compared only bonus tokens proves little)."""
    ar = Decoder(lm, sampling=s, max_new_tokens=max_new_tokens).generate(prompt)
    accepted = 0
    for spec, make in drafters.items():
        run = Decoder(lm, make(), sampling=s, max_new_tokens=max_new_tokens).generate(prompt)
        assert run.tokens == ar.tokens, (label, spec)
        accepted += sum(len(st.accepted) for st in run.steps)
    return accepted

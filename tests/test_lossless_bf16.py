"""Lossless in bf16 on the CPU, by esp.bench.verdict: every method against ar is exact or a rounding near-tie, never
a failure; and real faults (a rejected row committed to the cache, a mask at a wrong position) come out as
failures, not as near-ties that the tolerance would hide."""
from __future__ import annotations

import copy

import pytest
import torch

from conftest import ARCHS, spec_bench
import esp.decoding.engine as engine
from esp.decoding.batch import BatchDecoder
from esp.decoding.engine import Decoder
from esp.decoding.layout import EfficientLayouts
from esp.models.lm import LM
from esp.methods import build
from esp.models.lm import IdTokenizer
from esp.bench.verdict import EXACT, FAILURE, classify, tally

METHODS = ("ar", "esp:k=2:bc=30", "pld", "stand", "lade", "hybrid:bc=30")


def _verdicts(lm: LM, prompts: list[list[int]], specs, tokens: int, dtype: str, base=None) -> dict[str, dict]:
    base = base or [Decoder(lm, max_new_tokens=tokens).generate(p) for p in prompts]
    out = {}
    for spec in specs:
        runs = [Decoder(lm, build(spec), max_new_tokens=tokens).generate(p) for p in prompts]
        out[spec] = tally([classify(b.tokens, _top2(b), r.tokens, _top2(r), dtype) for b, r in zip(base, runs)])
    return out


def _top2(g) -> list[list]:
    return [t for s in g.steps for t in s.top2]


@pytest.fixture(scope="module")
def lm_bf16():
    from esp.models.loader import load

    return load(dtype="bfloat16")


@pytest.fixture(scope="module")
def prompts(lm_bf16):
    return [lm_bf16.chat_ids(q["turns"][0]) for q in spec_bench(1) if q["category"] in ("coding", "extraction")]


N = 16  # new tokens per run on the embedded model (bf16 is emulated, so slow, on a CPU without it)


@pytest.fixture(scope="module")
def alone(lm_bf16, prompts):
    """Plain one-row bf16 decoding of each prompt: the reference of every test here."""
    return [Decoder(lm_bf16, max_new_tokens=N).generate(p) for p in prompts]


@pytest.mark.model
def test_embedded_model_in_bf16_has_no_failure(lm_bf16, prompts, alone):
    assert lm_bf16.dtype == torch.bfloat16
    # The tree, a lookup and the hybrid here; every method on the tiny models below (bf16 is emulated here).
    for spec, v in _verdicts(lm_bf16, prompts, ("esp:k=2:bc=30", "lade", "hybrid:bc=30"), N, "bfloat16", alone).items():
        assert v["failure"] == 0, (spec, v)


@pytest.mark.model
def test_a_batch_in_bf16_has_no_failure_against_each_row_alone(lm_bf16, prompts, alone):
    """Batched rows in bf16 against plain one-row decoding of each prompt: a batch forward rounds differently
    from a one-row one, so a flip is allowed only at a rounding near-tie, never a failure."""
    for spec in ("hybrid:bc=auto",):  # the tree method's batch rows: test_embedded_model_in_bf16_has_no_failure's
        batch = BatchDecoder(lm_bf16, [build(spec) for _ in prompts], max_new_tokens=N).generate(prompts)
        v = tally([classify(b.tokens, _top2(b), r.tokens, _top2(r), "bfloat16") for b, r in zip(alone, batch)])
        assert v["failure"] == 0, (spec, v)


@pytest.mark.parametrize("arch", ARCHS)
def test_tiny_models_in_bf16_have_no_failure_and_float32_is_exact(tiny_lm, arch):
    base = tiny_lm(arch)
    g = torch.Generator().manual_seed(1)
    prompts = [(lambda b: b * 2 + b[:3])(torch.randint(0, base.vocab_size, (8,), generator=g).tolist()) for _ in range(2)]
    for dtype, name in ((torch.bfloat16, "bfloat16"), (torch.float32, "float32")):
        lm = LM(copy.deepcopy(base.model).to(dtype), IdTokenizer(), f"{base.name} {name}")
        for spec, v in _verdicts(lm, prompts, METHODS, 20, name).items():
            assert v["failure"] == 0, (arch, name, spec, v)
            if name == "float32":
                assert v["exact"] == len(prompts), (arch, spec, v)


# ---------------------------------------------------------------- injected faults

def _fault_verdict(lm: LM, prompt: list[int], ar, spec: str, patch) -> str:
    with pytest.MonkeyPatch.context() as mp:
        patch(mp)
        bad = Decoder(lm, build(spec), max_new_tokens=N).generate(prompt)
    return classify(ar.tokens, _top2(ar), bad.tokens, _top2(bad), "bfloat16").kind


def _commit_a_rejected_row(mp) -> None:
    """The last committed row of every tree step becomes the block's last row (a rejected node or a mask)."""
    real = engine.commit

    def commit(cache, past, rows):
        block = cache.layers[0].keys.shape[-2] - past
        if len(rows) > 0 and block > len(rows) and rows[-1] != block - 1:
            rows = rows[:-1] + [block - 1]
        real(cache, past, rows)

    mp.setattr(engine, "commit", commit)


def _shift_the_tree_mask(mp) -> None:
    """The block's attention mask one column to the right: every row sees its neighbour's columns."""
    real = EfficientLayouts.additive
    mp.setattr(EfficientLayouts, "additive", lambda self, *a: torch.roll(real(self, *a), 1, -1))


@pytest.mark.model
@pytest.mark.parametrize("fault", [_commit_a_rejected_row, _shift_the_tree_mask])
def test_injected_faults_are_failures_in_bf16(lm_bf16, prompts, alone, fault):
    kinds = [_fault_verdict(lm_bf16, p, ar, "esp:k=2:bc=30", fault) for p, ar in zip(prompts, alone)]
    assert FAILURE in kinds and EXACT not in kinds, kinds

"""Lossless, in one matrix: every registered method, in each of its variants, emits exactly plain decoding's
tokens, on every tiny architecture, greedy and sampled, alone and in batches (esp.decode with a list of prompts,
all at once and two at a time).

The reference is `ar` on the same model, itself checked against one uncached forward. Sampling is lossless
exactly, not in distribution, because its randomness is keyed by (seed, position) (esp/sampling.py). The tiny
models are float64 random-weight models (tests/conftest.py `tiny_lm`: no rounding ties) and make the fast tier;
the embedded model's slice is marked `model` and compares with transformers' generate().

A new method is registered in esp/methods.py and listed in METHODS here, with the settings that change how it
drafts; test_every_registered_method_is_in_the_matrix fails until it is."""
from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch

import esp
import esp.drafters.hybrid as hybrid
from conftest import ARCHS, SAMPLERS, repeated_prompt, spec_bench
from esp.budget.cost import CostCurve
from esp.decoding.engine import Decoder
from esp.drafters.esp import ESPConfig, ESPDrafter
from esp.methods import available, build, parse
from esp.sampling import Sampling

# Each registered method with the settings that change how it drafts: trees, mask inits, starts, sources, budgets.
METHODS = {
    "ar": ("ar",),
    "esp": ("esp:k=1:bc=10", "esp:k=2:bc=30:tree=dynamic", "esp:k=3:bc=30:init=lastk", "esp:k=2:bc=60:init=sample",
            "esp:k=4:bc=60:tree=dynamic:lam=0.5", "esp:k=2:shape=4,2", "esp:bc=auto"),
    "pld": ("pld", "pld:n=2:rule=hf"),
    "stand": ("stand:bc=20", "stand:bc=auto"),
    "lade": ("lade", "lade:n=3:w=4:g=3"),
    "tr": ("tr", "tr:tree=small", "tr:start=hot", "tr:matrix=zero"),
    "hybrid": ("hybrid:bc=8", "hybrid:bc=24", "hybrid:bc=40:k=2", "hybrid:bc=auto", "hybrid:bc=auto:start=hot",
               "hybrid:bc=auto@flat", "hybrid:bc=24:sources=esp", "hybrid:bc=24:sources=lookup",
               "hybrid:bc=24:sources=table", "hybrid:bc=24:sources=esp+lookup", "hybrid:bc=24:sources=lookup+table"),
}
# "@flat": bc=auto on a GPU-like cost curve (any width up to 128 rows costs one forward), where it drafts wide;
# without it, on this machine's curve.
FLAT = "@flat"
SPECS = [spec for specs in METHODS.values() for spec in specs]
# Alone: one drafter decodes the prompts in turn (a hot start keeps what it learnt, a cold one starts afresh).
# A batch: esp.decode with the prompts as a list, every prompt at once or at most two at a time.
BATCHES = {"alone": None, "batch": None, "two at a time": 2}
N = 32  # new tokens: the prompts' 17-23 tokens and these cross gemma3's 24-token sliding window
SEED = 3


def tiny_prompts(vocab: int) -> list[list[int]]:
    """Three prompts of unlike lengths that repeat themselves, so that lookups and tables find drafts."""
    return [repeated_prompt(seed, vocab) for seed in range(3)]


def flat_curve() -> CostCurve:
    return CostCurve([1, 128], [1.0, 1.0])


@pytest.fixture(scope="module")
def plain(tiny_lm):
    """plain(arch, mode) -> ar's tokens for each tiny prompt, each decoded alone (made once)."""
    made: dict[tuple[str, str], list[list[int]]] = {}

    def get(arch: str, mode: str) -> list[list[int]]:
        if (arch, mode) not in made:
            lm = tiny_lm(arch)
            s = SAMPLERS[mode](SEED)
            made[arch, mode] = [Decoder(lm, sampling=s, max_new_tokens=N).generate(p).tokens
                                for p in tiny_prompts(lm.vocab_size)]
        return made[arch, mode]

    return get


def decoded(lm, spec: str, prompts: list[list[int]], s: Sampling, batch: str, tokens: int) -> tuple[list[list[int]], int]:
    """Each prompt's new tokens under `spec`, decoded as `batch` says, and how many drafted tokens were accepted."""
    if batch == "alone":
        drafter = build(spec)
        runs = [Decoder(lm, drafter, sampling=s, max_new_tokens=tokens).generate(p) for p in prompts]
    else:
        runs = esp.decode(lm.model, lm.tokenizer, prompts, method=spec, max_new_tokens=tokens,
                          batch_size=BATCHES[batch], **dataclasses.asdict(s))
    return [r.tokens for r in runs], sum(len(st.accepted) for r in runs for st in r.steps)


def cases():
    """Every (spec, arch, mode, batch) but ar alone (the reference itself). The fast tier takes one case per spec and
    architecture, its batch mode and sampler turning with them so that every pair of values meets in it (each spec
    with every architecture, every batch mode and both samplers; each architecture with every batch mode and both
    samplers; each batch mode with both samplers: `test_the_fast_tier_meets_every_pair`); the rest is marked `slow`,
    and `make test` runs them all."""
    for i, spec in enumerate(SPECS):
        for a, arch in enumerate(ARCHS):
            fast = _fast(i, a)
            for batch in BATCHES:
                for mode in SAMPLERS:
                    if spec == "ar" and batch == "alone":
                        continue
                    marks = () if (batch, mode) == fast else pytest.mark.slow
                    yield pytest.param(spec, arch, mode, batch, marks=marks, id=f"{spec}-{arch}-{mode}-{batch}")


def _fast(i: int, a: int) -> tuple[str, str]:
    """The (batch mode, sampler) of spec i on architecture a in the fast tier (ar, the reference, never alone)."""
    b = (i + a) % len(BATCHES)
    if SPECS[i] == "ar" and b == 0:
        b = 1 + a % 2
    return list(BATCHES)[b], list(SAMPLERS)[(i + a // 2) % len(SAMPLERS)]


def test_the_fast_tier_meets_every_pair():
    fast = [(spec, arch, mode, batch) for spec, arch, mode, batch in
            (p.values for p in cases() if not p.marks)]
    everything = [p.values for p in cases()]
    for x, y in itertools.combinations(range(4), 2):
        assert {(c[x], c[y]) for c in fast} == {(c[x], c[y]) for c in everything}, (x, y)
    assert len(fast) == len(SPECS) * len(ARCHS)


# ---------------------------------------------------------------- the reference

@pytest.mark.parametrize("arch", ARCHS)
def test_ar_is_the_argmax_of_one_full_forward(tiny_lm, arch):
    """ar's greedy tokens are the argmax of one uncached forward over the whole text (transformers' own masks).

    A full forward rather than `generate`, because transformers' incremental sliding-window cache drifts from
    the full forward on Gemma3 once the window is crossed."""
    lm = tiny_lm(arch)
    prompt = tiny_prompts(lm.vocab_size)[1]
    ours = Decoder(lm, max_new_tokens=48).generate(prompt).tokens  # crosses gemma3's 24-token window
    logits = lm.model(torch.tensor([prompt + ours])).logits[0]
    assert logits[len(prompt) - 1 : -1].argmax(-1).tolist() == ours


def test_sampling_differs_by_seed_and_repeats_by_seed(tiny_lm):
    lm = tiny_lm("llama")
    prompt = tiny_prompts(lm.vocab_size)[0]
    run = lambda seed: Decoder(lm, sampling=Sampling(temperature=1.0, seed=seed), max_new_tokens=24).generate(prompt).tokens
    assert run(5) == run(5)
    assert run(5) != run(6)


def test_every_registered_method_is_in_the_matrix():
    assert set(METHODS) == set(available())
    assert all(parse(spec.removesuffix(FLAT))[0] == name for name, specs in METHODS.items() for spec in specs)


# ---------------------------------------------------------------- the matrix on tiny models

@pytest.mark.parametrize("spec, arch, mode, batch", list(cases()))
def test_tiny_models(tiny_lm, plain, monkeypatch, spec, arch, mode, batch):
    lm = tiny_lm(arch)
    if spec.endswith(FLAT):
        monkeypatch.setattr(hybrid, "curve_for", lambda lm: flat_curve())
    got, accepted = decoded(lm, spec.removesuffix(FLAT), tiny_prompts(lm.vocab_size), SAMPLERS[mode](SEED), batch, N)
    assert got == plain(arch, mode)
    # Drafts were accepted, not only bonus tokens (random models loop under greedy); bc=auto is left out, since
    # its widths follow measured time and it may rightly feed plain steps only.
    if spec != "ar" and "bc=auto" not in spec and mode == "greedy" and batch == "alone":
        assert accepted > 0


# ---------------------------------------------------------------- the embedded model's slice

EMBEDDED = ("esp:k=1:bc=30", "esp:k=2:bc=10", "esp:k=2:bc=30:tree=dynamic", "esp:bc=auto", "pld", "stand",
            "stand:bc=auto", "lade", "tr", "tr:tree=small", "hybrid:bc=8", "hybrid:bc=60", "hybrid:bc=auto",
            "hybrid:bc=auto:start=hot")
EMBEDDED_N = 24


@pytest.fixture(scope="module")
def dev_prompts(lm) -> list[list[int]]:
    """Development questions where copies and mask drafts both pay (coding, extraction), and a short one."""
    qs = [q["turns"][0] for q in spec_bench(1) if q["category"] in ("coding", "extraction")]
    return [lm.chat_ids(text) for text in (*qs, "Name a colour.")]


@pytest.fixture(scope="module")
def generated(lm, dev_prompts) -> list[list[int]]:
    """Greedy generate()'s new tokens for each prompt alone, up to and with its EOS."""
    out = []
    for ids in dev_prompts:
        new = lm.model.generate(torch.tensor([ids]), max_new_tokens=EMBEDDED_N, do_sample=False)[0, len(ids):].tolist()
        out.append(new[: next((i + 1 for i, t in enumerate(new) if t in lm.eos_ids), len(new))])
    return out


@pytest.fixture(scope="module")
def sampled(lm, dev_prompts) -> list[list[int]]:
    """ar's sampled new tokens for the two development questions, each alone."""
    s = SAMPLERS["sampling"](SEED)
    return [Decoder(lm, sampling=s, max_new_tokens=EMBEDDED_N).generate(p).tokens for p in dev_prompts[:2]]


@pytest.mark.model
@pytest.mark.parametrize("batch", ["alone", "two at a time"])
@pytest.mark.parametrize("spec", EMBEDDED)
def test_embedded_model_greedy_is_generate(lm, dev_prompts, generated, spec, batch):
    got, _ = decoded(lm, spec, dev_prompts, Sampling(), batch, EMBEDDED_N)
    assert got == generated


@pytest.mark.model
@pytest.mark.parametrize("spec", EMBEDDED)
def test_embedded_model_sampled_is_ar(lm, dev_prompts, sampled, spec):
    assert decoded(lm, spec, dev_prompts[:2], SAMPLERS["sampling"](SEED), "alone", EMBEDDED_N)[0] == sampled


@pytest.mark.model
def test_embedded_naive_and_efficient_masks_agree_end_to_end(lm):
    ids = lm.chat_ids("List three prime numbers.")
    runs = [Decoder(lm, ESPDrafter(ESPConfig(k=2, bc=30)), max_new_tokens=16, layouts=kind).generate(ids)
            for kind in ("efficient", "naive")]
    assert runs[0].tokens == runs[1].tokens
    assert [s.mask for s in runs[0].steps] == [s.mask for s in runs[1].steps]

"""CONTRIBUTING.md's "Adding a drafter" example is real code: its block runs as written, registers a method, and
decodes exactly as plain decoding (`ar`) through `esp.decode`, greedy and sampled, alone and in a batch, on tiny
random models and on the embedded model, where its drafts are accepted."""
from __future__ import annotations

import re

import pytest

import esp
import esp.methods as methods
from conftest import ROOT
from esp.errors import ESPError

TINY_PROMPTS = [[5, 6, 7, 8, 5, 6, 7, 8, 5, 6], [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]]
SAMPLERS = ({}, {"temperature": 0.8, "seed": 1})


def drafter_example() -> str:
    """The one Python block of the "Adding a drafter" section."""
    section = (ROOT / "CONTRIBUTING.md").read_text().split("## Adding a drafter", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "the section should hold exactly one Python block"
    return blocks[0]


@pytest.fixture
def bigram():
    """The example's drafter class, its method registered for the test only."""
    assert "bigram" not in methods.REGISTRY
    namespace = {"__name__": "contributing_example"}
    try:
        exec(compile(drafter_example(), str(ROOT / "CONTRIBUTING.md"), "exec"), namespace)
        yield namespace["Bigram"]
    finally:
        methods.REGISTRY.pop("bigram", None)


def test_the_example_registers_a_method_with_its_settings(bigram):
    assert "bigram" in methods.available()
    d = methods.build("bigram:draft=3")
    assert isinstance(d, bigram) and d.draft == 3
    with pytest.raises(ESPError, match=r"^bigram: draft must be a positive integer"):
        methods.build("bigram:draft=0")
    with pytest.raises(ESPError, match=r"^bigram: unknown setting 'k=2'"):
        methods.build("bigram:k=2")


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_the_example_is_lossless_on_a_tiny_model(tiny_lm, bigram, arch):
    lm = tiny_lm(arch)
    for kw in SAMPLERS:
        ar = [esp.decode(lm.model, lm.tokenizer, p, "ar", max_new_tokens=40, **kw).tokens for p in TINY_PROMPTS]
        alone = [esp.decode(lm.model, lm.tokenizer, p, "bigram", max_new_tokens=40, **kw) for p in TINY_PROMPTS]
        batch = esp.decode(lm.model, lm.tokenizer, TINY_PROMPTS, "bigram:draft=6", max_new_tokens=40, **kw)
        assert [r.tokens for r in alone] == ar == [r.tokens for r in batch], (arch, kw)
        assert any(len(s.nodes) > 1 for r in alone for s in r.steps)  # it drafted


@pytest.mark.model
def test_the_example_is_lossless_and_accepted_on_the_embedded_model(lm, bigram):
    prompts = ["Repeat this line three times: the quick brown fox jumps over the lazy dog.",
               "Copy exactly: Alice sat by the river and read her book, and the river ran past Alice."]
    forwards = {"ar": 0, "bigram": 0}
    for prompt in prompts:
        ar = esp.decode(lm.model, lm.tokenizer, prompt, "ar", max_new_tokens=48)
        run = esp.decode(lm.model, lm.tokenizer, prompt, "bigram", max_new_tokens=48)
        assert run.tokens == ar.tokens, prompt
        forwards["ar"] += ar.summary.forwards
        forwards["bigram"] += run.summary.forwards
    assert forwards["bigram"] < forwards["ar"], forwards  # its drafts were accepted

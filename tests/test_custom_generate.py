"""transformers' custom_generate (issue 22 item 3): `model.generate(..., custom_generate=<this checkout>,
trust_remote_code=True, method=SPEC)` returns greedy generate()'s token ids exactly, from the local folder,
offline, on the embedded model loaded the ordinary transformers way; what it cannot honour is refused."""
from __future__ import annotations

import re

import pytest
import torch
from transformers.generation.utils import GenerateDecoderOnlyOutput

from conftest import ROOT
from esp.errors import ESPError
from esp.methods import available

HELD_OUT = ["Translate to German: The weather is nice today and we are going to the lake.",
            "Write a Python function that returns the n-th Fibonacci number.",
            "A train travels 120 km in 1.5 hours. What is its average speed? Explain briefly."]


@pytest.fixture(scope="module")
def greedy(hf):
    """greedy(ids, n): plain greedy generate()'s sequences, computed once per prompt and length."""
    model, _ = hf
    done: dict[tuple, torch.Tensor] = {}

    def get(ids: torch.Tensor, n: int) -> torch.Tensor:
        key = (tuple(ids[0].tolist()), n)
        if key not in done:
            done[key] = model.generate(ids, max_new_tokens=n, do_sample=False)
        return done[key]

    return get


def _ids(tok, prompt: str) -> torch.Tensor:
    enc = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                  return_tensors="pt", return_dict=True)
    return enc["input_ids"]


def _esp(model, ids, **kw):
    return model.generate(ids, custom_generate=str(ROOT), trust_remote_code=True, **kw)


@pytest.mark.model
@pytest.mark.parametrize("method", ["esp", "hybrid:bc=auto", "pld"])
def test_held_out_prompts_get_greedy_generates_tokens(hf, greedy, method):
    model, tok = hf
    for prompt in HELD_OUT:
        ids = _ids(tok, prompt)
        ref = greedy(ids, 24)
        assert torch.equal(_esp(model, ids, method=method, max_new_tokens=24), ref), (method, prompt)


@pytest.mark.model
def test_every_method_gets_greedy_generates_tokens(hf, greedy):
    model, tok = hf
    ids = _ids(tok, HELD_OUT[1])
    ref = greedy(ids, 16)
    for method in available():
        assert torch.equal(_esp(model, ids, method=method, max_new_tokens=16), ref), method


@pytest.mark.model
def test_eos_dict_output_max_length_and_sampling(hf):
    model, tok = hf
    ids = _ids(tok, HELD_OUT[0])
    ref = model.generate(ids, max_new_tokens=10, do_sample=False)
    stop = int(ref[0, ids.shape[1] + 3])
    cut = _esp(model, ids, method="pld", max_new_tokens=10, eos_token_id=stop)
    assert torch.equal(cut, model.generate(ids, max_new_tokens=10, do_sample=False, eos_token_id=stop))
    out = _esp(model, ids, method="esp", max_new_tokens=10, return_dict_in_generate=True)
    assert isinstance(out, GenerateDecoderOnlyOutput) and torch.equal(out.sequences, ref)
    assert torch.equal(_esp(model, ids, method="pld", max_length=ids.shape[1] + 5), ref[:, : ids.shape[1] + 5])
    kw = dict(do_sample=True, temperature=0.7, top_p=0.9, max_new_tokens=12, seed=5)
    a, b = _esp(model, ids, method="esp", **kw), _esp(model, ids, method="ar", **kw)
    assert torch.equal(a, b) and a.shape[1] == ids.shape[1] + 12  # the engine's lossless sampling
    torch.manual_seed(1)
    c = _esp(model, ids, method="ar", **{**kw, "seed": None})
    torch.manual_seed(1)
    assert torch.equal(c, _esp(model, ids, method="pld", **{**kw, "seed": None}))  # seeded by torch's RNG


@pytest.mark.parametrize("kw,needle", [
    (dict(num_beams=2), "num_beams=2"),
    (dict(repetition_penalty=1.3), "repetition_penalty=1.3"),
    (dict(num_return_sequences=2, do_sample=True), "num_return_sequences=2"),
    (dict(streamer=object()), "must have put() and end()"),
    (dict(output_scores=True, return_dict_in_generate=True), "output_scores=True"),
    (dict(method="warp"), "Unknown method 'warp'"),
    (dict(method="esp:k=9"), "k (mask tokens)"),
    (dict(pixel_values=torch.zeros(1)), "does not take pixel_values"),
])
@pytest.mark.model
def test_what_it_cannot_honour_is_refused_with_one_line(hf, kw, needle):
    model, tok = hf
    ids = _ids(tok, "hi")
    with pytest.raises(ESPError) as e:
        _esp(model, ids, **{"max_new_tokens": 4, **kw})
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_the_folder_is_hub_ready():
    folder = ROOT / "custom_generate"
    front = re.match(r"---\n(.*?)\n---\n", (folder / "README.md").read_text(), re.S).group(1)
    assert re.search(r"^tags:\n(  - .*\n)*  - custom_generate$", front + "\n", re.M)
    reqs = (folder / "requirements.txt").read_text()
    assert "transformers>=5.24" in reqs and "torch>=" in reqs
    # transformers runs generate.py alone from its modules cache: no relative imports of files that are not there
    assert not re.search(r"^\s*from \.", (folder / "generate.py").read_text(), re.M)

"""esp.decode / esp.stream on a model the caller loaded (issue 22 item 2): plain decoding's tokens, the run's
statistics, the chat template, and one ESPError line for what the engine cannot take. On a tiny random model
and a character tokenizer (tests/conftest.py `tiny_chat`); every method's tokens through esp.decode, alone and
in batches, are tests/test_lossless_matrix.py's, and the README's example runs the embedded model."""
from __future__ import annotations

import copy
import re

import pytest
import torch

import esp
from conftest import ROOT
from esp.models.offline import MODELS, converted

PROMPT = "Name three colours."


def _greedy(model, ids: list[int], n: int) -> list[int]:
    ids = torch.tensor([ids])  # an explicit mask: generate() would take every pad_token_id in the prompt as padding
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False, pad_token_id=0)
    return out[0, ids.shape[1]:].tolist()


@pytest.mark.parametrize("method", ["esp", "pld", "esp:k=1:bc=10"])
def test_decode_returns_plain_greedy_tokens_and_its_statistics(tiny_chat, method):
    model, tok = tiny_chat
    r = esp.decode(model, tok, PROMPT, method=method, max_new_tokens=24)
    assert r.chat_template and r.prompt_ids == tok.apply_chat_template(
        [{"role": "user", "content": PROMPT}], add_generation_prompt=True, tokenize=True)["input_ids"]
    assert r.tokens == _greedy(model, r.prompt_ids, 24)
    assert r.text == tok.decode(r.tokens, skip_special_tokens=True)
    s = r.summary
    assert s.tokens == len(r.tokens) and s.forwards == len(r.steps) == len(r.widths) and s.seconds > 0
    assert s.tau == pytest.approx(s.tokens / s.forwards)
    assert r.widths[0] >= 1 and all(w >= 1 for w in r.widths)


def test_settings_extend_the_spec_and_ids_are_used_as_given(tiny_chat):
    model, tok = tiny_chat
    ids = tok(PROMPT)["input_ids"]
    a = esp.decode(model, tok, torch.tensor([ids]), method="esp", max_new_tokens=12, k=1, bc=10)
    b = esp.decode(model, tok, ids, method="esp:k=1:bc=10", max_new_tokens=12)
    c = esp.decode(model, tok, PROMPT, method="ar", max_new_tokens=12, chat_template=False)
    assert a.prompt_ids == b.prompt_ids == c.prompt_ids == ids and not (a.chat_template or c.chat_template)
    assert a.tokens == b.tokens == c.tokens == _greedy(model, ids, 12)
    assert max(a.widths[1:]) <= 10 and a.widths == b.widths


def test_stream_yields_the_steps_of_decode(tiny_chat):
    model, tok = tiny_chat
    steps = list(esp.stream(model, tok, PROMPT, method="pld", max_new_tokens=16))
    assert steps[0].prefill and [t for s in steps for t in s.emitted] == esp.decode(
        model, tok, PROMPT, method="pld", max_new_tokens=16).tokens


def test_eos_can_be_set(tiny_chat):
    model, tok = tiny_chat
    first = esp.decode(model, tok, PROMPT, method="ar", max_new_tokens=8).tokens
    cut = esp.decode(model, tok, PROMPT, method="pld", max_new_tokens=8, eos_token_id=first[2])
    assert cut.tokens == first[: first.index(first[2]) + 1]


def test_a_model_is_decoded_where_it_is_in_its_dtype(tiny_lm):
    model = copy.deepcopy(tiny_lm("llama").model).to(torch.bfloat16)
    ids = list(range(3, 40))
    r = esp.decode(model, None, ids, method="ar", max_new_tokens=16)
    ref = model.generate(torch.tensor([ids]), max_new_tokens=16, do_sample=False, pad_token_id=0)
    assert r.tokens == ref[0, len(ids):].tolist() and len(r.tokens) == 16
    assert esp.decode(model, None, ids, method="pld", max_new_tokens=16).summary.tokens == 16
    assert next(model.parameters()).dtype == torch.bfloat16  # used as it is, not cast


class NoHead(torch.nn.Module):
    config = type("C", (), {"is_encoder_decoder": False})()

    def get_input_embeddings(self):
        return torch.nn.Embedding(4, 2)

    def get_output_embeddings(self):
        return None

    def get_decoder(self):
        return self


@pytest.mark.parametrize("call,needle", [
    (lambda m, t: esp.decode(m, t, {"input_ids": [[1, 2, 3], [4, 5, 6]], "attention_mask": [[1, 0, 1], [1, 1, 1]]}),
     "Row 0's attention mask has padding inside the prompt"),
    (lambda m, t: esp.decode(m, t, [[1, 2], [3, 10**9]]), "Token ids must lie in"),
    (lambda m, t: esp.decode(m, t, [[1, 2], []]), "prompt is empty"),
    (lambda m, t: esp.decode(m, t, ["hi", ""]), "prompt is empty"),
    (lambda m, t: esp.decode(m, t, [1, 10**9]), "Token ids must lie in"),
    (lambda m, t: esp.decode(m, t, 3.5), "must be a str or token ids"),
    (lambda m, t: esp.decode(m, t, ""), "prompt is empty"),
    (lambda m, t: esp.decode(m, None, "hi"), "needs the model's tokenizer"),
    (lambda m, t: esp.decode(m, t, "hi", method="warp"), "Unknown method 'warp'"),
    (lambda m, t: esp.decode(m, t, "hi", method="esp", depth=3), "esp: unknown setting 'depth'"),
    (lambda m, t: esp.decode(m, t, "hi", method="esp", k=9), "k (mask tokens)"),
    (lambda m, t: esp.decode(m, t, "hi", temperature=-1), "temperature must be >= 0"),
    (lambda m, t: esp.decode(m, t, "hi", max_new_tokens=0), "max new tokens must be a positive integer"),
    (lambda m, t: esp.stream(m, t, "hi", method="pld:n=x"), "must be int"),
    (lambda m, t: esp.decode(NoHead(), t, "hi"), "not a causal LM"),
    (lambda m, t: esp.decode(torch.nn.Linear(2, 2), t, "hi"), "needs a Hugging Face causal LM"),
])
def test_what_the_engine_cannot_take_fails_with_one_line(tiny_chat, call, needle):
    with pytest.raises(esp.ESPError) as e:
        call(*tiny_chat)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_attention_kernels_without_a_custom_mask_are_refused(tiny_chat, monkeypatch):
    model, tok = tiny_chat
    monkeypatch.setattr(model.config, "_attn_implementation", "flash_attention_2")
    with pytest.raises(esp.ESPError, match="cannot take ESP's tree mask"):
        esp.decode(model, tok, "hi")


@pytest.mark.model
def test_the_readme_examples_run(monkeypatch):
    """The README's library block and its model.generate block after it, from the checkout's root, on the embedded
    model's converted weights instead of their Hub copy."""
    monkeypatch.chdir(ROOT)
    readme = (ROOT / "README.md").read_text()
    own, through = (re.search(rf"<!-- test: {name} -->\n```python\n(.*?)```", readme, re.S).group(1)
                    for name in ("own-model", "generate"))
    hub = MODELS["embedded"].hub_id
    assert f'"{hub}"' in own
    printed = []
    scope = {"print": lambda *a: printed.append(a)}
    exec(own.replace(f'"{hub}"', repr(str(converted(MODELS["embedded"])))), scope)
    exec(through, scope)
    (text,), (tau, forwards), (per_step,), (same,) = printed
    assert text.strip() and tau >= 1 and forwards >= 1
    assert sum(per_step) == len(scope["out"].tokens) and all(n >= 1 for n in per_step)  # esp's steps: the same tokens
    assert same is True  # model.generate through custom_generate: plain generate()'s tokens

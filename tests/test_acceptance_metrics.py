"""Each request's acceptance under vLLM's per-request names (issue 40 item 4): the fields mean what vLLM's
mean, they agree with tau, and they reach a caller through esp.decode, custom_generate and the bench."""
from __future__ import annotations

import pytest
import torch

from conftest import ROOT
import esp
from esp.trace import acceptance, pooled_acceptance

PROMPT = [3, 17, 5, 42, 8, 3, 17, 5, 9, 11, 3, 17, 5]
FIELDS = {"mean_acceptance_length", "draft_acceptance_rate", "acceptance_histogram",
          "acceptance_histogram_by_draft_length", "num_spec_steps", "num_accepted_draft_tokens", "num_draft_tokens",
          "num_spec_tokens"}


@pytest.mark.parametrize("method", ["esp", "pld", "lade", "hybrid:bc=60", "tr"])
def test_the_metrics_agree_with_tau_and_the_steps(tiny_lm, method):
    lm = tiny_lm("llama")
    r = esp.decode(lm.model, None, PROMPT, method=method, max_new_tokens=40)
    m = r.summary.speculative_decoding
    assert set(m) == FIELDS
    spec = [s for s in r.steps if not s.prefill and any(n.row is not None for n in s.nodes[1:])]
    assert m["num_spec_steps"] == len(spec) == sum(m["acceptance_histogram"])
    assert m["num_accepted_draft_tokens"] == sum(len(s.accepted) for s in spec)
    assert m["num_draft_tokens"] == sum(n.row is not None for s in spec for n in s.nodes[1:])
    assert m["mean_acceptance_length"] == pytest.approx(1 + m["num_accepted_draft_tokens"] / max(len(spec), 1))
    assert m["draft_acceptance_rate"] == pytest.approx(m["num_accepted_draft_tokens"] / max(m["num_draft_tokens"], 1))
    assert len(m["acceptance_histogram"]) == m["num_spec_tokens"] + 1
    for d, counts in m["acceptance_histogram_by_draft_length"].items():
        assert len(counts) == int(d) + 1
    # tau counts every forward; the spec steps' tokens are their mean acceptance length each (the last step may be
    # cut by the token limit), the prefill and plain steps one each.
    plain = [s for s in r.steps if s not in spec]
    emitted = sum(len(s.emitted) for s in spec)
    assert emitted <= len(spec) * m["mean_acceptance_length"] + 1e-9
    assert r.summary.tokens == emitted + sum(len(s.emitted) for s in plain)
    assert r.summary.tau == pytest.approx(r.summary.tokens / r.summary.forwards)


def test_plain_decoding_has_no_verification_steps(tiny_lm):
    m = esp.decode(tiny_lm("qwen2").model, None, PROMPT, method="ar", max_new_tokens=12).summary.speculative_decoding
    assert m["num_spec_steps"] == 0 and m["mean_acceptance_length"] == 1.0 and m["acceptance_histogram"] == [0]


def test_pooled_requests_count_as_one(tiny_lm):
    lm = tiny_lm("qwen3")
    runs = [esp.decode(lm.model, None, PROMPT[i:], method="esp", max_new_tokens=20).steps for i in range(3)]
    pooled = pooled_acceptance([acceptance(steps) for steps in runs])
    assert pooled == acceptance([s for steps in runs for s in steps])


@pytest.mark.model
def test_custom_generate_returns_each_rows_metrics(hf):
    model, tok = hf
    ids = tok.apply_chat_template([{"role": "user", "content": "List three colours."}], add_generation_prompt=True,
                                  return_tensors="pt", return_dict=True)["input_ids"]
    out = model.generate(ids, custom_generate=str(ROOT), trust_remote_code=True, method="esp", max_new_tokens=12,
                         return_dict_in_generate=True)
    (m,) = out.speculative_decoding
    assert set(m) == FIELDS and m["num_spec_steps"] >= 1
    assert torch.equal(out.sequences, model.generate(ids, max_new_tokens=12, do_sample=False))

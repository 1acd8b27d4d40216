"""The Mask Lens and the verifier's eye (issue 37): read from the step's own forward, they agree with what the
engine drafted and verified, change no token and no forward, and cost nothing when off."""
from __future__ import annotations

import json

import pytest
import torch

from conftest import ARCHS
from esp import methods
from esp.decoding.engine import Decoder
from esp.sampling import Sampling
from esp.trace import ACCEPTED, LENS_TOP, StepTrace

PROMPT = [3, 17, 5, 42, 8, 3, 17, 5, 9, 11]
MASKED = ("esp:k=2:bc=30", "esp:k=3:bc=60:tree=dynamic", "hybrid:bc=60")


def _run(lm, spec: str, lens: bool, tokens: int = 24, sampling: Sampling = Sampling(), ids=PROMPT):
    calls = []
    forward = lm.forward

    def spy(*a, **kw):
        calls.append(kw.get("layers", False))
        return forward(*a, **kw)

    lm.forward, before = spy, lm.head_calls
    try:
        gen = Decoder(lm, methods.build(spec), sampling, tokens, lens=lens).generate(list(ids))
    finally:
        del lm.forward
    return gen, lm.head_calls - before, calls


def _next_children(step: StepTrace) -> list[int]:
    """The depth-1 tokens of a step's tree, in the drafter's order (ESP: most probable first)."""
    return [n.token for n in step.nodes if n.depth == 1 and n.row is not None]


@pytest.mark.parametrize("arch", ARCHS)
def test_the_last_layer_of_the_lens_ranks_tokens_as_esp_drafted_them(tiny_lm, arch):
    lm = tiny_lm(arch)
    gen, _, _ = _run(lm, "esp:k=2:bc=30", True)
    checked = 0
    for step, nxt in zip(gen.steps, gen.steps[1:]):
        (m1, m2) = step.lens  # ESP feeds k masks at every node, so at the path's end too
        assert [m.j for m in (m1, m2)] == [1, 2]
        assert all(len(layer) == LENS_TOP for layer in m1.tokens) and len(m1.tokens) == lm.config.num_hidden_layers + 1
        # ESP's depth-1 children are mask 1's best tokens, the next root (its parent) skipped.
        want = [t for t in m1.tokens[-1] if t != nxt.root]
        got = _next_children(nxt)
        assert got[: len(want)] == want[: len(got)]
        assert m1.position == nxt.n_past and m2.position == m1.position + 1  # after the next root, at n + d + j
        checked += 1
    assert checked >= 5


def test_the_lens_resolves_each_mask_against_the_token_that_came(tiny_lm):
    lm = tiny_lm("llama")
    gen, _, _ = _run(lm, "esp:k=2:bc=30", True, tokens=32)
    out = {(len(PROMPT) if s.prefill else s.n_past + 1) + i: t for s in gen.steps for i, t in enumerate(s.emitted)}
    lens = {(s.step, m.j): m for s in gen.steps for m in s.lens}
    resolved = [r for s in gen.steps for r in s.lens_real]
    assert len(resolved) >= len(lens) - 4  # the last steps' masks may draft past the run's end
    for r in resolved:
        m = lens[(r.source_step, r.j)]
        assert r.token == out[m.position + 1]
        assert r.accepted == (len(gen.steps[r.source_step + 1].accepted) >= r.j)
        top1 = [layer[0] for layer in m.tokens]
        assert [rank == 1 for rank in r.rank] == [t == r.token for t in top1]
        assert len(r.prob) == len(r.rank) == len(m.tokens)


@pytest.mark.parametrize("spec", MASKED + ("pld", "ar"))
def test_the_lens_changes_no_token_and_no_forward(tiny_lm, spec):
    lm = tiny_lm("qwen3")
    off, _, _ = _run(lm, spec, False)
    on, _, _ = _run(lm, spec, True)
    assert on.tokens == off.tokens
    assert on.summary.forwards == off.summary.forwards
    assert [len(s.row_labels) for s in on.steps] == [len(s.row_labels) for s in off.steps]


@pytest.mark.parametrize("spec", MASKED)
def test_with_the_lens_off_a_step_does_no_lens_work(tiny_lm, spec):
    lm = tiny_lm("gemma3")
    off, heads_off, layers_off = _run(lm, spec, False)
    on, heads_on, layers_on = _run(lm, spec, True)
    assert not any(layers_off) and all(layers_on)  # no layer states kept without the lens
    assert all(not s.lens and not s.lens_real and not s.eye for s in off.steps)
    assert all(n.target_rank is None for s in off.steps for n in s.nodes)
    # The lens adds one LM-head call per step that fed masks at its path's end, and nothing else; ESP's drafter,
    # which would read those masks' logits with a call of its own, takes them from the lens's output layer.
    looked = sum(bool(s.lens) for s in on.steps)
    assert looked > 0 and heads_on - heads_off == (0 if spec.startswith("esp") else looked)


def test_the_verifiers_eye_shows_the_distribution_it_decided_from(tiny_lm):
    lm = tiny_lm("qwen2")
    gen, _, _ = _run(lm, "hybrid:bc=60", True, tokens=32)
    for s in gen.steps:
        assert len(s.eye) == len(s.emitted)
        assert [row[0] for row in s.eye] == s.emitted  # greedy: the choice is the distribution's top-1
        for row in s.eye:
            ps = row[1::2]
            assert ps == sorted(ps, reverse=True) and sum(ps) <= 1.002
        for n in s.nodes[1:]:
            if n.row is None:
                assert n.target_rank is None
            elif n.status == ACCEPTED:
                assert n.target_rank == 1
            elif s.nodes[n.parent].status != "rejected":  # a rejected child of a walked row lost to its choice
                assert n.target_rank > 1


def test_under_sampling_the_eye_is_the_distribution_the_engine_drew_from(tiny_lm):
    lm = tiny_lm("llama")
    s = Sampling(temperature=0.7, top_k=3, seed=3)
    gen, _, _ = _run(lm, "esp:k=2:bc=30", True, sampling=s, tokens=24)
    off, _, _ = _run(lm, "esp:k=2:bc=30", False, sampling=s, tokens=24)
    assert gen.tokens == off.tokens
    truncated = 0
    for step in gen.steps:
        for row, tok in zip(step.eye, step.emitted):
            ids, ps = row[::2], row[1::2]
            assert sum(ps) <= 1.002 and ps == sorted(ps, reverse=True)  # 3 significant digits each
            assert tok not in ids or ps[ids.index(tok)] > 0  # drawn from the distribution's support
            truncated += ps[-1] == 0
    assert truncated  # top-k cut the tail: the eye shows the distribution drawn from, not the raw softmax


def test_a_lens_trace_round_trips_through_json(tiny_lm):
    lm = tiny_lm("llama")
    gen, _, _ = _run(lm, "esp:k=2:bc=30", True, tokens=12)
    for s in gen.steps:
        back = StepTrace.from_dict(json.loads(json.dumps(s.to_dict())))
        assert back == s


@pytest.mark.model
def test_the_embedded_models_lens_agrees_with_its_drafts(lm):
    ids = lm.chat_ids("Count from 1 to 30, separated by commas.")
    gen, _, _ = _run(lm, "esp:k=2:bc=30", True, tokens=24, ids=ids)
    off, _, _ = _run(lm, "esp:k=2:bc=30", False, tokens=24, ids=ids)
    assert gen.tokens == off.tokens and gen.summary.forwards == off.summary.forwards
    for step, nxt in zip(gen.steps, gen.steps[1:]):
        want = [t for t in step.lens[0].tokens[-1] if t != nxt.root]
        got = _next_children(nxt)
        assert got[: len(want)] == want[: len(got)]
    assert any(r.accepted for s in gen.steps for r in s.lens_real)
    with torch.inference_mode():
        assert all(set(m.texts) == {t for layer in m.tokens for t in layer} for s in gen.steps for m in s.lens)


def test_the_library_the_bench_and_custom_generate_leave_the_lens_off(tiny_chat, monkeypatch):
    """esp.decode (what custom_generate calls) and the bench's engine turn build no lens unless asked: a lens
    built here fails the test."""
    import esp
    import esp.decoding.engine as engine
    from esp.bench.run import parser

    def refuse(*args, **kwargs):
        raise AssertionError("a lens was built")

    monkeypatch.setattr(engine, "MaskLens", refuse)
    model, tokenizer = tiny_chat
    for method in ("esp:k=2:bc=12", "hybrid:bc=auto"):
        out = esp.decode(model, tokenizer, "abc", method=method, max_new_tokens=8)
        assert out.tokens and all(not s.lens and not s.eye for s in out.steps)
        batch = esp.decode(model, tokenizer, ["abc", "de"], method=method, max_new_tokens=8)
        assert all(r.tokens for r in batch)
    assert parser().parse_args(["--questions", "q.jsonl"]).lens is False
    with pytest.raises(AssertionError, match="a lens was built"):  # the guard itself bites when asked for one
        esp.decode(model, tokenizer, "abc", method="esp:k=2:bc=12", max_new_tokens=8, views=True)

"""A step in words: for every step of every shipped and test trace, the paragraph agrees with the trace
(accepted count, bonus token, sources) and speaks in the run's decoding mode."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from components import sources as src
from components.export import read_trace_json
from components.step_words import step_words, tok
from esp.trace import ACCEPTED

ROOT = Path(__file__).resolve().parents[1]
TRACES = sorted((ROOT / "assets").glob("trace_*.json")) + [ROOT / "tests" / "data" / "trace_k2_bc30.json"]
SAMPLING = {"temperature": 0.7, "top_p": 0.95, "top_k": 0, "seed": 11}
# The sentence that names the model's own token: "... which was `X`", "... there was `X`", "... is `X`, the first".
BONUS = re.compile(r"(?:which was|there was|after the prompt is|after the root was|draft `.+?` was) (`[^`]*`)")


@pytest.fixture(scope="module", params=TRACES, ids=lambda p: p.stem)
def trace(request):
    return read_trace_json(request.param)


def _path(step):
    return sorted((n for n in step.nodes if n.status == ACCEPTED), key=lambda n: n.depth)


def test_words_match_every_step(trace):
    meta, steps = trace
    for step in steps:
        words = step_words(step, meta)
        if len(step.nodes) > 1:
            m = re.search(r"\*\*Accepted: (\d+) drafts?\*\*", words)
            assert m and int(m.group(1)) == len(step.accepted), (step.step, words)
            accepted = words[m.end():words.index("The walk stopped")]
            for node in _path(step):
                assert tok(node.text) in accepted and src.describe(node.sources) in accepted, (step.step, node.index)
            drafted = {s for n in step.nodes if n.row is not None for s in n.sources}
            for s in drafted:
                assert src.NAMES[s] in words, (step.step, s)
        else:
            assert "Accepted" not in words
        bonus = BONUS.findall(words)
        if len(step.emitted) > len(step.accepted):
            assert bonus and bonus[-1] == tok(step.emitted_text[len(step.accepted)]), (step.step, words)
        else:  # cut at the end of text or the token limit: the model's token is named but not emitted
            assert f"was token {step.bonus}" in words and "was not emitted" in words
        assert ("prefill" in words) == step.prefill


def test_first_rejected_draft_named(trace):
    """Where the walk stopped on a fed, rejected child, the words name the first one and the bonus after it."""
    meta, steps = trace
    seen = 0
    for step in steps:
        last = (_path(step) or [step.nodes[0]])[-1]
        rejected = [n for n in step.nodes if n.parent == last.index and n.row is not None and n.status != ACCEPTED]
        if rejected:
            seen += 1
            assert f"its first draft {tok(rejected[0].text)}" in step_words(step, meta)
    assert seen, "no step of this trace stopped on a rejected draft"


def test_words_follow_the_mode(trace):
    meta, steps = trace
    greedy = dict(meta, sampling={"temperature": 0.0, "top_p": 1.0, "top_k": 0, "seed": 0})
    sampled = dict(meta, sampling=SAMPLING)
    for step in steps:
        g, s = step_words(step, greedy), step_words(step, sampled)
        assert "top choice" in g and "sampled" not in g
        assert "sampled with seed 11 (temperature 0.7, top-p 0.95)" in s and "top choice" not in s


def test_prefill_explained():
    meta, steps = read_trace_json(ROOT / "assets" / "trace_masks.json")
    words = step_words(steps[0], meta)
    masks = steps[0].row_kinds.count("mask")
    assert words.startswith("**Step 0 is the prefill.**")
    assert f"{masks} mask rows" in words and "prompt's" in words
    assert step_words(steps[0].to_dict(), meta) == words  # a stored dict reads the same


def test_cost_against_a_plain_step():
    meta, steps = read_trace_json(ROOT / "assets" / "trace_masks.json")
    step = next(s for s in steps if not s.prefill)
    assert "a plain one-row step" in step_words(step, meta)
    assert "No cost curve" in step_words(step, {k: v for k, v in meta.items() if k != "curve"})

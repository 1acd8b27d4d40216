"""The training-free baselines (PLD, STAND, LADE): their drafting logic, and PLD against transformers' prompt
lookup (their tokens against plain decoding's: tests/test_lossless_matrix.py)."""
from __future__ import annotations

import random

import pytest
import torch

from conftest import spec_bench
from esp.decoding.drafter import Context
from esp.drafters.lade import LADEDrafter, remember, window_geometry
from esp.drafters.pld import RULES, NgramIndex, lookup
from esp.drafters.stand import NGramTable, STANDDrafter
from esp.decoding.engine import Decoder
from esp.errors import ESPError
from esp.methods import build
from esp.sampling import Sampling
from esp.decoding.tree import best_first


# ---- PLD lookup -------------------------------------------------------------------------------------

def test_pld_takes_the_longest_ngram_then_the_leftmost_match():
    t = torch.tensor([1, 2, 3, 9, 9, 2, 3, 8, 7, 6, 5, 1, 2, 3])
    # 3-gram (1, 2, 3) matches at 0 -> copy what followed.
    assert lookup(t, 3, 4) == [9, 9, 2, 3]
    # Limited to 2-grams, (2, 3) matches first at 1: the left-most earlier match wins.
    assert lookup(t, 2, 4) == [9, 9, 2, 3]
    assert lookup(torch.tensor([4, 5, 6]), 3, 4) == []  # nothing earlier


def test_pld_original_rule_needs_a_full_draft_and_hf_rule_does_not():
    t = torch.tensor([7, 1, 2, 5, 1, 2])
    assert lookup(t, 2, 4, "pld") == []  # (1, 2) at 1 is followed by only 3 tokens (suffix included)
    assert lookup(t, 2, 4, "hf") == [5, 1, 2]
    assert lookup(t, 2, 3, "pld") == [5, 1, 2]
    # A match overlapping the suffix is the original's "no match"; HF copies from it.
    assert lookup(torch.tensor([5, 1, 1]), 2, 1, "pld") == []
    assert lookup(torch.tensor([5, 1, 1]), 2, 1, "hf") == [1]


@pytest.mark.parametrize("ngram", [1, 2, 3])
def test_pld_hf_rule_equals_transformers_prompt_lookup(ngram):
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

    rng = random.Random(ngram)
    gen = PromptLookupCandidateGenerator(num_output_tokens=10, max_matching_ngram_size=ngram, max_length=10_000)
    for _ in range(200):
        ids = [rng.randrange(6) for _ in range(rng.randrange(2, 40))]
        cand, _ = gen.get_candidates(torch.tensor([ids]))
        assert lookup(torch.tensor(ids), ngram, 10, "hf") == cand[0, len(ids):].tolist(), ids


# ---- STAND table and tree ---------------------------------------------------------------------------

def test_stand_table_running_mean_topk_and_backoff():
    tab = NGramTable(max_n=4, top=2)
    tab.add([1, 2, 3], [5, 6], [0.6, 0.4])
    tab.add([9, 2, 3], [6, 7], [0.9, 0.1])
    # (3,) and (2, 3) saw both: mean over the union, then cut to the top 2.
    assert tab.lookup([2, 3])[0] == [6, 5]
    assert tab.lookup([2, 3])[1] == pytest.approx([0.65, 0.3])
    # The longest stored suffix wins: (1, 2, 3) saw only the first distribution.
    assert tab.lookup([0, 1, 2, 3]) == ([5, 6], [0.6, 0.4])
    assert tab.lookup([4]) == ([], [])


def test_a_table_with_a_memory_weighs_the_latest_observations_more():
    tab = NGramTable(max_n=1, top=10, memory=2)
    for t in (5, 5, 5, 6):
        tab.add([1], [t], [1.0])
    assert dict(zip(*tab.lookup([1]))) == pytest.approx({6: 0.5, 5: 0.5})  # a running mean: 6 at 1/4
    tab.add([1], [6], [1.0])
    assert dict(zip(*tab.lookup([1]))) == pytest.approx({6: 0.75, 5: 0.25})


def test_stand_table_seed_is_the_prompt_ngram_statistics():
    tab = NGramTable(max_n=2, top=10)
    tab.seed([1, 2, 1, 3, 1, 2])
    toks, probs = tab.lookup([1])
    assert dict(zip(toks, probs)) == pytest.approx({2: 2 / 3, 3: 1 / 3})
    assert tab.lookup([3, 1]) == ([2], [1.0])


def test_best_first_takes_highest_cumulative_paths():
    dist = {(): ([1, 2], [0.6, 0.4]), (1,): ([3, 4], [0.5, 0.5]), (2,): ([5], [0.9])}

    def children(tree, node, depth):
        path = []
        while node > 0:
            path.append(tree.tokens[node])
            node = tree.parents[node]
        return dist.get(tuple(path[::-1]), ([], []))

    tree = best_first(0, children, 3)
    # 0.6 (1), 0.4 (2), 0.36 (2,5) beat 0.3 (1,3) and 0.3 (1,4).
    assert tree.tokens == [0, 1, 2, 5] and tree.parents == [-1, 0, 0, 2]
    assert tree.cum_probs[3] == pytest.approx(0.36)


def test_stand_respects_the_budget(tiny_lm):
    lm = tiny_lm("llama")
    prompt = [1, 2, 3, 4] * 6
    gen = Decoder(lm, STANDDrafter(bc=8), max_new_tokens=24).generate(prompt)
    assert all(len(s.nodes) - sum(n.status == "pruned" for n in s.nodes) <= 8 for s in gen.steps)
    assert max(len(s.accepted) for s in gen.steps) > 0


def test_stand_gumbel_drafts_repeat_per_seed(tiny_lm):
    lm = tiny_lm("llama")
    prompt = [5, 6, 7, 8, 5, 6, 9, 8, 5, 6, 7]
    s = Sampling(temperature=1.0, seed=3)

    def first_tree():
        d = STANDDrafter(bc=12)
        ctx = Context(lm=lm, tokens=list(prompt), n_prompt=len(prompt), sampling=s)
        d.start(ctx)
        return d.propose(ctx).tree.tokens

    assert first_tree() == first_tree()


# ---- LADE window and pool ---------------------------------------------------------------------------

def test_lade_window_geometry_matches_the_official_mask():
    # Full window for N=4, W=3: level 0 has W-1 own tokens, levels 1..2 have W.
    offsets, see = window_geometry((2, 3, 3))
    assert offsets == (1, 2, 1, 2, 3, 2, 3, 4)
    # The official code builds it over [root, level 0, level 1, level 2]: level l column j sees
    # [root, level 0] columns <= j and column j of levels 1..l; level 0 is causal.
    w, levels = 3, 3
    ref = torch.zeros(w * levels, w * levels, dtype=torch.bool)
    causal = torch.ones(w, w, dtype=torch.bool).tril()
    for ll in range(levels):
        ref[w * ll : w * (ll + 1), :w] = causal
        for row in range(1, ll + 1):
            ref[w * ll : w * (ll + 1), w * row : w * (row + 1)] |= torch.eye(w, dtype=torch.bool)
    assert torch.equal(see, ref[1:, 1:])  # drop the root's row and column (the tree holds the root)
    assert ref[1:, 0].all()  # and every window row sees the root, as our see_tree gives it


def test_lade_pool_is_lru_with_g_per_key():
    pool: dict = {}
    for gram in [(1,), (2,), (3,), (1,), (4,)]:
        remember(pool, 0, gram, 3)
    assert pool[0] == [(3,), (1,), (4,)]


def test_lade_warms_up_then_slides_one_level(tiny_lm):
    lm = tiny_lm("llama")
    d = LADEDrafter(n=5, w=7, g=7)
    sizes = []
    dec = Decoder(lm, d, max_new_tokens=12)
    for _ in dec.stream([3, 1, 4, 1, 5, 9, 2, 6]):
        sizes.append([len(lv) for lv in d.levels])
    assert sizes[:4] == [[8, 9], [7, 8, 8], [6, 7, 7, 7], [6, 7, 7, 7]]
    assert len(d.pool) > 0


# ---- registry -----------------------------------------------------------------------------------------

def test_registry_builds_the_baselines():
    assert build("pld").describe() == "pld n=3 draft=10"
    assert build("stand:bc=30").bc == 30
    assert build("stand", {"bc": 60}).bc == 60  # the shared --bc budget
    assert build("lade:n=5:w=7:g=7").describe() == "lade n=5 w=7 g=7"


@pytest.mark.parametrize("spec", ["pld:n=0", "pld:rule=x", "stand:bc=1", "lade:n=2", "lade:w=1", "lade:g=0", "lade:k=3"])
def test_bad_baseline_settings_raise_one_clear_line(spec):
    with pytest.raises(ESPError) as e:
        build(spec)
    assert "\n" not in str(e.value)


# ---- PLD against transformers' prompt lookup, and its index -------------------------------------------

@pytest.mark.model
def test_pld_matches_transformers_prompt_lookup_on_the_embedded_model(lm):
    """Same tokens as `generate(prompt_lookup_num_tokens=10)`, and the same forward count with the same
    matching rule (HF's) and n-gram size. The tau comparison on more prompts is in docs/history.md."""
    q = next(q for q in spec_bench(1) if q["category"] == "translation")
    prompt = lm.chat_ids(q["turns"][0])
    calls = [0]
    hook = lm.model.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    try:
        with torch.inference_mode():
            out = lm.model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                    do_sample=False, max_new_tokens=48, prompt_lookup_num_tokens=10,
                                    max_matching_ngram_size=2, pad_token_id=lm.tokenizer.eos_token_id)
    finally:
        hook.remove()
    hf = out[0, len(prompt):].tolist()
    ours = Decoder(lm, build("pld:n=2:rule=hf"), max_new_tokens=48).generate(prompt)
    assert ours.tokens == hf
    # The last step may differ: HF caps a draft at the length limit, we cut the emitted tokens instead.
    assert abs(ours.summary.forwards - calls[0]) <= 1


@pytest.mark.parametrize("rule", RULES)
def test_pld_index_finds_what_the_search_finds_at_every_length(rule):
    """The drafter's incremental n-gram index against the search over the whole text, on texts of a small
    alphabet (many repeats) grown a token or a few at a time, as the engine grows them."""
    gen = torch.Generator().manual_seed(0)
    for trial in range(20):
        text = torch.randint(0, 4, (300,), generator=gen).tolist()
        n, draft = 1 + trial % 3, 1 + trial % 5
        index, grown = NgramIndex(n), text[:1]
        while len(grown) < len(text):
            grown.extend(text[len(grown) : len(grown) + 1 + trial % 3])
            index.extend(grown)
            assert index.find(draft, rule) == lookup(torch.tensor(grown), n, draft, rule), (trial, len(grown))

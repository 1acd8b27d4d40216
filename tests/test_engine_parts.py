"""Unit tests of the shared machinery: trees, layouts, verification, KV commit, sampling."""
from __future__ import annotations

import random

import pytest
import torch

from esp.drafters.esp import ESPConfig, default_shape
from esp.errors import ESPError
from esp.models.kvcache import commit
from esp.decoding.layout import EfficientLayouts, Extra, NaiveLayouts, _ancestors
from esp.sampling import Sampling, draw, probs, top_k
from esp.decoding.tree import DraftTree, dynamic_tree, static_tree
from esp.decoding.verify import ROW_K, TOP_K, check, verify


def _dist(v: int, ranked: list[int]) -> torch.Tensor:
    """A distribution whose tokens rank as `ranked` (then the rest)."""
    p = torch.full((v,), 1e-4)
    for r, t in enumerate(ranked):
        p[t] = 1.0 / (r + 2)
    return p / p.sum()


def _random_parents(n: int, rng: random.Random) -> list[int]:
    return [-1] + [rng.randrange(i) for i in range(1, n)]


def test_static_tree_top1_expansion_and_parent_pruning():
    dists = torch.stack([_dist(10, [7, 3, 5, 1]), _dist(10, [3, 8, 2])])
    tree = static_tree(root=7, dists=dists, shape=[2, 2])
    # depth 1: 7 equals the root -> pruned, its slot goes to 3 and 5; depth 2 hangs off 3 (top-1): 3 pruned
    assert tree.tokens == [7, 3, 5, 8, 2]
    assert tree.parents == [-1, 0, 0, 1, 1]
    assert [(p, t) for p, t, _, _ in tree.pruned] == [(0, 7), (1, 3)]
    assert tree.shape() == [2, 2]
    assert tree.cum_probs[3] == pytest.approx(tree.probs[1] * tree.probs[3])


def test_dynamic_tree_is_the_best_prefix_closed_set():
    rng = random.Random(0)
    for _ in range(20):
        k, v, n = rng.randint(1, 3), 12, rng.randint(1, 9)
        dists = torch.softmax(torch.randn(k, v, generator=torch.Generator().manual_seed(rng.randrange(9999))) * 2, -1)
        root = rng.randrange(v)
        tree = dynamic_tree(root, dists, n)
        assert len(tree) - 1 == n
        # every kept node's cumulative probability beats every candidate left out (children of kept nodes)
        kept = {(tree.parents[i], tree.tokens[i]) for i in range(1, len(tree))}
        worst = min(tree.cum_probs[1:])
        depths = tree.depths
        for node in range(len(tree)):
            if depths[node] == k:
                continue
            for tok in range(v):
                if tok != tree.tokens[node] and (node, tok) not in kept:
                    assert tree.cum_probs[node] * float(dists[depths[node], tok]) <= worst + 1e-12
        assert all(tree.tokens[i] != tree.tokens[tree.parents[i]] for i in range(1, len(tree)))


def test_dynamic_tree_with_k1_equals_static():
    d = torch.softmax(torch.randn(1, 50), -1)
    assert dynamic_tree(4, d, 14).tokens == static_tree(4, d, [14]).tokens


def test_paper_shapes_and_budget():
    assert default_shape(60, 2) == [15, 4] and default_shape(30, 1) == [14] and default_shape(10, 2) == [2, 1]
    for bc in (16, 25, 40, 60, 90):
        for k in range(1, 5):
            if bc >= (k + 1) ** 2:
                shape = default_shape(bc, k)
                assert len(shape) == k and min(shape) >= 1
                if (bc, k) not in {(60, 3), (10, 2)}:  # the paper's two shapes that overshoot slightly
                    assert (k + 1) * (1 + sum(shape)) <= bc
    assert ESPConfig(k=2, bc=60, tree="dynamic").n_nodes == 19


@pytest.mark.parametrize("kw,msg", [
    (dict(k=0), "k"), (dict(k=5), "k"), (dict(k=2, bc=8), "too small"), (dict(k=4, bc=24), "too small"),
    (dict(lam=1.5), "lambda"), (dict(lam=-0.1), "lambda"), (dict(tree="wide"), "tree"), (dict(init="zeros"), "init"),
])
def test_bad_esp_settings_are_one_clear_error(kw, msg):
    with pytest.raises(ESPError, match=msg):
        ESPConfig(**kw)


def test_ancestors_match_parent_walks():
    rng = random.Random(1)
    for _ in range(10):
        parents = _random_parents(rng.randint(1, 25), rng)
        anc = torch.from_numpy(_ancestors(parents))
        for i in range(len(parents)):
            walk, v = set(), i
            while v >= 0:
                walk.add(v)
                v = parents[v]
            assert set(torch.nonzero(anc[i]).flatten().tolist()) == walk


def test_efficient_and_naive_layouts_are_identical():
    rng = random.Random(2)
    eff, naive = EfficientLayouts(), NaiveLayouts()
    for trial in range(30):
        parents = _random_parents(rng.randint(1, 20), rng)
        k = rng.randint(0, 4)
        extra = None
        if trial % 3 == 0:
            e = rng.randint(1, 6)
            g = torch.Generator().manual_seed(trial)
            extra = Extra(tuple(range(e)), tuple(range(1, e + 1)), torch.rand(e, len(parents), generator=g) > 0.5,
                          torch.rand(e, e, generator=g) > 0.5, key=("t", trial))
        owners = None if trial % 2 else tuple(sorted(rng.sample(range(len(parents)), rng.randint(0, len(parents)))))
        a, b = eff.layout(parents, k, extra, owners), naive.layout(parents, k, extra, owners)
        assert torch.equal(a.visible, b.visible) and torch.equal(a.offsets, b.offsets)
        past = rng.randint(0, 40)
        ma, mb = eff.additive(a, past, torch.float32, torch.device("cpu")), naive.additive(b, past, torch.float32, torch.device("cpu"))
        assert torch.equal(ma, mb)


def test_esp_layout_rules():
    # root -> 1 -> 2, root -> 3 ; k = 2
    lay = EfficientLayouts().layout([-1, 0, 1, 0], 2)
    v, n = lay.visible, 4
    assert lay.size == (2 + 1) * 4
    assert v[2, :n].tolist() == [True, True, True, False]  # node 2 sees root, 1, itself
    assert v[3, :n].tolist() == [True, False, False, True]
    m21, m22 = lay.mask_rows(2)
    assert v[m22, :n].tolist() == [True, True, True, False]  # mask of node 2 sees node 2's path
    assert v[m22, n:].nonzero().flatten().tolist() == [m21 - n, m22 - n]  # and its masks 1..j
    assert v[m21, n:].nonzero().flatten().tolist() == [m21 - n]
    assert not v[:n, n:].any()  # no node sees a mask
    assert lay.offsets.tolist() == [0, 1, 2, 1] + [1, 2, 2, 3, 3, 4, 2, 3]


def test_prefix_columns_are_visible_and_buffer_is_reused_cleanly():
    eff = EfficientLayouts()
    lay = eff.layout([-1, 0, 0], 1)
    m1 = eff.additive(lay, 5, torch.float32, torch.device("cpu")).clone()
    m2 = eff.additive(lay, 9, torch.float32, torch.device("cpu"))
    assert m1.shape[-1] == 5 + 6 and m2.shape[-1] == 9 + 6
    assert (m2[..., :9] == 0).all()  # the previous step's block columns were reset to visible prefix
    assert torch.equal(m1[..., 5:], m2[..., 9:])


def test_verify_walks_greedy_path_and_returns_bonus():
    tree = DraftTree.root_only(0)
    a = tree.add(0, 5, 0.5)
    tree.add(0, 6, 0.3)
    b = tree.add(a, 7, 0.4)
    logits = torch.zeros(len(tree), 10)
    logits[0, 5] = logits[a, 7] = logits[b, 9] = 1.0
    assert verify(tree, logits, 10, Sampling()) == ([0, a, b], 9)
    logits[a, 7], logits[a, 2] = 0, 1
    assert verify(tree, logits, 10, Sampling()) == ([0, a], 2)


def test_sampling_is_keyed_by_seed_and_position():
    logits = torch.randn(100, dtype=torch.float64)
    s = Sampling(temperature=1.0, seed=3)
    assert draw(logits, 7, s) == draw(logits.clone(), 7, s)
    assert len({draw(logits, p, s) for p in range(50)}) > 5
    p = probs(logits, Sampling(temperature=1.0, top_k=5, top_p=0.5))
    assert (p > 0).sum() <= 5 and abs(float(p.sum()) - 1) < 1e-9


@pytest.mark.parametrize("shape", [(6, 49152), (5, 49152 + 300), (2, 700), (8, 5000), (2, 49152)])  # blocked from 5 rows
def test_blockwise_top_k_equals_torch_topk(shape):
    g = torch.Generator().manual_seed(shape[1])
    x = torch.randn(shape, generator=g)
    x[0, -5:] += 8  # winners in the partial last block
    x[1, :3] += 8  # and in the first block
    v, i = top_k(x, 10)
    ref_v, ref_i = torch.topk(x, 10, -1)
    assert torch.equal(v, ref_v) and torch.equal(i, ref_i)


def test_sampling_follows_the_target_distribution():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0], dtype=torch.float64)
    s = Sampling(temperature=1.0, seed=11)
    counts = torch.bincount(torch.tensor([draw(logits, p, s) for p in range(4000)]), minlength=4).double() / 4000
    assert torch.allclose(counts, torch.softmax(logits, 0), atol=0.03)


@pytest.mark.parametrize("kw", [dict(temperature=-1), dict(top_p=0), dict(top_p=1.5), dict(top_k=-2)])
def test_bad_sampling_settings(kw):
    with pytest.raises(ESPError):
        Sampling(**kw)


def test_commit_keeps_prefix_and_accepted_rows_in_order():
    from transformers import DynamicCache

    cache = DynamicCache()
    keys = torch.arange(10.0).view(1, 1, 10, 1).repeat(1, 2, 1, 3)
    cache.update(keys.clone(), -keys.clone(), 0)
    commit(cache, 4, [0, 2, 5])
    assert cache.layers[0].keys[0, 0, :, 0].tolist() == [0, 1, 2, 3, 4, 6, 9]
    assert cache.layers[0].values[0, 1, :, 0].tolist() == [-0.0, -1, -2, -3, -4, -6, -9]
    commit(cache, 2, [0, 1])
    assert cache.layers[0].keys.shape[2] == 4
    held = cache.layers[0].keys
    commit(cache, 3, [0])  # a one-row step keeps all it fed: nothing to cut, and no layer is sliced again
    assert cache.layers[0].keys is held and cache.layers[0].keys[0, 0, :, 0].tolist() == [0, 1, 2, 3]


def test_mask_ema_follows_every_emitted_token_in_order(tiny_lm):
    """m <- m + lambda (e(x) - m) per emitted token, from the mean of the prompt's embeddings."""
    from esp.decoding.drafter import Context
    from esp.drafters.esp import MaskEmbedding

    lm = tiny_lm("llama")
    prompt, out = [3, 9, 4, 7], [5, 11, 2]
    mask = MaskEmbedding(k=2, lam=0.1)
    mask.start(Context(lm=lm, tokens=prompt + out, n_prompt=len(prompt), sampling=Sampling()))
    e = lm.embed(prompt + out)
    want = e[: len(prompt)].mean(0)
    for x in e[len(prompt) :]:
        want = want + 0.1 * (x - want)
    assert torch.allclose(mask.m, want.expand(2, -1), atol=1e-12)
    mask.update(lm, [6])
    assert torch.allclose(mask.m[1], want + 0.1 * (lm.embed([6])[0] - want), atol=1e-12)
    assert not torch.equal(mask.m, mask.m0)


def test_the_verifiers_read_ranks_each_row_and_its_trace_keeps_the_verdicts_runners_up():
    """`check(...).rows` holds each fed node's ROW_K best (ids, logits) in order, the read a drafter reuses; the
    trace's rows along the path keep TOP_K pairs, the greedy choice first (an exact tie to the lower id)."""
    g = torch.Generator().manual_seed(1)
    tree = DraftTree([1, 2, 3], [-1, 0, 1], [1.0] * 3, [1.0] * 3)
    logits = torch.randn(3, 50, generator=g)
    logits[0, 2] = logits[1, 3] = 40.0
    logits[2, 8] = logits[2, 5] = 45.0  # the last row's best two tie exactly
    v = check(tree, logits, 0, Sampling())
    vals, ids = torch.topk(logits, ROW_K, dim=-1)
    assert [row[:ROW_K] for row in v.rows] == ids.float().tolist() and [row[ROW_K:] for row in v.rows] == vals.tolist()
    assert v.path == [0, 1, 2] and v.bonus == 5 and all(len(row) == 2 * TOP_K for row in v.top2)
    assert v.top2[2][0::2][:2] == [5, 8] and v.top2[0][0] == 2


def test_the_verifier_hands_over_its_choice_after_every_fed_node():
    """`check(...).choices[i]` is the target's token after node i by the verifier's own rule, for every node,
    walked or not: greedy the row's argmax (an exact tie to the lower id), sampled the draw keyed by the position
    after the node; the walk itself follows those choices, and the bonus is the last one."""
    g = torch.Generator().manual_seed(0)
    tree = DraftTree([1, 2, 3, 4, 5], [-1, 0, 0, 1, 3], [1.0] * 5, [1.0] * 5)
    logits = torch.randn(5, 40, generator=g, dtype=torch.float64)
    logits[0, 2] = logits[1, 4] = logits[3, 9] = 50.0  # root -> node 1 (token 2) -> node 3 (token 4), bonus 9
    logits[2, 7] = logits[2, 6] = 60.0  # node 2 (never walked): an exact tie
    for s in (Sampling(), Sampling(temperature=1.0, seed=3)):
        v = check(tree, logits, 10, s)
        want = [draw(logits[i], 10 + d + 1, s) for i, d in enumerate(tree.depths)]
        assert list(v.choices) == want and len(v.choices) == len(tree)
        assert all(tree.tokens[b] == v.choices[a] for a, b in zip(v.path, v.path[1:])) and v.bonus == v.choices[v.path[-1]]
    greedy = check(tree, logits, 10, Sampling())
    assert (greedy.path, greedy.bonus) == ([0, 1, 3], 9) and greedy.choices[1:3] == [4, 6]


@pytest.mark.parametrize("arch", ["llama", "gemma3", pytest.param("embedded", marks=pytest.mark.model)])
def test_a_plain_step_is_the_models_own_step_bit_for_bit(request, tiny_lm, arch):
    """A one-row step runs unmasked, as the model's own generate() runs it: every step after the prefill has the best
    logits of the model's own forward over its own cache, exactly: on the embedded model in float32 (through an
    additive mask they differed by up to 5e-5), and on tiny models before and past gemma3's 24-token sliding window.
    The prefill's block mask may round apart from the model's causal kernel in the last bit."""
    from transformers import DynamicCache

    from esp.decoding.drafter import Drafter
    from esp.decoding.engine import Decoder

    lm = request.getfixturevalue("lm") if arch == "embedded" else tiny_lm(arch)
    prompt = [random.Random(arch).randrange(lm.vocab_size) for _ in range(20)]
    g = Decoder(lm, Drafter(), max_new_tokens=12).generate(prompt)
    cache, own = DynamicCache(), []
    with torch.inference_mode():
        for fed in [prompt, *([t] for t in g.tokens[:-1])]:  # what each step fed: the prompt, then one token
            logits = lm.model(input_ids=torch.tensor([fed]), past_key_values=cache, use_cache=True).logits[0, -1]
            own.append(logits.topk(TOP_K).values.tolist())
    assert [s.top2[0][1::2] for s in g.steps[1:]] == own[1:]

"""The hybrid drafter and the budget machinery: cost curve, calibrator, width choice, trie merge, sources (its
tokens against plain decoding's: tests/test_lossless_matrix.py)."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from conftest import SAMPLERS, repeated_prompt as _prompt, spec_bench
from esp.budget.width import Choice, choose, grown_enough
from esp.budget.calibrate import Calibrator, bucket
from esp.budget.cost import CostCurve
from esp.drafters.candidates import History, calibrated
from esp.drafters.hybrid import CALL_TRUST, HybridDrafter
from esp.drafters.pld import NgramIndex
from esp.decoding.batch import BatchDecoder
from esp.decoding.drafter import Context
from esp.decoding.engine import Decoder
from esp.decoding.verify import top_rows
from esp.errors import ESPError
from esp.methods import build
from esp.sampling import Sampling
from esp.trace import ACCEPTED, LOOKUP

FLAT = CostCurve([1, 128], [1.0, 1.0])  # a GPU-like machine: any width up to 128 rows costs one forward


# ---------------------------------------------------------------- cost curve

def _curves() -> list[CostCurve]:
    """Curves of every kind a step reads: straight, falling after its first knot, AMD's AVX512 shape (2-3 rows dearer
    than 4-8), and that shape after a few steps of learning."""
    from esp.budget.cost import SHAPES
    from esp.models.timing import GRID
    learnt = CostCurve(list(GRID), list(SHAPES["cpu-float32-avx512"]), rate=0.1, weight=0.0, scaled=False)
    for r, secs in ((1, 0.02), (4, 0.021), (2, 0.03), (8, 0.026), (1, 0.019), (16, 0.04)):
        learnt.observe(r, secs)
    return [CostCurve([1, 4, 8], [1.0, 2.0, 2.0], rate=0.5), CostCurve([2, 5, 9, 30], [0.3, 0.2, 0.6, 0.9]),
            CostCurve(list(GRID), list(SHAPES["cpu-float32-avx512"])), learnt]


def test_the_least_price_over_widths_is_the_table_s_least():
    for curve in _curves():
        table = curve.table(64)
        for lo, hi in ((2, 64), (2, 3), (5, 7), (1, 64), (9, 9)):
            assert curve.least(lo, hi) == pytest.approx(float(table[lo : hi + 1].min()), rel=1e-12)


def test_a_step_builds_no_table_only_where_the_loss_cap_admits_no_width():
    """`_held` reads the curve's knots; it must hold a step to one row exactly where `Backoff.admitted` keeps no width
    past one row, at every room the cap can leave (a wrong yes would make a step plain that could have drafted)."""
    from types import SimpleNamespace
    from esp.budget.width import Backoff
    d, ctx = HybridDrafter(), SimpleNamespace(step=1, budget=None)
    for curve in _curves():
        table, d.curve = curve.table(64), curve
        ratios = sorted(float(x) / float(table[1]) - 1 for x in table[2:])
        for room in [ratios[0] - 1e-3, ratios[0] + 1e-3, -0.5, 0.0, 0.07, 0.3, 1.0, 5.0]:
            d.guard = Backoff()
            d.guard.cap.net = d.guard.room() - room
            assert d._held(ctx) == (not d.guard.admitted(table)[2:].any()), (curve.t, room)
            assert not d._held(SimpleNamespace(step=0, budget=None))  # the prefill is never held
            d.guard.left = 3  # backed off: no width at all
            assert d._held(ctx)


def test_cost_curve_interpolates_and_extrapolates():
    c = CostCurve([1, 4, 8], [1.0, 2.0, 2.0], rate=0.5)
    assert c.predict(1) == 1.0 and c.predict(2.5) == pytest.approx(1.5) and c.predict(6) == 2.0
    assert c.predict(16) == pytest.approx(2.0)  # flat last segment, extrapolated flat
    assert CostCurve([1, 2], [1.0, 2.0]).predict(4) == pytest.approx(4.0)
    assert c.table(3).tolist() == pytest.approx([0.0, 1.0, 1.0 + 1 / 3, 1.0 + 2 / 3])
    for curve in (c, CostCurve([3], [0.5]), CostCurve([2, 5, 9, 30], [0.3, 0.2, 0.6, 0.9])):
        assert curve.table(40)[1:].tolist() == pytest.approx([curve.predict(r) for r in range(1, 41)])
    for q, t in (([4, 1], [1.0, 2.0]), ([1, 2], [1.0, 0.0]), ([1], [float("nan")])):
        with pytest.raises(ValueError):
            CostCurve(q, t)


# ---------------------------------------------------------------- calibrator

def test_calibrator_shrinks_rare_keys_towards_coarser_ones():
    cal = Calibrator(prior=0.2, strength=4.0)
    assert cal.p((("a",), ("a", 1))) == 0.2  # nothing seen: the prior
    for i in range(96):
        cal.update((("a",), ("a", 1)), accepted=i % 4 != 0)  # 72 / 96 accepted
    assert cal.p((("a",),)) == pytest.approx((72 + 4 * 0.2) / (96 + 4))
    coarse = cal.p((("a",),))
    assert cal.p((("a",), ("a", 1))) == pytest.approx((72 + 4 * coarse) / (96 + 4))
    cal.update((("a",), ("a", 2)), accepted=False)  # one label: pulled towards the coarse rate, not to 0
    rare = cal.p((("a",), ("a", 2)))
    cal.update((("a",), ("a", 2)), accepted=False)  # a label after a read: the read is not served stale
    assert cal.p((("a",), ("a", 2))) < rare
    assert 0.5 < rare < cal.p((("a",),)) and cal.seen == 98
    batch = Calibrator(prior=0.2, strength=4.0)
    batch.update((("a",), ("a", 1)), accepted=72, seen=96)  # a step's labels counted first, then added once
    assert batch.p((("a",), ("a", 1))) == pytest.approx((72 + 4 * coarse) / (96 + 4)) and batch.seen == 96
    assert [bucket(x) for x in (0.0, 0.019, 0.02, 0.05, 0.5, 0.99)] == [0, 0, 1, 2, 6, 9]


# ---------------------------------------------------------------- width choice

def test_a_fake_cost_curve_decides_the_width_exactly():
    p = torch.tensor([0.9, 0.8, 0.5, 0.1, 0.05])  # a chain: each candidate is the previous one's child
    parents = [0, 1, 2, 3, 4]
    t = lambda *ys: torch.tensor([0.0, *ys], dtype=torch.float64)
    # Rows cost 1, 1.6, 1.9, 1.5, 1.7, 1.8: 3 nodes (4 rows) give 3.2 / 1.5 = 2.13 tokens per unit time,
    # more than 1 row (1), 2 rows (1.19), 3 rows (1.42), 5 rows (1.94) or 6 rows (1.86).
    c = choose(p, parents, k=0, mask_value=0.0, cap=6, cost=t(1, 1.6, 1.9, 1.5, 1.7, 1.8))
    assert (c.n, c.rows, c.masked) == (3, 4, ()) and c.expected == pytest.approx(3.2)
    # Expensive rows: a plain one-row step wins.
    c = choose(p, parents, k=0, mask_value=0.0, cap=6, cost=t(1, 3, 4, 5, 6, 7))
    assert (c.n, c.rows) == (0, 1)
    # A draft that only just beats the plain step is refused under a margin.
    assert choose(torch.tensor([0.55]), [0], k=0, mask_value=0.0, cap=2, cost=t(1, 1.5)).n == 1
    assert choose(torch.tensor([0.55]), [0], k=0, mask_value=0.0, cap=2, cost=t(1, 1.5), margin=0.1).n == 0
    # Flat cost: the whole budget is used.
    c = choose(p, parents, k=0, mask_value=0.0, cap=4)
    assert (c.n, c.rows) == (3, 4)



def test_the_early_plain_step_is_exactly_the_full_choice(monkeypatch):
    """The early plain step skips the width tables only where they would have picked the plain step anyway."""
    import esp.budget.width as budget

    real, said = budget.best_rate, []
    monkeypatch.setattr(budget, "best_rate", lambda *a: said.append(real(*a)) or said[-1])
    g = torch.Generator().manual_seed(0)
    cases = []
    for _ in range(400):
        n, k, cap = int(torch.randint(0, 12, (), generator=g)), int(torch.randint(0, 3, (), generator=g)), 16
        p = (torch.rand(n, generator=g, dtype=torch.float64) ** 4).sort(descending=True).values
        parents = [int(torch.randint(0, i + 1, (), generator=g)) for i in range(n)]  # an earlier node, or the root
        cost = torch.cat([torch.zeros(1), (1 + torch.rand(cap, generator=g, dtype=torch.float64)).cumsum(0) / 2])
        args = (p, parents, k, float(torch.rand((), generator=g)) * 2, cap, cost)
        margin = float(torch.rand((), generator=g)) * 0.2
        cases.append((args, margin, choose(*args, margin=margin)))
    monkeypatch.setattr(budget, "best_rate", lambda *a: float("inf"))  # never skip
    assert [choose(*args, margin=m) for args, m, _ in cases] == [c for _, _, c in cases]
    early = sum(b * (1 + 1e-9) < (1 + m) / float(args[-1][1]) for b, (args, m, _) in zip(said, cases))
    assert early > 50 and sum(c.rows > 1 for _, _, c in cases) > 50  # both ways were taken often
    for (args, _, c), b in zip(cases, said):  # the bound holds for what the tables chose
        assert c.rows == 1 or c.expected / float(args[-1][c.rows]) <= b * (1 + 1e-9)

def test_masks_go_where_the_accepted_path_is_likely_to_end():
    # root -> a (0.9) -> b (0.2); root -> c (0.05). The path most likely ends at a: P_end(a) = 0.9 - 0.2.
    p, parents = torch.tensor([0.9, 0.2, 0.05]), [0, 1, 0]
    # 5 rows: nodes a, b and masks on a and b (1 + 1.1 + 0.7 + 0.2 = 3.0) beat three nodes and a mask on a
    # (1 + 1.15 + 0.7 = 2.85): c is less likely than the path ending at b.
    c = choose(p, parents, k=1, mask_value=1.0, cap=5)
    assert (c.n, c.masked, c.rows) == (2, (1, 2), 5) and c.expected == pytest.approx(3.0)
    # 6 rows: a third mask, on the root (P_end 0.1), beats feeding c (0.05).
    c = choose(p, parents, k=1, mask_value=1.0, cap=6)
    assert (c.n, c.masked) == (2, (0, 1, 2)) and c.expected == pytest.approx(3.1)
    # Masks worth little: nodes first.
    c = choose(p, parents, k=1, mask_value=0.1, cap=5)
    assert (c.n, c.masked) == (3, (1,))
    # Forced probing feeds a mask even when masks are not worth their rows.
    c = choose(p, parents, k=2, mask_value=0.0, cap=8, cost=torch.tensor([0.0] + [1.0] + [9.0] * 7), force_mask=True)
    assert len(c.masked) == 1 and c.rows == 1 + c.n + 2


def test_growing_stops_only_where_no_further_candidate_can_change_the_choice():
    """Random grown candidates, the next one's P, costs and mask values: wherever `grown_enough` says stop, candidates
    added past the grown ones (each at most the next one's P) leave `choose` with the same pick for every mask count,
    and a mask probe either picks alike or falls under the share of the chosen score it must keep."""
    g = torch.Generator().manual_seed(4)
    rand = lambda *shape: torch.rand(shape, generator=g, dtype=torch.float64)
    stops = 0
    for i in range(4000):
        m, cap, k = i % 7, 2 + i % 23, 1 + i % 2
        p = (rand(m).sort(descending=True).values ** (0.2, 1, 2)[i % 3]).tolist()
        q = (p[-1] if m else 1.0) * (1.0 if i % 4 == 0 else float(rand(1)))
        parents = [int(rand(1) * (c + 1)) for c in range(m)]
        extra = 1 + i % 9
        full_p = p + [q * (1.0 if i % 3 else float(rand(1))) for _ in range(extra)]
        full_p[m:] = sorted(full_p[m:], reverse=True)
        full_parents = parents + [int(rand(1) * (m + c + 1)) for c in range(extra)]
        steps = (rand(cap) * (i % 5) * 0.2 * (rand(cap) < 0.6)).tolist()
        cost = [0.0] + [1.0 + sum(steps[1:r]) for r in range(1, cap + 1)]
        masks = [(j, float(rand(1)) * (i % 4) * 0.7) for j in range(1, k + 1)]
        probe = 0.9 if i % 2 else None
        if not grown_enough(p, q, masks, cost, 0.1, probe):
            continue
        stops += 1
        picks = []
        for j, value in masks:
            grown, whole = (choose(pp, par, j, value, cap, cost, margin=0.1) for pp, par in ((p, parents), (full_p, full_parents)))
            assert grown == whole, (i, j)
            picks.append(whole)
        if probe is not None:
            c = max(picks, key=Choice.score)
            j, value = masks[-1]
            grown, whole = (choose(pp, par, j, value, cap, cost, force_mask=True)
                            for pp, par in ((p, parents), (full_p, full_parents)))
            assert grown == whole or max(grown.score(), whole.score()) < probe * c.score(), i
    assert 500 < stops < 3500  # it stops often, and not always
    # Siblings' P need not sum to one (each is calibrated apart), so masks on two nodes may be worth more than the
    # root's: two further children of the root at 0.9 with masks worth 3 beat every choice without them.
    cost = [0.0, 1.0, 1.05, 1.3, 1.6, 2.0]
    assert choose([0.9, 0.9], [0, 0], 1, 3.0, 5, cost, margin=0.1).rows == 5
    assert not grown_enough([], 0.9, [(1, 3.0)], cost, 0.1)


# ---------------------------------------------------------------- merged tree

def _ctx(lm, prompt, step=0):
    return Context(lm=lm, tokens=list(prompt), n_prompt=len(prompt), sampling=Sampling(), step=step)


def _continuations_by_hand(text: list[int], max_n: int, draft: int, limit: int,
                           within: list[int] | None = None) -> list[tuple[int, list[int]]]:
    hay = text if within is None else within  # where the earlier occurrences are searched
    found = {}  # start of the continuation in `hay` -> longest suffix of `text` matched there
    for n in range(1, min(max_n, len(text) - (within is None)) + 1):
        for s in range(n, len(hay)):
            if hay[s - n : s] == text[len(text) - n :]:
                found[s] = n
    order = sorted(found, key=lambda s: (-found[s], -s))[:limit]
    return [(found[s], hay[s : s + draft]) for s in order]


def test_lookup_continuations_are_the_longest_and_most_recent_matches_at_every_length():
    """The hybrid's n-gram index, grown a few tokens at a time as the engine grows the text, against the
    search by hand over the whole text after every growth."""
    g = torch.Generator().manual_seed(0)
    for i in range(60):
        text = torch.randint(0, 2 + i % 4, (1 + i % 50 + 30,), generator=g).tolist()
        max_n, draft, limit = 1 + i % 8, 1 + i % 5, 1 + i % 6
        index, grown = NgramIndex(max_n), text[:1]
        while True:
            index.extend(grown)
            assert index.continuations(grown, draft, limit) == _continuations_by_hand(grown, max_n, draft, limit)
            if len(grown) == len(text):
                break
            grown.extend(text[len(grown) : len(grown) + 1 + i % 3])


def test_lookup_continuations_into_other_text_match_the_running_text_suffix():
    g = torch.Generator().manual_seed(1)
    for i in range(200):
        text = torch.randint(0, 2 + i % 4, (1 + i % 30,), generator=g).tolist()
        other = torch.randint(0, 2 + i % 4, (i % 40,), generator=g).tolist()
        max_n, draft, limit = 1 + i % 8, 1 + i % 5, 1 + i % 6
        index = NgramIndex(max_n)
        index.extend(other)
        assert index.continuations(text, draft, limit) == _continuations_by_hand(text, max_n, draft, limit, within=other)


def test_a_hot_drafters_history_searches_the_window_a_rebuilt_index_would():
    """The history indexed prompt by prompt (and compacted past twice its window) answers as an index built afresh
    over the last `size` tokens at every prompt, as a hot start built it before."""
    g = torch.Generator().manual_seed(2)
    for i in range(30):
        size, max_n = 5 + i % 20, 1 + i % 6
        history, kept = History(max_n, size), []
        for _ in range(12):
            prompt = torch.randint(0, 3 + i % 3, (int(torch.randint(0, 3 * size, (1,), generator=g)),), generator=g).tolist()
            history.add(prompt)
            kept = (kept + prompt)[-size:]
            assert len(history) == len(kept) and len(history.index.text) <= 2 * size
            fresh = NgramIndex(max_n)
            fresh.extend(kept)
            for suffix in (prompt[-4:], kept[-3:], [0, 1], [2]):
                assert history.continuations(suffix, 3, 2) == fresh.continuations(suffix, 3, 2)


def test_a_hot_drafters_copies_from_earlier_prompts_are_scored_apart(tiny_lm):
    lm = tiny_lm("llama")
    d = HybridDrafter(bc=16, sources=("lookup",), curve=FLAT, start="hot", prior="none")
    Decoder(lm, d, max_new_tokens=4, trace_mask=False).generate([5, 6, 7, 8, 9, 10, 11])
    prompt = [40, 41, 6, 7, 8]  # its suffix 6 7 8 occurs only in the earlier prompt
    ctx = _ctx(lm, prompt)
    d.start(ctx)
    (first,) = d.propose(ctx).plan.draft.cands[0]
    assert first.token == 9 and first.keys[1] == (("lookup",), (-3,))  # a 3-token match, into other text


def test_a_path_proposed_by_two_sources_is_one_node(tiny_lm):
    lm = tiny_lm("llama")
    prompt = [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6]
    d = HybridDrafter(bc=16, sources=("lookup", "table"), curve=FLAT)
    ctx = _ctx(lm, prompt)
    d.start(ctx)
    tree = d.propose(ctx).tree
    paths = {}
    for i in range(1, len(tree)):
        paths[i] = paths.get(tree.parents[i], ()) + (tree.tokens[i],)
    assert len(set(paths.values())) == len(paths)  # a trie: no path twice
    first = next(i for i in paths if paths[i] == (7,))  # both the copy and the prompt's n-grams say 7 next
    assert tree.sources[first] == ("lookup", "table")
    assert all(0 < tree.p[i] <= tree.p[tree.parents[i]] for i in range(1, len(tree)))


def test_fed_nodes_label_all_their_candidates(tiny_lm):
    lm = tiny_lm("llama")
    d = HybridDrafter(bc=12, curve=FLAT)
    run = Decoder(lm, d, max_new_tokens=12).generate(_prompt(1, lm.vocab_size))
    fed = sum(len(s.nodes) for s in run.steps)
    assert d.memory.calibrator.seen > fed  # several candidates per fed node, fed or not



def test_a_lookup_nodes_key_separates_a_continuing_copy_from_a_fresh_one(tiny_lm):
    """A lookup candidate's finest key says whether the last step's accepted path ended on a lookup node
    (the copy holding on), so the two learn apart while sharing every coarser key."""
    lm = tiny_lm("llama")
    marks = []

    class Spy(HybridDrafter):
        def propose(self, ctx):
            out = super().propose(ctx)
            marks.append({c.keys[4][-1] for cs in out.plan.draft.cands.values() for c in cs if LOOKUP in c.sources})
            return out

    d = Spy(bc=16, sources=("lookup",), curve=FLAT, prior="none")
    run = Decoder(lm, d, max_new_tokens=32).generate(_prompt(3, lm.vocab_size))
    held = [False]  # per step: did the previous step accept a path that ends on a lookup node?
    for s in run.steps[:-1]:
        ends = [n for n in s.nodes if n.status == ACCEPTED]
        held.append(bool(ends) and LOOKUP in max(ends, key=lambda n: n.depth).sources)
    assert all(m <= {h} for m, h in zip(marks, held))
    assert {True, False} <= {h for m, h in zip(marks, held) if m}  # both cases were drafted
    by = {LOOKUP: (4, 0)}
    cal = d.memory.calibrator
    _, chain, _ = calibrated(by, 2, cal, live=True)
    _, fresh, _ = calibrated(by, 2, cal, live=False)
    assert chain[:-1] == fresh[:-1] and chain[-1] != fresh[-1]
    cal.update(chain, 8, 8)
    cal.update(fresh, 0, 8)
    assert cal.p(chain) > 0.5 > cal.p(fresh)


def test_the_hybrid_labels_its_candidates_by_the_verifiers_choices(tiny_lm):
    """The labels are the verifier's (StepResult.choices), never a choice the hybrid makes itself: handed other
    choices (a rule under which every node's best candidate is right), it books exactly those."""
    lm = tiny_lm("llama")
    booked = []

    class Spy(HybridDrafter):
        def observe(self, ctx, res):
            draft, tree = res.proposal.plan.draft, res.proposal.tree
            if draft is None:
                return super().observe(ctx, res)
            choices = [cs[0].token if (cs := draft.cands.get(v)) else res.choices[v] for v in range(len(tree))]
            cal, got = self.memory.calibrator, []
            real = cal.update
            cal.update = lambda keys, accepted, seen=1: got.append(accepted) or real(keys, accepted, seen)
            try:
                notes = super().observe(ctx, replace(res, choices=choices))
            finally:
                del cal.update
            right = lambda said: sum(c.token == said[v] for v in range(len(tree)) for c in draft.cands.get(v, ()))
            booked.append((sum(got), right(choices), right(res.choices)))
            return notes

    prompt = _prompt(1, lm.vocab_size)
    run = Decoder(lm, Spy(bc=12, curve=FLAT), max_new_tokens=16).generate(prompt)
    assert run.tokens == Decoder(lm, max_new_tokens=16).generate(prompt).tokens
    assert booked and all(got == want for got, want, _ in booked)
    assert any(want != truth for _, want, truth in booked)  # the handed choices, not the hybrid's own


def test_the_hybrid_takes_each_rows_best_tokens_from_the_verifiers_read(tiny_lm, monkeypatch):
    """Greedy, the table's top tokens after every fed node come from the verifier's ranked read
    (StepResult.ranked), with no top-k of the drafter's own, and are the tokens and probabilities that ranking the
    softmax would give; without the read, the drafter ranks the rows itself."""
    import esp.drafters.hybrid as hybrid

    lm, seen = tiny_lm("llama"), []

    class Spy(HybridDrafter):
        def observe(self, ctx, res):
            seen.append(res)
            return super().observe(ctx, res)

    prompt = _prompt(1, lm.vocab_size)
    Decoder(lm, Spy(bc=12, curve=FLAT), max_new_tokens=12).generate(prompt)
    BatchDecoder(lm, [Spy(bc=12, curve=FLAT) for _ in range(2)], max_new_tokens=12).generate([prompt, _prompt(2, lm.vocab_size)])
    wide = [res for res in seen if len(res.node_logits) > 2]
    assert wide and all(res.ranked == top_rows(res.node_logits) for res in seen)  # alone and in a batch
    d = HybridDrafter(bc=12, curve=FLAT)
    for res in wide:
        itself = [x.clone() for x in d._top(replace(res, ranked=None), Sampling())]  # the buffer is reused
        probs, toks = torch.topk(torch.softmax(res.node_logits, -1), d.cfg.top, dim=-1)
        assert torch.equal(itself[0], toks) and torch.equal(itself[1], probs)
        with monkeypatch.context() as m:
            m.setattr(hybrid, "top_k", lambda *a: pytest.fail("ranked the block again"))
            got = d._top(res, Sampling())
        assert torch.equal(got[0], toks) and torch.equal(got[1], probs)


# ---------------------------------------------------------------- the engine with budgets

def test_one_head_call_covers_nodes_and_masks(tiny_lm):
    lm = tiny_lm("llama")
    seen = []

    class Spy(HybridDrafter):
        def observe(self, ctx, res):
            seen.append(res)
            calls = lm.head_calls
            notes = super().observe(ctx, res)
            assert lm.head_calls == calls  # the masks' logits came with the nodes' head call
            return notes

    Decoder(lm, Spy(bc=12, curve=FLAT), max_new_tokens=10).generate(_prompt(4, lm.vocab_size))
    masked = [r for r in seen if r.layout.size > r.layout.n_nodes]
    assert masked and all(r.forward.block_logits is not None and len(r.forward.block_logits) == r.layout.size for r in seen)
    for r in masked:
        rows = list(range(r.layout.size))
        assert torch.allclose(r.logits(rows, lm), lm.head(r.forward.hidden[rows]), atol=1e-6)
        assert torch.equal(r.node_logits, r.forward.block_logits[: r.layout.n_nodes])


def test_fixed_budget_fills_its_rows_and_traces_sources_p_and_cost(tiny_lm):
    lm = tiny_lm("llama")
    run = Decoder(lm, build("hybrid:bc=30"), max_new_tokens=24).generate(_prompt(2, lm.vocab_size))
    steps = run.steps[1:]
    widths = [len(s.positions) for s in steps]
    # The budget is filled whenever the sources have enough candidates (a random 96-token model's table
    # is often short of them, and without ESP drafts on a step nothing else ranks the whole vocabulary).
    assert max(widths) == 30 and sum(w == 30 for w in widths) >= 0.7 * len(widths), widths
    for s in run.steps:
        assert set(s.cost) == {"budget", "rows", "cap", "mode", "expected_tokens", "reliability", "predicted_s",
                               "measured_s", "curve", "drift", "backoff"}
        assert s.cost["rows"] == len(s.positions) and s.cost["budget"] == 30 and s.cost["measured_s"] > 0
        drafted = [n for n in s.nodes if n.status != "root"]
        assert all(n.sources and set(n.sources) <= {"esp", "lookup", "table"} and 0 < n.p <= 1 for n in drafted)
    assert {src for s in steps for n in s.nodes for src in n.sources} >= {"esp", "table"}


def test_auto_budget_follows_the_cost_curve(tiny_lm):
    lm = tiny_lm("llama")
    prompt = _prompt(3, lm.vocab_size)
    dear = CostCurve([1, 2, 128], [1.0, 100.0, 200.0])  # a second row costs 100 forwards: never worth it
    run = Decoder(lm, HybridDrafter(curve=dear), max_new_tokens=20).generate(prompt)
    steps = run.steps[1:]
    assert all("node" not in s.row_kinds for s in steps)  # no draft is worth a second row
    assert sum(len(s.positions) == 1 for s in steps) >= len(steps) * 3 // 4  # masks only on rare probes
    wide = Decoder(lm, HybridDrafter(curve=FLAT), max_new_tokens=20).generate(prompt)
    assert max(len(s.positions) for s in wide.steps[1:]) > 8  # free rows: it drafts wide


def test_a_calls_own_reliability_scales_its_p_under_the_auto_budget():
    """Under bc=auto, P is scaled by this call's accepted drafts over their sum of P, shrunk towards the drafter's
    reliability (CALL_TRUST); under a fixed budget by the drafter's alone. Both books take every label."""
    auto, fixed = HybridDrafter(), HybridDrafter(bc=12)
    for d in (auto, fixed):
        d.memory.reliability = [90.0, 100.0]
        assert d.gain == pytest.approx(0.9)  # nothing booked in this call yet: the drafter's
        d._trusted(0.0, 6.0)  # six tokens' worth of P fed, none accepted
        assert d.memory.reliability == [90.0, 106.0]
    assert auto.gain == pytest.approx((0 + CALL_TRUST * 90 / 106) / (6 + CALL_TRUST))
    assert fixed.gain == pytest.approx(90 / 106)
    auto._trusted(20.0, 6.0)  # then drafts that hold better than P said
    assert auto.gain == pytest.approx((20 + CALL_TRUST * 110 / 112) / (12 + CALL_TRUST)) and auto.gain > 1.0


def test_each_call_starts_from_the_drafters_reliability_and_scales_its_drafts_by_its_own(tiny_lm):
    """In the engine: every draft's P is its path probability times the gain of that moment, the call's books move
    it away from the drafter's, and a hot drafter's next prompt starts again from the drafter's (kept) reliability."""
    lm = tiny_lm("llama")
    seen = []

    class Spy(HybridDrafter):
        def _draft(self, ctx, cost=None):
            draft = super()._draft(ctx, cost)
            want = [min(x * self.gain, 1.0) for x in draft.tree.cum_probs[1:]]
            seen.append((draft.gain == self.gain, draft.p.tolist() == want, list(self.trust)))
            return draft

    d = Spy(curve=FLAT, start="hot")
    for seed in (1, 2):
        prompt = _prompt(seed, lm.vocab_size)
        run = Decoder(lm, d, max_new_tokens=24).generate(prompt)
        assert run.tokens == Decoder(lm, max_new_tokens=24).generate(prompt).tokens
        assert d.trust[1] > 0 and d.gain != pytest.approx(d.memory.gain)  # the call's own rate weighs
        if seed == 1:
            kept = list(d.memory.reliability)
    assert all(same and scaled for same, scaled, _ in seen)
    starts = [i for i, (*_, trust) in enumerate(seen) if trust == [0.0, 0.0]]
    assert len(starts) >= 2 and starts[0] == 0  # each prompt's first draft: nothing booked in the call
    assert d.memory.reliability[1] > kept[1]  # the drafter's books went on across the prompts


class _GrownBoth(HybridDrafter):
    """bc=auto that also grows every step's whole tree and checks that the candidates it grew choose alike."""

    steps = stopped = one_row_none = wide = 0

    def _held(self, ctx):  # no back-off resting the steps
        return False

    def _priced(self, ctx):  # the curve's prices alone
        return self.curve.table(self.cfg.cap, explore=True)

    def _width(self, ctx, draft, cost):
        c = super()._width(ctx, draft, cost)
        whole = self._draft(ctx)  # no cost table: every candidate grown, as before the stop
        w = super()._width(ctx, whole, cost)
        assert c == w, (ctx.step, c, w)
        n = c.n + 1
        assert draft.tree.tokens[:n] == whole.tree.tokens[:n] and draft.tree.parents[:n] == whole.tree.parents[:n]
        assert draft.p[: c.n].tolist() == whole.p[: c.n].tolist() and draft.cands[0] == whole.cands[0]
        type(self).steps += ctx.step > 0
        type(self).stopped += ctx.step > 0 and len(draft.p) < len(whole.p)
        type(self).one_row_none += ctx.step > 0 and c.rows == 1 and not len(draft.p) and len(whole.p) > 0
        type(self).wide += c.n > 0
        return c


@pytest.mark.parametrize("curve", [None, CostCurve([1, 2, 8, 64], [1.0, 1.1, 1.3, 3.0]),
                                   CostCurve([1, 2, 64], [1.0, 1.6, 4.0]), FLAT])
def test_the_auto_budget_grows_only_the_candidates_that_can_change_its_width(tiny_lm, curve):
    """Under bc=auto a step stops growing candidates once no width that a further one joins can win: every step
    (the machine's curve, cheap rows, dear rows, free rows; cold and hot) chooses the width and feeds the tree that
    the whole tree gives, and the stop is not idle (under dear rows, one-row steps that grow nothing)."""
    lm = tiny_lm("llama")
    _GrownBoth.steps = _GrownBoth.stopped = _GrownBoth.one_row_none = _GrownBoth.wide = 0
    for start in ("cold", "hot"):
        d = _GrownBoth(curve=curve, start=start)
        for seed in range(4):
            Decoder(lm, d, max_new_tokens=24, trace_mask=False).generate(_prompt(seed, lm.vocab_size))
    assert _GrownBoth.steps > 50 and _GrownBoth.wide > 0
    if curve is not FLAT:  # free rows: every candidate may join, so all are grown
        assert _GrownBoth.stopped > 0
    if curve is not None and curve.predict(2) > 1.5:  # dear rows: one-row steps that grow no candidate at all
        assert _GrownBoth.one_row_none > 0


def test_the_auto_budgets_prefill_feeds_the_masks_and_no_drafts(tiny_lm):
    """Free rows and a prompt that repeats itself: a fixed budget drafts at the prefill, bc=auto feeds the root's
    masks alone there (their drafts are the next step's) and drafts wide from the first decoding step on."""
    lm = tiny_lm("llama")
    prompt = _prompt(3, lm.vocab_size)
    auto = Decoder(lm, HybridDrafter(curve=FLAT), max_new_tokens=12).generate(prompt)
    fixed = Decoder(lm, HybridDrafter(bc=16, curve=FLAT), max_new_tokens=12).generate(prompt)
    assert auto.steps[0].prefill and auto.steps[0].row_kinds == ["root", "mask"]
    assert "node" in fixed.steps[0].row_kinds
    assert "node" in auto.steps[1].row_kinds and len(auto.steps[1].positions) > 8
    assert auto.tokens == fixed.tokens


@pytest.mark.parametrize("spec", ["hybrid:bc=auto", "esp:bc=auto", "stand:bc=auto", "hybrid:bc=60:k=2", "hybrid"])
def test_registry_builds_budgeted_drafters(spec):
    d = build(spec)
    assert isinstance(d, HybridDrafter) and d.name == spec.split(":")[0]


@pytest.mark.parametrize("spec, msg", [("hybrid:bc=wide", "an integer or 'auto'"), ("hybrid:k=9", "k (mask tokens)"),
                                       ("esp:bc=auto:tree=dynamic", "does not apply"), ("hybrid:bc=0", "BC must be")])
def test_bad_hybrid_settings_are_one_clear_line(spec, msg):
    with pytest.raises(ESPError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        build(spec)


@pytest.mark.model
def test_accepted_drafts_come_from_more_than_one_source_on_the_embedded_model(lm):
    q = next(q for q in spec_bench(1) if q["category"] == "extraction")  # copies and mask drafts both pay
    prompt = lm.chat_ids(q["turns"][0])
    sources = set()
    for spec in ("hybrid:bc=60", "hybrid:bc=auto"):
        run = Decoder(lm, build(spec), max_new_tokens=32).generate(prompt)
        sources |= {src for st in run.steps for n in st.nodes if n.status == ACCEPTED for src in n.sources}
    assert len(sources) >= 2, sources


def test_two_masks_compete_with_one(tiny_lm):
    """With k=2 the step may feed one or two masks per masked node, whichever adds more expected tokens:
    mask 2's drafts are fed only while they have added tokens."""
    lm = tiny_lm("llama")
    prompt = _prompt(5, lm.vocab_size)
    d = HybridDrafter(bc=16, k=2, curve=FLAT)
    ctx = _ctx(lm, prompt, step=1)
    d.start(ctx)
    d.memory.mask_value = [[40.0, 4.0], [0.0, 400.0]]  # mask 1's drafts have paid well, mask 2's never
    one = d.propose(ctx)
    d.memory.mask_value = [[40.0, 4.0], [40.0, 4.0]]  # both have
    two = d.propose(ctx)
    assert (one.k, len(one.mask_embeds)) == (1, 1) and one.masked
    assert (two.k, len(two.mask_embeds)) == (2, 2) and two.masked
    assert d.memory.mask_worth(1) == pytest.approx(10.0) and d.memory.mask_worth(2) == pytest.approx(20.0)


# ---------------------------------------------------------------- sources as a setting

@pytest.mark.parametrize("value, want", [("esp+lookup+table", ("esp", "lookup", "table")), ("lookup+table", ("lookup", "table")),
                                         ("table+ESP", ("esp", "table")), ("lookup", ("lookup",)), ("esp+esp", ("esp",))])
def test_sources_setting_parses_any_subset_and_describe_names_them(value, want):
    d = build(f"hybrid:bc=60:sources={value}")
    assert d.cfg.sources == want
    assert f"sources={'+'.join(want)}" in d.describe()
    assert (" k=" in d.describe()) == ("esp" in want)  # mask settings are shown only when masks are on
    assert build("hybrid").cfg.sources == ("esp", "lookup", "table")  # the default: every source


@pytest.mark.parametrize("value", ["foo", "", "esp+", "pool", "esp,lookup"])
def test_bad_sources_are_one_clear_line(value):
    with pytest.raises(ESPError, match=r"^hybrid: setting sources=.* must be some of esp, lookup, table joined by '\+'") as e:
        build(f"hybrid:sources={value}")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("mode", list(SAMPLERS))
def test_a_source_that_is_off_costs_nothing(tiny_lm, mode):
    lm = tiny_lm("llama")
    s = SAMPLERS[mode](1)
    prompt = _prompt(1, lm.vocab_size)
    no_esp = build("hybrid:bc=24:sources=lookup+table")
    run = Decoder(lm, no_esp, sampling=s, max_new_tokens=24).generate(prompt)
    assert all("mask" not in st.row_kinds for st in run.steps)  # no mask rows fed, so none computed
    assert no_esp.mask is None and no_esp.cfg.k == 0
    assert {src for st in run.steps for n in st.nodes for src in n.sources} <= {"lookup", "table"}
    no_table = build("hybrid:bc=24:sources=esp+lookup")
    run = Decoder(lm, no_table, sampling=s, max_new_tokens=24).generate(prompt)
    assert len(no_table.memory.table) == 0  # nothing harvested
    assert any("mask" in st.row_kinds for st in run.steps)
    assert "table" not in {src for st in run.steps for n in st.nodes for src in n.sources}

"""bc=auto's back-off (never slower than plain steps by more than a stated bound) and the cost curve's
noise smoothing, on fake cost curves and fake clocks: no wall-clock assertions (the curve's online
learning: tests/test_cost_online.py)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from esp.budget.batch import BatchWidth
from esp.budget.width import LOSS_BUDGET, LOSS_SHARE, LOSS_START, PLAIN_GAP, Backoff, choose
from esp.budget.cost import SHAPE_WEIGHT, CostCurve, smooth
from esp.decoding.batch import BatchDecoder
from esp.drafters.candidates import Draft
from esp.drafters.hybrid import HybridDrafter
from esp.decoding.engine import Decoder
from esp.decoding.tree import DraftTree

# A CPU-like fake machine: a second row costs half a plain step more, 64 rows four plain steps.
CURVE = ([1, 2, 64], [1.0, 1.5, 4.0])
DELTA = 0.5  # the least a drafted step that emits one token loses, in plain steps: min over r >= 2 of t(r)/t(1) - 1
PER_PROBE = math.floor(LOSS_BUDGET / DELTA) + 1  # the docstring's bound on drafted steps before a back-off


def probes_bound(n: int) -> float:
    """The docstring's bound on probes in n steps when drafting never pays."""
    return 1 + math.log2(1 + n / PLAIN_GAP)


# ---------------------------------------------------------------- the rule alone

def _run(b: Backoff, n: int, pays: bool, rows: int = 9) -> list[str]:
    """n steps on the fake machine: drafted steps of `rows` rows emit 1 token (never accepted) or 6."""
    curve, modes = CostCurve(*CURVE), []
    for _ in range(n):
        r = rows if b.drafting else 1
        modes.append("draft" if r > 1 else "plain")
        b.observe(r, (6 if pays else 1) if r > 1 else 1, curve.predict(r), curve.predict(1))
    return modes


def test_never_paying_drafts_back_off_with_doubling_gaps():
    b = Backoff()
    modes = _run(b, 300, pays=False)
    runs, cur = [], [modes[0], 0]  # (mode, length) of each stretch
    for m in modes:
        if m != cur[0]:
            runs.append(tuple(cur))
            cur = [m, 0]
        cur[1] += 1
    runs.append(tuple(cur))
    drafted = [n for m, n in runs if m == "draft"]
    gaps = [n for m, n in runs if m == "plain"]
    # 9 rows cost 0.78 plain steps more than the one token they bring: the loss budget (2) is passed on the 3rd.
    loss = CostCurve(*CURVE).predict(9) - 1
    assert drafted and all(n == math.floor(LOSS_BUDGET / loss) + 1 == 3 for n in drafted)
    assert gaps[:-1] == [PLAIN_GAP * 2**j for j in range(len(gaps) - 1)]  # 16, 32, 64, ...
    assert len(drafted) <= probes_bound(300)
    lost = sum(n for n in drafted) * (CostCurve(*CURVE).predict(9) - 1)  # seconds lost against plain steps
    c = CostCurve(*CURVE).predict(9)
    assert lost <= probes_bound(300) * (LOSS_BUDGET + c - 1)  # the stated regret bound, t1 = 1
    assert b.backoffs == len(drafted) and b.fails == len(drafted)


def test_drafts_that_pay_never_back_off_and_a_pass_resets_the_gap():
    b = Backoff()
    assert _run(b, 200, pays=True) == ["draft"] * 200 and b.backoffs == 0
    b = Backoff()
    _run(b, 3 + 16 + 3 + 32, pays=False)  # two failed probes and their gaps: the next gap would be 64
    assert b.fails == 2 and b.drafting
    _run(b, 1, pays=True)  # the probe gains 6 - 1.78 plain steps: passed
    assert b.fails == 0
    _run(b, 3, pays=False)
    assert b.left == PLAIN_GAP  # back to the shortest gap


def test_each_prompt_opens_with_a_probe_and_failures_carry_over():
    b = Backoff()
    _run(b, 3, pays=False)
    assert not b.drafting and b.left == PLAIN_GAP
    b.start()  # a new prompt: drafting is tried at once
    assert b.drafting
    _run(b, 3, pays=False)
    assert b.left == 2 * PLAIN_GAP  # but a failure there waits twice as long
    rates = b.state()
    assert rates["draft_rate"] == pytest.approx(1 / CostCurve(*CURVE).predict(9), abs=1e-3)  # rounded for the trace
    assert rates["draft_rate_all"] == rates["draft_rate"] and rates["fails"] == 2


def test_plain_step_time_is_measured_not_assumed():
    b = Backoff()
    b.observe(1, 1, 2.0, 1.0)  # the machine is slower than the curve said: plain steps take 2
    b.observe(4, 2, 3.0, 1.0)  # 2 tokens in 3 s beats 2 plain steps (4 s): a gain, not a loss
    assert b.t1 == 2.0 and b.loss == 0.0 and b.gain == pytest.approx(1.0)


def test_the_budget_and_the_backoff_together_end_at_plain_steps():
    """A fake cost curve and candidates whose P is always wrong (high, never accepted): the budget keeps
    choosing wide blocks; the back-off turns them into plain steps within PER_PROBE drafted steps."""
    curve, b = CostCurve(*CURVE), Backoff()
    p, parents = torch.tensor([0.9**d for d in range(1, 9)], dtype=torch.float64), list(range(8))
    widths = []
    for _ in range(100):
        rows = choose(p, parents, 0, 0.0, 64, curve.table(64), margin=0.1).rows if b.drafting else 1
        widths.append(rows)
        b.observe(rows, 1, curve.predict(rows), curve.predict(1))
    first_plain = widths.index(1)
    assert widths[0] > 1 and first_plain <= PER_PROBE
    assert sum(w > 1 for w in widths) <= PER_PROBE * probes_bound(100)


# ---------------------------------------------------------------- in the drafter, on a tiny model

class Scripted(HybridDrafter):
    """Proposes a chain of `depth` tokens with P 0.9 per node that never learns: the true continuation
    (drafts that pay) or a wrong token at every depth (P always wrong)."""

    def __init__(self, truth: list[int], n_prompt: int, right: bool, depth: int = 8, curve: CostCurve | None = None):
        super().__init__(sources=("lookup", "table"), curve=curve or CostCurve(*CURVE, rate=0.0))
        self.truth, self.n_prompt, self.right, self.depth = truth, n_prompt, right, depth
        self.fake = CostCurve(*CURVE)
        self.step_seconds = lambda res: self.fake.predict(res.layout.size)  # a fake clock: the fake curve's time
        self.host_seconds = lambda res: 0.0  # in which the drafter's own work takes no time

    def _draft(self, ctx, cost=None):
        done = len(ctx.tokens) - self.n_prompt
        want = self.truth[done : done + self.depth]
        toks = [t if self.right else (t + 1) % ctx.lm.vocab_size for t in want]
        cum = [0.9 ** (d + 1) for d in range(len(toks))]
        tree = DraftTree([ctx.tokens[-1], *toks], list(range(-1, len(toks))), [1.0] + [0.9] * len(toks),
                         [1.0, *cum], sources=[()] + [("lookup",)] * len(toks), p=[1.0, *cum])
        gain = self.memory.gain
        return Draft(tree=tree, p=np.minimum(np.asarray(cum) * gain, 1.0), cands={},
                     path_of={i: tuple(toks[:i]) for i in range(len(toks) + 1)}, gain=gain, esp_depths=None)

    def observe(self, ctx, res):
        notes = super().observe(ctx, res)
        self.memory.reliability = [4.0, 4.0]  # P stays what the script says, however wrong
        return notes

    def _costs(self, res, *args, learn=True):
        for rows, _ in res.forward.timed if learn else ():  # a curve that learns, learns the fake clock
            self.curve.observe(rows, self.fake.predict(rows))
        return super()._costs(res, *args, learn=False)


def _decode(lm, right: bool, n: int = 80, curve: CostCurve | None = None):
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    ar = Decoder(lm, max_new_tokens=n).generate(prompt)
    d = Scripted(ar.tokens, len(prompt), right, curve=curve)
    run = Decoder(lm, d, max_new_tokens=n).generate(prompt)
    assert run.tokens == ar.tokens  # lossless whatever the drafter does
    return d, run.steps[1:]


def test_a_drafter_whose_p_is_always_wrong_ends_at_plain_steps(tiny_lm):
    # long enough for the per-call cap (eps n + L0) to let the probe's losses pass the back-off's budget B
    d, steps = _decode(tiny_lm("llama"), right=False, n=int((LOSS_BUDGET + 0.5 - LOSS_START) / LOSS_SHARE))
    modes = [s.cost["mode"] for s in steps]
    widths = [s.cost["rows"] for s in steps]
    assert widths[0] > 1 and all(len(s.emitted) == 1 for s in steps)
    assert modes.index("plain") <= PER_PROBE  # backed off within the stated number of drafted steps
    assert all(w == 1 for w, m in zip(widths, modes) if m == "plain")
    assert sum(w > 1 for w in widths) <= PER_PROBE * probes_bound(len(steps))
    assert any(w > 1 for w in widths[modes.index("plain") :])  # it tried again (as the loss cap allowed)
    assert steps[-1].cost["backoff"]["backoffs"] >= 1
    plain = [s for s in steps if s.cost["mode"] == "plain"]
    assert all(len(s.nodes) == 1 for s in plain)  # no tree grown while backed off


def test_a_drafter_whose_drafts_pay_keeps_drafting(tiny_lm):
    d, steps = _decode(tiny_lm("llama"), right=True)
    assert all(s.cost["mode"] == "draft" and s.cost["rows"] > 1 for s in steps[:-1])
    assert d.memory.backoff.backoffs == 0 and sum(len(s.emitted) for s in steps) / len(steps) > 4
    state = steps[-1].cost["backoff"]
    assert state["draft_rate"] > 1 / CURVE[1][0]  # tokens per (fake) second beat a plain step's


def test_fixed_budgets_do_not_back_off(tiny_lm):
    lm = tiny_lm("llama")
    run = Decoder(lm, HybridDrafter(bc=12, curve=CostCurve(*CURVE)), max_new_tokens=16).generate([5, 6, 7, 5, 6, 7, 5])
    assert all(s.cost["mode"] == "draft" and s.cost["backoff"] is None for s in run.steps)


# ---------------------------------------------------------------- the per-call loss cap

def cap_bound(n: int, excess: float = 0.0) -> float:
    """The docstring's cap on a call's net loss after n steps, in plain steps: eps n + L0 + x."""
    return LOSS_SHARE * n + LOSS_START + excess


def _capped(n: int, tokens: int, host: float = 0.0) -> tuple[list[int], list[float]]:
    """n steps of a budget that always asks for the widest width the cap admits (P always optimistic) on the
    fake machine; drafted steps emit `tokens` and cost `host` more than the curve says. Each step's width and
    the call's loss so far against plain steps (t1 = 1)."""
    curve, b = CostCurve(*CURVE), Backoff()
    widths, losses, lost = [], [], 0.0
    for _ in range(n):
        ok = np.isfinite(b.affordable(curve.table(64)))
        rows = int(np.flatnonzero(ok)[-1]) if b.may_draft(curve.table(64)) else 1
        secs = curve.predict(rows) + (host if rows > 1 else 0.0)
        got = tokens if rows > 1 else 1
        b.observe(rows, got, secs, curve.predict(1))
        lost += secs - got
        widths.append(rows)
        losses.append(lost)
    return widths, losses


@pytest.mark.parametrize("host", [0.0, 0.2])
def test_the_cap_bounds_a_calls_loss_when_drafts_never_pay(host):
    widths, losses = _capped(300, tokens=1, host=host)
    t = CostCurve(*CURVE).table(64)
    assert widths[0] == max(r for r in range(65) if t[r] <= 1 + LOSS_START + LOSS_SHARE)  # what L0 + eps admits
    assert sum(w > 1 for w in widths[1:]) >= int(LOSS_SHARE * 300 / (DELTA + host))  # it keeps probing as eps refills
    # x: by how much a drafted step's loss exceeded the curve's worst case (here the host time)
    assert all(loss <= cap_bound(n + 1, host) + 1e-9 for n, loss in enumerate(losses))
    assert losses[-1] <= LOSS_SHARE * 300 + LOSS_START + host  # eps of a plain decode, plus L0


def fresh(t2: float = CURVE[1][1]) -> CostCurve:
    """The fake machine's curve (a second row at `t2` plain steps) as a shipped shape, the way a fresh machine starts:
    no samples at any knot, so the width choice reads it discounted for exploration (a fifth cheaper at first)."""
    return CostCurve(CURVE[0], [1.0, t2, CURVE[1][2]], weight=SHAPE_WEIGHT, scaled=False)


def test_the_cap_reads_worst_cases_from_the_curve_not_from_its_exploration_discount():
    curve, b = fresh(t2=1 + 1.1 * (LOSS_START + LOSS_SHARE)), Backoff()  # 2 rows just past what the first step affords
    curve.observe(1, 1.0)  # the level, and a first sample at the one-row anchor: wider knots still discounted
    explore, honest = curve.table(64, explore=True), curve.table(64)
    assert explore[2] / explore[1] - 1 <= b.room() < honest[2] / honest[1] - 1  # the discount would admit 2 rows
    assert np.isfinite(b.affordable(explore)[2])
    assert not b.may_draft(explore, honest) and np.isinf(b.affordable(explore, honest)[2:]).all()
    assert np.array_equal(b.affordable(explore, honest)[:2], explore[:2])  # what it admits is priced as the choice reads it


def test_on_a_fresh_curve_a_call_whose_drafts_never_pay_stays_within_the_cap_at_every_step(tiny_lm):
    d, steps = _decode(tiny_lm("llama"), right=False, n=120, curve=fresh())
    assert any(s.cost["rows"] > 1 for s in steps)  # it did probe
    assert all(_charged(steps[:n], 1.0) <= cap_bound(n) + 1e-9 for n in range(1, len(steps) + 1))


def test_under_the_cap_drafts_that_pay_keep_drafting_at_full_width():
    widths, losses = _capped(100, tokens=6)
    assert all(w > 1 for w in widths) and widths[1:] == [64] * 99  # gains fund every later step
    assert losses[-1] < -100  # and the call gains


def test_a_call_whose_first_probe_fails_can_probe_again_at_once():
    # Most of the allowance comes up front (L0): a first probe that fails (a copy that did not hold) leaves room for a
    # second as wide, instead of a wait of (t(r) / t(1) - 1) / eps steps for the allowance to refill.
    t, b = CostCurve(*CURVE).table(64), Backoff()
    assert np.isfinite(b.affordable(t)[2])
    b.observe(2, 1, t[2], t[1])  # the probe fails: one token for 1.5 plain steps
    assert np.isfinite(b.affordable(t)[2])  # the next step may probe as wide again
    b.observe(2, 1, t[2], t[1])
    assert not b.may_draft(t) and b.drafting  # a second failure spends it: the cap, not the back-off, stops the call


def test_the_drafter_s_own_work_on_a_one_row_step_it_grew_a_tree_for_is_a_loss():
    """Plain decoding's step is what the drafter's one-row step took less its own work; that work is booked against
    the cap where the drafter grew a tree (it chose to try), not where it was held to a plain step."""
    b = Backoff()
    b.observe(1, 1, 1.3, 1.0, host=0.3)  # grew a tree, fed one row: 0.3 of the step was the drafter's
    assert b.t1 == pytest.approx(1.0) and b.cap.net == pytest.approx(0.3)
    b.observe(1, 1, 1.1, 1.0, host=0.1, tried=False)  # held plain: its learning is outside the cap
    assert b.t1 == pytest.approx(1.0) and b.cap.net == pytest.approx(0.3)
    b.observe(4, 2, 3.0, 1.0, host=0.8)  # a drafted step's own work is in its seconds: 3 s for 2 tokens loses 1 step
    assert b.cap.net == pytest.approx(1.3)
    assert b.room() == pytest.approx(LOSS_SHARE * 4 + LOSS_START - 1.3)
    # so a call whose trees keep feeding one row at a fifth of a step each stops growing them once L0 is spent
    t, b, n = CostCurve(*CURVE).table(64), Backoff(), 0
    while b.may_draft(t) and n < 100:
        b.observe(1, 1, 1.2, 1.0, host=0.2)
        n += 1
    assert n == math.ceil((LOSS_START + LOSS_SHARE - DELTA) / (0.2 - LOSS_SHARE))


def test_the_hybrid_books_its_own_work_apart_from_the_forward(tiny_lm, monkeypatch):
    """What the back-off is handed each step: the step's seconds, the drafter's own part of them (never the forward),
    and whether it grew a tree."""
    booked, real = [], Backoff.observe

    def spy(self, rows, tokens, seconds, t1_hint, host=0.0, tried=True):
        booked.append((rows, seconds, host, tried))
        real(self, rows, tokens, seconds, t1_hint, host, tried)
    monkeypatch.setattr(Backoff, "observe", spy)
    run = Decoder(tiny_lm("llama"), HybridDrafter(curve=CostCurve(*CURVE)), max_new_tokens=40, timings=True)
    steps = run.generate([5, 6, 7, 5, 6, 7, 5, 6, 7]).steps[1:]
    assert len(booked) == len(steps) and {tried for *_, tried in booked} == {True, False}
    for (rows, seconds, host, tried), s in zip(booked, steps):
        assert rows == s.cost["rows"] and tried == (s.cost["mode"] != "plain")
        assert 0 < host < seconds - s.timings["forward"]


def test_a_backed_off_step_grows_no_tree_and_costs_a_plain_step(tiny_lm):
    d, steps = _decode(tiny_lm("llama"), right=False)
    plain = [s for s in steps if s.cost["mode"] == "plain"]
    assert plain and all(len(s.nodes) == 1 and s.cost["rows"] == 1 for s in plain)
    assert all(s.cost["backoff"] is not None and "room" in s.cost["backoff"] for s in steps)


def _charged(steps, plain: float) -> float:
    """What a run's steps cost on the fake clock against plain steps for the same tokens, in plain steps."""
    price = CostCurve(*CURVE)
    return sum(price.predict(s.cost["rows"]) - plain * len(s.emitted) for s in steps) / plain


def test_at_b1_a_call_whose_drafts_never_pay_stays_within_the_cap(tiny_lm):
    d, steps = _decode(tiny_lm("llama"), right=False, n=120)
    assert any(s.cost["rows"] > 1 for s in steps)  # it did probe
    assert _charged(steps, 1.0) <= cap_bound(len(steps))
    assert steps[-1].cost["backoff"]["net"] == pytest.approx(_charged(steps, 1.0), abs=0.01)


def test_at_b1_drafts_that_pay_are_not_throttled(tiny_lm):
    d, steps = _decode(tiny_lm("llama"), right=True)
    assert all(s.cost["rows"] > 1 for s in steps[:-1]) and _charged(steps, 1.0) < -len(steps)


class FakeClockWidth(BatchWidth):
    """The batch budget on a fake clock: a step costs the fake curve's price of the rows it fed."""

    def __init__(self):
        super().__init__()
        self.price, self.book = CostCurve(*CURVE), []  # per decoding step: (rows fed, tokens, seconds)

    def observe(self, width, fed, tokens, seconds, timed):
        secs = self.price.predict(self.batch * fed)
        if width is not None:
            self.book.append((self.batch * fed, sum(tokens), secs))
        super().observe(width, fed, tokens, secs, [(self.batch * fed, secs)] if width is not None else [])


def _batch(lm, right: bool, b: int = 8, n: int = 60, curve=lambda: None):
    prompts = [[3 + i, 1, 4, 1, 5, 9, 2, 6] for i in range(b)]
    truth = [Decoder(lm, max_new_tokens=n).generate(p).tokens for p in prompts]
    drafters = [Scripted(t, len(p), right, curve=curve()) for t, p in zip(truth, prompts)]
    planner = FakeClockWidth()
    got = BatchDecoder(lm, drafters, max_new_tokens=n, planner=planner).generate(prompts)
    assert [g.tokens for g in got] == truth  # lossless, every row
    return planner


@pytest.mark.parametrize("curve", [lambda: None, fresh], ids=["stored", "fresh"])
def test_at_b8_a_batch_whose_drafts_never_pay_stays_within_the_cap(tiny_lm, curve):
    planner = _batch(tiny_lm("llama"), right=False, curve=curve)
    t1 = planner.price.predict(8)  # a plain step of the batch: 8 rows
    assert all(tokens == 8 for _, tokens, _ in planner.book)  # one token per row per step: nothing accepted
    assert any(rows > 8 for rows, _, _ in planner.book)  # it did probe
    lost = 0.0
    for n, (rows, tokens, secs) in enumerate(planner.book, 1):
        lost += (secs - tokens / 8 * t1) / t1
        assert lost <= cap_bound(n) + 1e-9


def test_at_b8_drafts_that_pay_are_not_throttled(tiny_lm):
    planner = _batch(tiny_lm("llama"), right=True)
    steps = planner.book
    assert sum(rows > 8 for rows, _, _ in steps) >= len(steps) - 1 and sum(t for _, t, _ in steps) / len(steps) > 8 * 3


# ---------------------------------------------------------------- smoothing

def test_smoothing_pools_noise_and_keeps_the_kernel_switch():
    # SmolLM2's measured shape (ms): 2-3 rows dearer than 4-8 (the BLAS kernel switch), then small wobbles.
    t = [38.9, 61.3, 76.7, 59.6, 53.0, 57.3, 57.2, 63.5, 63.0, 68.4]
    s = [1.0] * len(t)
    out = smooth(t, s)
    assert out[:5] == t[:5]  # falls of 17 and 7 ms against 2 ms of noise: real, kept
    assert out[5] == out[6] == pytest.approx(57.25) and out[7] == out[8] == pytest.approx(63.25)
    assert out[9] == t[9]
    assert smooth(t, [10.0] * len(t)) == sorted(smooth(t, [10.0] * len(t)))  # all noise: monotone
    assert sum(smooth(t, [10.0] * len(t))) == pytest.approx(sum(t))  # pooling keeps the mean
    assert smooth([1.0, 3.0, 2.0, 2.5], [0.0] * 4) == [1.0, 3.0, 2.0, 2.5]  # no noise measured: as measured

"""bc=auto's back-off (never slower than plain steps by more than a stated bound) and the cost curve's
noise smoothing, on fake cost curves and fake clocks: no wall-clock assertions (the curve's online
learning: tests/test_cost_online.py)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from esp.budget.width import LOSS_BUDGET, PLAIN_GAP, Backoff, choose
from esp.budget.cost import CostCurve, smooth
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

    def __init__(self, truth: list[int], n_prompt: int, right: bool, depth: int = 8):
        super().__init__(sources=("lookup", "table"), curve=CostCurve(*CURVE, rate=0.0))
        self.truth, self.n_prompt, self.right, self.depth = truth, n_prompt, right, depth
        fake = CostCurve(*CURVE)
        self.step_seconds = lambda res: fake.predict(res.layout.size)  # a fake clock: the fake curve's time

    def _draft(self, ctx):
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


def _decode(lm, right: bool, n: int = 80):
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    ar = Decoder(lm, max_new_tokens=n).generate(prompt)
    d = Scripted(ar.tokens, len(prompt), right)
    run = Decoder(lm, d, max_new_tokens=n).generate(prompt)
    assert run.tokens == ar.tokens  # lossless whatever the drafter does
    return d, run.steps[1:]


def test_a_drafter_whose_p_is_always_wrong_ends_at_plain_steps(tiny_lm):
    d, steps = _decode(tiny_lm("llama"), right=False)
    modes = [s.cost["mode"] for s in steps]
    widths = [s.cost["rows"] for s in steps]
    assert widths[0] > 1 and all(len(s.emitted) == 1 for s in steps)
    assert modes.index("plain") <= PER_PROBE  # backed off within the stated number of drafted steps
    assert all(w == 1 for w, m in zip(widths, modes) if m == "plain")
    assert sum(w > 1 for w in widths) <= PER_PROBE * probes_bound(len(steps))
    assert steps[-1].cost["backoff"]["backoffs"] >= 2  # it tried again, and backed off again
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

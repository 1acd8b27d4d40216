"""Many prompts at once (issue 28): prompts of different lengths decoded in one forward per step, through
esp.decode and through custom_generate, on the embedded model loaded the ordinary transformers way: batches of
one and of eight, padded tokenizer output, a row that ends leaves the batch at once, prompts beyond the batch
size join as rows end, unlike lengths are prefilled apart; the batch budget falls back to plain rows where
drafting does not pay; and a streamer through model.generate hears what generate() would tell it. Every
method's rows against each prompt decoded alone, on every architecture and sampler: tests/test_lossless_matrix.py."""
from __future__ import annotations

import json
import threading

import numpy as np
import pytest
import torch
from transformers import TextIteratorStreamer

import esp
from conftest import ARCHS, ROOT
from esp.budget.cost import CostCurve, padded
from esp.budget.batch import BatchPadding, BatchWidth, Budgeted
from esp.budget.width import LOSS_SHARE, LOSS_START, by_rows, choose
from esp.decoding.batch import BatchDecoder, LiveBatch
from esp.decoding.drafter import Budget, Context, Offer
from esp.decoding.engine import Decoder
from esp.errors import ESPError
from esp.methods import build, build_batch

# Held out: none of these is a Spec-Bench question; lengths differ so that rows' caches differ.
PROMPTS = ["Hi!",
           "Translate to German: The weather is nice today and we are going to the lake.",
           "Write a Python function that returns the n-th Fibonacci number, with a docstring and a test.",
           "A train travels 120 km in 1.5 hours. What is its average speed? Explain briefly.",
           "List three facts about the Moon.",
           "Summarise in one sentence: the committee met on Tuesday, discussed the budget for the new library, "
           "heard from residents about parking, and agreed to meet again next month.",
           "What is 17 times 23?",
           "Name a colour."]
N = 24


def _ids(tok, prompt: str) -> list[int]:
    enc = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                  return_tensors="pt", return_dict=True)
    return enc["input_ids"][0].tolist()


@pytest.fixture(scope="module")
def alone(hf):
    """Each prompt's ids and what plain greedy generate() gives it alone (new tokens, up to its EOS)."""
    model, tok = hf
    out = []
    for prompt in PROMPTS:
        ids = _ids(tok, prompt)
        new = model.generate(torch.tensor([ids]), max_new_tokens=N, do_sample=False)[0, len(ids):].tolist()
        eos = set(model.generation_config.eos_token_id if isinstance(model.generation_config.eos_token_id, list)
                  else [model.generation_config.eos_token_id])
        end = next((i + 1 for i, t in enumerate(new) if t in eos), len(new))
        out.append((ids, new[:end]))
    return out


@pytest.mark.model
@pytest.mark.parametrize("method", ["ar", "hybrid:bc=auto", "pld"])
def test_batches_of_one_and_eight(hf, alone, method):
    model, tok = hf
    got = esp.decode(model, tok, PROMPTS, method=method, max_new_tokens=N)  # str prompts: the chat template
    assert [r.tokens for r in got] == [ref for _, ref in alone]
    one = esp.decode(model, tok, [PROMPTS[3]], method=method, max_new_tokens=N)
    assert len(one) == 1 and one[0].tokens == alone[3][1]


@pytest.mark.model
def test_a_padded_tokenizer_output_is_a_batch(hf, alone):
    """esp.decode takes padding on either side (it strips each row by its mask); model.generate only the left."""
    model, tok = hf
    rows = alone[:3]
    n = max(len(ids) for ids, _ in rows)
    enc = {"input_ids": torch.tensor([ids + [0] * (n - len(ids)) for ids, _ in rows]),
           "attention_mask": torch.tensor([[1] * len(ids) + [0] * (n - len(ids)) for ids, _ in rows])}
    got = esp.decode(model, tok, enc, method="hybrid:bc=auto", max_new_tokens=N)
    assert [r.tokens for r in got] == [ref for _, ref in rows]


@pytest.mark.model
@pytest.mark.parametrize("method", ["esp", "hybrid:bc=auto", "pld"])
def test_model_generate_takes_a_left_padded_batch_laid_out_as_generate_lays_it_out(hf, alone, method):
    model, tok = hf
    rows = alone[:4]
    pad = tok.pad_token_id
    n = max(len(ids) for ids, _ in rows)
    ids = torch.tensor([[pad] * (n - len(i)) + i for i, _ in rows])
    mask = torch.tensor([[0] * (n - len(i)) + [1] * len(i) for i, _ in rows])
    out = model.generate(ids, attention_mask=mask, custom_generate=str(ROOT), trust_remote_code=True, method=method,
                         max_new_tokens=N)
    width = max(len(ref) for _, ref in rows)
    assert out.shape == (len(rows), n + width)
    for row, (_, ref) in zip(out.tolist(), rows):
        assert row[n:] == ref + [pad] * (width - len(ref))  # pad_token_id after a row's EOS, as generate() writes
    assert torch.equal(out[:, :n], ids)  # the left padding kept
    plain = model.generate(ids, attention_mask=mask, max_new_tokens=N, do_sample=False)
    assert plain.shape == out.shape and torch.equal(plain[:, :n], out[:, :n])


@pytest.mark.model
def test_what_a_batch_cannot_take_is_refused_with_one_line(hf, alone):
    model, tok = hf
    a, b = alone[0][0], alone[1][0]
    n = max(len(a), len(b))
    ids = torch.tensor([a + [0] * (n - len(a)), b + [0] * (n - len(b))])
    right = torch.tensor([[1] * len(a) + [0] * (n - len(a)), [1] * len(b) + [0] * (n - len(b))])
    cases = [(dict(attention_mask=right), "padded on the right"),
             (dict(streamer=TextIteratorStreamer(tok)), "batch size 1")]
    hole = torch.ones_like(ids)
    hole[1, n // 2] = 0
    cases.append((dict(attention_mask=hole), "padding inside the prompt"))
    for kw, needle in cases:
        with pytest.raises(ESPError) as e:
            model.generate(ids, custom_generate=str(ROOT), trust_remote_code=True, max_new_tokens=4, **kw)
        assert needle in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ESPError, match="padding inside the prompt"):
        esp.decode(model, tok, {"input_ids": ids, "attention_mask": hole}, max_new_tokens=4)


@pytest.mark.model
def test_a_row_that_ends_leaves_the_batch_at_once(hf, alone, monkeypatch):
    """Row 0 ends early (the run's EOS set to one of its tokens that no other row writes); from the next
    forward on, the batch holds one row fewer, while the others go on to their own ends with their own tokens."""
    model, tok = hf
    rows = alone[1:5]
    first, others = rows[0][1], {t for _, ref in rows[1:] for t in ref}
    cut = next(k for k in range(2, len(first)) if first[k] not in others and first[k] not in first[:k])
    stop = first[cut]  # only row 0 stops early, on its token `cut`
    sizes = []
    real = esp.models.lm.LM.forward

    def spy(self, embeds, *args, **kw):
        sizes.append(embeds.shape[0] if embeds.dim() == 3 else 1)
        return real(self, embeds, *args, **kw)

    monkeypatch.setattr(esp.models.lm.LM, "forward", spy)
    steps = list(esp.stream(model, tok, [ids for ids, _ in rows], method="ar", max_new_tokens=N, eos_token_id=stop))
    mine = [t for i, t in steps if i == 0]
    assert [x for t in mine for x in t.emitted] == rows[0][1][: cut + 1]
    assert sizes[: len(mine)] == [4] * len(mine) and sizes[len(mine)] == 3
    for j, (_, ref) in enumerate(rows[1:], 1):
        assert [x for i, t in steps if i == j for x in t.emitted] == ref


@pytest.mark.model
def test_a_streamer_hears_the_prompt_then_each_token_then_end(hf, alone):
    model, tok = hf
    ids, ref = alone[2]
    calls = []

    class Recorder:
        def put(self, value):
            calls.append(("put", value.tolist()))

        def end(self):
            calls.append(("end", None))

    out = model.generate(torch.tensor([ids]), custom_generate=str(ROOT), trust_remote_code=True,
                         method="hybrid:bc=auto", max_new_tokens=N, streamer=Recorder())
    assert out[0, len(ids):].tolist() == ref
    assert calls[0] == ("put", [ids]) and calls[-1] == ("end", None)
    assert [v for kind, v in calls[1:-1]] == [[t] for t in ref]  # one put per new token, in order, EOS included
    for prompt_ids, greedy in alone[1:4]:
        streamer = TextIteratorStreamer(tok, skip_prompt=True)
        box = {}
        worker = threading.Thread(target=lambda: box.update(out=model.generate(
            torch.tensor([prompt_ids]), custom_generate=str(ROOT), trust_remote_code=True, method="hybrid:bc=auto",
            max_new_tokens=N, streamer=streamer)))
        worker.start()
        text = "".join(streamer)  # read here while generate runs in the other thread; ends with the run
        worker.join(timeout=120)
        assert text == tok.decode(greedy)  # the EOS's text included, as generate()'s streamer shows it
        assert box["out"][0, len(prompt_ids):].tolist() == greedy


class _Offers:
    """A stand-in row for BatchWidth: offers fixed expected tokens per width and shares one curve."""

    def __init__(self, offer: np.ndarray, curve: CostCurve):
        self.curve, self._offer, self.asked = curve, offer, 0

    def offer(self, ctx) -> Offer:
        self.asked += 1
        return Offer(tokens=self._offer)


def _ctx(step: int) -> Context:
    return Context(lm=None, tokens=[1], n_prompt=1, sampling=esp.Sampling(), step=step, batched=True)


def _width(planner: BatchWidth, rows: list, step: int, refill: bool = False) -> int | None:
    """The one width `planner` gives every row of the batch `rows` at `step` (None: each row its own), checking
    that each row's budget hands back that row's own offer."""
    budgets = planner.plan(rows, [_ctx(step)] * len(rows), refill)
    if budgets is None:
        return None
    assert len({b.rows for b in budgets}) == 1 and all(b.offer is None or b.offer.tokens is r._offer for b, r in zip(budgets, rows))
    return budgets[0].rows


def test_the_batch_budget_prices_the_whole_block_and_falls_back_to_plain_rows():
    good = by_rows([0.9, 0.8, 0.7, 0.6], [0, 1, 2, 3], 0, 0.0, 8)  # a confident chain: 1 + 3.0 tokens at 5 rows
    assert good[1] == 1.0 and good[5] == pytest.approx(4.0) and np.all(np.diff(good[1:]) >= 0)
    assert good[5] == pytest.approx(choose([0.9, 0.8, 0.7, 0.6], [0, 1, 2, 3], 0, 0.0, 5).expected)
    flat = CostCurve([1, 256], [1.0, 1.2])  # wide blocks nearly free: draft
    steep = CostCurve([1, 256], [1.0, 256.0])  # every row costs a plain step: never draft
    wide = BatchWidth()
    assert isinstance(_Offers(good, flat), Budgeted)  # what a batch budget needs of a drafter, and nothing else
    assert _width(wide, [_Offers(good, flat)] * 4, 0) is None  # the prefill: each row its own
    assert _width(wide, [_Offers(good, flat)] * 4, 1) > 1
    assert _width(BatchWidth(), [_Offers(good, steep)] * 4, 1) == 1
    # Drafted steps that bring nothing: the batch falls back to plain rows and stops asking for offers (its
    # per-call loss cap: before the k-th drafted step the batch has booked 3 + k steps and lost k plain steps, so it
    # drafts while k <= L0 + eps (4 + k); the widths' worst cases on this flat curve are nearly nothing).
    row = _Offers(good, flat)
    for _ in range(3):
        wide.observe(1, fed=1, tokens=[1] * 4, seconds=1.0, timed=[])  # plain steps: a second each
    drafted = 0
    while (w := _width(wide, [row] * 4, 5)) > 1 and drafted < 20:
        wide.observe(w, fed=w, tokens=[1] * 4, seconds=2.0, timed=[])  # 4 rows, one token each, at twice a plain step's time
        drafted += 1
    asked = row.asked
    assert drafted - 1 <= LOSS_START + LOSS_SHARE * (3 + drafted) < drafted  # the last one fitted, the next would not
    assert wide.backoff.cap.net == pytest.approx(drafted)
    assert _width(wide, [row] * 4, 6) == 1 and row.asked == asked


@pytest.mark.model
def test_the_bench_runs_the_questions_b_at_a_time_beside_batched_generate(tmp_path, lm, capsys):
    from conftest import QUESTIONS
    import esp.bench.run as bench

    ids = [json.loads(line)["question_id"] for line in QUESTIONS.read_text().splitlines()[:3]]
    out = tmp_path / "batch.json"
    bench.main(["--questions", str(QUESTIONS), "--ids", ",".join(map(str, ids)), "--methods", "hybrid:bc=auto",
                "--batch", "2", "--max-new-tokens", "8", "--dtype", "float32", "--json", str(out)])
    printed = capsys.readouterr().out
    assert "| 2 | generate() |" in printed and "| 2 | hybrid:bc=auto |" in printed and "| 2 | ar |" in printed
    data = json.loads(out.read_text())
    (run,) = data["runs"]
    assert "--batch 2" in data["meta"]["provenance"]["command"] and data["meta"]["provenance"]["machine"]["cpu"]
    assert run["generate()"]["per_prompt"] == run["ar"]["per_prompt"] == run["hybrid:bc=auto"]["per_prompt"]
    assert len(run["ar"]["per_prompt"]) == 3 and run["ar"]["batch"] == 2 and run["ar"]["tokens_per_s"] > 0
    bench.main(["--questions", str(QUESTIONS), "--ids", ",".join(map(str, ids)), "--methods", "hybrid:bc=auto",
                "--batch", "2", "--static", "--rounds", "1", "--max-new-tokens", "8", "--dtype", "float32",
                "--json", str(out)])
    data = json.loads(out.read_text())
    (static,) = data["runs"]
    assert data["meta"]["static"] and static["hybrid:bc=auto"]["per_prompt"] == run["generate()"]["per_prompt"]


def test_a_static_batch_is_worth_its_least_served_row_and_a_refilled_one_its_sum():
    """Eight rows, one copying its prompt (five tokens at two rows a sequence) and seven that nothing helps. With
    prompts waiting, the copying row's early end frees its place: draft. Without, the batch lasts as long as the
    seven: plain rows; and a drafted step is booked at its least-served row's tokens, not the mean."""
    curve = CostCurve([1, 256], [1.0, 4.0])
    copying = _Offers(np.array([0.0, 1.0, 5.0, 6.0, 7.0]), curve)
    stuck = _Offers(np.array([0.0, 1.0, 1.0, 1.0, 1.0]), curve)
    rows = [copying] + [stuck] * 7
    assert _width(BatchWidth(), rows, 1, refill=True) > 1
    assert _width(BatchWidth(), rows, 1, refill=False) == 1
    static, refilled = BatchWidth(), BatchWidth()
    for planner, refill in ((static, False), (refilled, True)):
        _width(planner, rows, 1, refill)
        planner.observe(1, fed=1, tokens=[1] * 8, seconds=1.0, timed=[])
        planner.observe(2, fed=2, tokens=[5] + [1] * 7, seconds=1.2, timed=[])
    assert static.backoff.cap.net == pytest.approx(0.2)  # 1.2 plain steps' time for one token a row
    assert refilled.backoff.cap.net == pytest.approx(1.2 - 12 / 8)


def test_where_one_row_is_best_the_batch_asks_for_offers_ever_more_rarely():
    flat = CostCurve([1, 256], [1.0, 1.2])  # wider steps are affordable, but the offers are worth less than a row
    row = _Offers(by_rows([0.01, 0.01], [0, 1], 0, 0.0, 8), flat)
    wide = BatchWidth()
    asked_at = []
    for step in range(1, 40):
        before = row.asked
        assert _width(wide, [row] * 4, step) == 1
        if row.asked > before:
            asked_at.append(step)
        wide.observe(1, fed=1, tokens=[1] * 4, seconds=1.0, timed=[])
    assert asked_at[:5] == [1, 3, 6, 11, 20]  # waits of 1, 2, 4, 8 plain steps, then at most REST_MAX
    assert all(b - a <= BatchWidth.REST_MAX + 1 for a, b in zip(asked_at, asked_at[1:]))


class _FourRows:
    """A new batch budget, written against the drafter interface alone (esp.budget.batch.Budgeted): four rows
    per sequence after the prefill, each row filling them from its own offer."""

    def plan(self, drafters, ctxs, refill=False):
        return None if ctxs[0].step == 0 else [Budget(rows=4, offer=d.offer(c)) for d, c in zip(drafters, ctxs)]

    def rows(self, batch: int, q: int) -> int:
        return q

    def observe(self, width, fed, tokens, seconds, timed) -> None:
        pass


def test_a_new_batch_budget_needs_only_the_drafter_interface(tiny_lm):
    lm = tiny_lm("llama")
    prompts = [[5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6], [11, 12, 13, 11, 12, 13, 11], [21, 22, 23, 24, 21, 22]]
    alone = [Decoder(lm, max_new_tokens=24).generate(p).tokens for p in prompts]
    rows = [build("hybrid:bc=auto") for _ in prompts]
    assert all(isinstance(d, Budgeted) for d in rows)
    got = BatchDecoder(lm, rows, max_new_tokens=24, planner=_FourRows()).generate(prompts)
    assert [g.tokens for g in got] == alone
    widths = [len(s.positions) for g in got for s in g.steps if not s.prefill]
    assert max(widths) == 4 and min(widths) >= 1  # the budget's width, filled from each row's offer


def test_padding_picks_a_wider_forward_only_where_it_costs_less():
    # rows per sequence 1..4 at B=3 on an AVX512 CPU's curve: 3 rows cost 1.9, 6 rows 1.45
    assert padded([1.9, 1.45, 1.55, 1.65]).tolist() == [2, 2, 3, 4]
    assert padded([1.0, 1.2, 1.3, 1.4]).tolist() == [1, 2, 3, 4]  # a rising curve: never
    assert padded([1.0, 0.97]).tolist() == [1, 2]  # 3% cheaper: within PAD_GAIN, not worth rows nobody reads
    assert padded([2.0, 1.9, 1.9, 1.9, 1.9, 1.0]).tolist()[:2] == [1, 6]  # a width reaches at most 2 q + 2
    # only from measured widths, to measured ones: a prior's dip this machine may lack pads nothing
    assert padded([1.9, 1.45, 1.55, 1.65], [False, True, True, True]).tolist() == [1, 2, 3, 4]
    assert padded([1.9, 1.45, 1.55, 1.65], [True, False, True, True]).tolist() == [3, 2, 3, 4]
    # ... or to one hoped cheaper (the curve's exploration price), from a measured width only
    hoped = [1.9, 1.3, 1.55, 1.65]
    assert padded([1.9, 1.45, 1.55, 1.65], [True, False, True, True], hoped).tolist() == [2, 2, 3, 4]
    assert padded([1.9, 1.45, 1.55, 1.65], [False, False, True, True], hoped).tolist() == [1, 2, 3, 4]


def test_a_width_is_hoped_for_at_most_explore_n_forwards_of_its_rows():
    """A hope the curve cannot lose (9 rows between two cheap knots, a kernel's cliff the piecewise-linear curve
    does not see; here a curve that learns nothing) pads three rows to nine at most EXPLORE_N times, then not."""
    from esp.budget.cost import EXPLORE_N, GRID

    t = {1: 1.0, 2: 1.3, 3: 1.9, 4: 1.4, 5: 2.4, 6: 2.5, 8: 1.0, 10: 1.0, 12: 3.0}
    planner = BatchPadding()
    planner.curve = CostCurve(list(GRID), [t.get(q, 3.0 + q / 10) for q in GRID], rate=0.0,
                              n=[4.0 if q <= 4 else 0.0 for q in GRID])
    fed = []
    for _ in range(6):
        fed.append(planner.rows(3, 1))
        planner.observe(1, fed[-1], [1, 1, 1], 2.5, [(3 * fed[-1], 2.5)])
    assert fed == [3] * int(EXPLORE_N) + [1] * (6 - int(EXPLORE_N)), fed


def test_a_plain_batch_on_a_shipped_shape_unlike_its_machine_learns_to_feed_one_row_per_sequence(tiny_lm,
                                                                                                   monkeypatch):
    """Two `ar` rows on the AMD AVX512 shape, where two rows a sequence look cheaper than one, on a machine where
    they cost 1.7 times as much (an Intel CPU's): one row a sequence is fed until it is measured, padding is tried
    at most twice on the shape's word, measured dearer, and dropped (padding on the prior alone, from an unmeasured
    width, once fed two rows each for good: 1.6x a plain step)."""
    from types import SimpleNamespace

    import esp.decoding.timer as timer
    from esp.budget import cost

    lm = tiny_lm("llama")
    planner = BatchPadding()
    planner.curve = CostCurve(list(cost.GRID), list(cost.SHAPES["cpu-float32-avx512"]), weight=cost.SHAPE_WEIGHT,
                              scaled=False)
    clock = SimpleNamespace(now=0.0)
    monkeypatch.setattr(timer, "time", SimpleNamespace(perf_counter=lambda: clock.now))
    prompts = [[5, 6, 7, 8, 9], [11, 12, 13]]
    alone = [Decoder(lm, max_new_tokens=24).generate(p).tokens for p in prompts]
    fed = []
    forward = lm.forward

    def timed(embeds, *a, **k):
        fed.append(tuple(embeds.shape[:2]))
        clock.now += 0.05 * (1.0 if embeds.shape[1] == 1 else 1.7)
        return forward(embeds, *a, **k)

    monkeypatch.setattr(lm, "forward", timed)
    got = BatchDecoder(lm, [build("ar") for _ in prompts], max_new_tokens=24, planner=planner).generate(prompts)
    assert [g.tokens for g in got] == alone
    assert fed[0] == (2, 5) and fed[1:3] == [(2, 1)] * 2, fed  # the prefill, then one row each until measured
    assert fed.count((2, 2)) <= 2 and fed[-12:] == [(2, 1)] * 12, fed


def test_a_static_batch_whose_rows_end_early_learns_to_pad_past_a_dip_its_prior_lacks(tiny_lm, monkeypatch):
    """Four prompts, one ending early, on a machine where three rows cost more than six (an AMD CPU's float32
    kernels) and a prior without that dip (the AVX2 shape): the three left are fed one row each until measured, then
    two rows each (hoped cheaper, measured cheaper), and keep their tokens. Batched generate() keeps its finished
    rows in the forward for that reason alone; a batch that could not learn this ran dearer than it."""
    from types import SimpleNamespace

    import esp.decoding.timer as timer
    from esp.budget import cost

    lm = tiny_lm("llama")
    planner = BatchPadding()
    planner.curve = CostCurve(list(cost.GRID), list(cost.SHAPES["cpu-float32"]), weight=cost.SHAPE_WEIGHT,
                              scaled=False)
    machine = CostCurve([1, 2, 3, 4, 6, 8, 12, 16], [1.0, 1.5, 1.9, 1.4, 1.45, 1.45, 1.7, 1.9], rate=0.0)
    clock = SimpleNamespace(now=0.0)
    monkeypatch.setattr(timer, "time", SimpleNamespace(perf_counter=lambda: clock.now))
    fed = []
    forward = lm.forward

    def timed(embeds, *a, **k):
        fed.append(tuple(embeds.shape[:2]))
        clock.now += 0.05 * machine.predict(embeds.shape[0] * embeds.shape[1])
        return forward(embeds, *a, **k)

    prompts = [[5, 6, 7, 8, 9], [11, 12, 13], [21, 22, 23, 24], [31, 32]]
    limits = [24, 4, 24, 24]
    alone = [Decoder(lm, max_new_tokens=n).generate(p).tokens for p, n in zip(prompts, limits)]
    monkeypatch.setattr(lm, "forward", timed)
    decs = BatchDecoder(lm, [build("ar") for _ in prompts], max_new_tokens=24, planner=planner)
    decs.rows[1].max_new_tokens = 4
    got = decs.generate(prompts)
    assert [g.tokens for g in got] == alone
    three = [f for f in fed if f[0] == 3]
    assert three[:2] == [(3, 1)] * 2 and three.count((3, 2)) >= len(three) // 2 and three[-6:] == [(3, 2)] * 6, fed


def test_a_batch_whose_rows_fall_to_an_expensive_width_is_fed_padded_and_keeps_its_tokens(tiny_lm):
    """Four prompts, one ending early: on a curve where 3 rows cost more than 6, the three left are fed two rows
    each (one of them padding nobody reads), and every row's tokens are still those it gets alone."""
    lm = tiny_lm("llama")
    planner = BatchPadding()
    planner.curve = CostCurve([1, 2, 3, 4, 6, 8], [1.0, 1.5, 1.9, 1.4, 1.45, 1.45], rate=0.0)
    fed = []
    forward = lm.forward
    lm.forward = lambda embeds, *a, **k: fed.append(tuple(embeds.shape[:2])) or forward(embeds, *a, **k)
    try:
        prompts = [[5, 6, 7, 8, 9], [11, 12, 13], [21, 22, 23, 24], [31, 32]]
        limits = [12, 3, 12, 12]
        alone = [Decoder(lm, max_new_tokens=n).generate(p).tokens for p, n in zip(prompts, limits)]
        decs = BatchDecoder(lm, [build("ar") for _ in prompts], max_new_tokens=12, planner=planner)
        decs.rows[1].max_new_tokens = 3
        got = decs.generate(prompts)
    finally:
        del lm.forward
    assert [g.tokens for g in got] == alone
    assert (4, 1) in fed and (3, 2) in fed and (3, 1) not in fed, fed


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("spec", ["ar", "hybrid:bc=auto", "esp:k=2:bc=12", "lade"])
def test_more_prompts_than_the_batch_size_join_as_rows_end_and_keep_their_tokens(tiny_lm, arch, spec, monkeypatch):
    """Seven prompts, at most three in flight: a row that ends gives its place to the next prompt (its prefill a
    forward of its own, then its cache rows join the batch's), and every prompt gets the tokens it gets alone."""
    lm = tiny_lm(arch)
    g = torch.Generator().manual_seed(3)
    prompts = [(lambda b: b * 2 + b[:3])(torch.randint(0, lm.vocab_size, (n,), generator=g).tolist()) for n in (5, 9, 4, 12, 7, 6, 10)]
    limits = [30, 6, 14, 30, 3, 22, 9]  # rows end at different steps (gemma3's 24-token window crossed)
    alone = [Decoder(lm, build(spec), max_new_tokens=n).generate(p).tokens for p, n in zip(prompts, limits)]
    drafters, planner = build_batch(spec, len(prompts))
    dec = BatchDecoder(lm, drafters, max_new_tokens=30, planner=planner, batch_size=3)
    for row, n in zip(dec.rows, limits):
        row.max_new_tokens = n
    fed, steps = [], []
    forward, step = lm.forward, LiveBatch.step
    lm.forward = lambda embeds, *a, **k: fed.append(embeds.shape[0]) or forward(embeds, *a, **k)
    monkeypatch.setattr(LiveBatch, "step", lambda batch, refill=False: steps.append((len(batch.runs), refill))
                        or step(batch, refill))
    try:
        got = dec.generate(prompts)
    finally:
        del lm.forward
    assert [x.tokens for x in got] == alone
    assert max(fed) == 3 and any(refill for _, refill in steps)
    assert all(rows == 3 for rows, refill in steps if refill), steps  # the batch stays full while prompts wait
    assert len(fed) < sum(x.summary.forwards for x in got) / 2


def test_a_batch_size_must_be_a_positive_integer(tiny_lm):
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ESPError, match="batch size"):
            BatchDecoder(tiny_lm("llama"), [build("ar")], batch_size=bad)


def test_prompts_of_unlike_lengths_are_prefilled_apart_and_keep_their_tokens(tiny_lm):
    """A long prompt beside short ones is prefilled in a forward of its own (one left-padded rectangle would pay
    its length on every row); the short ones share one; every row then decodes in one forward per step."""
    lm = tiny_lm("llama")
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(0, lm.vocab_size, (n,), generator=g).tolist() for n in (4, 40, 5, 6)]
    alone = [Decoder(lm, build("hybrid:bc=8"), max_new_tokens=10).generate(p).tokens for p in prompts]
    fed = []
    forward = lm.forward
    lm.forward = lambda embeds, *a, **k: fed.append(tuple(embeds.shape[:2])) or forward(embeds, *a, **k)
    try:
        got = BatchDecoder(lm, [build("hybrid:bc=8") for _ in prompts], max_new_tokens=10).generate(prompts)
    finally:
        del lm.forward
    assert [x.tokens for x in got] == alone
    assert [b for b, _ in fed[:3]] == [3, 1, 4] and fed[0][1] < 10 <= 40 <= fed[1][1], fed

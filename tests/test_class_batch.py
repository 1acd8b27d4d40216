"""A class decoded together (issue 48): runs that wait for the same model join one batch (explorer.batch), each
page streaming its own row's steps with every view it has alone, its tokens and traces those of its prompt
decoded alone; Stop, or a page going away, ends one row and leaves the others running; a run that waits is told
its place in the line, in the status line of the page."""
from __future__ import annotations

import threading
from typing import Iterator

import pytest

from components.settings import RunSettings
from conftest import repeated_prompt
from esp.decoding.engine import Decoder
from components.common import as_step
from esp.trace import StepTrace
from explorer import batch, calls
from explorer.batch import SharedBatch
from explorer.line import Line
from explorer.session import Session, StopToken
from test_views_golden import compare, views_of

# A class's runs, each with knobs of its own: the page's defaults, another tree, sampling, and a baseline.
CLASS = [RunSettings(k=2, bc=30, max_new_tokens=16), RunSettings(k=3, bc=60, tree="dynamic", max_new_tokens=12),
         RunSettings(k=2, bc=30, mode="sampling", temperature=0.8, seed=4, max_new_tokens=14),
         RunSettings(method="pld", max_new_tokens=16), RunSettings(k=1, bc=10, max_new_tokens=9)]


@pytest.fixture
def shared(monkeypatch, tiny_lm):
    """shared(rows, arch) -> (lm, the server's batch): a fresh line and batch of `rows` rows on a tiny model."""
    made: list[SharedBatch] = []

    def make(rows: int = 8, arch: str = "llama"):
        lm = tiny_lm(arch)
        one = SharedBatch(Line(), rows)
        made.append(one)
        monkeypatch.setattr(batch, "SHARED", one)
        monkeypatch.setattr(batch, "setup_call", lambda model, dtype: (lm, {"device": "CPU", "dtype": "float64"}))
        return lm, one

    yield make
    for one in made:
        one.close()


def alone(lm, ids: list[int], s: RunSettings) -> list[StepTrace]:
    """The prompt decoded alone, as a run on the page records it (explorer.worker.run_steps)."""
    dec = Decoder(lm, s.drafter(), s.sampling(), s.max_new_tokens, s.layouts, align=True, lens=True)
    return list(dec.stream(ids))


def collect(updates: Iterator[dict], out: list, stop_after: int | None = None, token: StopToken | None = None,
            leave_after: int | None = None) -> None:
    """Read a run's updates into `out`: press Stop after `stop_after` steps, or go away after `leave_after`."""
    steps = 0
    for update in updates:
        out.append(update)
        steps += "step" in update
        if stop_after is not None and steps == stop_after:
            token.set()
        if leave_after is not None and steps == leave_after:
            updates.close()
            return


def run_class(lm, settings: list[RunSettings], per_run: dict[int, dict] | None = None,
              ) -> tuple[list[list[int]], list[list[dict]]]:
    """Every run of `settings` submitted at once, each read by a page of its own (`per_run`: `collect`'s options
    for some of them, by index); (prompts, each one's updates)."""
    per_run = per_run or {}
    prompts = [repeated_prompt(seed, lm.vocab_size)[: 10 + 3 * seed] for seed in range(len(settings))]
    tokens = [StopToken.new() for _ in settings]
    outs: list[list[dict]] = [[] for _ in settings]
    pages = [threading.Thread(target=collect, args=(batch.updates("m", ids, s, token, who=("school", f"s{n}")),
                                                    outs[n]), kwargs=per_run.get(n, {}) | (
                                  {"token": tokens[n]} if "stop_after" in per_run.get(n, {}) else {}))
             for n, (ids, s, token) in enumerate(zip(prompts, settings, tokens))]
    for page in pages:
        page.start()
    for page in pages:
        page.join(120)
    for token in tokens:
        token.clear()
    assert not any(page.is_alive() for page in pages)
    return prompts, outs


def steps_of(out: list[dict]) -> list[StepTrace]:
    return [as_step(u["step"]) for u in out if "step" in u]


def test_a_class_decoded_together_gives_every_row_its_prompts_tokens_traces_and_views_alone(shared):
    lm, one = shared(rows=8)
    widths = []
    forward = lm.forward

    def spy(embeds, *a, **kw):
        widths.append(embeds.shape[0] if embeds.dim() == 3 else 1)
        return forward(embeds, *a, **kw)

    lm.forward = spy
    try:
        prompts, outs = run_class(lm, CLASS)
    finally:
        del lm.forward
    assert max(widths) >= 3  # rows really shared forwards
    for ids, s, out in zip(prompts, CLASS, outs):
        assert "meta" in next(u for u in out if "wait" not in u) and out[-1] == {"end": "done"}
        got, want = steps_of(out), alone(lm, ids, s)
        assert [t for st in got for t in st.emitted] == [t for st in want for t in st.emitted]
        compare({"steps": [views_of(x) for x in got]}, {"steps": [views_of(x) for x in want]})
        if s.method == "esp":
            assert any(st.lens for st in got) and any(st.alignment for st in got) and all(st.mask for st in got)
    assert not one.line.rows and not one.line.waiting


def test_stop_ends_one_row_and_a_page_that_goes_away_another_and_the_others_run_on(shared):
    lm, one = shared(rows=8, arch="qwen2")
    prompts, outs = run_class(lm, CLASS, {0: {"stop_after": 2}, 1: {"leave_after": 1}})
    assert outs[0][-1] == {"end": "stopped"} and 2 <= len(steps_of(outs[0])) <= 3  # the step in progress, at most
    assert not any("end" in u for u in outs[1])  # it left after its first step, without waiting for more
    for ids, s, out in list(zip(prompts, CLASS, outs))[2:]:
        assert out[-1] == {"end": "done"}
        want = alone(lm, ids, s)
        assert [t for st in steps_of(out) for t in st.emitted] == [t for st in want for t in st.emitted]
    assert not one.line.rows and not one.line.waiting


def test_a_run_beyond_the_batchs_rows_waits_and_is_told_its_place(shared):
    lm, one = shared(rows=1)
    ids = repeated_prompt(2, lm.vocab_size)
    tokens = [StopToken.new() for _ in range(3)]
    first = batch.updates("m", ids, RunSettings(max_new_tokens=40), tokens[0], who=("school", "s0"))
    assert "meta" in next(first)  # it holds the batch's one row
    outs: list[list[dict]] = [[], []]
    pages = [threading.Thread(target=collect, args=(batch.updates("m", ids, CLASS[n], tokens[n + 1],
                                                                  who=("school", f"s{n + 1}")), outs[n]))
             for n in range(2)]
    pages[0].start()
    while not outs[0]:
        pages[0].join(0.01)
    pages[1].start()
    list(first)
    for page in pages:
        page.join(60)
    waits = [[u["wait"] for u in out if "wait" in u] for out in outs]
    assert waits[0][0].startswith("**Waiting for the model** · next in line of 1 · ")
    assert any(w.startswith("**Waiting for the model** · 2nd in line of 2 · ") for w in waits[1])
    for out in outs:
        meta = next(i for i, u in enumerate(out) if "meta" in u)
        assert all(i < meta for i, u in enumerate(out) if "wait" in u) and out[-1] == {"end": "done"}
    for token in tokens:
        token.clear()


def test_stop_while_waiting_ends_the_run_before_it_starts(shared):
    lm, one = shared(rows=1)
    ids = repeated_prompt(1, lm.vocab_size)
    gate, forward = threading.Event(), lm.forward
    lm.forward = lambda *a, **kw: gate.wait(60) and forward(*a, **kw)  # the first run holds its row meanwhile
    tokens = [StopToken.new(), StopToken.new()]
    try:
        first = batch.updates("m", ids, CLASS[0], tokens[0])
        assert "meta" in next(first)  # it has the row
        waiting = batch.updates("m", ids, CLASS[0], tokens[1], who=("other", "u"))
        assert next(waiting)["wait"].startswith("**Waiting for the model** · next in line of 1")
        tokens[1].set()
        assert list(waiting) == [{"error": "Stopped while waiting for the model: nothing ran."}]
        gate.set()
        assert list(first)[-1] == {"end": "done"}
    finally:
        gate.set()
        del lm.forward
        for t in tokens:
            t.clear()
    assert not one.line.waiting and not one.line.rows


def test_the_batch_thread_ends_once_no_run_waits_and_the_next_run_starts_another(shared, monkeypatch):
    """An idle batch thread ends (its OpenMP pool would slow every other thread's forwards: explorer.batch), but not
    while a row waits behind a run that holds the model alone; a run after it ended starts a thread of its own."""
    monkeypatch.setattr(batch, "IDLE_S", 0.02)
    lm, one = shared(rows=2)
    ids = repeated_prompt(0, lm.vocab_size)
    token = StopToken.new()
    run = batch.updates("m", ids, CLASS[0], token)
    assert "meta" in next(run)
    first = one._thread  # the row is in the batch, so its thread runs
    assert list(run)[-1] == {"end": "done"}
    first.join(10)
    assert not first.is_alive() and one._thread is None
    out: list[dict] = []
    with batch.alone(("teacher", "t")):
        page = threading.Thread(target=collect, args=(batch.updates("m", ids, CLASS[4], token), out))
        page.start()
        while one._thread is None or not out:
            page.join(0.01)
        waiting = one._thread
        waiting.join(0.3)  # many idle timeouts while the row waits for the model
        assert waiting.is_alive() and not any("step" in u for u in out)
    page.join(60)
    assert out[-1] == {"end": "done"}
    want = alone(lm, ids, CLASS[4])
    assert [t for st in steps_of(out) for t in st.emitted] == [t for st in want for t in st.emitted]
    assert first is not waiting


@pytest.mark.app
def test_the_page_shows_a_waiting_runs_place_in_its_status_line(shared, monkeypatch, tiny_chat):
    from conftest import char_tokenizer
    from esp.models.lm import LM

    lm = LM(tiny_chat[0], char_tokenizer(), "tiny")
    monkeypatch.setattr(calls, "load_model", lambda name, dtype="float32": lm)
    _, one = shared(rows=1)
    monkeypatch.setattr(batch, "setup_call", lambda model, dtype: (lm, {"device": "CPU", "dtype": "float64"}))
    busy = calls.generate("abcabcabc", max_new_tokens=24, session=Session())
    next(busy)  # its first update: it holds the batch's one row
    pages = calls.generate("xyzxyz", max_new_tokens=4, session=Session())
    status = next(pages)[0]
    assert status.startswith("**Waiting for the model** · next in line of 1 · ")
    list(busy)
    assert list(pages)[-1][0].startswith("**Done**")


def test_the_library_records_every_rows_views_in_a_batch_as_alone(tiny_chat):
    import esp

    model, tokenizer = tiny_chat
    prompts = ["abcabcabcab", "hello hello hel", "xyz"]
    together = esp.decode(model, tokenizer, prompts, method="esp:k=2:bc=30", max_new_tokens=12, views=True)
    for prompt, row in zip(prompts, together):
        one = esp.decode(model, tokenizer, prompt, method="esp:k=2:bc=30", max_new_tokens=12, views=True)
        assert row.tokens == one.tokens and any(s.lens for s in row.steps)
        compare({"steps": [views_of(s) for s in row.steps]}, {"steps": [views_of(s) for s in one.steps]})

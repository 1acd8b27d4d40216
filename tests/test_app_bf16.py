"""The app's bfloat16 choice (issue 29): float32 by default; bfloat16 offered as one control only where this
machine computes it natively (explorer.gpu.bf16_missing), and refused in one line elsewhere before any
model work. Where it is offered, Run, What-if and Compare decode with one bfloat16 copy of the model, the
run's meta and trace say so, and Compare's lossless column is the bfloat16 verdict.

This dev machine has no native bf16 (AVX2): `esp.device.native_bf16` is monkeypatched both ways. Its CPU
emulates bf16 (slowly but correctly), so the runs stay short: 8 new tokens, Compare with ar and esp only."""
from __future__ import annotations

import logging

import gradio as gr
import pytest
import torch

import esp.device
from conftest import plain
from components.export import read_trace_json, write_trace_json
from esp import methods
from esp.bench.verdict import EXACT, NEAR_TIE, classify, label
from explorer import calls, gpu, worker
from explorer.session import Session

pytestmark = pytest.mark.app

PROMPT = "Count from 1 to 5."
RUN = dict(k=2, bc=30, lam=0.1, max_new_tokens=8)
HINT = (2, 30, 0.1, "mean", "static", "greedy", 0.7, 0.95, 0, 8, "efficient", "esp")  # check_settings' values
REFUSED = "This server does not offer bfloat16: its CPU does not compute it natively (float32 runs here)."


def one_line(line) -> bool:
    return isinstance(line, str) and line.startswith("⚠️ ") and "\n" not in line


def dtype_control(native: bool, monkeypatch) -> gr.Radio:
    import app

    monkeypatch.setattr(esp.device, "native_bf16", lambda flags=None: native)
    return next(b for b in app.build_app().blocks.values() if getattr(b, "elem_id", None) == "dtype")


def test_without_native_bf16_the_control_is_hidden_and_a_bf16_request_refused_before_any_model_work(
        monkeypatch, caplog):
    monkeypatch.setenv("ESP_EMULATE_ZEROGPU", "0")
    control = dtype_control(False, monkeypatch)
    assert control.visible is False and control.value == "float32"
    fail = lambda *a, **kw: pytest.fail("a refused request reached the model")
    for name in ("load_model", "decode_once", "rerun_step"):
        monkeypatch.setattr(calls, name, fail)
    monkeypatch.setattr(calls.batch, "updates", fail)
    session = Session()
    calls.open_shipped("trace_masks", session)
    caplog.set_level(logging.INFO, logger="esp.app")
    answers = [list(calls.generate(PROMPT, **RUN, dtype="bfloat16", session=Session()))[0][0],
               calls.whatif(1, **RUN, dtype="bfloat16", session=session)[0],
               list(calls.compare(PROMPT, **RUN, dtype="bfloat16"))[0][0],
               calls.check_settings(*HINT, "bfloat16")]
    assert all(one_line(a) and plain(a) == f"⚠️ {REFUSED}" for a in answers), answers
    assert not [r for r in caplog.records if r.exc_info]
    # Any other dtype is refused on any machine; a request without one is float32, as before it existed.
    assert plain(calls.check_settings(*HINT, "float16")) == "⚠️ Unknown dtype 'float16': choose from float32, bfloat16."
    assert calls.check_settings(*HINT).startswith("Ready")


def test_on_a_gpu_the_control_is_hidden_and_bf16_refused(monkeypatch):
    monkeypatch.setenv("ESP_EMULATE_ZEROGPU", "1")  # the ZeroGPU mode: the GPU runs its own dtype, unchanged
    monkeypatch.setattr(esp.device, "native_bf16", lambda flags=None: True)
    assert "on a GPU" in gpu.bf16_missing()
    assert one_line(calls.check_settings(*HINT, "bfloat16"))


@pytest.fixture(scope="module")
def bf16(lm):
    """With native bf16 monkeypatched in: the page's control, one streamed esp run, a What-if of its step 1
    and a Compare of ar and esp, all in bfloat16; the dtype of every model the GPU calls ran, and Compare's
    raw results. The bf16 copy is dropped afterwards."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ESP_EMULATE_ZEROGPU", "0")
        control = dtype_control(True, mp)
        mp.setattr(gpu, "_BF16", {})
        mp.setattr(methods, "available", lambda: ["ar", "esp"])  # Compare: the baseline and one tree method
        ran, raw = [], []

        def spy_device(model):
            ran.append(model.dtype)
            return gpu.on_device(model)

        def spy_decode(*args, **kwargs):
            raw.append(real_decode(*args, **kwargs))
            return raw[-1]

        real_decode = calls.decode_once
        mp.setattr(worker, "on_device", spy_device)
        mp.setattr(calls, "decode_once", spy_decode)
        session = Session()
        run = list(calls.generate(PROMPT, **RUN, dtype="bfloat16", session=session))
        whatif = calls.whatif(1, **{**RUN, "bc": 16}, dtype="bfloat16", session=session)
        compare = list(calls.compare(PROMPT, **RUN, dtype="bfloat16"))
        copies = dict(gpu._BF16)
        yield {"control": control, "run": run, "session": session, "whatif": whatif, "compare": compare, "ran": ran,
               "raw": raw, "copies": copies, "again": calls.load_model("embedded", "bfloat16")}


@pytest.mark.model
def test_with_native_bf16_the_control_is_shown_and_float32_stays_the_default(bf16):
    assert bf16["control"].visible is True and bf16["control"].value == "float32"
    assert [v for _, v in bf16["control"].choices] == ["float32", "bfloat16"]
    assert "equal to plain decoding up to rounding ties" in {v: t for t, v in bf16["control"].choices}["bfloat16"]


@pytest.mark.model
def test_a_bf16_run_decodes_in_bf16_and_its_trace_says_so(bf16, tmp_path):
    session = bf16["session"]
    assert bf16["run"][-1][0].startswith("**Done**"), bf16["run"][-1][0]
    assert session.meta["dtype"] == "bfloat16" and session.meta["settings"].endswith(", bfloat16")
    meta, _ = read_trace_json(write_trace_json(session.steps, session.meta, tmp_path / "t.json"))
    assert meta["dtype"] == "bfloat16"
    assert bf16["ran"] and set(bf16["ran"]) == {torch.bfloat16}  # the run, the what-if and every Compare call
    # Its tokens are those of plain bf16 decoding (Compare's ar run of the same prompt), or part at a near-tie.
    ar = next(r for r in bf16["raw"] if r["summary"]["method"] == "ar")
    tokens = [t for s in session.steps for t in s.emitted]
    top2 = [t for s in session.steps for t in s.top2]
    assert classify(ar["tokens"], ar["top2"], tokens, top2, "bfloat16").kind in (EXACT, NEAR_TIE)


@pytest.mark.model
def test_a_bf16_whatif_reruns_the_step(bf16):
    note = bf16["whatif"][0]
    assert "what-if" in note and not note.startswith("⚠️"), note


@pytest.mark.model
def test_compare_in_bf16_shows_the_bf16_verdict(bf16):
    status, rows, _ = bf16["compare"][-1]
    assert status == "Finished 2/2 methods on this CPU (bfloat16)."
    ar, esp_run = (next(r for r in bf16["raw"] if r["summary"]["method"] == m) for m in ("ar", "esp"))
    assert all(r["dtype"] == "bfloat16" for r in bf16["raw"])
    verdict = classify(ar["tokens"], ar["top2"], esp_run["tokens"], esp_run["top2"], "bfloat16")
    assert [r[-1] for r in rows] == ["baseline", label(verdict)] and verdict.kind in (EXACT, NEAR_TIE)


@pytest.mark.model
def test_one_bf16_copy_per_model_however_many_runs(bf16, lm):
    assert list(bf16["copies"]) == ["embedded"] and bf16["again"] is bf16["copies"]["embedded"]
    made = bf16["again"]
    assert made.dtype == torch.bfloat16 and made.model is not lm.model and lm.dtype == torch.float32

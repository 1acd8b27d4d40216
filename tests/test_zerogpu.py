"""The app's handlers driven directly under the ZeroGPU emulation (ESP_EMULATE_ZEROGPU=1): every GPU call
in a forked worker with pickled arguments and results, and CUDA raising in the main process."""
from __future__ import annotations

import multiprocessing
import os
import re
import time

import gradio as gr
import pytest
import torch

from app_server import gpu_mode

pytestmark = pytest.mark.zerogpu
PROMPT = "Count from 1 to 10."


@pytest.fixture(scope="module")
def emulated(lm):
    with gpu_mode("emulated"):
        yield


@pytest.fixture
def every_step(monkeypatch):
    """A page update per step, so that each yield of `generate` is one step received from the worker."""
    from explorer import calls

    monkeypatch.setattr(calls, "UPDATE_S", 0.0)


def _run(session, **kwargs):
    from explorer import calls

    return list(calls.generate(PROMPT, **{"max_new_tokens": 12, **kwargs}, session=session))


@pytest.mark.model
def test_run_rebuilds_the_session_in_the_main_process(emulated, lm):
    from esp.decoding.engine import Decoder
    from explorer.session import Session

    session = Session()
    outs = _run(session)
    assert outs[-1][0].startswith("**Done**") and not session.running
    expected = [t for s in Decoder(lm, max_new_tokens=12).stream(lm.chat_ids(PROMPT)) for t in s.emitted]
    assert [t for s in session.steps for t in s.emitted] == expected  # greedy ESP equals plain decoding
    assert session.meta["device"] == "CPU" and session.meta["curve"]["q"]  # measured inside the GPU call
    assert len(session.clocks) == len(session.steps) and session.clocks == sorted(session.clocks)
    assert not os.path.exists(session.token.path)  # the stop token is gone with the run


@pytest.mark.model
def test_stop_ends_the_run_within_one_step_of_the_click(emulated, every_step):
    from explorer import calls
    from explorer.session import Session

    session = Session()
    run = calls.generate("Write a long story about a robot who learns to paint.", k=1, bc=60,
                         max_new_tokens=200, session=session)
    for n, out in enumerate(run, 1):
        if n == 3:
            calls.request_stop(session)
        elif n > 3:
            assert out[0].startswith(("**Stopping…**", "**Stopped after")), out[0]
    final = out[0]
    n_steps, after = map(int, re.search(r"Stopped after (\d+) steps\*\* \((\d+) after the click\)", final).groups())
    assert n_steps == len(session.steps) < 100 and after <= 1
    assert sum(c > session.stopped_at for c in session.clocks) == after
    assert not session.running and not multiprocessing.active_children()  # the worker has left


@pytest.mark.model
def test_whatif_runs_in_a_worker(emulated):
    from explorer import calls
    from explorer.session import Session

    session = Session()
    _run(session)
    note, original, alternative = calls.whatif(2, bc=60, session=session)
    assert "what-if" in note and "esp:k=2:bc=60" in note
    count = lambda fig: sum(len(t.x) for t in fig.data if t.mode == "markers+text")
    assert count(alternative) > count(original)
    assert calls.whatif(0, session=session)[0].startswith("⚠️")  # refused before any GPU call


@pytest.mark.model
def test_compare_is_one_gpu_call_per_method(emulated, monkeypatch):
    from esp import methods
    from explorer import calls, emulation

    forks, real = [], emulation._exchange
    monkeypatch.setattr(emulation, "_exchange", lambda *a: forks.append(a[0].__name__) or real(*a))
    outs = list(calls.compare(PROMPT, max_new_tokens=8))
    assert forks == ["decode_once"] * len(methods.REGISTRY)
    tables = [o[1] for o in outs if isinstance(o[1], list)]
    assert [len(t) for t in tables] == list(range(1, len(methods.REGISTRY) + 1))  # each streamed as it ends
    assert [r[6] for r in tables[-1]] == ["baseline"] + ["exact"] * (len(tables[-1]) - 1)


@pytest.mark.model
def test_open_trace_after_the_worker_is_killed_mid_run(emulated, every_step):
    from explorer import calls
    from explorer.session import Session

    session = Session()
    run = calls.generate("Write a long story about a robot who learns to paint.", k=1, bc=60,
                         max_new_tokens=200, session=session)
    for n, out in enumerate(run, 1):
        if n == 2:
            for child in multiprocessing.active_children():
                child.kill()
    assert re.match(r"\*\*Stopped after \d+ steps: the GPU worker ended \(GPU task aborted\)\*\*", out[0]), out[0]
    assert not session.running and session.steps
    status, *_ = calls.open_shipped("trace_copy", session)
    assert status.startswith("**Done**") and "recorded: trace_copy.json" in status
    assert _run(session, max_new_tokens=4)[-1][0].startswith("**Done**")  # and a new run works


@pytest.mark.parametrize("bad", [dict(prompt="  "), dict(prompt="hi", k=4, bc=10), dict(prompt="hi", model="/tmp"),
                                 dict(prompt="hi", max_new_tokens=100_000)])
@pytest.mark.model
def test_bad_input_is_refused_before_any_gpu_call(emulated, monkeypatch, bad):
    from explorer import calls, emulation

    forks = []
    monkeypatch.setattr(emulation, "_exchange", lambda *a: forks.append(a))
    outs = list(calls.generate(**{"max_new_tokens": 8, **bad}))
    assert len(outs) == 1 and outs[0][0].startswith("⚠️") and not forks
    assert list(calls.compare(**{"max_new_tokens": 8, **bad}))[0][0].startswith("⚠️") and not forks


def _sleep(seconds: float) -> str:
    time.sleep(seconds)
    return "late"


def _fail() -> None:
    raise KeyError("a detail that stays in the worker")


def _cuda_seen() -> bool:
    return torch.cuda.is_available()


@pytest.mark.model
def test_the_emulation_aborts_at_the_duration_and_passes_only_the_error_class(emulated):
    from explorer import emulation

    with pytest.raises(gr.Error, match="GPU task aborted"):
        emulation.worker_call(_sleep, 0.5)(30)
    assert emulation.worker_call(_sleep, 30)(0) == "late"
    with pytest.raises(gr.Error) as e:
        emulation.worker_call(_fail, 30)()
    assert e.value.message == "KeyError"


@pytest.mark.model
def test_cuda_raises_in_the_main_process_only(emulated):
    from esp.models.loader import _load as load
    from explorer import emulation

    assert torch.cuda.is_available()  # as ZeroGPU makes it look in the main process
    with pytest.raises(RuntimeError, match="CUDA must not be initialised in the main process"):
        torch.zeros(2).to("cuda")
    with pytest.raises(RuntimeError, match="CUDA must not be initialised in the main process"):
        torch.cuda.synchronize()
    with pytest.raises(RuntimeError, match="CUDA must not be initialised"):  # the default device would be CUDA
        load.__wrapped__("embedded", None, "float32", None)  # a load, not the model an earlier test left cached
    assert torch.zeros(2).to("cpu", torch.float64).dtype == torch.float64
    assert emulation.worker_call(_cuda_seen, 30)() is False  # the worker sees the real CUDA


def test_durations_stay_within_zerogpu_quota(monkeypatch):
    from explorer import gpu

    monkeypatch.setattr(gpu, "mode", lambda: "zerogpu")
    assert gpu.call_seconds(8_000_000_000, 512) == gpu.MAX_CALL_S == 60
    small = gpu.call_seconds(135_000_000, 16)
    assert gpu.SETUP_S < small < gpu.call_seconds(135_000_000, 512) <= 60
    monkeypatch.setattr(gpu, "mode", lambda: "local")
    assert gpu.call_seconds(135_000_000, 512) is None  # no limit outside ZeroGPU

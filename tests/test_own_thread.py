"""The local mode's model work runs on a thread of its own that ends with the call (explorer.own_thread): results,
items and errors come back to the caller, closing the caller's iterator closes the work's generator, and no thread
that ran torch outlives its call (its OpenMP pool would slow every other thread's forwards)."""
from __future__ import annotations

import threading

import pytest
import torch

from explorer import gpu
from explorer.own_thread import own_thread


def _ran_torch_on() -> threading.Thread:
    torch.ones(64, 64) @ torch.ones(64, 64)
    return threading.current_thread()


def test_a_call_returns_from_a_thread_that_has_ended():
    ran = own_thread(_ran_torch_on)()
    assert ran is not threading.current_thread() and not ran.is_alive()


def test_a_calls_error_is_raised_in_the_caller():
    def fail(x):
        raise KeyError(x)

    with pytest.raises(KeyError, match="lost"):
        own_thread(fail)("lost")


def test_a_generators_items_and_error_come_back_in_order():
    def items(n):
        for i in range(n):
            yield i, threading.current_thread()
        raise ValueError("after the last item")

    got = []
    with pytest.raises(ValueError, match="after the last item"):
        for item in own_thread(items)(3):
            got.append(item)
    assert [i for i, _ in got] == [0, 1, 2]
    ran = {t for _, t in got}
    assert len(ran) == 1 and threading.current_thread() not in ran


def test_closing_the_callers_iterator_closes_the_generator_and_its_thread_ends():
    step, closed, ran = threading.Event(), threading.Event(), []

    def endless():
        ran.append(threading.current_thread())
        try:
            while True:
                step.wait(10)
                yield 1
        finally:
            closed.set()

    it = own_thread(endless)()
    step.set()
    assert next(it) == 1
    it.close()
    assert closed.wait(10)
    ran[0].join(10)
    assert not ran[0].is_alive()


def test_a_gpu_function_runs_locally_on_a_thread_of_its_own(monkeypatch):
    monkeypatch.setattr(gpu, "mode", lambda: "local")
    ran = gpu.gpu(_ran_torch_on)()
    assert ran is not threading.current_thread() and not ran.is_alive()

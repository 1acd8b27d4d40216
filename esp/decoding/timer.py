"""Named phases of a decoding step, timed with one clock that waits for the device only when asked.

On a GPU, kernels run asynchronously: a host timestamp says when work was queued, not when it ran. Honest
per-phase times need a device synchronize at every phase boundary, and each one stalls the pipeline, so
they are taken only when step timings are wanted (the app's per-step bars, the overhead measurements);
a timed benchmark run syncs once at its end instead.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

import torch


class Phases:
    """Seconds per named phase; `phases("verify")` closes the running phase and opens the next."""

    def __init__(self, device: torch.device | str = "cpu", sync: bool = True):
        self._cuda = sync and torch.device(device).type == "cuda"
        self.seconds: dict[str, float] = {}
        self._name: str | None = None
        self._t = 0.0

    def now(self) -> float:
        """The clock, after the device's queued work when synchronizing."""
        if self._cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    def __call__(self, name: str | None) -> None:
        """End the running phase (if any) and start `name` (None: stop the clock)."""
        t = self.now()
        if self._name is not None:
            self.seconds[self._name] = self.seconds.get(self._name, 0.0) + t - self._t
        self._name, self._t = name, t

    @contextmanager
    def within(self, name: str) -> Iterator[None]:
        """Count the block as `name`, then resume the phase that was running (e.g. a drafter's LM-head
        call is model time, whichever phase makes it)."""
        outer = self._name
        self(name)
        try:
            yield
        finally:
            self(outer)

    def done(self) -> dict[str, float]:
        """Stop the clock: the phases' seconds plus their `total`."""
        self(None)
        out = dict(self.seconds)
        out["total"] = sum(out.values())
        return out


class ForwardTimer:
    """Seconds of each step's forward (with its LM-head call) for a drafter that learns its cost curve,
    without blocking the device.

    On CUDA a pair of events brackets the forward and is read at the next step, by when the step's
    verify read has already waited for it (an event not done yet is dropped, never waited for): a step
    learns the previous forward's time. Elsewhere the host clock is exact, since the CPU runs each op as
    it is called, and a step learns its own forward's time."""

    def __init__(self, device: torch.device | str = "cpu"):
        self._cuda = torch.device(device).type == "cuda"
        self._pending: tuple[int, object, object] | None = None  # CUDA: (rows, start, end) of the last forward
        self._start: object = 0.0

    def start(self) -> None:
        if self._cuda:
            self._start = torch.cuda.Event(enable_timing=True)
            self._start.record()
        else:
            self._start = time.perf_counter()

    def stop(self, rows: int, keep: bool = True) -> list[tuple[int, float]]:
        """End the forward of `rows` rows; returns the (rows, seconds) measured by now. `keep=False`
        (a prefill, which also holds the prompt) times nothing."""
        if not self._cuda:
            return [(rows, time.perf_counter() - self._start)] if keep else []
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        done, self._pending = self._pending, (rows, self._start, end) if keep else None
        if done is None or not done[2].query():
            return []
        return [(done[0], done[1].elapsed_time(done[2]) / 1000)]

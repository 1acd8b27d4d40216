"""One browser session's run, the stop token that reaches a run in another process, and the bound on how
many sessions hold a run at once."""
from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
import uuid
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.limits import Limits
from esp.trace import StepTrace

STOP_DIR = Path(tempfile.gettempdir()) / "esp-explorer-stop"


@dataclass(frozen=True)
class StopToken:
    """A per-run flag that crosses processes: a file that exists once Stop is pressed. The main process
    sets it; the decode polls it between steps, wherever it runs (a thread here, a forked ZeroGPU worker)."""

    path: str

    @classmethod
    def new(cls) -> "StopToken":
        STOP_DIR.mkdir(parents=True, exist_ok=True)
        return cls(str(STOP_DIR / uuid.uuid4().hex))

    def set(self) -> None:
        Path(self.path).touch()

    def is_set(self) -> bool:
        return os.path.exists(self.path)

    def clear(self) -> None:
        Path(self.path).unlink(missing_ok=True)


@dataclass
class Session:
    """One browser session's last run: its traces (CPU-only data, rebuilt in the main process from what the
    GPU call sent), the worker's clock at the end of each step, a folder for exports, and the running run's
    stop token."""

    steps: list[StepTrace] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    folder: str | None = None
    running: bool = False
    token: StopToken | None = None
    clocks: list[float] = field(default_factory=list)  # time.monotonic() when each step finished
    stopped_at: float | None = None  # time.monotonic() when Stop was pressed
    gone: str | None = None  # why this session's run was let go (HELD bounds how many runs are kept)

    def start(self, meta: dict[str, Any]) -> StopToken:
        """Forget the last run and begin a new one; returns its stop token."""
        self.steps, self.clocks, self.meta, self.stopped_at, self.gone = [], [], meta, None, None
        self.running, self.token = True, StopToken.new()
        HELD.hold(self)
        return self.token

    def load(self, steps: list[StepTrace], meta: dict[str, Any]) -> None:
        """Keep an opened trace as this session's run (no clocks: it was recorded elsewhere)."""
        self.steps, self.clocks, self.meta, self.gone = steps, [], meta, None
        HELD.hold(self)

    def hold(self) -> None:
        """This session's run was just used: keep it among the HELD runs, as the most recent."""
        HELD.hold(self)

    def let_go(self, why: str) -> None:
        """Drop the stored run (not a running one), saying why on the next request that needs it."""
        self.steps, self.clocks, self.meta, self.gone = [], [], {}, why

    def finish(self) -> None:
        """The run is over, whatever ended it (done, stopped, the worker killed or raising)."""
        self.running = False
        if self.token is not None:
            self.token.clear()

    def add(self, step: StepTrace, clock: float) -> None:
        self.steps.append(step)
        self.clocks.append(clock)

    def request_stop(self) -> bool:
        """Ask the running decode to end after the step in progress; False when nothing runs."""
        if not self.running or self.token is None:
            return False
        self.stopped_at = time.monotonic()
        self.token.set()
        return True

    def steps_after_stop(self) -> int:
        """Steps that finished after Stop was pressed (the one in progress at the click, at most)."""
        return 0 if self.stopped_at is None else sum(c > self.stopped_at for c in self.clocks)

    def export_dir(self) -> Path:
        if self.folder is None:
            self.folder = tempfile.mkdtemp(prefix="esp-explorer-")
        return Path(self.folder)


class HeldRuns:
    """The sessions holding a run's steps, least recently used first; beyond `limit`, the oldest one not
    running lets its run go. This bounds the server's memory however many sessions are open, since a
    session without a run is small (Gradio bounds their number: launch(state_session_capacity))."""

    def __init__(self, limit: int):
        self.limit = limit
        self._held: OrderedDict[int, weakref.ref] = OrderedDict()  # id(session) -> session
        self._lock = threading.Lock()

    def hold(self, session: Session) -> None:
        with self._lock:
            self._held[id(session)] = weakref.ref(session)
            self._held.move_to_end(id(session))
            for key, ref in list(self._held.items()):
                if len(self._held) <= self.limit:
                    break
                old = ref()
                if old is None or not old.steps:
                    del self._held[key]
                elif not old.running and old is not session:
                    del self._held[key]
                    old.let_go(f"This page's run was let go to make room for other visitors (the server keeps "
                               f"the {self.limit} most recently used): run it again or open a trace.")

    def __len__(self) -> int:
        return len(self._held)


HELD = HeldRuns(Limits.held_runs)  # explorer.requests sets the server's own cap (LIMITS.held_runs)


def free_session(session: Session | None) -> None:
    """State delete callback: drop the session's export files and any stop token left behind."""
    if session is None:
        return
    if session.folder:
        shutil.rmtree(session.folder, ignore_errors=True)
    session.finish()

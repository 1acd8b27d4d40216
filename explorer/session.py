"""One browser session's run, and the stop token that reaches a run in another process."""
from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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

    def start(self, meta: dict[str, Any]) -> StopToken:
        """Forget the last run and begin a new one; returns its stop token."""
        self.steps, self.clocks, self.meta, self.stopped_at = [], [], meta, None
        self.running, self.token = True, StopToken.new()
        return self.token

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


def free_session(session: Session | None) -> None:
    """State delete callback: drop the session's export files and any stop token left behind."""
    if session is None:
        return
    if session.folder:
        shutil.rmtree(session.folder, ignore_errors=True)
    session.finish()

"""Start the app in-process for the API and browser tests (the model is loaded before launch), in-process
or under the ZeroGPU emulation (GPU calls in forked workers; see explorer/emulation.py); the paced and the
replaying engines of the door's tests; and `python tests/app_server.py`, the app as `python app.py` serves it
with the replaying engine (tests/test_class.py)."""
from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script, the app's packages are found from the checkout
from esp.decoding.engine import Decoder  # noqa: E402 - after the path above

# The two ways the app's GPU functions run in the tests: here, or as ZeroGPU runs them (emulated).
MODES = ["local", pytest.param("emulated", marks=pytest.mark.zerogpu)]


def in_process_only(request, fixture: str, where: str) -> None:
    """Skip the emulated copy of a test whose subject is the same wherever the GPU calls run (the suite's
    time); `where` names the tests that cover its part in a worker."""
    if request.node.callspec.params.get(fixture) == "emulated":
        pytest.skip(f"in-process only; in a GPU worker: {where}")


@contextmanager
def gpu_mode(mode: str) -> Iterator[None]:
    """Run the app's GPU functions in `mode` ('local' or 'emulated') inside the block; under the
    emulation the main process is readied as on a ZeroGPU Space (model on the CPU, CUDA raising)."""
    from explorer import calls, emulation

    saved = os.environ.get("ESP_EMULATE_ZEROGPU")
    os.environ["ESP_EMULATE_ZEROGPU"] = "1" if mode == "emulated" else "0"
    try:
        if mode == "emulated":
            calls.ready_process(calls.LIMITS.models[0])
        yield
    finally:
        emulation.unguard()
        if saved is None:
            os.environ.pop("ESP_EMULATE_ZEROGPU")
        else:
            os.environ["ESP_EMULATE_ZEROGPU"] = saved


@contextmanager
def serve(mode: str | None = None) -> Iterator[str]:
    """Launch the app on a free local port with its GPU functions in `mode` (default: emulated when
    ESP_EMULATE_ZEROGPU=1, else local); yields its URL and closes it afterwards."""
    import torch

    import app

    mode = mode or ("emulated" if os.environ.get("ESP_EMULATE_ZEROGPU") == "1" else "local")
    threads = torch.get_num_threads()
    app.configure_engine()  # as `python app.py` does
    with gpu_mode(mode):
        demo = app.queued(app.build_app())
        demo.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True, **app.launch_options())
        try:
            yield demo.local_url
        finally:
            demo.close()
            torch.set_num_threads(threads)  # the rest of the test session keeps its own setting


class Paced(Decoder):
    """The engine with a pause after each step, as long as the tokens it emitted, so that a long run holds the
    model for minutes whatever the machine's speed and the drafts' length (a fast run once finished it while
    a test still counted). Stop is read between steps, so it still ends within one."""

    pace_s = 0.25  # per emitted token: a run of 400 tokens takes at least 100 s

    def stream(self, ids, n_prompt=None):
        for step in super().stream(ids, n_prompt):
            yield step
            time.sleep(self.pace_s * max(len(step.emitted), 1))


class Replay(Decoder):
    """A fake engine for the door's tests: the steps of a recorded run (assets/trace_masks.json, recorded on the
    embedded model) one every `pace_s`, until `max_new_tokens` are emitted or the recording ends, instead of
    decoding; a run then costs the machine next to nothing and lasts as long as the test wants."""

    pace_s = 0.1
    _steps: list = []

    def stream(self, ids, n_prompt=None):
        if not Replay._steps:
            from components.export import read_trace_json

            Replay._steps = read_trace_json(ROOT / "assets" / "trace_masks.json")[1]
        emitted = 0
        for step in Replay._steps:
            time.sleep(self.pace_s)
            yield step
            emitted += len(step.emitted)
            if emitted >= self.max_new_tokens:
                return


def serve_replayed() -> None:
    """`python app.py` with the replaying engine (its pace: ESP_TEST_PACE_S seconds a step) and no warm-up sweep
    of the cost curve (a run needs the model only to read its prompt). A replayed run cannot share a batch: every
    run has the model alone, in the line's turn."""
    import app
    from explorer import batch, calls, worker

    Replay.pace_s = float(os.environ.get("ESP_TEST_PACE_S", Replay.pace_s))
    worker.Decoder = Replay
    batch.shares_batch = lambda settings: False
    calls.ready_process = lambda name: calls.load_model(name)
    app.main()


if __name__ == "__main__":
    serve_replayed()

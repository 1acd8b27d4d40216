"""Start the app in-process for the API and browser tests (the model is loaded before launch), in-process
or under the ZeroGPU emulation (GPU calls in forked workers; see explorer/emulation.py)."""
from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

import pytest

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

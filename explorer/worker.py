"""What runs inside a GPU call: plain data in (names, token ids, settings, step dicts), plain data out.

Under ZeroGPU these run in a forked worker (see `explorer.gpu`), so they never see the main process's
session: a run reads its stop token between steps and sends each finished step as a dict the moment it is
done; the main process rebuilds the run, renders the figures and owns `running`. Errors come back as data
(`{"error": ...}`): ZeroGPU passes only an exception's class name across.
"""
from __future__ import annotations

import functools
import logging
import time
from typing import Callable, Iterator

from components.settings import RunSettings
from esp import methods
from esp.budget.cost import curve_for
from esp.decoding.engine import Decoder
from esp.errors import ESPError
from esp.sampling import Sampling
from esp.trace import StepTrace
from esp.bench.whatif import whatif_step

from .gpu import MARGIN_S, device_label, enter_call, gpu, load_model, on_device
from .session import StopToken

log = logging.getLogger("esp.app")


def error_data(e: Exception) -> dict:
    if isinstance(e, ESPError):
        return {"error": str(e)}
    log.exception("GPU call failed")  # a bug, not a user error: its traceback stays in the log
    return {"error": f"The run failed: {type(e).__name__}: {e}", "bug": True}


def _errors_as_data(fn: Callable) -> Callable:
    """A GPU function whose errors come back as `{"error": ...}`: as its result, or as its last item."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - see error_data
            return error_data(e)
    return call


def setup_call(model: str, dtype: str) -> tuple:
    """The call's model (in the visitor's dtype, RunSettings.dtype) on its device, and the run facts the
    main process keeps in its meta (the dtype the model really ran in among them)."""
    enter_call()
    lm = on_device(load_model(model, dtype))
    return lm, {"device": device_label(lm), "dtype": str(lm.dtype).removeprefix("torch."),
                "curve": curve_for(lm).to_dict()}


@gpu
def run_steps(model: str, ids: list[int], settings: RunSettings, token: StopToken,
              seconds: float | None = None) -> Iterator[dict]:
    """Decode `ids`, yielding `{"meta": ...}` once, then `{"step": dict, "clock": t}` per step (t: this
    host's monotonic clock when the step finished), then `{"end": "done" | "stopped" | "timeout"}`. It
    ends after the step in progress when `token` is set, or when its call's time is nearly out."""
    started = time.monotonic()
    try:
        lm, meta = setup_call(model, settings.dtype)
        yield {"meta": meta}
        decoder = Decoder(lm, settings.drafter(), settings.sampling(), settings.max_new_tokens, settings.layouts,
                          align=True, lens=True)
        end = "done"
        for step in decoder.stream(ids):
            yield {"step": step.to_dict(), "clock": time.monotonic()}
            if token.is_set():
                end = "stopped"
                break
            if seconds is not None and time.monotonic() - started > seconds - MARGIN_S:
                end = "timeout"
                break
        yield {"end": end}
    except Exception as e:  # noqa: BLE001 - see error_data
        yield error_data(e)


@gpu
@_errors_as_data
def decode_once(model: str, ids: list[int], settings: RunSettings, spec: str, defaults: dict | None,
                seconds: float | None = None) -> dict:
    """One method's whole run for Compare: summary, tokens, per-token top-2 and the run's dtype."""
    lm, meta = setup_call(model, settings.dtype)
    gen = Decoder(lm, methods.build(spec, defaults), settings.sampling(), settings.max_new_tokens,
                  settings.layouts).generate(ids)
    return {"summary": gen.summary.to_dict(), "tokens": gen.tokens,
            "top2": [t for s in gen.steps for t in s.top2], **meta}


@gpu
@_errors_as_data
def rerun_step(model: str, settings: RunSettings, prompt_ids: list[int], steps: list[dict], i: int,
               sampling: dict, max_new_tokens: int, layouts: str, seconds: float | None = None) -> dict:
    """What-if: stored step `i` (steps: the run's first i + 1, as dicts) re-run with `settings`."""
    lm, _ = setup_call(model, settings.dtype)
    alt = whatif_step(lm, settings.drafter(), prompt_ids, [StepTrace.from_dict(s) for s in steps], i,
                      Sampling(**sampling), max_new_tokens, layouts)
    return {"step": alt.to_dict()}

"""Argument pieces shared by the command lines: the model, ESP's knobs, sampling."""
from __future__ import annotations

import argparse
import sys

from esp.errors import ESPError


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="embedded",
                   help="'embedded' (SmolLM2-135M), an offline model such as 'qwen2.5-coder-0.5b' (make qwen), "
                        "a Hub id or a local folder")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--dtype", default=None,
                   help="auto, float32, bfloat16 or float16: the model's dtype. Default auto (float32 with --reference): on a CPU "
                        "bfloat16 where the CPU has it natively and a one-time check on the model finds it faster (tokens then "
                        "equal plain bfloat16 decoding up to rounding ties), else float32; on CUDA bfloat16 from compute "
                        "capability 8.0, float16 below, float32 for families that overflow in float16")
    p.add_argument("--calibrate", action="store_true",
                   help="time this machine's cost curve for the model once loaded, and store it (a blocking sweep, "
                        "seconds on a CPU); without it bc=auto starts from the stored curve or a default shape and "
                        "learns from its own steps")


def add_esp_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--k", type=int, default=None, help="mask tokens (1-4)")
    p.add_argument("--bc", type=_budget, default=None,
                   help="block complexity: tokens per forward, or 'auto' (chosen per step from measured cost)")
    p.add_argument("--lam", type=float, default=None, help="EMA rate of the mask embedding, in [0, 1]")
    p.add_argument("--tree", default=None, choices=["static", "dynamic"])
    p.add_argument("--init", default=None, choices=["mean", "sample", "lastk"])


def _budget(value: str) -> int | str:
    from esp.methods import budget

    try:
        return budget(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer or 'auto', not {value!r}") from None


def check_model_args(a: argparse.Namespace) -> None:
    """Fail with one line on a bad --dtype or --max-new-tokens, before anything loads; fill in the default
    dtype: auto, or float32 where a run is checked token for token against a float32 one (--reference)."""
    from esp.models.loader import AUTO, DTYPES

    if a.dtype is None:
        a.dtype = "float32" if getattr(a, "reference", False) else AUTO
    if a.dtype not in (AUTO, *DTYPES):
        fail(f"--dtype must be one of {AUTO}, {', '.join(DTYPES)}, not {a.dtype!r}.")
    if a.max_new_tokens < 1:
        fail("--max-new-tokens must be at least 1.")


def load_model(a: argparse.Namespace, **kw):
    """The model the arguments name, in their dtype, its cost curve timed first when --calibrate asks."""
    from esp.budget.cost import calibrate
    from esp.models.loader import load

    lm = load(a.model, dtype=a.dtype, **kw)
    if getattr(a, "calibrate", False):
        calibrate(lm)
    return lm


def esp_defaults(a: argparse.Namespace) -> dict:
    """Settings given on the command line, for `methods.build` to fill in."""
    return {k: v for k, v in dict(k=a.k, bc=a.bc, lam=a.lam, tree=a.tree, init=a.init).items() if v is not None}


def require(module: str, option: str, extra: str = "app") -> None:
    """Fail with one line when `option` needs an optional package that is not installed."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        fail(f"{option} needs {module}: pip install 'esp-explorer[{extra}]' (or pip install {module}).")


def fail(message: str) -> None:
    """One clear line on stderr and a non-zero exit."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def run_main(main) -> None:
    """Run `main`, turning engine errors into one line instead of a traceback."""
    try:
        main()
    except ESPError as e:
        fail(str(e))
    except KeyboardInterrupt:
        fail("interrupted")

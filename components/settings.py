"""The app's controls -> an engine method spec and a sampling rule, checked before any model work."""
from __future__ import annotations

from dataclasses import dataclass

from esp import methods
from esp.decoding.drafter import Drafter
from esp.drafters.esp import INITS, TREES, ESPConfig
from esp.errors import ESPError
from esp.decoding.layout import BUILDERS
from esp.sampling import Sampling

__all__ = ["DTYPES", "INITS", "KNOBS", "LAYOUTS", "MODES", "TREES", "RunSettings", "knob_reasons"]

LAYOUTS = BUILDERS
MODES = ("greedy", "sampling")
# float32 (the default: exactly what plain decoding writes) or bfloat16 (faster where the CPU has it natively;
# equal to plain bfloat16 decoding up to rounding ties, esp.bench.verdict).
DTYPES = ("float32", "bfloat16")
# The drafting knobs of the Run view, by the setting name methods register (esp.methods.Method.settings).
KNOBS = ("k", "bc", "lam", "init", "tree")


def knob_reasons(method: str) -> dict[str, str | None]:
    """Per drafting knob: None if `method` takes it, else a one-line reason why it is off."""
    if method not in methods.REGISTRY:
        raise ESPError(f"Unknown method {method!r}: choose from {', '.join(methods.available())}.")
    takes = methods.REGISTRY[method].settings
    return {knob: None if knob in takes else f"{method} does not use {knob} (its settings: "
            f"{', '.join(takes) or 'none'})." for knob in KNOBS}


@dataclass(frozen=True)
class RunSettings:
    """Everything a run needs besides the prompt and the model, validated by the engine's own rules."""

    k: int = 2
    bc: int = 30
    lam: float = 0.1
    init: str = "mean"
    tree: str = "static"
    mode: str = "greedy"
    temperature: float = 0.7
    top_p: float = 0.95
    seed: int = 0
    max_new_tokens: int = 64
    layouts: str = "efficient"
    method: str = "esp"
    dtype: str = "float32"

    def __post_init__(self):
        # Sliders hand over floats; the engine wants ints where it counts.
        for name in ("k", "bc", "seed", "max_new_tokens"):
            value = getattr(self, name)
            if value is None or float(value) != int(value):
                raise ESPError(f"{name} must be a whole number, not {value}.")
            object.__setattr__(self, name, int(value))
        if self.mode not in MODES:
            raise ESPError(f"decoding must be 'greedy' or 'sampling', not {self.mode!r}.")
        if self.max_new_tokens < 1:
            raise ESPError(f"max new tokens must be at least 1, not {self.max_new_tokens}.")
        if self.layouts not in LAYOUTS:
            raise ESPError(f"mask construction must be 'efficient' or 'naive', not {self.layouts!r}.")
        if self.dtype not in DTYPES:
            raise ESPError(f"dtype must be one of {', '.join(DTYPES)}, not {self.dtype!r}.")
        # spec() joins these into the method spec for every method: only the controls' choices, so that
        # no text can add a setting the page does not offer ("mean:top=100000").
        if self.init not in INITS:
            raise ESPError(f"mask init must be one of {', '.join(INITS)}, not {self.init!r}.")
        if self.tree not in TREES:
            raise ESPError(f"tree must be one of {', '.join(TREES)}, not {self.tree!r}.")
        knob_reasons(self.method)  # an unknown method is refused with the list of known ones
        if self.method == "esp":
            self.esp_config()  # the engine's sentence for impossible k / BC / lambda
        self.drafter()  # every other method checks its own settings when built
        self.sampling()

    def esp_config(self) -> ESPConfig:
        return ESPConfig(k=self.k, bc=self.bc, lam=float(self.lam), tree=self.tree, init=self.init)

    def esp_spec(self) -> str:
        """ESP's method spec for esp.methods.build, with the panel's settings."""
        return f"esp:k={self.k}:bc={self.bc}:lam={float(self.lam)}:tree={self.tree}:init={self.init}"

    def spec(self) -> str:
        """The chosen method's spec with the panel's knobs it takes (others are left out)."""
        if self.method == "esp":
            return self.esp_spec()
        knobs = {"k": self.k, "bc": self.bc, "lam": float(self.lam), "init": self.init, "tree": self.tree}
        name, taken = methods.parse(self.method, knobs)
        return ":".join([name, *(f"{k}={v}" for k, v in taken.items())])

    def drafter(self) -> Drafter:
        """A fresh drafter for the chosen method."""
        return methods.build(self.spec())

    def sampling(self) -> Sampling:
        if self.mode == "greedy":
            return Sampling(seed=self.seed)
        return Sampling(temperature=float(self.temperature), top_p=float(self.top_p), seed=self.seed)

    def describe(self) -> str:
        precision = "" if self.dtype == "float32" else f", {self.dtype}"
        if self.method != "esp":
            return f"{self.drafter().describe()}, {self.mode}, {self.layouts} mask{precision}"
        tree = self.esp_config()
        shape = f"dynamic N={tree.n_nodes}" if self.tree == "dynamic" else f"static shape {tree.static_shape}"
        return (f"k={self.k}, BC={self.bc} ({shape}, {tree.n_nodes} nodes), λ={float(self.lam):g}, "
                f"init={self.init}, {self.mode}, {self.layouts} mask{precision}")

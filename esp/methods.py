"""Method specs such as `esp:k=2:bc=30:tree=dynamic` or `lade:n=5:w=7:g=7` -> drafters.

Every method registers its name, its settings with their types, and a factory; the CLI, the benchmark
and the app all build drafters through `build`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from esp.budget.batch import BatchPadding
from esp.decoding.drafter import BatchPlanner, Drafter
from esp.drafters.esp import ESPConfig, ESPDrafter
from esp.drafters.hybrid import AUTO, HybridDrafter
from esp.drafters.lade import LADEDrafter
from esp.drafters.pld import PLDDrafter
from esp.drafters.stand import STANDDrafter
from esp.drafters.tr import TRDrafter
from esp.errors import ESPError
from esp.trace import ESP, LOOKUP, TABLE


@dataclass(frozen=True)
class Method:
    factory: Callable[..., Drafter]
    settings: dict[str, type]  # name -> type (int, float, str, or tuple for comma lists of ints)
    uses_bc: bool = False  # takes the shared --bc budget unless its spec sets one


REGISTRY: dict[str, Method] = {}


def register(name: str, factory: Callable[..., Drafter], settings: dict[str, type], uses_bc: bool = False) -> None:
    REGISTRY[name] = Method(factory, settings, uses_bc)


def budget(value: str | int) -> int | str:
    """A block budget: a number of rows, or 'auto' (chosen every step from the measured cost curve)."""
    return AUTO if str(value).strip().lower() == AUTO else int(value)


HYBRID_SOURCES = (ESP, LOOKUP, TABLE)


def sources(value: str) -> tuple[str, ...]:
    """'lookup+table' -> ('lookup', 'table'): a non-empty subset of the hybrid's sources."""
    got = tuple(dict.fromkeys(s.strip().lower() for s in str(value).split("+")))
    if not all(got) or not set(got) <= set(HYBRID_SOURCES):
        raise ValueError(value)
    return got


def _esp(bc: int | str = 30, **kw) -> Drafter:
    if bc != AUTO:
        return ESPDrafter(ESPConfig(bc=bc, **kw))
    for fixed in ("tree", "shape"):
        if kw.pop(fixed, None) not in (None, "static"):
            raise ESPError(f"esp: {fixed} does not apply with bc=auto (the budget shapes the tree).")
    return HybridDrafter(AUTO, sources=("esp",), name="esp", **kw)


def _stand(bc: int | str = 30, **kw) -> Drafter:
    if bc != AUTO:
        return STANDDrafter(bc=bc, **kw)
    return HybridDrafter(AUTO, sources=("table",), name="stand", **kw)


register("ar", Drafter, {})
register("esp", _esp, {"k": int, "bc": budget, "lam": float, "tree": str, "init": str, "shape": tuple}, uses_bc=True)
register("pld", PLDDrafter, {"n": int, "draft": int, "rule": str})
register("stand", _stand, {"bc": budget, "top": int, "n": int}, uses_bc=True)
register("lade", LADEDrafter, {"n": int, "w": int, "g": int})
register("tr", TRDrafter, {"tree": str, "start": str, "matrix": str})
register("hybrid", HybridDrafter, {"bc": budget, "k": int, "lam": float, "init": str, "top": int, "n": int,
                                   "match": int, "draft": int, "sources": sources, "start": str, "prior": str},
         uses_bc=True)

KINDS = {tuple: "a list of integers", budget: "an integer or 'auto'",
         sources: f"some of {', '.join(HYBRID_SOURCES)} joined by '+' (e.g. lookup+table)"}


def _convert(method: str, key: str, value: str, kind: type):
    try:
        if kind is tuple:
            return tuple(int(x) for x in value.replace("-", ",").split(","))
        return kind(value)
    except ValueError:
        raise ESPError(f"{method}: setting {key}={value!r} must be {KINDS.get(kind, getattr(kind, '__name__', kind))}.") from None


def parse(spec: str, defaults: dict | None = None) -> tuple[str, dict]:
    """'esp:k=2:bc=30' -> ('esp', {'k': 2, 'bc': 30}), defaults filling only settings the method has."""
    name, *pairs = spec.strip().split(":")
    if name not in REGISTRY:
        raise ESPError(f"Unknown method {name!r}: choose from {', '.join(REGISTRY)}.")
    method = REGISTRY[name]
    out = {k: v for k, v in (defaults or {}).items() if k in method.settings and v is not None}
    if not method.uses_bc:
        out.pop("bc", None)
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in method.settings:
            known = ", ".join(method.settings) or "none"
            raise ESPError(f"{name}: unknown setting {pair!r} (settings: {known}).")
        out[key] = _convert(name, key, value, method.settings[key])
    return name, out


def build(spec: str, defaults: dict | None = None) -> Drafter:
    """A ready drafter for `spec`; bad names or settings raise ESPError with one clear line."""
    name, kwargs = parse(spec, defaults)
    try:
        return REGISTRY[name].factory(**kwargs)
    except TypeError as e:
        raise ESPError(f"{name}: {e}") from None


def build_batch(spec: str, n: int, defaults: dict | None = None) -> tuple[list[Drafter], BatchPlanner]:
    """`n` drafters for `spec`, one per prompt of a batch (none shared), and what sets the batch's widths: the
    drafters' own planner (bc=auto: one width for all rows), else one that only pads a forward where a wider
    one costs less (`esp.budget.batch.BatchPadding`)."""
    drafters = [build(spec, defaults) for _ in range(n)]
    return drafters, (drafters[0].batch_planner() if drafters else None) or BatchPadding()


def available() -> list[str]:
    """Every registered method name, baselines included."""
    return list(REGISTRY)


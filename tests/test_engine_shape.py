"""The engine stays small enough to read (issue 39): no function in esp/ over MAX_LINES lines, no class with more
than MAX_FIELDS instance fields, and the records that cross the drafter interface are keyword-only.
Read from the source (AST), so these tests run in a moment and name the offender."""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from conftest import ROOT

PACKAGE = ROOT / "esp"
MAX_LINES = 50
MAX_FIELDS = 12
# The trace's records are the JSON schema that the app, stored traces and exported files share (esp.trace):
# one field per thing a step shows, read by name, so they are exempt from the field count.
SCHEMA = {"esp.trace.StepTrace", "esp.trace.NodeTrace"}


def _modules() -> dict[str, ast.Module]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = ast.parse(path.read_text(), str(path))
    return out


def long_functions(modules: dict[str, ast.Module], limit: int = MAX_LINES) -> list[str]:
    """'module:line name (n lines)' for every function or method longer than `limit` lines (decorators left out)."""
    out = []
    for name, tree in modules.items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > limit:
                    out.append(f"{name}:{node.lineno} {node.name} ({n} lines)")
    return out


def _own_fields(cls: ast.ClassDef) -> set[str]:
    """A dataclass's fields and every `self.x` a method assigns (annotated names in any other class body are
    class attributes, such as a drafter's `name`)."""
    record = any("dataclass" in ast.unparse(d) for d in cls.decorator_list)
    fields = {b.target.id for b in cls.body if record and isinstance(b, ast.AnnAssign) and isinstance(b.target, ast.Name)
              and "ClassVar" not in ast.unparse(b.annotation)}
    for node in ast.walk(cls):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
        for t in targets:
            for e in [t, *(t.elts if isinstance(t, ast.Tuple) else [])]:
                if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
                    fields.add(e.attr)
    return fields


def class_fields(modules: dict[str, ast.Module]) -> dict[str, set[str]]:
    """module.Class -> its instance fields, those of its bases defined in esp/ included."""
    own, bases, where = {}, {}, {}
    for mod, tree in modules.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                key = f"{mod}.{node.name}"
                own[key], bases[key] = _own_fields(node), [ast.unparse(b) for b in node.bases]
                where.setdefault(node.name, []).append(key)

    def resolve(key: str, seen: frozenset = frozenset()) -> set[str]:
        got = set(own[key])
        for base in bases[key]:
            mod = key.rpartition(".")[0]
            found = f"{mod}.{base}" if f"{mod}.{base}" in own else (where.get(base.rpartition(".")[2]) or [None])[0]
            if found and found not in seen:
                got |= resolve(found, seen | {key})
        return got

    return {key: resolve(key) for key in own}


def big_classes(modules: dict[str, ast.Module], limit: int = MAX_FIELDS) -> list[str]:
    return [f"{key} ({len(f)} fields: {', '.join(sorted(f))})" for key, f in class_fields(modules).items()
            if len(f) > limit and key not in SCHEMA]


def test_the_finders_see_long_functions_and_wide_classes():
    source = ("@dataclass\nclass A:\n    x: int\n    def __post_init__(self):\n        self.y = 1\n"
              "        self.a, self.b = 2, 3\nclass B(A):\n    def f(self):\n        self.z = 0\n"
              "class C:\n    k: int = 0\n" + "def g():\n" + "    pass\n" * 60)
    mods = {"m": ast.parse(source)}
    assert class_fields(mods) == {"m.A": {"x", "y", "a", "b"}, "m.B": {"x", "y", "a", "b", "z"}, "m.C": set()}
    assert big_classes(mods, 4) == ["m.B (5 fields: a, b, x, y, z)"]
    assert long_functions(mods) == ["m:12 g (61 lines)"]


def test_no_function_in_esp_is_over_50_lines():
    assert not long_functions(_modules()), "split these: " + "; ".join(long_functions(_modules()))


def test_no_class_in_esp_has_more_than_a_dozen_fields():
    mods = _modules()
    assert not big_classes(mods), "group these fields into records: " + "; ".join(big_classes(mods))
    assert SCHEMA <= set(class_fields(mods))  # the exemptions name classes that exist


@pytest.mark.parametrize("record", ["Proposal", "Offer", "Budget", "Context", "Forward", "StepResult", "Notes"])
def test_the_step_records_are_keyword_only(record):
    import esp.decoding.drafter as drafter

    cls = getattr(drafter, record)
    assert all(f.kw_only for f in dataclasses.fields(cls)), record
    with pytest.raises(TypeError):
        cls(*[None] * len(dataclasses.fields(cls)))


def test_the_hybrid_keeps_no_step_in_flight_on_itself():
    """What `propose` decides reaches `observe` in the step's record (Proposal.plan), never through the drafter:
    none of the per-step names the hybrid once kept on itself is an attribute of it now."""
    fields = class_fields(_modules())["esp.drafters.hybrid.HybridDrafter"]
    assert not fields & {"cands", "path_of", "choice", "gain", "t0", "resting", "drafted", "known"}, fields

"""esp's modules import one another without a circle: the model loader, the offline models, the cost
curves and the CLIs stack in layers (issue 15 item 7)."""
from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from conftest import ROOT

PACKAGE = ROOT / "esp"


def _module(path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_main_guard(node: ast.AST) -> bool:
    """`if __name__ == "__main__":` runs only when the file is the program, not when it is imported."""
    return (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__")


def _imports(path, modules: set[str], program: bool = False) -> set[str]:
    """esp modules that `path` imports anywhere (function bodies too: a lazy import still closes a circle
    once it runs), except under a main guard; with `program`, only those its main guard imports."""
    here = _module(path)
    return imports_in(path.read_text(), here, path.name == "__init__.py", modules, program)


def imports_in(source: str, here: str, is_package: bool, modules: set[str], program: bool = False) -> set[str]:
    """`_imports` for the source of module `here`."""
    package = here if is_package else here.rpartition(".")[0]
    out: set[str] = set()

    def visit(node: ast.AST, guarded: bool = False) -> None:
        if _is_main_guard(node):
            if program:
                for child in node.body:
                    visit(child, True)
            return
        if program and not guarded:
            for child in ast.iter_child_nodes(node):
                visit(child)
            return
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in modules)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.add(sub if sub in modules else base)
        for child in ast.iter_child_nodes(node):
            visit(child, guarded)

    visit(ast.parse(source))
    return {m for m in out if m in modules and m != here}


def graph() -> dict[str, set[str]]:
    files = sorted(PACKAGE.rglob("*.py"))
    modules = {_module(f) for f in files}
    return {_module(f): _imports(f, modules) for f in files}


def cycle(g: dict[str, set[str]]) -> list[str] | None:
    """One import circle of `g`, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(g[m]):
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state and (found := dfs(n)):
                return found
        state[m] = 2
        stack.pop()
        return None

    for m in sorted(g):
        if m not in state and (found := dfs(m)):
            return found
    return None


def test_cycle_finder_finds_a_circle():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_the_import_graph_has_no_cycle():
    g = graph()
    assert {"esp.models.loader", "esp.models.offline", "esp.budget.cost", "esp.paths", "esp.drafters.hybrid"} <= set(g)
    assert "esp.paths" in g["esp.budget.cost"] and "esp.models.offline" not in g["esp.budget.cost"]
    assert cycle(g) is None, " -> ".join(cycle(g))


def reaches(g: dict[str, set[str]], start: set[str], target: str) -> bool:
    """True when a module of `start` imports `target`, directly or through others."""
    seen, todo = set(), list(start)
    while todo:
        m = todo.pop()
        if m == target:
            return True
        if m not in seen:
            seen.add(m)
            todo.extend(g.get(m, ()))
    return False


def test_no_program_imports_its_own_module_back():
    """`python -m esp.x` runs x as `__main__`: if what its main guard imports leads back to esp.x, the file is
    imported a second time as esp.x, two copies of one module (the circle esp.models.offline had: its main guard ran
    esp.offline_cli, which imports esp.models.loader, which imports esp.models.offline)."""
    files = sorted(PACKAGE.rglob("*.py"))
    modules = {_module(f) for f in files}
    g = graph()
    programs = {_module(f): _imports(f, modules, program=True) for f in files}
    back = [m for m, run in programs.items() if reaches(g, run, m)]
    assert not back, f"these modules' main guards import them back: {back}"
    assert not reaches({"a": set(), "b": set()}, {"b"}, "a")
    # The finder on the old esp/offline.py's shape: it sees the guard's import and the way back.
    old = "from .errors import ESPError\nif __name__ == '__main__':\n    from esp.offline_cli import main\n    main()\n"
    run = imports_in(old, "esp.models.offline", False, modules, program=True)
    assert run == {"esp.offline_cli"} and reaches(g, run, "esp.models.offline")


@pytest.mark.slow
def test_modules_import_alone_in_the_order_that_used_to_close_the_circle():
    """Each in a fresh interpreter: the cost curves first (they reached back up to the offline models), then
    the loader; and the offline CLI still runs as `python -m esp.models.offline`."""
    code = "import esp.budget.cost, esp.drafters.hybrid, esp.models.loader, esp.models.offline, esp.offline_cli, esp.bench.run; print('ok')"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]
    r = subprocess.run([sys.executable, "-m", "esp.models.offline", "no-such-model"], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.strip().startswith("error: Unknown offline model 'no-such-model'")


# The engine's folders by role, lowest first: a module may import its own folder and the ones below it,
# never one above (the loose top-level modules: leaves such as esp.errors below everything, the public
# entry points such as esp.api and esp.methods above every folder but the bench).
LAYERS = ("leaf", "esp.models", "esp.decoding", "esp.budget", "esp.drafters", "top", "esp.bench", "esp.console")
LEAVES = {"esp.errors", "esp.trace", "esp.sampling", "esp.device", "esp.paths"}


def layer(module: str) -> int:
    if module in LEAVES:
        return 0
    if module == "esp.console" or module.endswith(".__main__"):  # programs: they run the layers, nothing imports them
        return len(LAYERS) - 1
    folder = ".".join(module.split(".")[:2])
    return LAYERS.index(folder) if folder in LAYERS else LAYERS.index("top")


def test_no_import_runs_back_up_between_the_engines_folders():
    """The engine's layers, lowest first; a module imports its own layer and those below, never one above:
    1. leaves: esp.errors, esp.trace, esp.sampling, esp.device, esp.paths (no engine imports);
    2. esp.models: the Hugging Face model, its KV cache (esp.models.kvcache, every cache edit) and forward timings;
    3. esp.decoding: the loop (engine, batch), tree, layout, verifier, and the drafter interface with its
       records (esp.decoding.drafter);
    4. esp.budget: cost curves, calibration, width choice and the batch budgets, which see drafters only through
       that interface (esp.budget.batch.Budgeted);
    5. esp.drafters: ESP, the hybrid and the baselines, which implement it;
    6. the entry points (esp.api, esp.methods, esp.cli, ...), which name the drafters;
    7. esp.bench, which measures the entry points; 8. the programs (esp.console, __main__ modules)."""
    g = graph()
    assert layer("esp.decoding.engine") < layer("esp.budget.cost") < layer("esp.drafters.hybrid") < layer("esp.api")
    up = sorted(f"{m} -> {d}" for m, deps in g.items() for d in deps if layer(d) > layer(m))
    assert not up, up
    assert layer("esp.bench.run") > layer("esp.methods")  # the bench measures the public methods


@pytest.mark.slow
def test_the_public_functions_are_not_shadowed_by_the_folders():
    """`esp.decode` is the public function, not a folder: importing every folder leaves it callable."""
    code = ("import esp, esp.decoding.engine, esp.decoding.timer, esp.budget.cost, esp.bench.run, esp.models.loader; "
            "print(callable(esp.decode), callable(esp.stream))")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.stdout.strip() == "True True", r.stderr[-2000:]

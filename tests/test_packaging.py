"""The installable engine (issue 22 item 1): the wheel holds the `esp` package and, for esp.show (issue 41), the
view layer packed inside it as esp._components (no top-level `components`, nothing of the app); it declares what
the engine and the views import, plays a trace from an installed copy with no checkout in reach, and makes three
console scripts that answer --help and fail on bad input with one line."""
from __future__ import annotations

import ast
import configparser
import functools
import importlib.metadata
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser

import pytest
from packaging.requirements import Requirement

from conftest import ROOT
from esp import console

ENGINE = ROOT / "esp"
VIEWS = ROOT / "components"
SCRIPTS = {"esp-generate": "esp.console:generate", "esp-bench": "esp.console:bench",
           "esp-offline": "esp.console:offline"}


def _files(folder, name: str) -> set[str]:
    """The files of `folder` as a wheel names them under package folder `name` (no bytecode)."""
    return {f"{name}/{p.relative_to(folder).as_posix()}" for p in folder.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}


def engine_files() -> set[str]:
    """The engine's files and the view layer's, as esp._components."""
    return _files(ENGINE, "esp") | _files(VIEWS, "esp/_components")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    """The wheel setuptools builds from a copy of the checkout (a build writes build/ and *.egg-info next to
    pyproject.toml, which must not land in the checkout); no network, no build isolation."""
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("dist")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for folder in (ENGINE, VIEWS):
        shutil.copytree(folder, src / folder.name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    code = "import sys; from setuptools import build_meta as b; print(b.build_wheel(sys.argv[1]))"
    r = subprocess.run([sys.executable, "-c", code, str(out)], cwd=src, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return zipfile.ZipFile(out / r.stdout.strip().splitlines()[-1])


def _dist_info(whl: zipfile.ZipFile, name: str) -> str:
    (path,) = [n for n in whl.namelist() if n.endswith(f".dist-info/{name}")]
    return whl.read(path).decode()


@pytest.mark.slow
def test_the_wheel_holds_the_engine_and_its_views_only(wheel):
    names = set(wheel.namelist())
    ours = {n for n in names if not n.startswith("esp_explorer-0.1.0.dist-info/")}
    # Every engine and view file (package data included), and nothing of the app; a package missing from
    # pyproject.toml's list shows here as its files.
    assert ours == engine_files(), (engine_files() - ours, ours - engine_files())
    assert "esp/models/offline/__main__.py" in ours and "esp/_components/lecture.py" in ours
    assert not any(n.startswith(("explorer/", "components/", "app.py")) for n in names)
    assert _dist_info(wheel, "top_level.txt").split() == ["esp"]


@pytest.mark.slow
def test_an_installed_wheel_plays_a_trace_without_the_checkout(wheel, tmp_path):
    """esp.show from the wheel's files alone (the checkout's components/ out of reach): its own views."""
    site = tmp_path / "site"
    wheel.extractall(site)
    shutil.copy(ROOT / "assets" / "trace_copy.json", tmp_path / "trace.json")
    code = ("import esp, esp.notebook as nb; assert nb.view_package() == 'esp._components', nb.view_package(); "
            "assert esp.__file__.startswith(%r); print(esp.show('trace.json', path='lecture.html'))" % str(site))
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site), "PYTHONSAFEPATH": "1", "HOME": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    page = (tmp_path / "lecture.html").read_text()
    assert r.stdout.strip().endswith("lecture.html") and "function espPlayer(" in page and 'id="esp-run"' in page


def _imports(path, top_level_only: bool) -> set[str]:
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    out = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            out.add(node.module.split(".")[0])
    return out - set(sys.stdlib_module_names) - {"esp", "__future__"}


@functools.cache
def _providers() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()  # reads every installed distribution's file list


def _dist(module: str) -> str:
    """The distribution that provides the import name `module` here, normalised (huggingface_hub -> huggingface-hub)."""
    return _providers()[module][0].lower().replace("_", "-")


@pytest.mark.slow
def test_the_metadata_declares_what_the_engine_imports(wheel):
    meta = Parser().parsestr(_dist_info(wheel, "METADATA"))
    reqs = [Requirement(r) for r in meta.get_all("Requires-Dist")]
    core = {r.name.lower().replace("_", "-") for r in reqs if r.marker is None}
    app = {r.name.lower() for r in reqs if r.marker is not None and r.marker.evaluate({"extra": "app"})}
    files = sorted(ENGINE.rglob("*.py"))
    eager = {_dist(m) for f in files for m in _imports(f, top_level_only=True)}
    lazy = {_dist(m) for f in files for m in _imports(f, top_level_only=False)}
    assert {"torch", "transformers"} <= eager <= core, eager - core
    assert "safetensors" in lazy and lazy - core <= app and "gradio" in app  # e.g. plotly, for esp-bench --html only
    torch = next(r for r in reqs if r.name == "torch")
    assert torch.specifier.contains("2.8.0") and torch.specifier.contains(importlib.metadata.version("torch").split("+")[0])
    assert meta["Requires-Python"] == ">=3.10"


@pytest.mark.slow
def test_the_notebook_extra_declares_what_the_views_import(wheel):
    meta = Parser().parsestr(_dist_info(wheel, "METADATA"))
    reqs = [Requirement(r) for r in meta.get_all("Requires-Dist")]
    core = {r.name.lower().replace("_", "-") for r in reqs if r.marker is None}
    notebook = {r.name.lower() for r in reqs if r.marker is not None and r.marker.evaluate({"extra": "notebook"})}
    views = {_dist(m) for f in sorted(VIEWS.rglob("*.py")) for m in _imports(f, top_level_only=False)}
    assert {"anywidget", "plotly", "networkx", "pydantic"} <= views and views - core <= notebook, views - core - notebook


@pytest.mark.slow
def test_the_wheel_makes_three_console_scripts(wheel):
    entry = configparser.ConfigParser()
    entry.read_string(_dist_info(wheel, "entry_points.txt"))
    assert dict(entry["console_scripts"]) == SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS)
def test_console_scripts_answer_help(script, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [script, "--help"])
    with pytest.raises(SystemExit) as e:
        getattr(console, SCRIPTS[script].rpartition(":")[2])()
    assert e.value.code == 0 and capsys.readouterr().out.startswith("usage:")


@pytest.mark.parametrize("script,args,needle", [
    ("esp-generate", ["--prompt", "hi", "--method", "warp"], "Unknown method 'warp'"),
    ("esp-bench", ["--questions", "q.jsonl", "--methods", "esp:k=9"], "k (mask tokens)"),
    ("esp-offline", ["no-such-model"], "Unknown offline model 'no-such-model'"),
])
def test_console_scripts_fail_with_one_line(script, args, needle, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [script, *args])
    with pytest.raises(SystemExit) as e:
        getattr(console, SCRIPTS[script].rpartition(":")[2])()
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert e.value.code == 2 and len(err) == 1 and needle in err[0], err

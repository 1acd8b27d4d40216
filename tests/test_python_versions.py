"""Python 3.10 to 3.12 (issue 22 item 5): vermin finds nothing in the shipped code that needs more than 3.10,
and the requirements pick ZeroGPU's torch on the Pythons a ZeroGPU Space runs."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest
from packaging.requirements import Requirement

from conftest import ROOT

CODE = ["esp", "explorer", "components", "app.py", "scripts", "custom_generate"]


def vermin(*paths) -> subprocess.CompletedProcess:
    """vermin's verdict on `paths` against a target of Python 3.10 at most (annotations evaluated as written)."""
    return subprocess.run([sys.executable, "-c", "import sys, vermin; sys.exit(vermin.main())", "--no-tips", "--violations", "--eval-annotations",
                           "-t=3.10-", *map(str, paths)], cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_the_code_needs_nothing_newer_than_python_3_10():
    r = vermin(*CODE)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-1000:]
    assert re.search(r"Minimum required versions: 3\.(\d+)", r.stdout) and "Target versions not met" not in r.stdout


def test_vermin_flags_what_needs_3_11(tmp_path):
    f = tmp_path / "new.py"
    f.write_text("import tomllib\n")
    r = vermin(f)
    assert r.returncode != 0 and "tomllib" in r.stdout


def _torch_pins() -> list[Requirement]:
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    return [Requirement(x) for x in lines if x.strip().startswith("torch") and not x.lstrip().startswith("#")]


@pytest.mark.parametrize("python,torch", [("3.10", "2.11.0"), ("3.11", "2.13.0"), ("3.12", "2.11.0")])
def test_requirements_pick_a_torch_for_each_python(python, torch):
    """3.11 (this project's machines) gets the tested torch; 3.10 and 3.12, the Pythons ZeroGPU runs, get the
    newest torch ZeroGPU supports (2.8 to 2.11)."""
    picked = [r for r in _torch_pins() if r.marker is None or r.marker.evaluate({"python_version": python})]
    assert len(picked) == 1 and list(picked[0].specifier)[0].version == torch


def test_the_space_front_matter_runs_a_zerogpu_python_and_preloads_the_embedded_model():
    front = re.match(r"---\n(.*?)\n---\n", (ROOT / "README.md").read_text(), re.S).group(1)
    assert re.search(r'^python_version: "3\.12\.12"$', front, re.M)
    assert re.search(r"^preload_from_hub:\n  - HuggingFaceTB/SmolLM2-135M-Instruct$", front, re.M)

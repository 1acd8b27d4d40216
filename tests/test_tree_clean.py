"""A test run leaves the checkout as it found it: no tracked file changed, no new untracked file.

conftest records `git status` (with file contents) when the session starts and runs this file last."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from conftest import tree_state


def _diff(before: dict, after: dict) -> list[str]:
    return sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))


def test_tree_state_sees_edits_new_files_and_restores(tmp_path):
    if not shutil.which("git"):
        pytest.skip("git is not installed")
    git = lambda *a: subprocess.run(["git", *a], cwd=tmp_path, check=True, capture_output=True)
    git("init", "-q")
    (tmp_path / ".gitignore").write_text("*.log\n")
    (tmp_path / "a.txt").write_text("one")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    clean = tree_state(tmp_path)
    assert clean == {}
    (tmp_path / "a.txt").write_text("two")
    edited = tree_state(tmp_path)
    assert _diff(clean, edited) == ["a.txt"]
    (tmp_path / "a.txt").write_text("three")  # still " M", but not the same change
    assert _diff(edited, tree_state(tmp_path)) == ["a.txt"]
    (tmp_path / "a.txt").write_text("one")
    (tmp_path / "run.log").write_text("ignored")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "new.bin").write_bytes(b"x")
    assert _diff(clean, tree_state(tmp_path)) == ["sub/new.bin"]
    assert tree_state(tmp_path / "sub") is None  # not the top of a checkout


def test_the_run_left_the_tree_as_it_found_it(tree_at_start):
    if tree_at_start is None:
        pytest.skip("not a git checkout: nothing to compare")
    changed = _diff(tree_at_start, tree_state())
    assert not changed, f"the test run changed these files (see git status): {changed}"

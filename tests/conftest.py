"""Shared fixtures: the embedded model (loaded once per test session) and tiny random-weight models."""
from __future__ import annotations

import hashlib
import html
import importlib
import os
import re
import subprocess
from pathlib import Path

import pytest
import torch

from esp.bench.questions import DEV_QUESTIONS, load_questions
from esp.models.lm import IdTokenizer
from esp.models.lm import LM

ROOT = Path(__file__).resolve().parents[1]
# The suite's app servers take many loopback sessions from one address (tests/test_door.py sets its own limits).
os.environ.setdefault("ESP_APP_LOCAL_UNLIMITED", "1")
QUESTIONS = DEV_QUESTIONS
# Checked last: a test run must leave the checkout as it found it (tests/test_tree_clean.py).
TREE_CHECK = "test_tree_clean.py"
_TREE_AT_START = pytest.StashKey()


def script_module(name: str):
    """scripts/<name>.py as the package module it is run as (`python -m scripts.<name>`, from the checkout)."""
    return importlib.import_module(f"scripts.{name}")


def plain(line: str) -> str:
    """A status line as the visitor reads it: components.common.md_text's escapes undone."""
    return html.unescape(re.sub(r"\\(.)", r"\1", line))


def tree_state(root: Path = ROOT) -> dict[str, tuple[str, str]] | None:
    """`git status` of the checkout at root, with content: {path: (XY, sha256)} for every changed or
    untracked (not ignored) file. None when root is not the top of a git checkout (or git is missing)."""
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=root, capture_output=True, text=True)
    except OSError:
        return None
    if top.returncode or Path(top.stdout.strip()).resolve() != Path(root).resolve():
        return None
    out = subprocess.run(["git", "status", "--porcelain=v1", "-z", "--untracked-files=all"], cwd=root,
                         capture_output=True, check=True).stdout.decode()
    state, entries = {}, iter(out.split("\0"))
    for entry in entries:
        if not entry:
            continue
        xy, path = entry[:2], entry[3:]
        if xy[0] in "RC":
            next(entries)  # a rename's or copy's source path follows
        f = Path(root) / path
        # The content too, so that a further change to an already modified file counts.
        state[path] = (xy, hashlib.sha256(f.read_bytes()).hexdigest() if f.is_file() else "")
    return state


def pytest_sessionstart(session):
    session.config.stash[_TREE_AT_START] = tree_state()


def pytest_collection_modifyitems(items):
    """The tree check runs after every other test, whatever the order of the files."""
    items.sort(key=lambda item: item.path.name == TREE_CHECK)


@pytest.fixture(scope="session")
def tree_at_start(request):
    """tree_state() as it was when the test session started (None outside a git checkout)."""
    return request.config.stash[_TREE_AT_START]


@pytest.fixture(scope="session")
def lm():
    """SmolLM2-135M-Instruct from the embedded GGUF."""
    from esp.models.loader import load

    return load()


@pytest.fixture(scope="session")
def hf(lm):
    """The embedded model's converted weights through from_pretrained, as a transformers user loads a model
    (the `lm` fixture converts them once): (model, tokenizer)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from esp.models.offline import MODELS, converted

    path = converted(MODELS["embedded"])
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32), AutoTokenizer.from_pretrained(path)


def spec_bench(per_category: int = 1) -> list[dict]:
    """The first `per_category` development-split questions of each category (the bench's own loader)."""
    if not QUESTIONS.exists():
        pytest.skip(f"Spec-Bench questions not found at {QUESTIONS}")
    return load_questions(QUESTIONS, per_category)


def _tiny(arch: str, vocab: int = 96):
    common = dict(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    if arch == "llama":
        from transformers import LlamaConfig, LlamaForCausalLM
        return LlamaForCausalLM(LlamaConfig(**common))
    if arch == "qwen2":
        from transformers import Qwen2Config, Qwen2ForCausalLM
        return Qwen2ForCausalLM(Qwen2Config(**common))
    if arch == "qwen3":
        from transformers import Qwen3Config, Qwen3ForCausalLM
        return Qwen3ForCausalLM(Qwen3Config(head_dim=8, **common))
    if arch == "gemma3":
        from transformers import Gemma3ForCausalLM, Gemma3TextConfig
        # A short window so that long runs cross it and the sliding-window mask is exercised.
        cfg = Gemma3TextConfig(head_dim=8, sliding_window=24, sliding_window_pattern=2, **common)
        return Gemma3ForCausalLM(cfg)
    raise ValueError(arch)


ARCHS = ("llama", "qwen2", "qwen3", "gemma3")


@pytest.fixture(scope="session")
def tiny_lm():
    """tiny_lm(arch) -> an LM with random weights in float64 (no rounding ties)."""
    made: dict[str, LM] = {}

    def get(arch: str) -> LM:
        if arch not in made:
            torch.manual_seed(0)
            model = _tiny(arch).double().eval()
            model.generation_config.eos_token_id = None
            made[arch] = LM(model, IdTokenizer(), f"tiny-{arch}")
        return made[arch]

    return get


@pytest.fixture(scope="module")
def browser():
    """Debian's chromium through Playwright, headless (the tests that use it skip without /usr/bin/chromium)."""
    sync_api = pytest.importorskip("playwright.sync_api")
    args = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"]
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path="/usr/bin/chromium", args=args)
        yield b
        b.close()

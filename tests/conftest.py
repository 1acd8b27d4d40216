"""Shared fixtures: the embedded model (loaded once per test session), tiny random-weight models, and the tiers.

Tiers (markers, registered in pyproject.toml): `model` loads the embedded model (or a bigger one), `app` builds
or serves the Gradio app, `browser` drives chromium, `slow` runs subprocesses, builds or long loops; what carries
none of them is the fast tier (`make check`). A test that asks for the embedded model or the browser without its
marker is refused at collection, so that the fast tier never loads them unasked."""
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
from esp.sampling import Sampling

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


# Fixtures that belong to a tier: a test using one (directly or through another fixture) carries its marker.
TIER_FIXTURES = {"lm": "model", "hf": "model", "lm_bf16": "model", "browser": "browser"}


def pytest_collection_modifyitems(items):
    """The tree check runs after every other test, whatever the order of the files; every test that uses a
    tier's fixture is marked with that tier."""
    unmarked = [f"{item.nodeid} uses the fixture {name!r}: mark it {mark!r}" for item in items
                for name, mark in TIER_FIXTURES.items()
                if name in getattr(item, "fixturenames", ()) and item.get_closest_marker(mark) is None]
    if unmarked:
        raise pytest.UsageError("; ".join(unmarked))
    items.sort(key=lambda item: item.path.name == TREE_CHECK)


@pytest.fixture(autouse=True)
def _models_only_where_marked(request, monkeypatch):
    """A test without the `model` mark that loads one of the registered models (the embedded one or a bigger
    one, by any path: a fixture, the app's handlers, a script) fails at once, naming the mark it lacks."""
    if request.node.get_closest_marker("model") is not None:
        return
    from esp.models import loader
    from esp.models.offline import MODELS

    real = loader._load

    def refuse(name, *args):
        if name in MODELS:
            pytest.fail(f"{request.node.nodeid} loads the model {name!r}: mark it `model`", pytrace=False)
        return real(name, *args)

    monkeypatch.setattr(loader, "_load", refuse)


# A bench run in a test times its oracle curve (esp.bench.run's rounds of paired forwards: a sweep before the
# questions, one more after each) at four widths over a short cache, once each, in place of esp.models.timing's
# seventeen over 300 tokens, five times for a sweep: the run still sweeps, pools its rounds and prices every row on
# that curve, in about a second a round where the whole grid takes 5 s (a sweep 17 s) on a 2-core AVX2 CPU. What
# the curve is and how a run is priced on it: tests/test_oracle.py and tests/test_bench_protocol.py.
NARROW_GRID = (1, 2, 4, 8)
NARROW_CONTEXT = 32
NARROW_BENCH = ROOT / "tests" / "narrow_bench.py"  # `python -m esp.bench` with these rounds, in a process of its own


def narrow_samples(lm, grid: tuple[int, ...], repeats: int = 1) -> dict[int, list[tuple[float, float]]]:
    """esp.models.timing.samples at NARROW_GRID over a NARROW_CONTEXT-token cache, one repeat, whatever `grid` and
    `repeats` the run asks for."""
    from esp.models.timing import samples

    return samples(lm, NARROW_GRID, NARROW_CONTEXT, 1)


@pytest.fixture(autouse=True)
def _narrow_sweeps(monkeypatch):
    """Every bench run in this process times narrow rounds (tests/narrow_bench.py: in a process of its own)."""
    import esp.bench.run

    monkeypatch.setattr(esp.bench.run, "samples", narrow_samples)


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
# The two target decoding modes; sampling is keyed by (seed, position), so lossless under it is exact.
SAMPLERS = {
    "greedy": lambda seed: Sampling(seed=seed),
    "sampling": lambda seed: Sampling(temperature=0.9, top_p=0.95, top_k=40, seed=seed),
}


def repeated_prompt(seed: int, vocab: int) -> list[int]:
    """A random 5-9 token phrase three times and a bit, so that drafts sometimes hit."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randint(0, vocab, (5 + seed % 5,), generator=g).tolist()
    return base * 3 + base[:2]


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


# A character per token: the 95 printable ASCII characters and one for anything else, a tiny model's 96 ids.
CHARS = "".join(map(chr, range(32, 127)))
CHAT_TEMPLATE = ("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
                 "{% if add_generation_prompt %}<assistant>{% endif %}")


def char_tokenizer():
    """A transformers tokenizer of one id per printable ASCII character, with a chat template and no EOS: what
    the API takes from a caller, for a tiny model."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {c: i for i, c in enumerate(CHARS)} | {"\ufffd": len(CHARS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="\ufffd"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()  # the characters back together, without spaces between them
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="\ufffd", chat_template=CHAT_TEMPLATE)


@pytest.fixture(scope="session")
def tiny_chat(tiny_lm):
    """(model, tokenizer) as a caller of esp.decode holds them: the tiny llama's transformers model and a
    character tokenizer with a chat template."""
    return tiny_lm("llama").model, char_tokenizer()


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


@pytest.fixture(scope="module")
def served(browser):
    """(address, browser): the app served in-process on the embedded model (tests/app_server.py), and chromium."""
    from app_server import serve

    with serve("local") as url:
        yield url, browser


@pytest.fixture(scope="module")
def loads():
    """Every model load the server attempts while a module's tests run."""
    from explorer import gpu

    seen = []
    with pytest.MonkeyPatch.context() as mp:
        real = gpu.load
        mp.setattr(gpu, "load", lambda *a, **kw: seen.append(a) or real(*a, **kw))
        yield seen

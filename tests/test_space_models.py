"""The models a Space offers (components/limits.py) and the README's front matter that declares them: a Space with
a GPU offers a ~1.5B model on which ESP wins, preloaded at build time, and `models:` lists exactly the models
the Space offers."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import components.limits as limits
from esp.models.offline import MODELS

ROOT = Path(__file__).resolve().parents[1]


def front_list(key: str) -> list[str]:
    """A list in the README's front matter ("key:" then "  - item" lines)."""
    front = re.match(r"---\n(.*?)\n---\n", (ROOT / "README.md").read_text(), re.S).group(1)
    block = re.search(rf"^{key}:\n((?:  - .+\n?)+)", front, re.M)
    return [line.strip()[2:] for line in block.group(1).splitlines()]


def hub_id(name: str) -> str:
    """A model's Hub id (an offline model by the one it was made from)."""
    return MODELS[name].hub_id if name in MODELS else name


@pytest.fixture
def on_a_space(monkeypatch):
    """Limits as a fresh Space computes them: no offline GGUF model installed, `gpu` said by CUDA."""
    monkeypatch.setattr(limits, "offline_models", lambda: [])

    def offered(gpu: bool, **env) -> tuple[str, ...]:
        monkeypatch.setattr("torch.cuda.is_available", lambda: gpu)
        return limits.Limits.from_env({"SPACE_ID": "me/esp", **env}).models
    return offered


def test_a_space_with_a_gpu_offers_the_model_where_esp_wins(on_a_space):
    assert not set(limits.GPU_SPACE_MODELS) & set(on_a_space(False))  # a CPU Space: too slow there
    assert set(limits.GPU_SPACE_MODELS) <= set(on_a_space(True))  # a GPU of its own
    assert set(limits.GPU_SPACE_MODELS) <= set(on_a_space(False, SPACES_ZERO_GPU="true"))  # ZeroGPU
    assert "Qwen/Qwen2.5-Coder-1.5B-Instruct" in limits.GPU_SPACE_MODELS


def test_the_front_matter_lists_exactly_what_the_space_offers_and_preloads_it(on_a_space):
    offered = [hub_id(m) for m in on_a_space(False, SPACES_ZERO_GPU="1")]
    assert front_list("models") == offered
    assert set(front_list("preload_from_hub")) == {hub_id("embedded"), *limits.GPU_SPACE_MODELS}

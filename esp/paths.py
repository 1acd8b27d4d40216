"""Where ESP Explorer keeps what it computes once per machine (converted models, measured cost curves).

At the bottom of the package's imports: the model loader, the offline models and the cost curves all read it.
"""
from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """The model cache: $ESP_CACHE, else $XDG_CACHE_HOME/esp-explorer, else ~/.cache/esp-explorer."""
    root = os.environ.get("ESP_CACHE") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "esp-explorer")
    return Path(root).expanduser()


def write_atomic(path: Path, text: str) -> bool:
    """Write `text` to `path` through a temporary file and a rename, so that a reader never sees half a file;
    False when the cache is read-only (the caller keeps what it computed for this process)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(text)
        tmp.replace(path)
    except OSError:
        return False
    return True

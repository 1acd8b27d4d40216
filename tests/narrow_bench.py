"""`python -m esp.bench` with the narrow rounds of timings the suite's bench runs take (tests/conftest.py
`narrow_samples`), for the tests that run the bench in processes of their own: a run killed midway, torchrun's
ranks."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, as `python -m` from its root has it

import esp.bench.run  # noqa: E402
from conftest import narrow_samples  # noqa: E402
from esp.bench.commands import main  # noqa: E402
from esp.cli import run_main  # noqa: E402

if __name__ == "__main__":
    esp.bench.run.samples = narrow_samples
    run_main(main)

"""The console scripts `pip install` makes (esp-generate, esp-bench, esp-offline): each runs its command
line with engine errors turned into one line on stderr, as `python -m esp.generate` etc. do."""
from __future__ import annotations

from esp.cli import run_main


def generate() -> None:
    """esp-generate: `python -m esp.generate`."""
    from esp.generate import main

    run_main(main)


def bench() -> None:
    """esp-bench: `python -m esp.bench` and its subcommands."""
    from esp.bench.commands import main

    run_main(main)


def offline() -> None:
    """esp-offline: `python -m esp.models.offline`."""
    from esp.offline_cli import main

    main()

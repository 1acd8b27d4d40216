"""`python -m esp.bench`: the benchmark's command line and its subcommands (esp.bench.commands)."""
from esp.bench.commands import main
from esp.cli import run_main

if __name__ == "__main__":
    run_main(main)

"""`python -m esp.bench`: the benchmark's command line (esp.bench.run)."""
from esp.bench.run import main
from esp.cli import run_main

if __name__ == "__main__":
    run_main(main)

"""`python -m esp.models.offline NAME` (what `make qwen` runs). The command line lives in esp.offline_cli, which
needs the model loader, which needs this package: as a package with a `__main__`, `esp.models.offline` is imported
once, as itself, instead of a second time under the name `__main__`."""
from esp.offline_cli import main

main()

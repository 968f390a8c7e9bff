# Two set-up commands: `make demo` and `make test`. Both build .venv first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Azurite (the Azure Storage emulator the Azure store's tests run against), from npm.
AZURITE_VERSION := 3.37.0
AZURITE_STAMP := .tools/.azurite-$(AZURITE_VERSION)

# Chromium, which the dashboard's browser tests drive headless (Debian's package; never
# Playwright's own browser download).
CHROMIUM ?= /usr/bin/chromium

.PHONY: demo test check lint typecheck suite long bench clean java-check chromium-check wheel

# pytest keeps the test modules it rewrites (and Python the modules it compiles) in
# __pycache__ (git ignores it); with PYTHONDONTWRITEBYTECODE set in the shell, each
# xdist worker of each run rewrites and compiles them all again: ~5 s of CPU a worker
# in make check's collection (7.4 s against 2.5 s with the caches).
unexport PYTHONDONTWRITEBYTECODE

# Workers for the whole suite (pytest-xdist). Most of the
# suite's wall time waits on subprocesses, servers, Spark and timeouts, not on the CPU, so
# more workers than cores pay; `--dist loadgroup` runs the classic Spark tests on one
# worker and the Connect ones on another (tests/support/scheduling.py).
JOBS ?= 4

$(STAMP): pyproject.toml
	@$(PY) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is needed"'
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip 'setuptools>=77'  # the build's own (pyproject's SPDX license)
	$(BIN)/pip install --quiet -e '.[spark,dev,azure,gcp]'
	@touch $(STAMP)

java-check:
	@command -v java >/dev/null 2>&1 || { \
	  echo "Java 17+ is needed for PySpark and was not found on PATH."; \
	  echo "Install it with: sudo apt-get install -y openjdk-17-jre-headless"; \
	  exit 1; }

chromium-check:
	@test -x $(CHROMIUM) || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "Installing chromium for the dashboard's browser tests (apt-get)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	  else \
	    echo "Chromium is needed for the dashboard's browser tests and was not found at $(CHROMIUM)."; \
	    echo "Install it with: sudo apt-get install -y chromium"; \
	    exit 1; \
	  fi; }

$(AZURITE_STAMP):
	@command -v npm >/dev/null 2>&1 || { \
	  echo "npm (Node.js 18+) is needed to install Azurite for the Azure store's tests."; \
	  echo "Install it with: sudo apt-get install -y nodejs npm"; \
	  exit 1; }
	npm install --prefix .tools --no-audit --no-fund --loglevel=error azurite@$(AZURITE_VERSION)
	@touch $@

# The package as a wheel in dist/ (until there is a release), built in a throwaway venv
# (not .venv): pip install 'dist/osqueue_spark-VERSION-py3-none-any.whl[spark]'.
WHEEL_VENV := build/wheel-venv
wheel:
	@$(PY) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is needed"'
	rm -rf dist $(WHEEL_VENV)
	$(PY) -m venv $(WHEEL_VENV)
	$(WHEEL_VENV)/bin/pip wheel --quiet --no-deps --wheel-dir dist .
	@ls dist/*.whl

demo: $(STAMP) java-check
	$(BIN)/python -m osqueue_spark.pipelines.demo

lint: $(STAMP)
	$(BIN)/ruff check broker osqueue_spark tests bench tools jobs notebooks
	$(BIN)/lint-imports --no-cache

typecheck: $(STAMP)
	$(BIN)/mypy

# The whole pytest suite, every tier, less the long variants of the random and chaos
# runs (marked long: their short variants run here with the same checks);
# pyproject's addopts print the 25 slowest tests.
suite: $(STAMP) java-check $(AZURITE_STAMP) chromium-check
	OSQ_CHROMIUM=$(CHROMIUM) $(BIN)/python -m pytest -q -n $(JOBS) --dist loadgroup -m "not long"

# The long variants alone (tests/support/tiers.py): the chaos runs at their former 20 s,
# the job-table equivalence run's and the spill adversaries' other seeds, and the HTTP
# fuzzing's full request counts.
long: $(STAMP) java-check $(AZURITE_STAMP)
	$(BIN)/python -m pytest -q -n $(JOBS) --dist loadgroup -m long

test: lint typecheck suite

# The one-minute check: lint, import contracts, types, references and the unit tier
# (tests/unit: no servers, no subprocesses, no Spark, no browser), less its few tests
# marked slow (long random runs, a test counting what a loop does in 4 s of wall
# time; make test runs them); its hypothesis runs take a fifth
# of their examples (OSQ_TESTS_TIER=quick: tests/support/tiers.py).
check: lint typecheck
	$(BIN)/python -m tools.refcheck
	OSQ_TESTS_TIER=quick $(BIN)/python -m pytest -q -n 2 -m "not slow" tests/unit tests/repo/test_tests_layout.py

bench: $(STAMP)
	$(BIN)/python bench/state_encode_bench.py

clean:
	rm -rf $(VENV) .tools .pytest_cache .mypy_cache .ruff_cache build dist

# The Spark tests under PySpark 4.0-4.3, a venv each under .compat/ (heavy; not part of `make test`).
# make compat VERSIONS=4.0,4.3 runs a subset; FRESH=1 rebuilds the venvs.
.PHONY: compat
compat: $(STAMP) java-check
	$(BIN)/python tools/compat.py $(if $(VERSIONS),--versions $(VERSIONS)) $(if $(FRESH),--fresh)

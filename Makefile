# Two set-up commands: `make demo` and `make test`. Both build .venv first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit bench clean java-check

$(STAMP): pyproject.toml
	@$(PY) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is needed"'
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[spark,dev,gcp]'
	@touch $(STAMP)

java-check:
	@command -v java >/dev/null 2>&1 || { \
	  echo "Java 17+ is needed for PySpark and was not found on PATH."; \
	  echo "Install it with: sudo apt-get install -y openjdk-17-jre-headless"; \
	  exit 1; }

demo: $(STAMP) java-check
	$(BIN)/python -m osqueue_spark.demo

lint: $(STAMP)
	$(BIN)/ruff check broker osqueue_spark tests bench jobs notebooks

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP) java-check
	$(BIN)/python -m pytest -q

test: lint typecheck unit

bench: $(STAMP)
	$(BIN)/python bench/state_encode_bench.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

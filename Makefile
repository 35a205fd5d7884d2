PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck pytest bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m interpreters demo

test: $(STAMP) lint typecheck pytest

lint: $(STAMP)
	$(BIN)/ruff check op state interpreters programs tests bench

typecheck: $(STAMP)
	$(BIN)/mypy op state interpreters programs tests bench
	$(BIN)/pyright

pytest: $(STAMP)
	$(BIN)/pytest

# the baselines are installed for the benchmarks only; they are not dependencies of opdsl
bench: $(STAMP)
	$(BIN)/pip install -q effect langgraph langgraph-checkpoint-sqlite
	$(BIN)/python bench/driver.py
	$(BIN)/python bench/journal.py
	$(BIN)/python bench/concurrency.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache

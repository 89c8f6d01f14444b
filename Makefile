# Two commands on a fresh machine: `make demo` runs the demo, `make test` the tests.
# Both create .venv and install the project with its extras the first time.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: demo test test-fast lint bench docs clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

demo: $(BIN)/.installed
	$(BIN)/proletarian-di demo

test: $(BIN)/.installed
	$(BIN)/pytest $(PYTEST_ARGS)

test-fast: $(BIN)/.installed
	$(BIN)/pytest -m "not db" $(PYTEST_ARGS)

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

docs: $(BIN)/.installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

$(BIN)/.bench-installed: $(BIN)/.installed
	$(BIN)/pip install -q -e '.[dev,bench]'
	touch $@

bench: $(BIN)/.bench-installed
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) site build *.egg-info

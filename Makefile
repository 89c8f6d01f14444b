# Two commands on a fresh machine: `make demo` runs the demo, `make test` the tests.
# Both create .venv and install the project with its extras the first time.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=
# Test processes, each with an embedded PostgreSQL and a MariaDB of its own (a MYSQL_URL you
# set is one server: its tests then all run in one process). With DATABASE_URL each process
# has a database of its own on that server; roles are the server's, so the tests of grants,
# which create them, run in one process (tests/test_security.py's xdist group). Three on two
# cores: most tests wait on their servers more than they compute. See tests/conftest.py.
PYTEST_WORKERS ?= $(if $(DATABASE_URL),2,3)
# Django 6 (its built-in django.tasks) needs Python 3.12+: `make test-django6` tests the
# Django backend on it, in a venv of its own.
PYTHON312 ?= python3.12
VENV_DJANGO6 ?= .venv-django6
BIN_DJANGO6 := $(VENV_DJANGO6)/bin

.PHONY: demo test test-fast test-django6 lint bench docs clean

# The first install takes a minute or more: pip shows what it fetches.
$(BIN)/.installed: pyproject.toml
	@echo "Installing proletarian-di and its extras into $(VENV) (the first time only)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -e '.[dev]'
	touch $@

demo: $(BIN)/.installed
	$(BIN)/proletarian-di demo

test: $(BIN)/.installed
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

$(BIN_DJANGO6)/.installed: pyproject.toml
	@echo "Installing proletarian-di with Django 6 into $(VENV_DJANGO6) (the first time only)"
	$(PYTHON312) -m venv $(VENV_DJANGO6)
	$(BIN_DJANGO6)/pip install -q --upgrade pip
	$(BIN_DJANGO6)/pip install -e '.[django,postgres,binary,mysql,embedded]' \
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
	@echo "Installing the benchmark's extras into $(VENV) (the first time only)"
	$(BIN)/pip install -e '.[dev,bench]'
	touch $@

bench: $(BIN)/.bench-installed
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) $(VENV_DJANGO6) site build *.egg-info

"""Fixtures: every behavioural test runs on PostgreSQL and on MySQL/MariaDB.

PostgreSQL is `DATABASE_URL` or an embedded server started for the session.
MySQL is `MYSQL_URL` (default: the local MariaDB); when none is reachable the
MySQL tests skip, saying why, unless PROLETARIAN_REQUIRE_MYSQL=1 (CI), which
makes them fail instead. With the default and pytest-xdist, each worker but the
first starts a MariaDB of its own from the machine's binaries (`private_mariadb`),
so that the MySQL tests spread over the workers.

Two tiers: a test that uses a database fixture (or any fixture built on one) is
marked `db` here; a test that reaches a database some other way says so with
`@pytest.mark.db`. `pytest -m "not db"` runs the rest in seconds, with no server.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from proletarian_di._store.secrets import mask
from proletarian_di.embedded import postgres_url
from proletarian_di.testing import mysql_unreachable_reason

import private_mariadb
from backends import MYSQL_URL, Backend, Gate, MySQLBackend, PostgresBackend

pytest_plugins = ["slow_tests"]


def _import_the_cli_with_no_fixed_width() -> None:
    """Rich fixes a console's width for good from COLUMNS when it is made: import the CLI (and
    its consoles) before any test sets COLUMNS, so each test's own COLUMNS counts, whatever
    order the tests run in (pytest-xdist's workers run them in another)."""
    columns = os.environ.pop("COLUMNS", None)
    try:
        import proletarian_di.contrib.cli._app  # noqa: F401
    except ImportError:  # the cli extra is not installed
        pass
    finally:
        if columns is not None:
            os.environ["COLUMNS"] = columns


_import_the_cli_with_no_fixed_width()


def _private_mysql_servers() -> bool:
    """Whether each pytest-xdist worker but the first has a MariaDB of its own: with the
    default MYSQL_URL (one named is the server to test, such as a MySQL 8), more than one
    worker, and the machine's server binaries. The same answer in every worker."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    return "MYSQL_URL" not in os.environ and workers > 1 and private_mariadb.available()


DATABASE_FIXTURES = frozenset(
    {"backend", "pg", "pool", "effects", "postgresql_backend", "mysql_backend"}
)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark `db` every test whose fixtures, direct or indirect, include a database; and,
    unless the workers have MySQL servers of their own, put every test that uses MySQL in
    one xdist group, so that under `pytest -n N --dist loadgroup` one worker runs them all
    (they share the one MySQL database, while each worker starts an embedded PostgreSQL of
    its own). The tests that drive Chromium run in one worker, which starts it and seeds
    their pages once per module."""
    shared = not _private_mysql_servers()
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if DATABASE_FIXTURES.intersection(fixtures):
            item.add_marker(pytest.mark.db)
        if shared and ("mysql" in item.nodeid.lower() or "mysql_backend" in fixtures):
            item.add_marker(pytest.mark.xdist_group("mysql"))
        elif "browser" in fixtures:
            item.add_marker(pytest.mark.xdist_group("chromium"))


_LEFTOVERS = pytest.StashKey[list[tuple[Backend, set[str]]]]()


def _shared_servers() -> list[Backend]:
    """The servers a test run may share with others: the MySQL/MariaDB, and the PostgreSQL
    that `DATABASE_URL` names (not an embedded one, gone at the end), if reachable."""
    servers: list[Backend] = []
    if not mysql_unreachable_reason(MYSQL_URL, timeout=1):
        servers.append(MySQLBackend(MYSQL_URL))
    url = os.environ.get("DATABASE_URL")
    if url:
        server = PostgresBackend(url, connect_args={"connect_timeout": 1})
        try:
            server.schemas()
        except Exception:
            pass
        else:
            servers.append(server)
    return servers


def pytest_sessionstart(session: pytest.Session) -> None:
    """Note the shared servers' databases (PostgreSQL: schemas) before the tests, in the one
    process that outlives pytest-xdist's workers, for `pytest_sessionfinish`."""
    if not hasattr(session.config, "workerinput"):
        session.stash[_LEFTOVERS] = [(s, s.schemas()) for s in _shared_servers()]


_LEFT = pytest.StashKey[list[str]]()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Fail the run if the tests left databases (PostgreSQL: schemas) that were not there
    before (`pytest_terminal_summary` names them): a test that creates one drops it, or has
    the session drop it at its end (`Backend.install` notes what it creates; else
    `will_create` or `creating_schemas`)."""
    left = session.config.stash[_LEFT] = []
    for server, before in session.stash.get(_LEFTOVERS, []):
        try:
            names = sorted(server.schemas() - before)
        except Exception:  # the server went away: the tests say so already
            continue
        if names:
            kind = "databases" if server.name == "mysql" else "schemas"
            left.append(f"the tests left {kind} on {mask(server.url)}: {', '.join(names)}")
    if left:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Name what the tests left on the shared servers (see `pytest_sessionfinish`)."""
    for line in config.stash.get(_LEFT, []):
        terminalreporter.write_sep("=", line, red=True, bold=True)


@pytest.fixture(scope="session")
def postgresql_backend() -> Iterator[Backend]:
    """The session's PostgreSQL (`DATABASE_URL` or embedded), with a fresh schema; the
    schemas the session created are dropped at its end."""
    with postgres_url() as url:
        backend = PostgresBackend(url)
        backend.recreate()
        yield backend
        backend.drop_created_schemas()


@pytest.fixture(scope="session")
def mysql_backend() -> Iterator[Backend]:
    """The session's MySQL/MariaDB (`MYSQL_URL`, or a private one: see
    `_private_mysql_servers`) with a fresh schema, or a skip saying why; the databases the
    session created are dropped at its end."""
    reason = mysql_unreachable_reason(MYSQL_URL)
    if reason:
        if os.environ.get("PROLETARIAN_REQUIRE_MYSQL") == "1":
            pytest.fail(f"PROLETARIAN_REQUIRE_MYSQL=1 but {reason}")
        pytest.skip(reason)
    first = os.environ.get("PYTEST_XDIST_WORKER", "gw0") == "gw0"
    with contextlib.ExitStack() as stack:
        url = MYSQL_URL
        if _private_mysql_servers() and not first:
            url = stack.enter_context(private_mariadb.private_mariadb())
        backend = MySQLBackend(url)
        backend.recreate()
        yield backend
        backend.drop_created_schemas()


@pytest.fixture(params=["postgresql", "mysql"])
def backend(request: pytest.FixtureRequest) -> Backend:
    """A clean database of each kind, with the default schema installed."""
    chosen: Backend = request.getfixturevalue(f"{request.param}_backend")
    chosen.reset()
    return chosen


@pytest.fixture
def pg(postgresql_backend: Backend) -> Backend:
    """PostgreSQL only, for what only PostgreSQL has."""
    postgresql_backend.reset()
    return postgresql_backend


@pytest.fixture
def pool(backend: Backend) -> Iterator[object]:
    """A connection pool (psycopg_pool or DBUtils) on the backend."""
    source = backend.pool(8)
    yield source
    source.close()  # type: ignore[attr-defined]


@pytest.fixture
def gate() -> Iterator[Gate]:
    """A blocking handler (`backends.Gate`), released at the test's end whatever happened."""
    blocking = Gate()
    yield blocking
    blocking.release.set()


@pytest.fixture
def effects(backend: Backend) -> Iterator[Callable[[], list[str]]]:
    """A table for handler side effects; returns a function listing its notes."""
    backend.execute("DROP TABLE IF EXISTS proletarian.effects")
    backend.execute("CREATE TABLE proletarian.effects (note VARCHAR(100))")
    yield lambda: [row[0] for row in backend.query("SELECT note FROM proletarian.effects")]
    backend.execute("DROP TABLE proletarian.effects")

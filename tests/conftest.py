"""Fixtures: every behavioural test runs on PostgreSQL and on MySQL/MariaDB, on databases of
the run's own, so that two runs on one machine (two checkouts, a developer and CI) do not
meet.

The run's id: the controlling pytest process makes one (`backends.new_run`, 8 random hex
digits) and passes it to pytest-xdist's workers and the tests' subprocesses in the
environment variable PROLETARIAN_TEST_RUN.

PostgreSQL is an embedded server started for each test process (one per pytest-xdist
worker), gone at its end; or, when `DATABASE_URL` names a server, a database of the run's own
on that server: `<the URL's database>_<run id>`, and `_<worker>` after it in a pytest-xdist
worker (`DATABASE_URL=postgresql://postgres@127.0.0.1:5432/test` gives `test_1f0c9a2e` or
`test_1f0c9a2e_gw0`), created by the process that uses it and dropped at its end; the
controlling process drops any of the run's that are left (a killed worker's) at the very end.

MySQL/MariaDB is, by default, a server of each test process's own started from the
machine's binaries (`private_mariadb`): the queue's default tables are `proletarian.job` and
`proletarian.archived_job`, and on MySQL `proletarian` is a database, one for the whole
server, so a database per run cannot keep two runs' tables apart on one server. With a
server of their own, the MySQL tests also spread over the workers, server-wide settings,
`KILL` and process lists included. When `MYSQL_URL` names a server (to test a MySQL 8, say;
its database is the tests' connections' own, while the queue's tables live in `proletarian`),
or the machine has no server binaries (then the local MariaDB at `backends.MYSQL_URL`), the
run uses that server: its MySQL tests all run in one process (the xdist group "mysql"), and
the controlling process holds the server's lock `proletarian_di_tests` (GET_LOCK) for the
whole run, so a second run on that server waits for it instead of breaking it. When no
server is reachable the MySQL tests skip, saying why, unless PROLETARIAN_REQUIRE_MYSQL=1
(CI), which makes them fail instead.

What a run leaves: each session's databases are checked at its end, after the session dropped
what it created: a database (PostgreSQL: a schema) that was not there at its start fails the
run, named in the summary (a test that creates one drops it, or has the session drop it:
`Backend.install` notes what it creates; else `will_create` or `creating_schemas`).

Signals: SIGTERM (and SIGHUP) end a test process as Ctrl-C does, with KeyboardInterrupt, so
that its fixtures finalize: servers stop, databases are dropped. A process killed outright
(SIGKILL; pytest-xdist kills a worker that has not ended 10 s after being told to) leaves its
embedded PostgreSQL and private MariaDB to a watchdog (`servers.Watchdog`), which stops them
and removes their folders.

Two tiers: a test that uses a database fixture (or any fixture built on one) is
marked `db` here; a test that reaches a database some other way says so with
`@pytest.mark.db`. `pytest -m "not db"` runs the rest in seconds, with no server.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

import pytest

from proletarian_di._store.secrets import mask
from proletarian_di.embedded import postgres_url
from proletarian_di.testing import mysql_unreachable_reason

import private_mariadb
from backends import (
    EFFECTS_TABLE,
    MYSQL_URL,
    Backend,
    Gate,
    MySQLBackend,
    PostgresBackend,
    drop_run_databases,
    new_run,
    postgres_run_database,
)
from servers import Watchdog

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
    """Whether each test process starts a MariaDB of its own (`private_mariadb`): unless
    `MYSQL_URL` names the server to test, when the machine has the server's binaries. The
    same answer in every process of a run."""
    return "MYSQL_URL" not in os.environ and private_mariadb.available()


_REPEATS_IGNORED_FOR = 5.0


def _interrupt_on_sigterm() -> None:
    """End this process on SIGTERM and SIGHUP as on Ctrl-C, with KeyboardInterrupt: Python's
    default ends it at once, running no `finally`, so no fixture would stop its server or
    drop its database. (A handler someone set, or SIG_IGN under nohup, stays.)

    The same signal often comes twice at once (`kill -TERM -- -<make's group>` reaches pytest,
    and make passes its own on to pytest too): a repeat within 5 s is ignored, so that it
    does not interrupt the first one's clean-up; a later one ends the process at once (its
    servers are left to their watchdogs)."""
    first: list[float] = []

    def interrupt(signum: int, frame: object) -> None:
        if not first:
            first.append(time.monotonic())
            raise KeyboardInterrupt(signal.Signals(signum).name)
        if time.monotonic() - first[0] < _REPEATS_IGNORED_FOR:
            return
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        with contextlib.suppress(ValueError):  # not the main thread: no signal comes here
            if signal.getsignal(sig) == signal.SIG_DFL:
                signal.signal(sig, interrupt)


def _controller(config: pytest.Config) -> bool:
    """Whether this is the controlling pytest process (not a pytest-xdist worker)."""
    return not hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    """The run's id (made in the controlling process, inherited by the workers), and
    SIGTERM as Ctrl-C in every process."""
    if _controller(config):
        new_run()
    _interrupt_on_sigterm()


DATABASE_FIXTURES = frozenset(
    {"backend", "pg", "pool", "effects", "postgresql_backend", "mysql_backend"}
)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark `db` every test whose fixtures, direct or indirect, include a database; and,
    unless each process has a MySQL server of its own, put every test that uses MySQL in one
    xdist group, so that under `pytest -n N --dist loadgroup` one worker runs them all (the
    queue's tables on a server are one for all). The tests that drive Chromium run in one
    worker, which starts it and seeds their pages once per module."""
    shared = not _private_mysql_servers()
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if DATABASE_FIXTURES.intersection(fixtures):
            item.add_marker(pytest.mark.db)
        if shared and ("mysql" in item.nodeid.lower() or "mysql_backend" in fixtures):
            item.add_marker(pytest.mark.xdist_group("mysql"))
        elif "browser" in fixtures:
            item.add_marker(pytest.mark.xdist_group("chromium"))


_MYSQL_LOCK = "proletarian_di_tests"
_LOCK = pytest.StashKey[Any]()


def _lock_the_mysql_server(config: pytest.Config) -> None:
    """Hold the named MySQL server's lock for the run (see the module's docstring), waiting
    for another run that holds it; not for a run of the tests that need no database."""
    if _private_mysql_servers() or config.option.markexpr.strip() == "not db":
        return
    if mysql_unreachable_reason(MYSQL_URL, timeout=1):
        return  # the MySQL tests skip (or fail) saying so
    conn = MySQLBackend(MYSQL_URL).connect()
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    waiting = False
    while True:
        with conn.cursor() as cursor:
            cursor.execute("SELECT GET_LOCK(%s, 5)", (_MYSQL_LOCK,))
            (got,) = cursor.fetchone()
        if got == 1:
            break
        if not waiting and reporter is not None:
            reporter.write_line(
                f"waiting for another test run on {mask(MYSQL_URL)} to end "
                f"(it holds the lock {_MYSQL_LOCK})"
            )
        waiting = True
    config.stash[_LOCK] = conn


def pytest_sessionstart(session: pytest.Session) -> None:
    """The controlling process takes a named MySQL server's lock for the run."""
    if _controller(session.config):
        _lock_the_mysql_server(session.config)


_LEFT_BEHIND: list[str] = []
"""What this process's sessions left on their servers (`_checked_for_leftovers`)."""
_LEFT = pytest.StashKey[list[str]]()


@contextlib.contextmanager
def _checked_for_leftovers(backend: Backend) -> Iterator[None]:
    """Drop the schemas (MySQL: databases) the session created at its end, and note in
    `_LEFT_BEHIND` any that are there then and were not at its start."""
    before = backend.schemas()
    try:
        yield
    finally:
        backend.drop_created_schemas()
        try:
            names = sorted(backend.schemas() - before)
        except Exception:  # the server went away: the tests say so already
            names = []
        if names:
            kind = "databases" if backend.name == "mysql" else "schemas"
            _LEFT_BEHIND.append(f"the tests left {kind} on {mask(backend.url)}: {', '.join(names)}")


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """A pytest-xdist worker's leftovers, for the controlling process's summary."""
    _LEFT_BEHIND.extend(getattr(node, "workeroutput", {}).get("left_behind", []))


@pytest.hookimpl(trylast=True)  # after the session's fixtures are finalized
def pytest_sessionfinish(session: pytest.Session) -> None:
    """A worker hands its leftovers to the controlling process; that fails the run if the
    tests left any (`pytest_terminal_summary` names them)."""
    config = session.config
    if not _controller(config):
        config.workeroutput["left_behind"] = list(_LEFT_BEHIND)  # type: ignore[attr-defined]
        return
    config.stash[_LEFT] = list(_LEFT_BEHIND)
    if _LEFT_BEHIND:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Name what the tests left on their servers (see `pytest_sessionfinish`)."""
    for line in config.stash.get(_LEFT, []):
        terminalreporter.write_sep("=", line, red=True, bold=True)


def pytest_unconfigure(config: pytest.Config) -> None:
    """At the very end, also after a failure or an interrupt: the controlling process drops
    the run's databases that are left on `DATABASE_URL`'s server (a killed worker's), and
    lets go of the named MySQL server's lock."""
    if not _controller(config):
        return
    url = os.environ.get("DATABASE_URL")
    if url:
        with contextlib.suppress(Exception):  # unreachable: the tests said so already
            drop_run_databases(url)
    conn = config.stash.get(_LOCK, None)
    if conn is not None:
        with contextlib.suppress(Exception):
            conn.close()  # the lock goes with the connection


@pytest.fixture(scope="session")
def postgresql_backend() -> Iterator[Backend]:
    """The session's PostgreSQL (see the module's docstring), with a fresh schema; the
    schemas the session created are dropped at its end."""
    with contextlib.ExitStack() as stack:
        watchdog = stack.enter_context(contextlib.closing(Watchdog()))
        url = os.environ.get("DATABASE_URL")
        if url:
            url = stack.enter_context(postgres_run_database(url))
        else:
            url = stack.enter_context(postgres_url())
            watchdog.arm_postgres(url)
        backend = PostgresBackend(url)
        with _checked_for_leftovers(backend):
            backend.recreate()
            yield backend


@pytest.fixture(scope="session")
def mysql_backend() -> Iterator[Backend]:
    """The session's MySQL/MariaDB (a server of its own, or `MYSQL_URL`: see the module's
    docstring) with a fresh schema, or a skip saying why; the databases the session created
    are dropped at its end."""
    with contextlib.ExitStack() as stack:
        if _private_mysql_servers():
            try:
                url = stack.enter_context(private_mariadb.private_mariadb())
            except Exception as exc:
                _no_mysql(f"the tests' own MariaDB did not start ({type(exc).__name__}: {exc})")
        else:
            url = MYSQL_URL
            reason = mysql_unreachable_reason(url)
            if reason:
                _no_mysql(reason)
        backend = MySQLBackend(url)
        with _checked_for_leftovers(backend):
            backend.recreate()
            yield backend


def _no_mysql(reason: str) -> NoReturn:
    """Skip the MySQL tests, saying why; fail them instead under PROLETARIAN_REQUIRE_MYSQL=1."""
    if os.environ.get("PROLETARIAN_REQUIRE_MYSQL") == "1":
        pytest.fail(f"PROLETARIAN_REQUIRE_MYSQL=1 but {reason}")
    pytest.skip(reason)


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
    backend.execute(f"DROP TABLE IF EXISTS {EFFECTS_TABLE}")
    backend.execute(f"CREATE TABLE {EFFECTS_TABLE} (note VARCHAR(100))")
    yield lambda: [row[0] for row in backend.query(f"SELECT note FROM {EFFECTS_TABLE}")]
    backend.execute(f"DROP TABLE {EFFECTS_TABLE}")

"""The tests' databases: `proletarian_di.testing.QueueDatabase` with what only the tests need
(subprocess environments, `reset`), the databases of the run's own (see `conftest.py`), and
helpers for assertions on jobs."""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool

from proletarian_di import enqueue
from proletarian_di.schema import workers_table
from proletarian_di.testing import MySQLQueueDatabase, PostgresQueueDatabase, QueueDatabase


def _share_pymysql_default_tls_context() -> None:
    """PyMySQL (1.1+) makes every connection given no TLS options "preferred" TLS, with a new
    `ssl.create_default_context()`, which loads the machine's whole CA bundle: some 25 ms of
    CPU per connection, the bulk of a MySQL connection's cost in the tests (a test opens
    dozens), also when the server has no TLS (the tests' MariaDB), where the context is never
    used. In the test processes (this module is imported by conftest.py and by the tests'
    worker scripts) those connections share one such context, made the same way on first
    use: what goes over the wire is unchanged, and connections given TLS options still get
    their own."""
    try:
        from pymysql import connections
    except ImportError:  # no mysql extra
        return
    make = connections.Connection._create_ssl_ctx
    if getattr(make, "shared_default", False):
        return
    made: list[Any] = []
    lock = threading.Lock()

    def create_ssl_ctx(self: Any, sslp: Any) -> Any:
        if not (isinstance(sslp, dict) and not sslp):
            return make(self, sslp)
        with lock:
            if not made:
                made.append(make(self, sslp))
            return made[0]

    create_ssl_ctx.shared_default = True  # type: ignore[attr-defined]
    connections.Connection._create_ssl_ctx = create_ssl_ctx  # type: ignore[method-assign]


_share_pymysql_default_tls_context()

MYSQL_URL = os.environ.get("MYSQL_URL", "mysql://root@127.0.0.1:3306/test")
"""The MySQL/MariaDB server a run uses when it starts none of its own (see `conftest.py`)."""

RUN_VARIABLE = "PROLETARIAN_TEST_RUN"
"""The run's id, made by the controlling pytest process (`new_run`) and inherited by
pytest-xdist's workers and the tests' subprocesses."""


def new_run() -> str:
    """Make this process's run id, and its children's: 8 random hex digits."""
    os.environ[RUN_VARIABLE] = secrets.token_hex(4)
    return os.environ[RUN_VARIABLE]


def run_database_name(base: str) -> str:
    """The name of this run's database on a shared server whose URL names `base`:
    `<base>_<run id>`, and `_<worker>` after it in a pytest-xdist worker (`test_1f0c9a2e_gw0`),
    so that no two runs, nor two workers of one, share one."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    return f"{base}_{os.environ[RUN_VARIABLE]}" + (f"_{worker}" if worker else "")


_RESETTING = threading.local()
"""`Backend.reset`'s connection, while the thread resets (its `conn`, else None)."""


class Backend(QueueDatabase):
    """A test database with the default queue tables."""

    def install(self, job_table: str | None = None, archived_job_table: str | None = None) -> None:
        """Install the default tables, or the given ones (a test module's own)."""
        if job_table is None and archived_job_table is None:
            super().install()
        else:
            self.with_tables(
                job_table or self.job_table, archived_job_table or self.archived_job_table
            ).install()

    def reset(self) -> None:
        """Empty both tables, and the live workers' table (rows a killed process left).

        `clear`'s statements run as they would alone, each committed on its own, but on one
        connection (in autocommit mode) instead of one each: a reset comes before nearly
        every test, and a dozen connections cost more than the statements."""
        with contextlib.closing(self.connect()) as conn:
            if self.name == "mysql":
                conn.autocommit(True)
            else:
                conn.autocommit = True
            _RESETTING.conn = conn
            try:
                self.clear()
                self.execute(f"DELETE FROM {workers_table(self.job_table)}")
            finally:
                _RESETTING.conn = None

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """As `QueueDatabase.query`, but on `reset`'s connection while this thread resets."""
        conn = getattr(_RESETTING, "conn", None)
        if conn is None:
            return super().query(sql, params)
        cursor = conn.cursor()
        try:
            cursor.execute(sql, params)
            return list(cursor.fetchall()) if cursor.description else []
        finally:
            cursor.close()

    def env(self) -> dict[str, str]:
        """Environment for a subprocess that should use this database."""
        return {**os.environ, "TEST_BACKEND": self.name, "TEST_DATABASE_URL": self.url}


class PostgresBackend(Backend, PostgresQueueDatabase):
    """The session's PostgreSQL."""


class MySQLBackend(Backend, MySQLQueueDatabase):
    """The session's MySQL/MariaDB."""


def _postgres_database(url: str) -> str:
    """The database a PostgreSQL URL (or conninfo) names: libpq's default, the user's name,
    when it names none."""
    params = psycopg.conninfo.conninfo_to_dict(url)
    return str(params.get("dbname") or params.get("user") or os.environ.get("PGDATABASE") or "")


def with_postgres_database(url: str, database: str) -> str:
    """`url` naming `database` instead (a URL stays a URL: the CLI's tests take it as one)."""
    if "://" in url:
        return urlunsplit(urlsplit(url)._replace(path="/" + quote(database, safe="")))
    return psycopg.conninfo.make_conninfo(url, dbname=database)


def _drop_postgres_database(admin: psycopg.Connection, name: str) -> None:
    """Drop the database, ending the sessions still in it (a worker thread a failed test
    left behind)."""
    name_sql = sql.Identifier(name)
    try:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name_sql))
    except psycopg.errors.SyntaxError:  # before PostgreSQL 13
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,)
        )
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(name_sql))


@contextlib.contextmanager
def postgres_run_database(server_url: str) -> Iterator[str]:
    """Create this run's database (`run_database_name`) on the server `server_url` names,
    yield its URL, and drop it at the end."""
    name = run_database_name(_postgres_database(server_url) or "proletarian_tests")
    with psycopg.connect(server_url, autocommit=True) as admin:
        _drop_postgres_database(admin, name)  # a run id is random: nothing, but be sure
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield with_postgres_database(server_url, name)
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            _drop_postgres_database(admin, name)


def drop_run_databases(server_url: str) -> list[str]:
    """Drop whatever databases of this run are left on the server (those of workers that
    did not get to drop their own: killed, say); their names."""
    base = _postgres_database(server_url) or "proletarian_tests"
    prefix = f"{base}_{os.environ[RUN_VARIABLE]}"
    with psycopg.connect(server_url, autocommit=True, connect_timeout=5) as admin:
        names = [
            name
            for (name,) in admin.execute("SELECT datname FROM pg_database").fetchall()
            if name == prefix or name.startswith(prefix + "_")
        ]
        for name in names:
            _drop_postgres_database(admin, name)
    return names


def backend_from_env() -> Backend:
    """The backend a test subprocess was started for (see `Backend.env`)."""
    url = os.environ["TEST_DATABASE_URL"]
    if os.environ["TEST_BACKEND"] == "mysql":
        return MySQLBackend(url)
    return PostgresBackend(url)


LOCK_VIEW_S = 0.12
"""MariaDB (and MySQL) answer information_schema.INNODB_TRX from a cache that a read
refreshes only when the last read was more than 100 ms before: a read within 100 ms of
another shows the transactions and row locks of then, and reads that keep coming less than
100 ms apart show those for as long as they go on. The MySQL dialect's admin reads ask it
whether any transaction holds row locks (`held_rows`: which jobs run, in held mode), so a
test that reads them right after a claim, or polls them, waits this long before each read."""


def lock_view_settled(backend: QueueDatabase) -> None:
    """On MySQL, wait until information_schema.INNODB_TRX's next read is fresh (see
    `LOCK_VIEW_S`); on PostgreSQL, whose lock views are live, return at once."""
    if backend.name == "mysql":
        time.sleep(LOCK_VIEW_S)


def wait_until(
    predicate: Callable[[], Any],
    timeout: float = 10.0,
    interval: float = 0.01,
    description: str = "",
) -> Any:
    """Poll `predicate` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout}s: {description or predicate}")
        time.sleep(interval)


def enqueue_committed(backend: QueueDatabase, *jobs: tuple[str, Any], **options: Any) -> list[Any]:
    """Enqueue jobs on a fresh connection and commit; return their ids."""
    with contextlib.closing(backend.connect()) as conn:
        ids = [enqueue(conn, job_type, payload, **options) for job_type, payload in jobs]
        conn.commit()
    return ids


@contextlib.contextmanager
def connection(backend: QueueDatabase) -> Iterator[Any]:
    """An admin connection; whatever the test left open is rolled back."""
    conn = backend.connect()
    try:
        yield conn
    finally:
        conn.rollback()
        conn.close()


def committed(backend: QueueDatabase, action: Any, *args: Any, **kwargs: Any) -> Any:
    """Run an admin function on a connection of its own and commit."""
    with connection(backend) as conn:
        result = action(conn, *args, **kwargs)
        conn.commit()
    return result


def as_uuid(value: Any) -> uuid.UUID:
    """A job id as read back from either database (MySQL stores 16 bytes)."""
    return value if isinstance(value, uuid.UUID) else uuid.UUID(bytes=bytes(value))


def store_raw_payload(db: QueueDatabase, job_id: uuid.UUID, text: str) -> None:
    """Overwrite a waiting job's payload with `text`, as a foreign writer might."""
    key = job_id.bytes if db.name == "mysql" else job_id
    db.execute(f"UPDATE {db.job_table} SET payload = %s WHERE job_id = %s", (text, key))


def archive_by_id(db: QueueDatabase) -> dict[uuid.UUID, tuple[str, int]]:
    """The archived jobs as {job_id: (status, attempts)}."""
    rows = db.query(f"SELECT job_id, status, attempts FROM {db.archived_job_table}")
    return {as_uuid(job_id): (status, attempts) for job_id, status, attempts in rows}


class Events:
    """A `log` function that records every event."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()

    def __call__(self, event: str, data: dict[str, Any]) -> None:
        with self._lock:
            self.events.append((event, dict(data)))

    def named(self, event: str) -> list[dict[str, Any]]:
        """The data of every recorded `event`, in order."""
        with self._lock:
            return [data for name, data in self.events if name == event]


EFFECTS_TABLE = "proletarian.effects"
"""The table of handlers' side effects (the `effects` fixture), beside the queue's tables."""


def write_effect(job: Any, note: str) -> None:
    """A handler's side effect through the job's own connection (see the `effects` fixture)."""
    cur = job.connection.cursor()
    cur.execute(f"INSERT INTO {EFFECTS_TABLE} VALUES (%s)", (note,))
    cur.close()


class StatementLog:
    """Every statement the server runs for the pool's connections (log_statement=all)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.statements: list[str] = []
        self.executed: list[str] = []

    def configure(self, conn: psycopg.Connection) -> None:
        conn.execute("SET client_min_messages TO log")
        conn.execute("SET log_statement TO 'all'")
        conn.commit()
        conn.add_notice_handler(self._notice)

    def _notice(self, diagnostic: psycopg.errors.Diagnostic) -> None:
        message = diagnostic.message_primary or ""
        with self.lock:
            if message.startswith("statement: "):
                self.statements.append(message.removeprefix("statement: "))
            elif message.startswith("execute "):  # the extended protocol's, with parameters
                self.executed.append(message.partition(": ")[2])

    def about_jobs(self) -> list[str]:
        with self.lock:
            return [s for s in self.statements if "proletarian_" in s or s == "ROLLBACK"]


@contextlib.contextmanager
def logged_pool(url: str, log: StatementLog):
    pool = ConnectionPool(url, min_size=1, max_size=2, configure=log.configure, open=True)
    try:
        yield pool
    finally:
        pool.close()


COM_QUERY = 3


class CountedConnections:
    """New PyMySQL connections whose commands to the server are counted (a real connection,
    its `_execute_command` watched)."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.queries: list[str] = []
        self.made: list[Any] = []
        self.lock = threading.Lock()

    def __call__(self) -> Any:
        conn = self.backend.connect()
        conn.autocommit(True)
        send = conn._execute_command

        def counted(command: int, sql: Any) -> Any:
            if command == COM_QUERY:
                with self.lock:
                    self.queries.append(sql.decode() if isinstance(sql, bytes) else sql)
            return send(command, sql)

        conn._execute_command = counted
        self.made.append(conn)
        return conn


class Gate:
    """A handler that blocks until released, saying when it has started (the `gate`
    fixture)."""

    def __init__(self) -> None:
        self.started, self.release = threading.Event(), threading.Event()

    def __call__(self, job_type: str, payload: Any) -> None:
        self.started.set()
        assert self.release.wait(30)

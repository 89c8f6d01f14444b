"""The tests' databases: `proletarian_di.testing.QueueDatabase` with what only the tests need
(subprocess environments, `reset`), and helpers for assertions on jobs."""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from proletarian_di import enqueue
from proletarian_di.schema import workers_table
from proletarian_di.testing import MySQLQueueDatabase, PostgresQueueDatabase, QueueDatabase

MYSQL_URL = os.environ.get("MYSQL_URL", "mysql://root@127.0.0.1:3306/test")


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
        """Empty both tables, and the live workers' table (rows a killed process left)."""
        self.clear()
        self.execute(f"DELETE FROM {workers_table(self.job_table)}")

    def env(self) -> dict[str, str]:
        """Environment for a subprocess that should use this database."""
        return {**os.environ, "TEST_BACKEND": self.name, "TEST_DATABASE_URL": self.url}


class PostgresBackend(Backend, PostgresQueueDatabase):
    """The session's PostgreSQL."""


class MySQLBackend(Backend, MySQLQueueDatabase):
    """The session's MySQL/MariaDB."""


def backend_from_env() -> Backend:
    """The backend a test subprocess was started for (see `Backend.env`)."""
    url = os.environ["TEST_DATABASE_URL"]
    if os.environ["TEST_BACKEND"] == "mysql":
        return MySQLBackend(url)
    return PostgresBackend(url)


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


def write_effect(job: Any, note: str) -> None:
    """A handler's side effect through the job's own connection (see the `effects` fixture)."""
    cur = job.connection.cursor()
    cur.execute("INSERT INTO proletarian.effects VALUES (%s)", (note,))
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

"""Real databases for the tests: the embedded (or given) PostgreSQL and MariaDB/MySQL."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pymysql
from psycopg_pool import ConnectionPool

from proletarian_di.embedded import embedded_postgres
from proletarian_di.mysql import MySQLDataSource, parse_mysql_url
from proletarian_di.schema import install_schema

MYSQL_URL = os.environ.get("MYSQL_URL", "mysql://root@127.0.0.1:3306/test")


class Backend:
    """One database: fresh connections, a pool, and row queries for assertions."""

    name = ""
    url = ""

    def connect(self) -> Any:
        raise NotImplementedError

    def pool(self, size: int = 4) -> Any:
        raise NotImplementedError

    def install(
        self,
        job_table: str = "proletarian.job",
        archived_job_table: str = "proletarian.archived_job",
    ) -> None:
        with contextlib.closing(self.connect()) as conn:
            install_schema(conn, job_table, archived_job_table)

    def recreate(self) -> None:
        """Drop the queue tables and install the current schema (a server kept from an
        earlier run may hold tables of an older schema)."""
        self.execute("DROP TABLE IF EXISTS proletarian.job")
        self.execute("DROP TABLE IF EXISTS proletarian.archived_job")
        self.install()

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with contextlib.closing(self.connect()) as conn:
            cur = conn.cursor()
            cur.execute(sql, params)
            rows = list(cur.fetchall()) if cur.description else []
            conn.commit()
            return rows

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        self.query(sql, params)

    def reset(self) -> None:
        self.execute("DELETE FROM proletarian.job")
        self.execute("DELETE FROM proletarian.archived_job")

    def jobs(self) -> list[tuple[Any, ...]]:
        """Waiting jobs as (job_type, attempts, queue)."""
        return self.query(
            "SELECT job_type, attempts, queue FROM proletarian.job ORDER BY process_at"
        )

    def archived(self) -> list[tuple[Any, ...]]:
        """Archived jobs as (job_type, status, attempts), oldest enqueue first."""
        return self.query(
            "SELECT job_type, status, attempts FROM proletarian.archived_job "
            "ORDER BY enqueued_at, finished_at"
        )

    def env(self) -> dict[str, str]:
        """Environment for a subprocess that should use this database."""
        return {**os.environ, "TEST_BACKEND": self.name, "TEST_DATABASE_URL": self.url}


class PostgresBackend(Backend):
    name = "postgresql"

    def __init__(self, url: str) -> None:
        self.url = url

    def connect(self) -> Any:
        return psycopg.connect(self.url)

    def pool(self, size: int = 4) -> Any:
        return ConnectionPool(self.url, min_size=1, max_size=size, open=True)


class MySQLBackend(Backend):
    name = "mysql"

    def __init__(self, url: str) -> None:
        self.url = url
        self.options = parse_mysql_url(url)

    def connect(self) -> Any:
        return pymysql.connect(**self.options, autocommit=False)

    def pool(self, size: int = 4) -> Any:
        return MySQLDataSource(self.url, max_connections=size)


@contextlib.contextmanager
def embedded_postgres_url() -> Iterator[str]:
    """DATABASE_URL when set, else a throwaway embedded PostgreSQL server."""
    if os.environ.get("DATABASE_URL"):
        yield os.environ["DATABASE_URL"]
        return
    with embedded_postgres() as url:
        yield url


def mysql_unreachable_reason(url: str) -> str | None:
    """Why no MySQL server can be used at `url`, or None when one can."""
    try:
        pymysql.connect(**parse_mysql_url(url), connect_timeout=3).close()
    except Exception as exc:
        return f"no MySQL/MariaDB server reachable at {url} ({exc})"
    return None


def backend_from_env() -> Backend:
    """The backend a test subprocess was started for (see `Backend.env`)."""
    url = os.environ["TEST_DATABASE_URL"]
    if os.environ["TEST_BACKEND"] == "mysql":
        return MySQLBackend(url)
    return PostgresBackend(url)


def wait_until(
    predicate: Any, timeout: float = 10.0, interval: float = 0.01, description: str = ""
) -> Any:
    """Poll `predicate` until it returns something truthy; fail after `timeout` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout}s: {description or predicate}")
        time.sleep(interval)


def enqueue_committed(backend: Backend, *jobs: tuple[str, Any], **options: Any) -> list[Any]:
    """Enqueue jobs on a fresh connection and commit; return their ids."""
    from proletarian_di import enqueue

    with contextlib.closing(backend.connect()) as conn:
        ids = [enqueue(conn, job_type, payload, **options) for job_type, payload in jobs]
        conn.commit()
    return ids


class Events:
    """A `log` function that records every event."""

    def __init__(self):
        self.items = []
        self.lock = threading.Lock()

    def __call__(self, event, data):
        with self.lock:
            self.items.append((event, dict(data)))

    def named(self, event):
        return [data for name, data in self.items if name == event]


def write_effect(job, note):
    cur = job.connection.cursor()
    cur.execute("INSERT INTO proletarian.effects VALUES (%s)", (note,))
    cur.close()

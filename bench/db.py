"""The databases under test: connections, pools, table cleanup and versions.

The benchmark uses its own tables (`proletarian_bench.job`, `…archived_job`)
so it never touches the tables of tests running against the same server.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from proletarian_di.schema import install_schema

JOB_TABLE = "proletarian_bench.job"
ARCHIVED_JOB_TABLE = "proletarian_bench.archived_job"
TABLES = {"job_table": JOB_TABLE, "archived_job_table": ARCHIVED_JOB_TABLE}
QUEUE = "default"
COLUMNS = "job_id, queue, job_type, payload, attempts, enqueued_at, process_at"


class Database:
    """One server: fresh connections, a pool of a given size, and housekeeping."""

    name = ""
    label = ""

    def __init__(self, url: str) -> None:
        self.url = url

    def connect(self) -> Any:
        raise NotImplementedError

    def pool(self, size: int) -> Any:
        raise NotImplementedError

    def version(self) -> str:
        raise NotImplementedError

    def run(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with contextlib.closing(self.connect()) as conn:
            cur = conn.cursor()
            cur.execute(sql, params)
            rows = list(cur.fetchall()) if cur.description else []
            conn.commit()
            return rows

    def install(self) -> None:
        with contextlib.closing(self.connect()) as conn:
            install_schema(conn, JOB_TABLE, ARCHIVED_JOB_TABLE)

    def clean(self) -> None:
        """Empty both tables, leaving no dead rows behind."""
        self.run(f"TRUNCATE TABLE {JOB_TABLE}")
        self.run(f"TRUNCATE TABLE {ARCHIVED_JOB_TABLE}")

    def analyze(self) -> None:
        """Fresh planner statistics for the job table (PostgreSQL only)."""

    def waiting(self) -> int:
        return int(self.run(f"SELECT COUNT(*) FROM {JOB_TABLE}")[0][0])

    def archived(self) -> int:
        return int(self.run(f"SELECT COUNT(*) FROM {ARCHIVED_JOB_TABLE}")[0][0])

    def is_empty(self) -> bool:
        return not self.run(f"SELECT 1 FROM {JOB_TABLE} LIMIT 1")


class Postgres(Database):
    name = "postgresql"
    label = "PostgreSQL"

    def connect(self) -> Any:
        import psycopg

        return psycopg.connect(self.url, connect_timeout=10)

    def pool(self, size: int) -> Any:
        from psycopg_pool import ConnectionPool

        pool = ConnectionPool(
            self.url, min_size=size, max_size=size, open=True, timeout=30, name="bench"
        )
        pool.wait(timeout=30)
        return pool

    def version(self) -> str:
        return str(self.run("SHOW server_version")[0][0]).split()[0]

    def analyze(self) -> None:
        with contextlib.closing(self.connect()) as conn:
            conn.autocommit = True
            conn.execute(f"ANALYZE {JOB_TABLE}")


class MySQL(Database):
    name = "mysql"
    label = "MariaDB"

    def __init__(self, url: str) -> None:
        from proletarian_di.mysql import parse_mysql_url

        super().__init__(url)
        self.options = parse_mysql_url(url)

    def connect(self) -> Any:
        import pymysql

        return pymysql.connect(**self.options, autocommit=False, connect_timeout=5, read_timeout=60)

    def pool(self, size: int) -> Any:
        from proletarian_di.mysql import MySQLDataSource

        return MySQLDataSource(self.url, max_connections=size, min_cached=size)

    def version(self) -> str:
        text = str(self.run("SELECT VERSION()")[0][0])
        self.label = "MariaDB" if "mariadb" in text.lower() else "MySQL"
        return text.split("-")[0]


def database(kind: str, url: str) -> Database:
    return MySQL(url) if kind == "mysql" else Postgres(url)


@contextlib.contextmanager
def postgres_url(url: str | None) -> Iterator[str]:
    """`url`, else $DATABASE_URL, else a throwaway embedded PostgreSQL server."""
    url = url or os.environ.get("DATABASE_URL")
    if url:
        yield url
        return
    from proletarian_di.embedded import embedded_postgres

    with embedded_postgres() as embedded_url:
        yield embedded_url


def mysql_reachable(url: str) -> str | None:
    """None when a MySQL/MariaDB server answers at `url`, else why not."""
    try:
        db = MySQL(url)
        import pymysql

        pymysql.connect(**db.options, connect_timeout=3).close()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None

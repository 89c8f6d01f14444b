"""A handler's session settings do not follow its connection back into the pool."""

from __future__ import annotations

import contextlib
from typing import Any

from faults import running, wait_for

from proletarian_di import create_queue_worker
from proletarian_di.mysql import MySQLDataSource

from backends import enqueue_committed

PG_SETTINGS = ("search_path", "TimeZone", "statement_timeout", "DateStyle")
MY_SETTINGS = ("@@SESSION.sql_mode", "@@SESSION.time_zone", "@@SESSION.tx_isolation", "DATABASE()")


def pg_settings(pool: Any) -> tuple[Any, ...]:
    with pool.connection() as conn:
        return tuple(conn.execute(f"SHOW {name}").fetchone()[0] for name in PG_SETTINGS)


def my_settings(source: Any) -> tuple[Any, ...]:
    with source.connection() as conn, conn.cursor() as cursor:
        cursor.execute(f"SELECT {', '.join(MY_SETTINGS)}")
        return tuple(cursor.fetchone())


def run_one_job(backend: Any, source: Any, statements: list[str]) -> None:
    """A worker on `source` runs a job whose handler changes the session's settings."""
    enqueue_committed(backend, ("meddle", None))

    def handler(job: Any) -> None:
        with contextlib.closing(job.connection.cursor()) as cursor:
            for statement in statements:
                cursor.execute(statement)

    with running(create_queue_worker(source, handler, handler_fn_mode="advanced")):
        wait_for(lambda: backend.archived(), what="the job archived")
    assert backend.archived() == [("meddle", "success", 1)]


def test_postgres_settings_are_restored_when_the_worker_lets_go(pg):
    pool = pg.pool(1)
    try:
        with pool.connection() as conn:
            conn.execute("SET statement_timeout = 4321")  # the app's own setting stays
            conn.commit()
        before = pg_settings(pool)
        run_one_job(
            pg,
            pool,
            [
                "SET search_path TO pg_catalog",
                "SET TimeZone TO 'Asia/Tokyo'",
                "SET statement_timeout = 999",
                "SET DateStyle TO 'German'",
            ],
        )
        assert pg_settings(pool) == before
        assert before[2] == "4321ms"
    finally:
        pool.close()


def test_mysql_settings_are_restored_when_the_worker_lets_go(mysql_backend):
    mysql_backend.reset()
    source = MySQLDataSource(mysql_backend.url, max_connections=1)
    try:
        before = my_settings(source)
        run_one_job(
            mysql_backend,
            source,
            [
                "SET SESSION sql_mode = 'ANSI_QUOTES'",
                "SET time_zone = '+05:00'",
                "SET SESSION TRANSACTION ISOLATION LEVEL SERIALIZABLE",
                "USE mysql",
            ],
        )
        assert my_settings(source) == before
    finally:
        source.close()


def test_the_mysql_data_source_restores_any_borrowers_settings(mysql_backend):
    source = MySQLDataSource(mysql_backend.url, max_connections=1)
    try:
        before = my_settings(source)
        with source.connection() as conn, conn.cursor() as cursor:
            cursor.execute("SET SESSION sql_mode = ''")
            cursor.execute("SET time_zone = '-03:00'")
            cursor.execute("USE mysql")
        assert my_settings(source) == before
    finally:
        source.close()

"""A handler's session settings do not follow its connection back into the pool."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from faults import running, wait_for

from proletarian_di import create_queue_worker
from proletarian_di._store.dialects.mysql import _session_variables
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


OTHER_VALUES = {
    "sql_mode": "ANSI_QUOTES",
    "time_zone": "+01:00",
    "tx_isolation": "SERIALIZABLE",
    "transaction_isolation": "SERIALIZABLE",
    "tx_read_only": 1,
    "transaction_read_only": 1,
    "character_set_client": "latin1",
    "character_set_connection": "latin1",
    "character_set_results": "latin1",
    "collation_connection": "latin1_bin",
    "foreign_key_checks": 0,
    "unique_checks": 0,
    "sql_safe_updates": 1,
    "innodb_lock_wait_timeout": 7,
    "lock_wait_timeout": 77,
    "wait_timeout": 777,
    "max_statement_time": 7,
    "max_execution_time": 7000,
}


def test_the_mysql_data_source_sees_a_change_to_any_one_setting(mysql_backend):
    """The pool tells a changed session by one fingerprint of every setting it keeps: a
    change to any one of them alone is seen, and put back."""
    source = MySQLDataSource(mysql_backend.url, max_connections=1)
    try:
        with source.connection() as conn:
            names = _session_variables(conn)
        assert set(names) <= set(OTHER_VALUES)
        for name in names:
            query = f"SELECT @@SESSION.{name}"
            with source.connection() as conn, conn.cursor() as cursor:
                cursor.execute(query)
                (before,) = cursor.fetchone()
                cursor.execute(f"SET SESSION {name} = %s", (OTHER_VALUES[name],))
                cursor.execute(query)
                assert cursor.fetchone()[0] != before, name
            with source.connection() as conn, conn.cursor() as cursor:
                cursor.execute(query)
                assert cursor.fetchone()[0] == before, name
        with source.connection() as conn:
            conn.autocommit(True)
        with source.connection() as conn:
            assert not conn.get_autocommit()
    finally:
        source.close()


class CountedSource(MySQLDataSource):
    """A MySQLDataSource that counts how it lends: with the settings check, or without."""

    def __init__(self, url: str) -> None:
        super().__init__(url, max_connections=4)
        self.lent = {"checked": 0, "worker": 0}

    @contextlib.contextmanager
    def connection(self):  # type: ignore[override]
        self.lent["checked"] += 1
        with super().connection() as conn:
            yield conn

    @contextlib.contextmanager
    def _worker_connection(self):  # type: ignore[override]
        self.lent["worker"] += 1
        with super()._worker_connection() as conn:
            yield conn


@pytest.mark.parametrize("callback", [False, True], ids=["own", "failed_job_fn"])
def test_a_mysql_lease_worker_borrows_without_the_settings_check_unless_user_code_gets_one(
    mysql_backend, callback
):
    """A leased job's claim and archive use the connection for the worker's own statements
    only, which change no setting: the round trip that checks the settings on return is
    spared, and the connection still comes back rolled back. A failed-job callback is handed
    the job's connection: then every borrow is checked."""
    mysql_backend.reset()
    enqueue_committed(mysql_backend, *[("t", n) for n in range(5)])
    source = CountedSource(mysql_backend.url)
    ran: list[Any] = []
    try:
        worker = create_queue_worker(
            source,
            lambda t, p: ran.append(p),
            lease_ms=5_000,
            polling_interval_ms=10,
            failed_job_fn=(lambda job, exc: None) if callback else None,
        )
        with running(worker):
            assert wait_for(lambda: len(ran) == 5)
        lent_by_worker = dict(source.lent)
        before = my_settings(source)
        enqueue_committed(mysql_backend, ("locked", None))
        locking = f"SELECT job_id FROM {mysql_backend.job_table} FOR UPDATE NOWAIT"
        with source._worker_connection() as conn, conn.cursor() as cursor:
            assert cursor.execute(locking) == 1  # its transaction holds the row
        with contextlib.closing(mysql_backend.connect()) as other, other.cursor() as cursor:
            assert cursor.execute(locking) == 1, "lent back rolled back: the lock is gone"
        assert my_settings(source) == before
    finally:
        source.close()
    assert sorted(ran) == list(range(5))
    if callback:
        assert lent_by_worker["worker"] == 0, lent_by_worker
    else:
        assert lent_by_worker["worker"] >= 5, lent_by_worker

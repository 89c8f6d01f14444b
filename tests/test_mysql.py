"""MySQL/MariaDB pitfalls: time zones, batching, isolation, gap locks."""

from __future__ import annotations

import contextlib
import threading
from datetime import datetime, timedelta, timezone

import pytest

from proletarian_di import create_queue_worker, enqueue, enqueue_many, process_next_job
from proletarian_di.mysql import MySQLDataSource, mask, parse_mysql_url
from proletarian_di.schema import LATEST

from backends import enqueue_committed, wait_until

T0 = datetime(2030, 6, 1, 12, 30, 15, 123456, tzinfo=timezone.utc)


@pytest.fixture
def my(mysql_backend):
    mysql_backend.reset()
    return mysql_backend


def test_times_are_utc_whatever_the_session_time_zone(my):
    with contextlib.closing(my.connect()) as conn:
        conn.cursor().execute("SET time_zone = '+05:00'")
        enqueue(conn, "x", None, clock=lambda: T0)
        conn.commit()
    assert my.query(f"SELECT enqueued_at FROM {my.job_table}") == [(T0.replace(tzinfo=None),)]
    seen = []
    source = MySQLDataSource(my.url, max_connections=1, init_command="SET time_zone = '-07:00'")
    try:
        process_next_job(source, seen.append, handler_fn_mode="advanced", clock=lambda: T0)
    finally:
        source.close()
    assert seen[0].enqueued_at == T0 and seen[0].process_at == T0


def test_enqueue_many_is_one_statement(my):
    with contextlib.closing(my.connect()) as conn:
        cur = conn.cursor()

        def inserts():
            cur.execute("SHOW SESSION STATUS LIKE 'Com_insert'")
            return int(cur.fetchone()[1])

        before = inserts()
        ids = enqueue_many(conn, [("n", i) for i in range(200)])
        after = inserts()
        conn.commit()
    assert after - before == 1
    assert len(ids) == 200 and len(my.jobs()) == 200


def test_enqueuers_are_not_blocked_by_a_running_job(my):
    """Worker transactions are READ COMMITTED: no gap locks hold up inserts while a job runs."""
    now = datetime.now(timezone.utc)
    enqueue_committed(my, ("slow", None), clock=lambda: now - timedelta(minutes=1))
    started, release, inserted = threading.Event(), threading.Event(), []

    def handler(job_type, payload):
        started.set()
        release.wait(20)

    source = MySQLDataSource(my.url, max_connections=2)
    worker = create_queue_worker(source, handler, polling_interval_ms=10)
    try:
        with worker:
            assert started.wait(10)
            with contextlib.closing(my.connect()) as conn:
                conn.cursor().execute("SET SESSION innodb_lock_wait_timeout = 2")
                # Just before the locked row in the index: the gap a next-key lock covers.
                earlier = now - timedelta(minutes=2)
                inserted.append(enqueue(conn, "during", None, clock=lambda: earlier))
                conn.commit()
            release.set()
            wait_until(lambda: len(my.archived()) == 2)
    finally:
        release.set()
        source.close()
    assert inserted and sorted(r[0] for r in my.archived()) == ["during", "slow"]


def test_worker_restores_the_sessions_isolation_level(my):
    source = MySQLDataSource(
        my.url,
        max_connections=1,
        init_command="SET SESSION TRANSACTION ISOLATION LEVEL SERIALIZABLE",
    )
    try:
        with create_queue_worker(source, lambda t, p: None, polling_interval_ms=10):
            enqueue_committed(my, ("x", None))
            wait_until(lambda: my.archived())
        with source.connection() as conn:
            cur = conn.cursor()
            cur.execute("SELECT @@SESSION.tx_isolation")
            assert cur.fetchone()[0] == "SERIALIZABLE"
    finally:
        source.close()


def test_a_killed_pooled_connection_is_replaced(my):
    source = MySQLDataSource(my.url, max_connections=1)
    try:
        with source.connection() as conn:
            cur = conn.cursor()
            cur.execute("SELECT CONNECTION_ID()")
            first = cur.fetchone()[0]
        my.execute(f"KILL {int(first)}")
        enqueue_committed(my, ("x", None))
        assert process_next_job(source, lambda t, p: None) is True
    finally:
        source.close()


def test_urls_are_parsed_and_masked():
    options = parse_mysql_url("mysql://app:s%40cret@db.example:3307/shop")
    assert options == {
        "host": "db.example",
        "port": 3307,
        "user": "app",
        "password": "s@cret",
        "database": "shop",
    }
    assert (
        mask("mysql://app:s%40cret@db.example:3307/shop") == "mysql://app:***@db.example:3307/shop"
    )
    with pytest.raises(ValueError, match="not a MySQL URL"):
        parse_mysql_url("postgresql://app:pw@db/shop")


def _mysql_error(code: int) -> Exception:
    """The exception PyMySQL raises for a server error packet with this code."""
    import pymysql.err

    packet = b"\xff" + code.to_bytes(2, "little") + b"#HY000" + b"message"
    try:
        pymysql.err.raise_mysql_exception(packet)
    except pymysql.err.MySQLError as exc:
        return exc
    raise AssertionError("no exception raised")


@pytest.mark.parametrize(
    ("code", "transient"),
    [
        (2003, True),  # cannot connect
        (2006, True),  # server has gone away
        (2013, True),  # lost connection during query
        (1040, True),  # too many connections
        (1053, True),  # server shutdown in progress
        (1205, True),  # lock wait timeout
        (1213, True),  # deadlock
        (1290, True),  # --read-only: a demoted primary during failover
        (1836, True),  # read-only mode
        (1927, True),  # connection killed (MariaDB)
        (4031, True),  # idle connection closed by the server
        (1054, False),  # unknown column
        (1142, False),  # command denied (privileges)
        (1146, False),  # no such table
        (1064, False),  # syntax error
        (1062, False),  # duplicate key
    ],
)
def test_only_connection_level_mysql_errors_are_transient(code, transient):
    from proletarian_di._store.dialects import is_transient

    assert is_transient(_mysql_error(code)) is transient


def test_an_sql_error_reaches_on_polling_error_as_on_postgresql(my):
    """A job table without the attempts column: 1054, which PyMySQL calls OperationalError."""
    my.execute("DROP TABLE IF EXISTS proletarian.bad_job")
    my.execute(
        "CREATE TABLE proletarian.bad_job (job_id BINARY(16) PRIMARY KEY, queue VARCHAR(255), "
        "job_type VARCHAR(255), payload LONGTEXT, enqueued_at DATETIME(6), "
        "process_at DATETIME(6), last_error TEXT, "
        "INDEX bad_job_queue_priority_process_at (queue, process_at))"  # the claim names it
    )
    my.execute(
        "CREATE TABLE IF NOT EXISTS proletarian.bad_job_paused (queue VARCHAR(255) PRIMARY KEY, "
        "paused_at DATETIME(6) NOT NULL)"
    )
    my.execute(
        "CREATE TABLE IF NOT EXISTS proletarian.bad_job_schema_version (job_table VARCHAR(255) "
        "PRIMARY KEY, version INTEGER NOT NULL, upgraded_at DATETIME(6) NOT NULL)"
    )
    my.execute(  # a schema that says it is current, so the worker starts and then fails
        "REPLACE INTO proletarian.bad_job_schema_version VALUES (%s, %s, UTC_TIMESTAMP(6))",
        ("proletarian.bad_job", LATEST["mysql"]),
    )
    seen, stopped = [], threading.Event()
    try:
        worker = create_queue_worker(
            my.pool(2),
            lambda t, p: None,
            job_table="proletarian.bad_job",
            polling_interval_ms=10,
            on_polling_error=lambda exc: seen.append(exc) or True,
            on_shutdown=stopped.set,
            log=lambda event, data: None,
        )
        worker.start()
        assert stopped.wait(10)
    finally:
        my.execute(
            "DROP TABLE proletarian.bad_job, proletarian.bad_job_paused, "
            "proletarian.bad_job_schema_version"
        )
    assert seen and seen[0].args[0] == 1054
    assert worker.state == "stopped"

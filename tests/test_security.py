"""Security: passwords never leak, every value goes to SQL as a parameter, and the
least-privilege roles in sql/grants-*.sql are enough to run a worker, and no more."""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psycopg
import pymysql
import pytest
from faults import EventLog, running, wait_for
from psycopg_pool import ConnectionPool

from proletarian_di import RetrySpec, create_queue_worker, enqueue, enqueue_many, process_next_job
from proletarian_di._store.dialects import dialect_of
from proletarian_di._store.outcomes import sum_up
from proletarian_di.admin import DEFAULT_TABLES
from proletarian_di.mysql import MySQLDataSource, mask, parse_mysql_url
from proletarian_di.schema import statements

# Roles and users are the server's, not a database's: on a shared server (DATABASE_URL) the
# tests that create them run in one test process.
pytestmark = pytest.mark.xdist_group("server_roles")

ROOT = Path(__file__).resolve().parent.parent
SECRET = "S3cr3t-Pw_42"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"mysql://root:{SECRET}@db:3306/app", "mysql://root:***@db:3306/app"),
        (f"mysql://app:{SECRET}@db/app?charset=utf8mb4", "mysql://app:***@db/app?charset=utf8mb4"),
        ("mysql://root:p%40ss%3Aw0rd@db:3306/app", "mysql://root:***@db:3306/app"),
        ("mysql://root:3306@db:3306/app", "mysql://root:***@db:3306/app"),
        ("mysql://root:root@root:3306/root", "mysql://root:***@root:3306/root"),
        (f"postgresql://app:{SECRET}@db:5432/app", "postgresql://app:***@db:5432/app"),
        ("mysql://root@db:3306/app", "mysql://root@db:3306/app"),
    ],
)
def test_mask_hides_the_password_and_nothing_else(url, shown):
    assert mask(url) == shown


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://app@db/app?password={SECRET}",
        f"host=db user=app password={SECRET} dbname=app",
        f"postgresql://app:{SECRET}@db/app?sslmode=require&password={SECRET}",
    ],
)
def test_mask_hides_passwords_outside_the_user_info(url):
    assert SECRET not in mask(url)


def no_secret(*texts: Any) -> bool:
    return all(SECRET not in str(text) and SECRET not in repr(text) for text in texts)


def wrong_root_password_url(mysql_backend: Any) -> str:
    """The session's MySQL/MariaDB, as root with a wrong password."""
    options = parse_mysql_url(mysql_backend.url)
    return f"mysql://root:{SECRET}@{options['host']}:{options['port']}/test"


def test_mysql_wrong_password_never_appears_in_errors_reprs_or_logs(mysql_backend, caplog):
    caplog.set_level(logging.DEBUG)
    source = MySQLDataSource(wrong_root_password_url(mysql_backend), max_connections=2)
    try:
        worker = create_queue_worker(source, lambda t, p: None)
        with pytest.raises(pymysql.err.OperationalError) as error:
            worker.start()
        assert "Access denied" in str(error.value)
        with pytest.raises(pymysql.err.OperationalError) as again:
            process_next_job(source, lambda t, p: None)
        assert no_secret(error.value, again.value, source, worker, error.getrepr())
    finally:
        source.close()
    assert no_secret(*(record.getMessage() for record in caplog.records))


def test_postgres_connection_errors_never_show_the_password(caplog):
    caplog.set_level(logging.DEBUG)
    url = f"postgresql://postgres:{SECRET}@127.0.0.1:1/test"
    pool = ConnectionPool(url, min_size=1, max_size=1, timeout=0.5, open=False)
    pool.open(wait=False)
    try:
        worker = create_queue_worker(pool, lambda t, p: None)
        with pytest.raises(psycopg.OperationalError) as error:
            worker.start()
        with pytest.raises(psycopg.OperationalError) as direct:
            psycopg.connect(url, connect_timeout=2)
        assert no_secret(error.value, direct.value, error.getrepr(), worker)
    finally:
        pool.close()
    assert no_secret(*(record.getMessage() for record in caplog.records))


def test_polling_errors_logged_by_a_running_worker_never_show_the_password(backend, caplog):
    """The data source works for the start-up check, then every connection fails."""
    caplog.set_level(logging.DEBUG)
    log = EventLog()
    calls = []
    if backend.name == "mysql":
        bad = {**backend.options, "password": SECRET}

        def broken() -> Any:
            return pymysql.connect(**bad)
    else:

        def broken() -> Any:
            return psycopg.connect(f"postgresql://postgres:{SECRET}@127.0.0.1:1/test")

    def source() -> Any:
        calls.append(1)
        return backend.connect() if len(calls) == 1 else broken()

    worker = create_queue_worker(source, lambda t, p: None, polling_interval_ms=10, log=log)
    with running(worker):
        wait_for(lambda: log.named("polling_error"), what="a polling error")
    texts = [f"{event} {data}" for event, data in log.events]
    texts += [repr(data.get("exception")) for _, data in log.events]
    assert no_secret(*texts, *(record.getMessage() for record in caplog.records))


@pytest.mark.parametrize("scheme", ["mysql", "postgresql"])
def test_the_cli_never_prints_the_password(scheme, request):
    if scheme == "mysql":
        url = wrong_root_password_url(request.getfixturevalue("mysql_backend"))
    else:
        url = f"postgresql://postgres:{SECRET}@127.0.0.1:1/test"
    result = subprocess.run(
        [sys.executable, "-m", "proletarian_di.cli", "schema", "check", "--database-url", url],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
        cwd=ROOT,
    )
    assert result.returncode != 0
    assert "***" in result.stdout + result.stderr
    assert no_secret(result.stdout, result.stderr)


# All SQL parameterized -------------------------------------------------------

HOSTILE_TYPE = "x'); DROP TABLE proletarian.archived_job; --"
HOSTILE_QUEUE = "q' OR '1'='1"
HOSTILE_TEXT = "'; DELETE FROM proletarian.job; -- \\' \" `"


class Recorder:
    """Every (statement, parameters) a connection is asked to run."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def sql(self) -> list[str]:
        return [sql if isinstance(sql, str) else bytes(sql).decode() for sql, _ in self.calls]


class Lending:
    """A data source lending the same connection every time, without closing it."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    @contextlib.contextmanager
    def connection(self) -> Any:
        yield self.conn


def recording_connection(backend: Any, recorder: Recorder) -> Any:
    if backend.name == "mysql":

        def recording(base: type) -> type:
            class MySQLCursor(base):  # type: ignore[misc, valid-type]
                _inner = False

                def execute(self, query: Any, args: Any = None) -> Any:
                    if not self._inner:
                        recorder.calls.append((query, args))
                    return super().execute(query, args)

                def executemany(self, query: Any, args: Any) -> Any:
                    recorder.calls.append((query, args))
                    self._inner = True
                    try:
                        return super().executemany(query, args)
                    finally:
                        self._inner = False

            return MySQLCursor

        class MySQLConnection(pymysql.connections.Connection):  # type: ignore[misc]
            """Records through whichever cursor class is asked for."""

            def cursor(self, cursor: Any = None) -> Any:
                return recording(cursor or self.cursorclass)(self)

        return MySQLConnection(**backend.options, autocommit=False)

    class PGCursor(psycopg.Cursor):  # type: ignore[type-arg]
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            recorder.calls.append((str(query), params))
            return super().execute(query, params, **kwargs)

        def executemany(self, query: Any, params_seq: Any, **kwargs: Any) -> Any:
            recorder.calls.append((str(query), params_seq))
            return super().executemany(query, params_seq, **kwargs)

    return psycopg.connect(backend.url, cursor_factory=PGCursor)


def test_every_value_reaches_the_database_as_a_parameter(backend):
    recorder = Recorder()
    conn = recording_connection(backend, recorder)
    payload = {"text": HOSTILE_TEXT, HOSTILE_TEXT: [HOSTILE_QUEUE]}
    try:
        first = enqueue(conn, HOSTILE_TYPE, payload, queue=HOSTILE_QUEUE)
        many = enqueue_many(conn, [(HOSTILE_TYPE, payload)] * 3, queue=HOSTILE_QUEUE)
        conn.commit()
        seen: list[Any] = []

        def handle(job: Any) -> None:
            seen.append((job.job_type, job.payload, job.queue))
            if len(seen) == 2:
                raise RuntimeError(HOSTILE_TEXT)

        options = {
            "queue": HOSTILE_QUEUE,
            "handler_fn_mode": "advanced",
            "retry_strategy_fn": lambda job, exc: RetrySpec(retries=1),
            "failed_job_fn": lambda job, exc: None,
        }
        while process_next_job(Lending(conn), handle, **options) is not None:
            pass
    finally:
        with contextlib.suppress(Exception):
            conn.close()
    assert seen == [(HOSTILE_TYPE, payload, HOSTILE_QUEUE)] * 5
    archived = backend.query(
        "SELECT job_id, job_type, queue, status FROM proletarian.archived_job WHERE queue = %s",
        (HOSTILE_QUEUE,),
    )
    ids = {
        value if isinstance(value, uuid.UUID) else uuid.UUID(bytes=value) for value, *_ in archived
    }
    assert ids == {first, *many}
    assert {(t, q, s) for _, t, q, s in archived} == {(HOSTILE_TYPE, HOSTILE_QUEUE, "success")}
    sql = recorder.sql()
    assert len(sql) >= 6
    for marker in (
        HOSTILE_TYPE,
        HOSTILE_QUEUE,
        HOSTILE_TEXT,
        "DROP TABLE",
        "DELETE FROM proletarian.job;",
    ):
        assert not [s for s in sql if marker in s], f"{marker!r} was pasted into SQL"
    params = repr([p for _, p in recorder.calls])
    assert "OR '1'='1" in params or "OR \\'1\\'=\\'1" in params


# Least-privilege grants ------------------------------------------------------

WORKER_USER = "proletarian_test_worker"


def test_grants_are_enough_for_a_worker_and_no_more_on_postgres(postgresql_backend):
    backend = postgresql_backend
    backend.reset()
    with contextlib.closing(psycopg.connect(backend.url, autocommit=True)) as admin:
        for _ in range(2):
            admin.execute((ROOT / "sql" / "grants-postgresql.sql").read_text())
        admin.execute(
            f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{WORKER_USER}') "
            f"THEN CREATE ROLE {WORKER_USER} LOGIN IN ROLE proletarian_worker; END IF; END $$"
        )
    url = psycopg.conninfo.make_conninfo(backend.url, user=WORKER_USER)
    run_as_worker(backend, lambda: psycopg.connect(url), lambda: psycopg.connect(url))
    forbidden = [
        "SELECT * FROM proletarian.archived_job",
        "INSERT INTO proletarian.job (job_id, queue, job_type, payload, attempts, enqueued_at,"
        " process_at) VALUES (gen_random_uuid(), 'q', 't', '1', 0, now(), now())",
        "DELETE FROM proletarian.archived_job",
        "TRUNCATE proletarian.job",
        "DROP TABLE proletarian.job",
        "CREATE TABLE proletarian.sneaky (id int)",
    ]
    assert_denied_on_postgres(url, forbidden)


def assert_denied_on_postgres(url: str, forbidden: list[str]) -> None:
    for statement in forbidden:
        with (
            contextlib.closing(psycopg.connect(url)) as conn,
            pytest.raises(psycopg.errors.InsufficientPrivilege),
        ):
            conn.execute(statement)


def test_grants_are_enough_for_a_worker_and_no_more_on_mysql(mysql_backend):
    backend = mysql_backend
    admin = backend.connect()
    try:
        cursor = admin.cursor()
        for _ in range(2):
            for statement in statements((ROOT / "sql" / "grants-mysql.sql").read_text()):
                cursor.execute(statement)
        cursor.execute(
            f"CREATE USER IF NOT EXISTS '{WORKER_USER}'@'%' IDENTIFIED BY %s".replace(
                "'%'", "'%%'"
            ),
            (SECRET,),
        )
        cursor.execute(f"GRANT proletarian_worker TO '{WORKER_USER}'@'%'")
        cursor.execute(f"SET DEFAULT ROLE proletarian_worker FOR '{WORKER_USER}'@'%'")
        admin.commit()
    finally:
        admin.close()
    options = {**backend.options, "user": WORKER_USER, "password": SECRET}  # type: ignore[attr-defined]
    options.pop("database", None)
    source = MySQLDataSource(max_connections=2, **options)
    try:
        run_as_worker(backend, lambda: pymysql.connect(**options), source)
    finally:
        source.close()
    forbidden = [
        "SELECT * FROM proletarian.archived_job",
        "INSERT INTO proletarian.job (job_id, queue, job_type, payload, attempts, enqueued_at,"
        " process_at) VALUES (UNHEX(REPLACE(UUID(), '-', '')), 'q', 't', '1', 0, NOW(), NOW())",
        "DELETE FROM proletarian.archived_job",
        "DROP TABLE proletarian.job",
        "CREATE TABLE proletarian.sneaky (id int)",
        "SELECT * FROM mysql.user",
    ]
    with contextlib.closing(pymysql.connect(**options)) as conn:
        for statement in forbidden:
            with pytest.raises(pymysql.err.MySQLError) as denied:
                conn.cursor().execute(statement)
            assert denied.value.args[0] in (1142, 1143, 1044, 1045, 1227, 1146), denied.value


def run_as_worker(backend: Any, connect: Any, source: Any) -> None:
    """Enqueue as the admin; start, run, retry, fail and archive as the worker role."""
    queue = f"grants-{uuid.uuid4().hex[:8]}"
    with contextlib.closing(backend.connect()) as conn:
        ids = enqueue_many(conn, [("ok", 1), ("flaky", 2), ("bad", 3)], queue=queue)
        conn.commit()
    attempts: dict[str, int] = {}
    failed = []
    events = EventLog()

    def handle(job_type: str, payload: Any) -> None:
        attempts[job_type] = attempts.get(job_type, 0) + 1
        if job_type == "bad" or (job_type == "flaky" and attempts[job_type] == 1):
            raise RuntimeError("boom")

    worker = create_queue_worker(
        source,
        handle,
        queue=queue,
        polling_interval_ms=10,
        retry_strategy_fn=lambda job, exc: (
            RetrySpec(retries=1) if job.job_type == "flaky" else None
        ),
        failed_job_fn=lambda job, exc: failed.append(job.job_type),
        log=events,
    )
    with running(worker):
        wait_for(
            lambda: backend.query(
                "SELECT 1 FROM proletarian.job_workers WHERE queue = %s", (queue,)
            ),
            what="the least-privileged worker registered among the live workers",
        )
        rows = wait_for(
            lambda: (lambda r: r if len(r) == 3 else None)(
                backend.query(
                    "SELECT job_type, status, attempts FROM proletarian.archived_job "
                    "WHERE queue = %s ORDER BY job_type",
                    (queue,),
                )
            ),
            what="three jobs archived by the least-privileged worker",
        )
    assert [tuple(r) for r in rows] == [
        ("bad", "failure", 1),
        ("flaky", "success", 2),
        ("ok", "success", 1),
    ]
    assert failed == ["bad"]
    assert events.named("registry_error") == []
    with contextlib.closing(connect()) as conn:  # what a worker's beat does once an hour
        sum_up(conn, dialect_of(conn, DEFAULT_TABLES), datetime.now(timezone.utc))
        conn.commit()
    summed = backend.query("SELECT COUNT(*) FROM proletarian.job_hourly_outcomes WHERE queue = ''")
    assert summed[0][0] >= 1, "the worker role summed up an hour of the archive"
    assert backend.query("SELECT 1 FROM proletarian.job_workers WHERE queue = %s", (queue,)) == []
    assert worker.summary()["succeeded"] == 2
    assert len(ids) == 3
    assert (
        backend.query("SELECT COUNT(*) FROM proletarian.job WHERE queue = %s", (queue,))[0][0] == 0
    )


SCHEDULER_USER = "proletarian_test_scheduler"


def run_as_scheduler(backend: Any, source: Any) -> None:
    """A scheduler with the scheduler role alone records its schedule and enqueues a tick."""
    from datetime import datetime, timedelta, timezone

    from proletarian_di import PeriodicJob, create_scheduler
    from proletarian_di.testing import FakeClock

    name = f"grants-{uuid.uuid4().hex[:8]}"
    clock = FakeClock(datetime(2026, 5, 1, 10, 0, 30, tzinfo=timezone.utc))
    scheduler = create_scheduler(source, [PeriodicJob(name, "* * * * *", name)], clock=clock)
    scheduler.register()
    clock.advance(timedelta(minutes=1))
    [tick] = scheduler.run_pending()
    assert tick.job_id is not None
    assert backend.query("SELECT job_type FROM proletarian.job WHERE job_type = %s", (name,)) == [
        (name,)
    ]


def test_the_scheduler_role_is_enough_for_a_scheduler_and_no_more_on_postgres(
    postgresql_backend,
):
    backend = postgresql_backend
    backend.reset()
    url = postgres_login(backend, SCHEDULER_USER, "proletarian_scheduler")
    run_as_scheduler(backend, lambda: psycopg.connect(url))
    assert_denied_on_postgres(
        url, ["SELECT * FROM proletarian.job", "DELETE FROM proletarian.job_periodic"]
    )


def test_the_scheduler_role_is_enough_for_a_scheduler_and_no_more_on_mysql(mysql_backend):
    backend = mysql_backend
    backend.reset()
    options = mysql_login(backend, SCHEDULER_USER, "proletarian_scheduler")
    run_as_scheduler(backend, lambda: pymysql.connect(**options))
    with contextlib.closing(pymysql.connect(**options)) as conn:
        for statement in ("SELECT * FROM proletarian.job", "DELETE FROM proletarian.job_periodic"):
            with pytest.raises(pymysql.err.MySQLError) as denied:
                conn.cursor().execute(statement)
            assert denied.value.args[0] in (1142, 1044), denied.value


def postgres_login(backend: Any, user: str, role: str) -> str:
    """Install the grants, and a login `user` holding only `role`; its URL."""
    with contextlib.closing(psycopg.connect(backend.url, autocommit=True)) as admin:
        admin.execute((ROOT / "sql" / "grants-postgresql.sql").read_text())
        admin.execute(
            f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{user}') "
            f"THEN CREATE ROLE {user} LOGIN IN ROLE {role}; END IF; END $$"
        )
    return psycopg.conninfo.make_conninfo(backend.url, user=user)


def mysql_login(backend: Any, user: str, role: str) -> dict[str, Any]:
    """Install the grants, and a user holding only `role` by default; its connect options."""
    with contextlib.closing(backend.connect()) as admin:
        cursor = admin.cursor()
        for statement in statements((ROOT / "sql" / "grants-mysql.sql").read_text()):
            cursor.execute(statement)
        cursor.execute(f"CREATE USER IF NOT EXISTS '{user}'@'%%' IDENTIFIED BY %s", (SECRET,))
        cursor.execute(f"GRANT {role} TO '{user}'@'%'")
        cursor.execute(f"SET DEFAULT ROLE {role} FOR '{user}'@'%'")
        admin.commit()
    options = {**backend.options, "user": user, "password": SECRET}
    options.pop("database", None)
    return options


ENQUEUER_USER = "proletarian_test_enqueuer"


def enqueue_as_enqueuer(backend: Any, connect: Any) -> None:
    """Plain, prioritized and unique enqueues, and a duplicate, as the enqueuer role."""
    backend.reset()
    with contextlib.closing(connect()) as conn:
        plain_id = enqueue(conn, "plain", 1)
        urgent = enqueue(conn, "urgent", 2, priority=5)
        first = enqueue(conn, "invoice", 3, unique_key="invoice:42")
        conn.commit()
        again = enqueue(conn, "invoice", 4, unique_key="invoice:42")
        conn.commit()
    assert again == first
    assert len({plain_id, urgent, first}) == 3
    rows = backend.query(f"SELECT job_type, priority FROM {backend.job_table} ORDER BY job_type")
    assert rows == [("invoice", 0), ("plain", 0), ("urgent", 5)]


def test_the_enqueuer_role_enqueues_with_keys_and_priorities_on_postgres(postgresql_backend):
    backend = postgresql_backend
    url = postgres_login(backend, ENQUEUER_USER, "proletarian_enqueuer")
    enqueue_as_enqueuer(backend, lambda: psycopg.connect(url))
    assert_denied_on_postgres(
        url, ["SELECT payload FROM proletarian.job", "DELETE FROM proletarian.job"]
    )


def test_the_enqueuer_role_enqueues_with_keys_and_priorities_on_mysql(mysql_backend):
    backend = mysql_backend
    options = mysql_login(backend, ENQUEUER_USER, "proletarian_enqueuer")
    enqueue_as_enqueuer(backend, lambda: pymysql.connect(**options))
    with contextlib.closing(pymysql.connect(**options)) as conn:
        for statement in ("SELECT payload FROM proletarian.job", "DELETE FROM proletarian.job"):
            with pytest.raises(pymysql.err.MySQLError) as denied:
                conn.cursor().execute(statement)
            assert denied.value.args[0] in (1142, 1143), denied.value

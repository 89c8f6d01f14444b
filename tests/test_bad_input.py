"""Bad input on both databases: each case is a clear error, and nothing is lost.

The jobs live in their own tables (`proletarian_bad.*`), so that other test runs
sharing the server neither take these jobs nor delete them.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from faults import EventLog, running, wait_for

from proletarian_di import (
    ConfigurationError,
    PayloadError,
    RetrySpec,
    create_queue_worker,
    enqueue,
    enqueue_many,
    process_next_job,
)
from proletarian_di.router import JobRouter, UnknownJobType
from proletarian_di.schema import install_schema, schema_sql
from proletarian_di.testing import run_due_jobs

JOB = "proletarian_bad.job"
ARCHIVE = "proletarian_bad.archived_job"
TABLES = {"job_table": JOB, "archived_job_table": ARCHIVE}


@pytest.fixture
def backend(backend: Any) -> Any:
    """The shared backend, with this module's own tables installed and emptied."""
    backend.install(JOB, ARCHIVE)
    backend.execute(f"DELETE FROM {JOB}")
    backend.execute(f"DELETE FROM {ARCHIVE}")
    return backend


def waiting(backend: Any) -> list[tuple[Any, ...]]:
    return backend.query(f"SELECT job_type, attempts, queue FROM {JOB} ORDER BY process_at")


def _uuid(value: Any) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(bytes=bytes(value))


def commit_jobs(backend: Any, *jobs: tuple[str, Any]) -> list[uuid.UUID]:
    with contextlib.closing(backend.connect()) as conn:
        ids = [enqueue(conn, job_type, payload, job_table=JOB) for job_type, payload in jobs]
        conn.commit()
    return ids


def archive_by_id(backend: Any) -> dict[uuid.UUID, tuple[str, int]]:
    rows = backend.query(f"SELECT job_id, status, attempts FROM {ARCHIVE}")
    return {_uuid(job_id): (status, attempts) for job_id, status, attempts in rows}


def store_raw_payload(backend: Any, job_id: uuid.UUID, text: str) -> None:
    key = job_id.bytes if backend.name == "mysql" else job_id
    backend.execute(f"UPDATE {JOB} SET payload = %s WHERE job_id = %s", (text, key))


def test_undecodable_rows_among_good_ones_do_not_stop_the_worker(backend, pool):
    ids = commit_jobs(backend, *[("work", {"n": n}) for n in range(6)])
    bad = {ids[1]: "{not json", ids[3]: "", ids[4]: "[1,"}
    for job_id, text in bad.items():
        store_raw_payload(backend, job_id, text)
    handled, failures = [], {}

    def on_failure(job, exc):
        failures[job.job_id] = exc

    with running(
        create_queue_worker(
            pool,
            lambda t, p: handled.append(p["n"]),
            polling_interval_ms=10,
            **TABLES,
            failed_job_fn=on_failure,
        )
    ):
        archived = wait_for(lambda: (lambda a: a if len(a) == 6 else None)(archive_by_id(backend)))
    assert sorted(handled) == [0, 2, 5]
    assert set(failures) == set(bad)
    assert all(isinstance(exc, PayloadError) for exc in failures.values())
    assert all("JSON" in str(exc) for exc in failures.values())
    assert archived == {job_id: ("failure" if job_id in bad else "success", 1) for job_id in ids}
    assert waiting(backend) == []


def test_unknown_job_type_is_archived_as_a_failure_naming_it(backend, pool):
    router = JobRouter()
    done = []
    router.register("known", lambda t, p: done.append(p))
    known, mystery = commit_jobs(backend, ("known", 1), ("mystery", 2))
    failures = []
    ran = run_due_jobs(
        pool, router, **TABLES, failed_job_fn=lambda job, exc: failures.append((job.job_id, exc))
    )
    assert ran == 2
    assert done == [1]
    ((failed_id, exc),) = failures
    assert failed_id == mystery
    assert isinstance(exc, UnknownJobType) and isinstance(exc, LookupError)
    assert "'mystery'" in str(exc) and "'known'" in str(exc)
    assert archive_by_id(backend) == {known: ("success", 1), mystery: ("failure", 1)}


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("__str__ itself fails")


class NotAnException(BaseException):
    """A BaseException subclass, as some libraries raise (e.g. timeouts, cancellation)."""


UNUSUAL = {
    "SystemExit": lambda: SystemExit(3),
    "unprintable": lambda: Unprintable(),
    "BaseException subclass": lambda: NotAnException("cancelled"),
    "no args": lambda: RuntimeError(),
}


@pytest.mark.parametrize("kind", list(UNUSUAL))
def test_handlers_raising_unusual_exceptions_fail_the_job_and_the_worker_goes_on(
    backend, pool, kind, caplog
):
    caplog.set_level("ERROR", logger="proletarian_di")
    ids = commit_jobs(backend, ("bad", None), ("good", None), ("bad", None), ("good", None))
    runs, failures = [], []
    log = EventLog()

    def handle(job_type, payload):
        runs.append(job_type)
        if job_type == "bad":
            raise UNUSUAL[kind]()

    worker = create_queue_worker(
        pool,
        handle,
        polling_interval_ms=10,
        **TABLES,
        worker_threads=1,
        failed_job_fn=lambda job, exc: failures.append(type(exc)),
    )
    logged = create_queue_worker(pool, handle, polling_interval_ms=10, **TABLES, log=log)
    with running(worker):
        archived = wait_for(
            lambda: (lambda a: a if len(a) == 4 else None)(archive_by_id(backend)),
            what=f"all jobs archived after a handler raised {kind}",
        )
        assert worker.running
        assert all(t.is_alive() for t in worker._threads)
    assert archived == {
        ids[0]: ("failure", 1),
        ids[1]: ("success", 1),
        ids[2]: ("failure", 1),
        ids[3]: ("success", 1),
    }
    assert sorted(runs) == ["bad", "bad", "good", "good"]
    assert failures == [type(UNUSUAL[kind]())] * 2
    assert any("job_failed" in record.getMessage() for record in caplog.records)
    (bad,) = commit_jobs(backend, ("bad", None))
    with running(logged):
        wait_for(lambda: bad in archive_by_id(backend))
    (event,) = log.named("job_failed")
    assert isinstance(event["exception"], type(UNUSUAL[kind]()))


@pytest.mark.parametrize("raised", [ValueError("mailer down"), SystemExit(1), NotAnException()])
def test_a_raising_failed_job_fn_never_loops(backend, pool, raised):
    ids = commit_jobs(backend, ("bad", None), ("good", None))
    runs, log = [], EventLog()

    def handle(job_type, payload):
        runs.append(job_type)
        if job_type == "bad":
            raise RuntimeError("boom")

    def on_failure(job, exc):
        raise raised

    with running(
        create_queue_worker(
            pool, handle, polling_interval_ms=10, **TABLES, failed_job_fn=on_failure, log=log
        )
    ):
        archived = wait_for(lambda: (lambda a: a if len(a) == 2 else None)(archive_by_id(backend)))
    assert archived == {ids[0]: ("failure", 1), ids[1]: ("success", 1)}
    assert sorted(runs) == ["bad", "good"], "the failed job ran once: no loop"
    (error,) = log.named("failed_job_fn_error")
    assert error["exception"] is raised
    assert error["job_id"] == ids[0]


def raising_strategy(job, exc):
    raise KeyError("strategy bug")


@pytest.mark.parametrize(
    ("strategy", "message"),
    [
        (lambda job, exc: {"retries": -1}, "retries must be >= 0"),
        (lambda job, exc: {"retriez": 2}, "unknown retry spec keys"),
        (lambda job, exc: {"delays": [10]}, "needs a 'retries' key"),
        (lambda job, exc: 3, "must return a RetrySpec, a dict or None"),
        (lambda job, exc: "retry please", "must return a RetrySpec, a dict or None"),
        (lambda job, exc: {"retries": 2, "delays": [-5]}, "delay must be an int >= 0"),
        (lambda job, exc: {"retries": 2.5}, "retries must be an int"),
        (raising_strategy, "strategy bug"),
    ],
)
def test_invalid_retry_specs_from_a_strategy_fail_the_job_once(backend, pool, strategy, message):
    (job_id,) = commit_jobs(backend, ("x", None))
    log, runs = EventLog(), []

    def handle(job_type, payload):
        runs.append(1)
        raise RuntimeError("boom")

    assert process_next_job(pool, handle, retry_strategy_fn=strategy, log=log, **TABLES) is False
    assert process_next_job(pool, handle, retry_strategy_fn=strategy, log=log, **TABLES) is None
    assert runs == [1]
    assert archive_by_id(backend) == {job_id: ("failure", 1)}
    (error,) = log.named("retry_strategy_error")
    assert message in str(error["exception"])


def test_a_valid_retry_spec_still_works_beside_them(backend, pool):
    (job_id,) = commit_jobs(backend, ("x", None))
    attempts = []

    def handle(job):
        attempts.append(job.attempts)
        if job.attempts < 3:
            raise RuntimeError("again")

    while (
        process_next_job(
            pool,
            handle,
            handler_fn_mode="advanced",
            **TABLES,
            retry_strategy_fn=lambda job, exc: RetrySpec(retries=5),
        )
        is not None
    ):
        pass
    assert attempts == [1, 2, 3]
    assert archive_by_id(backend) == {job_id: ("success", 3)}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"worker_threads": -1}, "worker_threads must be an int >= 1"),
        ({"worker_threads": True}, "worker_threads must be an int >= 1"),
        ({"worker_threads": "4"}, "worker_threads must be an int >= 1"),
        ({"worker_threads": 2.0}, "worker_threads must be an int >= 1"),
        ({"handler_fn_mode": "ADVANCED"}, "handler_fn_mode must be 'default' or 'advanced'"),
        ({"polling_interval_ms": -100}, "polling_interval_ms must be an int >= 0"),
        ({"polling_interval_ms": "100"}, "polling_interval_ms must be an int >= 0"),
        ({"await_termination_timeout_ms": -1}, "await_termination_timeout_ms"),
        ({"threads": 4}, "unknown worker option.*threads"),
        ({"queue": 7}, "queue must be a non-empty string"),
        ({"queue": "a\x00b"}, "queue must not contain NUL"),
        ({"retry_strategy_fn": {"retries": 3}}, "retry_strategy_fn must be callable"),
        ({"serializer": "json"}, "serializer must have encode"),
        ({"log": "stdout"}, "log must be a callable"),
        ({"install_shutdown_hook": "yes"}, "install_shutdown_hook must be a bool"),
        ({"job_table": "job; DROP TABLE x"}, "job_table must be a plain identifier"),
    ],
)
def test_invalid_options_fail_before_any_connection(options, message):
    def data_source():
        raise AssertionError("no connection may be opened for invalid options")

    with pytest.raises(ConfigurationError, match=message):
        create_queue_worker(data_source, lambda t, p: None, **options)
    with pytest.raises(ConfigurationError, match=message):
        process_next_job(data_source, lambda t, p: None, **options)
    with pytest.raises(ConfigurationError, match=message):
        run_due_jobs(data_source, lambda t, p: None, **options)


def test_naive_datetimes_are_rejected_and_write_nothing(backend):
    naive = datetime(2030, 1, 1, 12, 0)
    with contextlib.closing(backend.connect()) as conn:
        with pytest.raises(ConfigurationError, match="timezone-aware"):
            enqueue_many(conn, [("a", 1), ("b", 2)], process_at=naive, job_table=JOB)
        with pytest.raises(ConfigurationError, match="process_at must be a datetime"):
            enqueue(conn, "a", 1, process_at="2030-01-01T12:00:00", job_table=JOB)
        with pytest.raises(ConfigurationError, match="process_in must be a timedelta"):
            enqueue(conn, "a", 1, process_in=5, job_table=JOB)
        enqueue(conn, "ok", 1, process_in=timedelta(seconds=-5), job_table=JOB)
        conn.commit()
    assert waiting(backend) == [("ok", 0, "default")]


def test_nul_in_a_job_type_or_queue_is_named_and_writes_nothing(backend):
    with contextlib.closing(backend.connect()) as conn:
        with pytest.raises(ConfigurationError, match="job_type must not contain NUL"):
            enqueue_many(conn, [("ok", 1), ("a\x00b", 2)], job_table=JOB)
        with pytest.raises(ConfigurationError, match="job_type must not contain NUL"):
            enqueue(conn, "a\x00b", 1, job_table=JOB)
        with pytest.raises(ConfigurationError, match="queue must not contain NUL"):
            enqueue(conn, "a", 1, queue="q\x00", job_table=JOB)
        conn.commit()
    assert waiting(backend) == []


def test_a_10_mb_payload_round_trips(backend, pool):
    blob = "x" * (10 * 1024 * 1024 - 64) + "é😀"
    payload = {"blob": blob, "n": 1}
    (job_id,) = commit_jobs(backend, ("big", payload))
    seen = []

    def handle(job_type, payload):
        seen.append(hashlib.sha256(payload["blob"].encode()).hexdigest())

    assert process_next_job(pool, handle, **TABLES) is True
    assert seen == [hashlib.sha256(blob.encode()).hexdigest()]
    assert archive_by_id(backend) == {job_id: ("success", 1)}


BAD_TABLE_NAMES = [
    "proletarian.job; DROP TABLE proletarian.archived_job --",
    'proletarian."job"',
    "proletarian.job ",
    "a.b.c",
    "1job",
    "",
    "proletarian.jöb",
    "proletarian.job)--",
]


def statements_sent(backend, conn) -> Any:
    """A marker of the statements the server has seen on `conn`."""
    if backend.name == "mysql":
        cursor = conn.cursor()
        cursor.execute("SHOW SESSION STATUS LIKE 'Questions'")
        return int(cursor.fetchone()[1]) - 1
    return conn.info.transaction_status


@pytest.mark.parametrize("name", BAD_TABLE_NAMES)
def test_table_names_that_are_not_plain_identifiers_are_rejected_before_any_sql(
    backend, pool, name
):
    with contextlib.closing(backend.connect()) as conn:
        before = statements_sent(backend, conn)
        with pytest.raises(ValueError, match="plain identifier"):
            enqueue(conn, "x", 1, job_table=name)
        with pytest.raises(ValueError, match="plain identifier"):
            enqueue_many(conn, [("x", 1)], job_table=name)
        with pytest.raises(ValueError, match="plain identifier"):
            install_schema(conn, name)
        after = statements_sent(backend, conn)
        if backend.name == "postgresql":
            assert before == after == psycopg.pq.TransactionStatus.IDLE
        else:
            assert after == before + 1
    with pytest.raises(ValueError, match="plain identifier"):
        schema_sql(backend.name, name)
    with pytest.raises(ValueError, match="plain identifier"):
        create_queue_worker(pool, lambda t, p: None, archived_job_table=name)
    assert waiting(backend) == []
    assert backend.query(f"SELECT COUNT(*) FROM {ARCHIVE}")[0][0] == 0


@pytest.mark.parametrize(
    ("job_type", "payload", "queue"),
    [
        ("ok", {"s": "\ud800"}, "default"),
        ("ok", ["\udcff"], "default"),
        ("ok", {"\udc80key": 1}, "default"),
        ("\ud800", {"s": 1}, "default"),
        ("ok", {"s": 1}, "q\udfff"),
    ],
)
def test_text_that_is_not_valid_utf8_is_a_clear_error_and_writes_nothing(
    backend, job_type, payload, queue
):
    with contextlib.closing(backend.connect()) as conn:
        with pytest.raises(ValueError, match=r"surrogate|UTF-8|utf-8|encode"):
            enqueue(conn, job_type, payload, queue=queue, job_table=JOB)
        enqueue(conn, "after", {"emoji": "😀", "nul": "\x00"}, job_table=JOB)
        conn.commit()
    assert waiting(backend) == [("after", 0, "default")]
    seen = []
    source = backend.pool(1)
    try:
        assert process_next_job(source, lambda t, p: seen.append(p), **TABLES) is True
    finally:
        source.close()
    assert seen == [{"emoji": "😀", "nul": "\x00"}]


def test_bad_input_under_concurrency_loses_nothing(backend, pool):
    """Good, undecodable, raising and unknown jobs mixed, run by several threads."""
    kinds = ["good", "raise", "unknown", "bad_payload"] * 10
    ids = commit_jobs(backend, *[(kind, {"i": i}) for i, kind in enumerate(kinds)])
    for job_id, kind in zip(ids, kinds, strict=False):
        if kind == "bad_payload":
            store_raw_payload(backend, job_id, "{")
    router = JobRouter()
    lock = threading.Lock()
    ran: list[int] = []

    @router.handler("good", "bad_payload")
    def good(job_type, payload):
        with lock:
            ran.append(payload["i"])

    @router.handler("raise")
    def raising(job_type, payload):
        raise SystemExit("handler called exit()")

    with running(
        create_queue_worker(pool, router, polling_interval_ms=10, **TABLES, worker_threads=4)
    ):
        archived = wait_for(
            lambda: (lambda a: a if len(a) == len(ids) else None)(archive_by_id(backend))
        )
    expected = {
        job_id: ("success" if kind == "good" else "failure", 1)
        for job_id, kind in zip(ids, kinds, strict=True)
    }
    assert archived == expected
    assert sorted(ran) == [i for i, kind in enumerate(kinds) if kind == "good"]
    assert waiting(backend) == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"process_in": timedelta(days=3_000_000)}, "process_in=.* is too far ahead"),
        (
            {"process_at": datetime.max.replace(tzinfo=timezone(timedelta(hours=-5)))},
            "process_at=.* is too far ahead",
        ),
    ],
)
def test_times_past_what_a_database_holds_are_a_clear_error(backend, options, message):
    conn = backend.connect()
    try:
        with pytest.raises(ConfigurationError, match=message):
            enqueue(conn, "x", None, job_table=JOB, **options)
        with pytest.raises(ValueError, match=message):
            enqueue_many(conn, [("x", None)], job_table=JOB, **options)
        conn.commit()
    finally:
        conn.close()
    assert waiting(backend) == []


def test_the_last_representable_time_is_stored_as_it_is(backend):
    last = datetime.max.replace(tzinfo=timezone.utc)
    commit_jobs_at(backend, last)
    (due,) = backend.query(f"SELECT process_at FROM {JOB}")[0]
    assert due.replace(tzinfo=timezone.utc) == last


def commit_jobs_at(backend: Any, process_at: datetime) -> None:
    with contextlib.closing(backend.connect()) as conn:
        enqueue(conn, "last", None, job_table=JOB, process_at=process_at)
        conn.commit()

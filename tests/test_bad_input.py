"""Bad input on both databases, across the API: each case is a clear error, and nothing is lost.

Bad input that concerns one module is tested with it (invalid options in test_worker.py,
retry specs in test_retry.py, times and table names in test_enqueue.py, unknown job types
in test_router.py). The jobs here live in their own tables (`proletarian_bad.*`), so that
other test runs sharing the server neither take these jobs nor delete them.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from faults import EventLog, NotAnException, running, wait_for

from proletarian_di import (
    ConfigurationError,
    PayloadError,
    SchemaError,
    create_queue_worker,
    enqueue,
    enqueue_many,
    process_next_job,
)
from proletarian_di._common.checks import MAX_DURATION_MS
from proletarian_di._store.dependencies import LATEST_DUE
from proletarian_di.router import JobRouter

from backends import archive_by_id, enqueue_committed, store_raw_payload

JOB = "proletarian_bad.job"
ARCHIVE = "proletarian_bad.archived_job"
TABLES = {"job_table": JOB, "archived_job_table": ARCHIVE}


@pytest.fixture
def backend(backend: Any) -> Any:
    """The shared backend seen through this module's own tables, installed and emptied."""
    own = backend.with_tables(JOB, ARCHIVE)
    own.install()
    own.reset()
    return own


def commit_jobs(backend: Any, *jobs: tuple[str, Any]) -> list[Any]:
    """Enqueue and commit jobs in this module's table; return their ids."""
    return enqueue_committed(backend, *jobs, job_table=JOB)


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("__str__ itself fails")


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


def test_nul_in_a_job_type_or_queue_is_named_and_writes_nothing(backend):
    with contextlib.closing(backend.connect()) as conn:
        with pytest.raises(ConfigurationError, match="job_type must not contain NUL"):
            enqueue_many(conn, [("ok", 1), ("a\x00b", 2)], job_table=JOB)
        with pytest.raises(ConfigurationError, match="job_type must not contain NUL"):
            enqueue(conn, "a\x00b", 1, job_table=JOB)
        with pytest.raises(ConfigurationError, match="queue must not contain NUL"):
            enqueue(conn, "a", 1, queue="q\x00", job_table=JOB)
        conn.commit()
    assert backend.jobs() == []


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


@pytest.mark.parametrize(
    ("text", "error", "message"),
    [
        ({"payload": {"s": "\ud800"}}, PayloadError, "payload is not JSON-serializable"),
        ({"payload": ["\udcff"]}, PayloadError, "payload is not JSON-serializable"),
        ({"payload": {"\udc80key": 1}}, PayloadError, "payload is not JSON-serializable"),
        ({"job_type": "\ud800"}, ConfigurationError, "job_type must be valid Unicode text"),
        ({"queue": "q\udfff"}, ConfigurationError, "queue must be valid Unicode text"),
        ({"unique_key": "k\udc80"}, ConfigurationError, "unique_key must be valid Unicode"),
    ],
)
def test_text_that_is_not_valid_utf8_is_a_clear_error_and_writes_nothing(
    backend, text, error, message
):
    """A lone surrogate is named by the option it is in, before anything is sent (it was a
    raw UnicodeEncodeError from the driver)."""
    job = {"job_type": "ok", "payload": {"s": 1}, **text}
    options = {key: value for key, value in text.items() if key in ("queue", "unique_key")}
    with contextlib.closing(backend.connect()) as conn:
        with pytest.raises(error, match=message) as raised:
            enqueue(conn, job["job_type"], job["payload"], job_table=JOB, **options)
        assert "surrogate" in str(raised.value)
        if "unique_key" not in options:
            with pytest.raises(error, match=message):
                enqueue_many(
                    conn, [("fine", 1), (job["job_type"], job["payload"])], **options, job_table=JOB
                )
        enqueue(conn, "after", {"emoji": "😀", "nul": "\x00"}, job_table=JOB)
        conn.commit()
    assert backend.jobs() == [("after", 0, "default")]
    seen = []
    source = backend.pool(1)
    try:
        assert process_next_job(source, lambda t, p: seen.append(p), **TABLES) is True
    finally:
        source.close()
    assert seen == [{"emoji": "😀", "nul": "\x00"}]


def test_a_lone_surrogate_in_a_workers_queue_or_job_timeouts_is_a_configuration_error(pool):
    with pytest.raises(ConfigurationError, match="queue must be valid Unicode text"):
        create_queue_worker(pool, lambda t, p: None, queue="q\ud800", **TABLES)
    with pytest.raises(ConfigurationError, match="job type must be valid Unicode text"):
        create_queue_worker(pool, lambda t, p: None, job_timeouts={"t\udc80": 5}, **TABLES)


@pytest.mark.parametrize(
    "option",
    [
        "lease_ms",
        "job_timeout_ms",
        "polling_interval_ms",
        "fallback_polling_interval_ms",
        "await_termination_timeout_ms",
    ],
)
def test_a_duration_past_the_bound_is_a_configuration_error(pool, option):
    """`lease_ms=2**62` killed the heartbeat with an OverflowError and every claim failed
    forever; now it, and every other duration past about a century, is refused."""
    for too_long in (MAX_DURATION_MS + 1, 2**62):
        with pytest.raises(ConfigurationError, match=f"{option} must be at most {MAX_DURATION_MS}"):
            create_queue_worker(pool, lambda t, p: None, **{option: too_long}, **TABLES)
    with pytest.raises(ConfigurationError, match=r"job_timeouts\['t'\] must be at most"):
        create_queue_worker(pool, lambda t, p: None, job_timeouts={"t": 2**62}, **TABLES)


def test_the_longest_lease_runs_jobs(backend, pool):
    """The bound is real: a worker with the longest lease claims, renews and settles."""
    ids = commit_jobs(backend, ("a", 1), ("b", 2))
    ran = []
    worker = create_queue_worker(
        pool,
        lambda t, p: ran.append(p),
        lease_ms=MAX_DURATION_MS,
        polling_interval_ms=10,
        **TABLES,
    )
    with running(worker):
        wait_for(lambda: len(archive_by_id(backend)) == 2)
    assert sorted(ran) == [1, 2]
    assert archive_by_id(backend) == {job_id: ("success", 1) for job_id in ids}


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
    assert backend.jobs() == []


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
    assert backend.jobs() == []


def test_the_last_time_a_job_may_be_due_is_stored_as_it_is(backend):
    """Later times (up to datetime.max) are kept for jobs that wait on others."""
    last = LATEST_DUE - timedelta(microseconds=1)
    enqueue_committed(backend, ("last", None), job_table=JOB, process_at=last)
    (due,) = backend.query(f"SELECT process_at FROM {JOB}")[0]
    assert due.replace(tzinfo=timezone.utc) == last
    with pytest.raises(ConfigurationError, match="must be due before 9999-12-30 00:00 UTC"):
        enqueue_committed(backend, ("later", None), job_table=JOB, process_at=LATEST_DUE)


def test_an_error_message_with_a_lone_surrogate_is_stored_escaped(backend, pool):
    """A handler's error text goes to last_error: a lone surrogate in it (a file name decoded
    with surrogateescape) made every retry and archive of the job fail, so it ran forever."""
    (job_id,) = commit_jobs(backend, ("odd", None))

    def handle(job_type, payload):
        raise RuntimeError("cannot open b'\udcff' \ud800")

    def retry_once(job, exc):
        return {"retries": 1} if job.attempts == 1 else None

    # (logged nowhere: a test report cannot carry the surrogate to a pytest-xdist controller)
    options = {"retry_strategy_fn": retry_once, "log": lambda event, data: None, **TABLES}
    assert process_next_job(pool, handle, **options) is False
    (last_error,) = backend.query(f"SELECT last_error FROM {JOB}")[0]
    assert last_error.startswith("RuntimeError: cannot open b'\\udcff' \\ud800")
    assert process_next_job(pool, handle, **options) is False
    assert archive_by_id(backend) == {job_id: ("failure", 2)}
    (archived_error,) = backend.query(f"SELECT last_error FROM {ARCHIVE}")[0]
    assert archived_error.startswith("RuntimeError: cannot open b'\\udcff' \\ud800")


@pytest.mark.parametrize("how", ["one", "many", "unique"])
def test_enqueue_into_a_table_that_does_not_exist_says_so_and_leaves_the_transaction(backend, how):
    """A wrong `job_table` (or a schema never installed): a SchemaError naming the table
    and how to install it, not the driver's error; the caller's transaction goes on."""
    table = "proletarian_bad.no_such_job"
    with contextlib.closing(backend.connect()) as conn:
        with pytest.raises(SchemaError) as raised:
            if how == "many":
                enqueue_many(conn, [("email", {"n": 1})], job_table=table)
            elif how == "unique":
                enqueue(conn, "email", {"n": 1}, job_table=table, unique_key="k")
            else:
                enqueue(conn, "email", {"n": 1}, job_table=table)
        message = str(raised.value)
        assert table in message and "does not exist" in message and "schema install" in message
        conn.rollback()
        enqueue(conn, "email", {"n": 2}, job_table=JOB)
        conn.commit()
    assert len(backend.query(f"SELECT job_id FROM {JOB}")) == 1

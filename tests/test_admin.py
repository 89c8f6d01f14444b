"""The admin API on both databases: listing and inspecting jobs in every state, retrying,
cancelling and pruning, and a running job told apart without blocking its worker."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from proletarian_di import (
    ConfigurationError,
    RetrySpec,
    create_queue_worker,
    enqueue,
    enqueue_many,
    process_next_job,
)
from proletarian_di.admin import (
    STATES,
    JobInfo,
    cancel_jobs,
    delete_archived,
    get_job,
    list_jobs,
    retry_failed,
    retry_jobs,
)

from backends import (
    archive_by_id,
    committed,
    connection,
    enqueue_committed,
    lock_view_settled,
    store_raw_payload,
    wait_until,
)

LATER = {"retry_strategy_fn": lambda job, exc: RetrySpec(retries=3, delays=[3_600_000])}


def ok(job_type: str, payload: Any) -> None:
    return None


def boom(job_type: str, payload: Any) -> None:
    raise RuntimeError(f"boom {payload}")


def by_type(jobs: list[JobInfo]) -> dict[str, JobInfo]:
    return {job.job_type: job for job in jobs}


def is_utc(moment: datetime | None) -> bool:
    return moment is not None and moment.utcoffset() == timedelta(0)


def one_of_each_state(backend: Any, pool: Any) -> dict[str, uuid.UUID]:
    """A job in every state but running, each of its own type and queue."""
    ids = {
        "queued": enqueue_committed(backend, ("queued", {"n": 1}), queue="q")[0],
        "scheduled": enqueue_committed(
            backend, ("scheduled", {"n": 2}), queue="s", process_in=timedelta(hours=1)
        )[0],
    }
    for state, queue, handler, options in (
        ("retrying", "r", boom, LATER),
        ("succeeded", "ok", ok, {}),
        ("failed", "bad", boom, {}),
    ):
        ids[state] = enqueue_committed(backend, (state, {"n": state}), queue=queue)[0]
        process_next_job(pool, handler, queue=queue, **options)
    ids["cancelled"] = enqueue_committed(backend, ("cancelled", None), queue="c")[0]
    assert committed(backend, cancel_jobs, queue="c") == 1
    return ids


def test_every_state_listed_and_got(backend, pool):
    ids = one_of_each_state(backend, pool)
    with connection(backend) as conn:
        everything = by_type(list_jobs(conn))
        assert {name: job.state for name, job in everything.items()} == {s: s for s in ids}
        for state, job_id in ids.items():
            assert [job.job_id for job in list_jobs(conn, state=state)] == [job_id]

        retrying = get_job(conn, str(ids["retrying"]))
        assert retrying is not None
        assert (retrying.queue, retrying.attempts, retrying.payload) == ("r", 1, {"n": "retrying"})
        assert retrying.error is not None and "RuntimeError: boom" in retrying.error
        assert retrying.finished_at is None
        assert retrying.process_at > datetime.now(timezone.utc) + timedelta(minutes=50)
        assert is_utc(retrying.enqueued_at) and is_utc(retrying.process_at)

        failed = get_job(conn, ids["failed"])
        assert failed is not None and failed.state == "failed" and failed.attempts == 1
        assert failed.error is not None and "boom" in failed.error and is_utc(failed.finished_at)
        succeeded = get_job(conn, ids["succeeded"])
        assert succeeded is not None and succeeded.error is None
        assert get_job(conn, uuid.uuid4()) is None

        as_json = json.loads(json.dumps(failed.as_dict()))
        assert as_json["job_id"] == str(failed.job_id)
        assert as_json["finished_at"] == failed.finished_at.isoformat()
        assert as_json["payload"] == {"n": "failed"} and as_json["state"] == "failed"


def test_payload_that_cannot_be_decoded_is_shown_raw(backend):
    [job_id] = enqueue_committed(backend, ("raw", {"a": 1}))
    store_raw_payload(backend, job_id, "not json {")
    with connection(backend) as conn:
        job = get_job(conn, job_id)
        assert job is not None and job.payload == "not json {"


def hold(backend: Any, conn: Any) -> None:
    """Open a transaction that fails after 3 s rather than hang on a row lock."""
    if backend.name == "mysql":
        conn.cursor().execute("SET SESSION innodb_lock_wait_timeout = 3")
        conn.begin()
    else:
        conn.execute("SET lock_timeout = '3s'")


def test_running_job_is_found_without_blocking_its_worker(backend, pool):
    started, release = threading.Event(), threading.Event()

    def slow(job_type: str, payload: Any) -> None:
        started.set()
        release.wait(20)

    [running_id] = enqueue_committed(backend, ("slow", None), queue="slow")
    [waiting_id] = enqueue_committed(backend, ("waiting", None), queue="other")
    worker = create_queue_worker(pool, slow, queue="slow", polling_interval_ms=20)
    worker.start()
    try:
        assert started.wait(10)
        with connection(backend) as conn:
            hold(backend, conn)
            assert [job.job_id for job in list_jobs(conn, state="running")] == [running_id]
            states = {job.job_id: job.state for job in list_jobs(conn)}
            assert states == {running_id: "running", waiting_id: "queued"}
            assert [job.job_id for job in list_jobs(conn, state="queued")] == [waiting_id]
            job = get_job(conn, running_id)
            assert job is not None and job.state == "running"

            begun = time.monotonic()
            assert cancel_jobs(conn, [running_id]) == 0
            assert cancel_jobs(conn, queue="slow") == 0
            assert time.monotonic() - begun < 2

            # Another worker is not held up by the probe (on MariaDB the probe's locks last
            # until this transaction ends: workers pass over those jobs meanwhile).
            begun = time.monotonic()
            result = process_next_job(pool, ok, queue="other")
            assert time.monotonic() - begun < 5
            assert result is (None if backend.name == "mysql" else True)
            with connection(backend) as other:  # nor is another admin's probe
                states = {job.job_id: job.state for job in list_jobs(other, queue="other")}
                assert states == {waiting_id: "queued" if backend.name == "mysql" else "succeeded"}

            release.set()
            wait_until(lambda: running_id in archive_by_id(backend), description="slow done")
        assert archive_by_id(backend)[running_id] == ("success", 1)
        if backend.name == "mysql":
            assert process_next_job(pool, ok, queue="other") is True
        assert archive_by_id(backend)[waiting_id] == ("success", 1)
    finally:
        release.set()
        worker.stop()


def lock_row(backend: Any, conn: Any, job_id: uuid.UUID) -> None:
    """Hold a job's row lock on `conn`, as a worker running it does."""
    key = job_id.bytes if backend.name == "mysql" else job_id
    cursor = conn.cursor()
    cursor.execute(f"SELECT job_id FROM {backend.job_table} WHERE job_id = %s FOR UPDATE", (key,))
    assert cursor.fetchall()
    lock_view_settled(backend)  # MySQL's view of row locks lags 100 ms behind


def autocommit(backend: Any, conn: Any) -> None:
    if backend.name == "mysql":
        conn.autocommit(True)
    else:
        conn.autocommit = True


def test_held_rows_on_an_autocommit_connection_and_across_batches(backend, monkeypatch):
    monkeypatch.setattr("proletarian_di.admin.jobs._SCAN_BATCH", 1)
    a, b, c, d = (enqueue_committed(backend, (name, None))[0] for name in "abcd")
    with connection(backend) as holder, connection(backend) as conn:
        lock_row(backend, holder, d)
        autocommit(backend, conn)
        assert [job.job_id for job in list_jobs(conn, state="queued", limit=2)] == [c, b]
        assert [job.job_id for job in list_jobs(conn, state="running", limit=1)] == [d]
        assert [job.state for job in list_jobs(conn)] == ["running", "queued", "queued", "queued"]
        assert cancel_jobs(conn, job_type="d") == 0
        assert cancel_jobs(conn, [a, d]) == 1
    assert sorted(job[0] for job in backend.jobs()) == ["b", "c", "d"]
    assert archive_by_id(backend) == {a: ("cancelled", 0)}


def test_reads_leave_the_callers_transaction_as_it_was(backend):
    with connection(backend) as conn:
        mine = enqueue(conn, "mine", {"n": 1}, queue="own")
        job = get_job(conn, mine)
        assert job is not None and job.state == "queued"
        assert [job.job_id for job in list_jobs(conn, queue="own")] == [mine]
        conn.commit()
    assert backend.jobs() == [("mine", 0, "own")]


def test_mysql_reads_row_locks_from_data_locks_where_it_can(mysql_backend, monkeypatch):
    """MySQL 8's performance_schema.data_locks, as MariaDB stands in for it here."""
    from proletarian_di._store.dialects import MySQLDialect
    from proletarian_di._store.dialects.mysql import _lock_key

    backend = mysql_backend
    backend.reset()
    held, free = enqueue_committed(backend, ("held", None), ("free", None))
    assert _lock_key(f"0x{held.hex.upper()}") == held.bytes
    assert _lock_key("supremum pseudo-record") is None and _lock_key(None) is None

    def no_probe(*args: Any) -> set[Any]:
        raise AssertionError("data_locks answered: nothing to probe")

    monkeypatch.setattr(MySQLDialect, "_locked_job_ids", lambda self, conn: {held.bytes})
    monkeypatch.setattr(MySQLDialect, "probe_held", no_probe)
    with connection(backend) as conn:
        assert [job.job_id for job in list_jobs(conn, state="running")] == [held]
        assert {job.job_id: job.state for job in list_jobs(conn)} == {
            held: "running",
            free: "queued",
        }


def test_filters_and_pages(backend, pool):
    with contextlib.closing(backend.connect()) as conn:
        tied = enqueue_many(conn, [("tied", {"n": n}) for n in range(10)], queue="p")
        conn.commit()
    middle = datetime.now(timezone.utc)
    time.sleep(0.01)
    ids = tied + [enqueue_committed(backend, ("single", {"n": n}), queue="p")[0] for n in range(15)]
    enqueue_committed(backend, ("elsewhere", None), queue="other")
    for handler in (ok, boom, ok, boom, ok):
        process_next_job(pool, handler, queue="p")

    with connection(backend) as conn:
        first = list_jobs(conn, queue="p", limit=10)
        second = list_jobs(conn, queue="p", limit=10, before=first[-1])
        third = list_jobs(conn, queue="p", limit=10, before=second[-1].cursor)
        assert [len(page) for page in (first, second, third)] == [10, 10, 5]
        assert list_jobs(conn, queue="p", limit=10, before=third[-1]) == []
        listed = first + second + third
        assert sorted(job.job_id for job in listed) == sorted(ids)
        keys = [(job.enqueued_at, job.job_id) for job in listed]
        assert keys == sorted(keys, reverse=True)
        assert {job.state for job in listed} == {"queued", "succeeded", "failed"}

        queued = list_jobs(conn, queue="p", state="queued", limit=8)
        queued += list_jobs(conn, queue="p", state="queued", limit=8, before=queued[-1])
        assert len({job.job_id for job in queued}) == len(queued) == 16

        assert {job.job_type for job in list_jobs(conn, job_type="single")} == {"single"}
        assert len(list_jobs(conn, queue="p", enqueued_until=middle)) == 10
        assert len(list_jobs(conn, queue="p", enqueued_since=middle)) == 15
        archived = list_jobs(conn, finished_since=middle)
        assert len(archived) == 5 and all(job.finished_at for job in archived)
        assert list_jobs(conn, finished_until=middle) == []
        assert list_jobs(conn, state="queued", finished_since=middle) == []
        assert [job.queue for job in list_jobs(conn, queue="other")] == ["other"]


def test_retry_jobs_by_id_and_by_filter(backend, pool):
    ids = enqueue_committed(backend, ("a", {"n": 1}), ("b", {"n": 2}), ("c", {"n": 3}), queue="r")
    for _ in ids:
        assert process_next_job(pool, boom, queue="r") is False
    [done] = enqueue_committed(backend, ("fine", None), queue="r")
    assert process_next_job(pool, ok, queue="r") is True

    with connection(backend) as conn:
        assert retry_failed(conn, queue="r", dry_run=True) == 3
        assert retry_jobs(conn, [ids[0], str(done), uuid.uuid4()]) == 1
        conn.commit()
        again = get_job(conn, ids[0])
        assert again is not None
        assert (again.state, again.attempts, again.payload) == ("queued", 0, {"n": 1})
        assert again.error is not None and "boom" in again.error
        assert retry_jobs(conn, job_type="b") == 1
        now = datetime.now(timezone.utc)
        assert retry_jobs(conn, until=now - timedelta(hours=1)) == 0
        assert retry_jobs(conn, queue="r", since=now - timedelta(hours=1), until=now) == 1
        conn.commit()
        assert retry_jobs(conn, []) == 0
    assert sorted(job[0] for job in backend.jobs()) == ["a", "b", "c"]

    seen = []
    while process_next_job(pool, lambda t, p: seen.append(p), queue="r"):
        pass
    assert sorted(payload["n"] for payload in seen) == [1, 2, 3]
    archive = archive_by_id(backend)
    assert [archive[job_id] for job_id in ids] == [("success", 1)] * 3


def test_cancel_jobs_by_id_and_by_filter(backend, pool):
    x, y = enqueue_committed(backend, ("x", None), ("y", None), queue="c")
    [retrying] = enqueue_committed(backend, ("again", None), queue="c2")
    process_next_job(pool, boom, queue="c2", **LATER)
    [kept] = enqueue_committed(backend, ("kept", None), queue="keep")

    with connection(backend) as conn:
        assert cancel_jobs(conn, [x]) == 1
        assert cancel_jobs(conn, queue="c2") == 1
        assert cancel_jobs(conn, job_type="y", queue="c") == 1
        assert cancel_jobs(conn, [x, str(y)]) == 0
        assert cancel_jobs(conn, []) == 0
        conn.commit()
        cancelled = by_type(list_jobs(conn, state="cancelled"))
        assert sorted(cancelled) == ["again", "x", "y"]
        assert cancelled["again"].attempts == 1 and cancelled["x"].attempts == 0
        assert all(is_utc(job.finished_at) for job in cancelled.values())
        assert cancelled["again"].error is not None
        job = get_job(conn, kept)
        assert job is not None and job.state == "queued"
    assert archive_by_id(backend)[retrying] == ("cancelled", 1)


def test_delete_archived(backend, pool):
    one_of_each_state(backend, pool)
    assert committed(backend, delete_archived, status="failure") == 1
    assert committed(backend, delete_archived, older_than=timedelta(hours=1)) == 0
    assert committed(backend, delete_archived, queue="ok") == 1
    assert committed(backend, delete_archived, older_than=timedelta(0), status="cancelled") == 1
    assert archive_by_id(backend) == {}
    assert len(backend.jobs()) == 3


def test_nothing_commits(backend, pool):
    [failed] = enqueue_committed(backend, ("bad", None), queue="bad")
    process_next_job(pool, boom, queue="bad")
    [waiting] = enqueue_committed(backend, ("waiting", None), queue="w")
    with connection(backend) as conn:
        assert retry_jobs(conn, [failed]) == 1
        assert cancel_jobs(conn, [waiting]) == 1
        conn.rollback()
        assert delete_archived(conn, queue="bad") == 1
        conn.rollback()
    assert archive_by_id(backend) == {failed: ("failure", 1)}
    assert backend.jobs() == [("waiting", 0, "w")]


def test_bad_input_is_a_clear_error(backend):
    valid = ", ".join(STATES)
    with connection(backend) as conn:
        for call, message in (
            (lambda: get_job(conn, "not-a-uuid"), "'not-a-uuid' is not a UUID"),
            (lambda: get_job(conn, 42), "42 is not a UUID"),
            (lambda: retry_jobs(conn, ["nope"]), "'nope' is not a UUID"),
            (lambda: cancel_jobs(conn, [uuid.uuid4(), "x1"]), "'x1' is not a UUID"),
            (lambda: cancel_jobs(conn, str(uuid.uuid4())), "must be a list"),
            (lambda: cancel_jobs(conn), "needs job ids or a filter"),
            (lambda: list_jobs(conn, state="done"), f"valid states: {valid}"),
            (lambda: list_jobs(conn, limit=0), "from 1 to 1000"),
            (lambda: list_jobs(conn, limit=1001), "from 1 to 1000"),
            (lambda: list_jobs(conn, limit=True), "from 1 to 1000"),
            (lambda: list_jobs(conn, before="page-2"), "cursor"),
            (lambda: list_jobs(conn, enqueued_since="yesterday"), "must be a datetime"),
            (lambda: delete_archived(conn), "needs a filter"),
            (lambda: delete_archived(conn, status="gone"), "valid statuses"),
        ):
            with pytest.raises(ConfigurationError, match=message):
                call()

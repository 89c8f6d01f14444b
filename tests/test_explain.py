"""`admin.explain_job`, on both databases: what holds a waiting job back now (its queue
paused, scheduled or retrying until a time, max_running full with the job holding the slot,
no live worker for its queue), and nothing for a due, running or finished job; real workers
where the reason needs one."""

from __future__ import annotations

import threading
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from proletarian_di import RateLimit, RetrySpec, admin, create_queue_worker, process_next_job
from proletarian_di._engine import registry as _registry
from proletarian_di.admin.explain import moment
from proletarian_di.errors import ConfigurationError
from proletarian_di.schema import workers_table

from backends import (
    Backend,
    committed,
    connection,
    enqueue_committed,
    lock_view_settled,
    wait_until,
)


@pytest.fixture(autouse=True)
def quick_beats(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers beat every 50 ms here, so that the registry shows a running job at once."""
    monkeypatch.setattr(_registry, "BEAT_S", 0.05)


def explain(backend: Backend, job_id: Any, **options: Any) -> admin.Explanation:
    lock_view_settled(backend)  # MySQL's view of row locks lags 100 ms behind a claim
    with connection(backend) as conn:
        found = admin.explain_job(conn, job_id, **options)
    assert found is not None
    return found


def running_in_registry(backend: Backend, job_id: uuid.UUID) -> bool:
    with connection(backend) as conn:
        return any(job_id in w.running_job_ids for w in admin.list_workers(conn))


def stale_row(backend: Backend, queue: str, seen_ago_s: float) -> None:
    """A row as a worker process killed `seen_ago_s` seconds ago leaves it."""
    ago = (
        f"UTC_TIMESTAMP(6) - INTERVAL {seen_ago_s} SECOND"
        if backend.name == "mysql"
        else f"statement_timestamp() - interval '{seen_ago_s} seconds'"
    )
    backend.execute(
        f"INSERT INTO {workers_table(backend.job_table)} (worker_id, queue, queue_worker_id, "
        f"host, pid, threads, state, started_at, seen_at, activity) VALUES "
        f"('gone:1:00', %s, 'w', 'gone', 1, 1, 'running', {ago}, {ago}, '[]')",
        (queue,),
    )


def test_a_missing_job_is_none_and_a_malformed_id_is_refused(backend):
    with connection(backend) as conn:
        assert admin.explain_job(conn, uuid.uuid4()) is None
        with pytest.raises(ConfigurationError, match="is not a UUID"):
            admin.explain_job(conn, "42")


def test_a_scheduled_job_waits_until_its_time_and_then_for_a_worker(backend):
    [job_id] = enqueue_committed(backend, ("report", None), process_in=timedelta(hours=1))
    found = explain(backend, str(job_id))
    with connection(backend) as conn:
        job = admin.get_job(conn, job_id)
    assert job is not None
    assert (found.job_id, found.queue, found.state) == (job_id, "default", "scheduled")
    assert found.reasons == [
        f"scheduled until {moment(job.process_at)}",
        "no live worker polls queue 'default'",
    ]
    assert found.note is None
    later = explain(backend, job_id, now=job.process_at + timedelta(seconds=1))
    assert later.state == "queued"
    assert later.reasons == ["no live worker polls queue 'default'"]
    assert found.as_dict()["job_id"] == str(job_id)


def test_a_retrying_job_waits_out_its_delay(backend, pool):
    [job_id] = enqueue_committed(backend, ("flaky", None))

    def fail(job_type: str, payload: Any) -> None:
        raise TimeoutError("upstream slow")

    later = {"retry_strategy_fn": lambda job, exc: RetrySpec(retries=2, delays=[3_600_000])}
    assert process_next_job(pool, fail, **later) is False
    with connection(backend) as conn:
        job = admin.get_job(conn, job_id)
    assert job is not None and job.process_at > datetime.now(timezone.utc)
    found = explain(backend, job_id)
    assert found.state == "retrying"
    assert found.reasons[0] == f"retrying until {moment(job.process_at)} (after 1 failed attempt)"
    due = explain(backend, job_id, now=job.process_at + timedelta(seconds=1))
    assert due.state == "retrying" and not any("until" in r for r in due.reasons)


def test_a_paused_queue_holds_its_jobs_back_until_resumed(backend):
    [job_id] = enqueue_committed(backend, ("send", None), queue="mail")
    committed(backend, admin.pause_queue, "mail")
    with connection(backend) as conn:
        since = admin.paused_queues(conn)["mail"]
    found = explain(backend, job_id)
    assert found.state == "queued"
    assert found.reasons[0] == (
        f"its queue 'mail' is paused (since {moment(since)}); resume it to run it"
    )
    committed(backend, admin.resume_queue, "mail")
    assert not any("paused" in r for r in explain(backend, job_id).reasons)


def test_a_live_worker_of_the_queue_and_only_of_it_counts(backend, pool):
    [job_id] = enqueue_committed(backend, ("send", None), queue="mail")
    committed(backend, admin.pause_queue, "mail")  # so that the live worker leaves it be
    none = "no live worker polls queue 'mail'"
    with create_queue_worker(pool, lambda t, p: None, queue="other"):
        assert explain(backend, job_id).reasons[1:] == [none]
    stale_row(backend, "mail", 60)
    with connection(backend) as conn:
        [gone] = admin.list_workers(conn, queue="mail")
    assert gone.state == "stale"
    assert explain(backend, job_id).reasons[1:] == [
        f"{none} (the last one was seen at {moment(gone.last_seen)})"
    ]
    with create_queue_worker(pool, lambda t, p: None, queue="mail"):
        # the worker claims once to learn the queue is paused: its job is running meanwhile
        found = wait_until(lambda: (f := explain(backend, job_id)).state == "queued" and f)
    assert len(found.reasons) == 1 and found.reasons[0].startswith("its queue 'mail' is paused")


def test_max_running_full_names_the_job_that_holds_the_slot(backend, pool, gate):
    [first] = enqueue_committed(backend, ("slow", 1), queue="capped")
    worker = create_queue_worker(pool, gate, queue="capped", worker_threads=2, max_running=1)
    with worker:
        assert gate.started.wait(30)
        [second] = enqueue_committed(backend, ("slow", 2), queue="capped")
        wait_until(lambda: running_in_registry(backend, first), description="a beat")
        with connection(backend) as conn:
            [listed] = admin.list_workers(conn, queue="capped")
        assert listed.max_running == 1
        waiting = explain(backend, second)
        assert waiting.state == "queued"
        assert waiting.reasons == [
            f"max_running is full: queue 'capped' runs at most 1 job at once, and {first} "
            "holds its slot"
        ]
        running = explain(backend, first)
        assert (running.state, running.reasons) == ("running", [])
        assert running.note is not None
        assert running.note.startswith(f"running on {listed.host} pid {listed.pid} (thread ")
        gate.release.set()
        wait_until(lambda: len(backend.archived()) == 2, description="both jobs ran")
    done = explain(backend, second)
    assert (done.state, done.reasons) == ("succeeded", [])
    assert done.note is not None and done.note.startswith("succeeded at ")


def test_a_due_job_behind_a_busy_uncapped_worker_has_no_reason(backend, pool, gate):
    [first] = enqueue_committed(backend, ("slow", 1))
    with create_queue_worker(pool, gate, worker_threads=1) as worker:
        assert gate.started.wait(30)
        [second] = enqueue_committed(backend, ("slow", 2))
        wait_until(lambda: running_in_registry(backend, first), description="a beat")
        with connection(backend) as conn:
            [listed] = admin.list_workers(conn)
        assert listed.worker_id == worker.worker_id and listed.max_running is None
        found = explain(backend, second)
        assert (found.state, found.reasons) == ("queued", [])
        assert found.note is not None
        assert found.note.startswith("due since ")
        assert found.note.endswith(
            "waiting for a free worker thread (1 live worker polls its queue, every thread "
            "running a job)"
        )
        gate.release.set()
        wait_until(lambda: len(backend.archived()) == 2, description="both jobs ran")
        [later] = enqueue_committed(backend, ("slow", 3), process_in=timedelta(hours=1))
        with connection(backend) as conn:
            job = admin.get_job(conn, later)
        assert job is not None
        # a beat since both ran: one that never saw the second run may still list the first
        wait_until(
            lambda: not any(running_in_registry(backend, j) for j in (first, second)),
            description="a beat",
        )
        idle = explain(backend, later, now=job.process_at + timedelta(seconds=1))
        assert idle.reasons == [] and idle.note is not None
        assert idle.note.endswith(
            "1 of 1 worker thread is free, to claim it at their next poll "
            "(1 live worker polls its queue)"
        )


def test_without_the_live_workers_table_nothing_is_said_of_workers(backend):
    tables = admin.Tables("explain_old.job", "explain_old.archived_job")
    backend.install(tables.job_table, tables.archived_job_table)
    backend.with_tables(tables.job_table, tables.archived_job_table).clear()
    backend.execute(f"DROP TABLE {workers_table(tables.job_table)}")
    [job_id] = enqueue_committed(backend, ("old", None), job_table=tables.job_table)
    found = explain(backend, job_id, tables=tables)
    assert (found.state, found.reasons) == ("queued", [])
    assert found.note is not None and found.note.endswith("waiting for a free worker thread")


def test_a_draining_worker_does_not_poll(backend, pool, gate):
    [first] = enqueue_committed(backend, ("slow", 1))
    worker = create_queue_worker(pool, gate, worker_threads=1)
    worker.start()
    stopping = threading.Thread(target=worker.stop)
    try:
        assert gate.started.wait(30)
        [second] = enqueue_committed(backend, ("slow", 2))
        stopping.start()
        said = "no live worker polls queue 'default' (its 1 worker is stopping)"
        found = wait_until(lambda: said in (f := explain(backend, second)).reasons and f)
        assert found.reasons == [said]
    finally:
        gate.release.set()
        if stopping.is_alive():
            stopping.join(30)
        worker.stop()
    assert explain(backend, first).state == "succeeded"


def rate_reasons(backend: Backend, job_id: Any) -> list[str]:
    return [r for r in explain(backend, job_id).reasons if r.startswith("rate limited")]


def slot_starts(backend: Backend, bucket: str) -> list[datetime]:
    """The starts a bucket's slots record, as the database holds them, oldest first."""
    table = f"{backend.job_table}_rate_slots"
    rows = backend.query(f"SELECT used_at FROM {table} WHERE bucket = %s", (bucket,))
    starts = [row[0] if row[0].tzinfo else row[0].replace(tzinfo=timezone.utc) for row in rows]
    return sorted(start for start in starts if start.year > 1970)


def until_of(reason: str) -> datetime:
    until = datetime.strptime(reason.split(" until ")[1][:23], "%Y-%m-%d %H:%M:%S UTC")
    return until.replace(tzinfo=timezone.utc)


def test_a_rate_limited_queue_says_until_when(backend, pool):
    """One start a minute: once it is used, the next due job is rate limited until the
    minute after that start (by the database's clock), as the slot records it."""
    rate = RateLimit(1, 60_000)
    with create_queue_worker(pool, lambda t, p: None, queue="limited", rate_limit=rate):
        [first, second] = enqueue_committed(backend, ("call", 1), ("call", 2), queue="limited")
        wait_until(lambda: explain(backend, first).state == "succeeded", description="a run")
        [reason] = wait_until(lambda: rate_reasons(backend, second), description="a beat")
        [start] = slot_starts(backend, "limited")
        assert until_of(reason) == (start + timedelta(seconds=60)).replace(microsecond=0)
        assert reason.endswith(
            "queue 'limited' starts at most 1 job in any 60 s, and has started it in the last one"
        )
        assert explain(backend, second).state == "queued"
        other = explain(backend, enqueue_committed(backend, ("call", 3))[0])
        assert not [r for r in other.reasons if r.startswith("rate limited")], "another queue"


def test_with_a_limit_of_two_one_free_slot_holds_nothing_back(backend, pool):
    """Two starts an hour: after one, the next job is not rate limited (it waits only for
    its paused queue); after two, it is, until the older start is an hour old."""
    rate = RateLimit(2, 3_600_000)
    with create_queue_worker(pool, lambda t, p: None, queue="two", rate_limit=rate):
        [first] = enqueue_committed(backend, ("call", 1), queue="two")
        wait_until(lambda: explain(backend, first).state == "succeeded", description="a run")
        committed(backend, admin.pause_queue, "two")
        [second] = enqueue_committed(backend, ("call", 2), queue="two")
        assert len(slot_starts(backend, "two")) == 1
        wait_until(lambda: explain(backend, second).state == "queued")
        assert rate_reasons(backend, second) == []
        committed(backend, admin.resume_queue, "two")
        wait_until(lambda: explain(backend, second).state == "succeeded", description="a run")
        committed(backend, admin.pause_queue, "two")
        [third] = enqueue_committed(backend, ("call", 3), queue="two")
        older, newer = slot_starts(backend, "two")
        [reason] = wait_until(lambda: rate_reasons(backend, third), description="a beat")
        assert until_of(reason) == (older + timedelta(hours=1)).replace(microsecond=0)
        assert until_of(reason) < newer + timedelta(hours=1) - timedelta(microseconds=1)
        assert "starts at most 2 jobs in any 3600 s, and has started them" in reason


def test_a_limit_no_live_worker_has_holds_nothing_back(backend, pool):
    """The slots of a limit outlive it: a queue that ran under one start an hour, whose
    workers now run without a limit, is not rate limited, whatever its slots say."""
    limited = RateLimit(1, 3_600_000)
    with create_queue_worker(pool, lambda t, p: None, queue="was", rate_limit=limited):
        [first] = enqueue_committed(backend, ("call", 1), queue="was")
        wait_until(lambda: explain(backend, first).state == "succeeded", description="a run")
    assert len(slot_starts(backend, "was")) == 1, "the slot remembers the start"
    committed(backend, admin.pause_queue, "was")
    [job_id] = enqueue_committed(backend, ("call", 2), queue="was")
    with create_queue_worker(pool, lambda t, p: None, queue="was"):
        wait_until(lambda: explain(backend, job_id).state == "queued")
        found = explain(backend, job_id)
        assert [r for r in found.reasons if not r.startswith("its queue 'was' is paused")] == []
        with connection(backend) as conn:
            [worker] = admin.list_workers(conn, queue="was")
        assert worker.rate_limit is None
    with create_queue_worker(pool, lambda t, p: None, queue="was", rate_limit=limited):
        [reason] = wait_until(lambda: rate_reasons(backend, job_id), description="a beat")
        with connection(backend) as conn:
            [worker] = admin.list_workers(conn, queue="was")
        assert worker.rate_limit == limited
        assert worker.as_dict()["rate_limit"] == {"limit": 1, "period_ms": 3_600_000, "by": "queue"}
        assert "at most 1 job in any 3600 s" in reason


def test_a_group_key_held_back_by_its_rate_limit_is_named(backend, pool):
    rate = RateLimit(1, 60_000, by="group_key")
    ran: list[int] = []
    with create_queue_worker(pool, lambda t, p: ran.append(p), rate_limit=rate, fair=True):
        [first, second] = enqueue_committed(backend, ("call", 1), ("call", 2), group_key="tenant-9")
        [other] = enqueue_committed(backend, ("call", 3), group_key="tenant-4")
        wait_until(lambda: sorted(ran) == [1, 3], description="one job of each group")
        [reason] = wait_until(lambda: rate_reasons(backend, second), description="a beat")
        assert "group key 'tenant-9' of queue 'default' starts at most 1 job in any 60 s" in reason
        assert explain(backend, other).state == "succeeded"
        assert explain(backend, first).state == "succeeded"
        assert explain(backend, second).state == "queued"

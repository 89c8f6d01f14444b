"""A job's whole story: every attempt with its start, duration, worker and error, in held
mode, lease mode and batches; gone with the job when the archive lets it go; and the
archive's timings (wait and run percentiles per queue, job type and hour)."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from proletarian_di import ConfigurationError, RetrySpec, create_queue_worker, process_next_job
from proletarian_di._store.dialects import dialect_of
from proletarian_di.admin import (
    Tables,
    delete_archived,
    discard_failed,
    get_job,
    purge_archive,
    retry_jobs,
    timings,
)
from proletarian_di.schema import attempt_table

from backends import Backend, committed, connection, enqueue_committed, wait_until

T0 = datetime(2031, 1, 1, 9, 0, tzinfo=timezone.utc)
WORKER = f"{socket.gethostname()}:"


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def story(backend: Backend, job_id: Any) -> Any:
    with connection(backend) as conn:
        job = get_job(conn, job_id)
    assert job is not None
    return job


def attempt_rows(backend: Backend) -> int:
    return int(backend.query(f"SELECT COUNT(*) FROM {attempt_table(backend.job_table)}")[0][0])


@contextlib.contextmanager
def running(backend: Backend, handler: Callable[..., Any], **options: Any) -> Iterator[None]:
    source = backend.pool(4)
    options = {"polling_interval_ms": 20, "log": lambda e, d: None, **options}
    try:
        with create_queue_worker(source, handler, **options):
            yield
    finally:
        source.close()


def test_a_job_retried_twice_then_succeeding_shows_its_three_attempts(backend, pool):
    clock = Clock()
    [job_id] = enqueue_committed(backend, ("sync", None), clock=clock)
    runs = iter([(4, OSError("upstream down")), (6, TimeoutError("upstream slow")), (3, None)])

    def handler(job_type: str, payload: Any) -> None:
        seconds, error = next(runs)
        clock.now += timedelta(seconds=seconds)
        if error is not None:
            raise error

    retry = RetrySpec(retries=2, delays=[60_000])
    options = {"clock": clock, "retry_strategy_fn": lambda job, exc: retry}
    assert process_next_job(pool, handler, **options) is False
    clock.now += timedelta(minutes=1)
    assert process_next_job(pool, handler, **options) is False
    clock.now += timedelta(minutes=2)
    assert process_next_job(pool, handler, **options) is True

    job = story(backend, job_id)
    assert job.state == "succeeded"
    first, second, third = job.history
    assert [a.number for a in job.history] == [1, 2, 3]
    assert first.started_at == T0 and first.duration == timedelta(seconds=4)
    assert second.started_at == T0 + timedelta(seconds=4, minutes=1)
    assert second.duration == timedelta(seconds=6)
    assert third.started_at == T0 + timedelta(seconds=10, minutes=3)
    assert third.finished_at == job.finished_at
    assert third.duration == timedelta(seconds=3)
    assert first.error is not None and first.error.startswith("OSError: upstream down")
    assert second.error is not None and second.error.startswith("TimeoutError: upstream slow")
    assert third.error is None and third.succeeded and not first.succeeded
    for attempt in job.history:
        assert attempt.worker is not None
        assert attempt.worker.startswith(WORKER) and attempt.worker.endswith("proletarian[default]")
    assert job.as_dict()["history"][1]["duration_seconds"] == 6.0


def test_a_failure_keeps_each_failed_attempt(backend, pool):
    clock = Clock()
    [job_id] = enqueue_committed(backend, ("charge", None), clock=clock)
    seen: list[int] = []

    def handler(job: Any) -> None:
        seen.append(job.attempts)
        clock.now += timedelta(seconds=2)
        raise ValueError(f"card declined {job.attempts}")

    options = {
        "clock": clock,
        "handler_fn_mode": "advanced",
        "retry_strategy_fn": lambda job, exc: RetrySpec(retries=1),
    }
    assert process_next_job(pool, handler, **options) is False
    assert process_next_job(pool, handler, **options) is False

    job = story(backend, job_id)
    assert job.state == "failed" and seen == [1, 2]
    assert [a.number for a in job.history] == [1, 2]
    assert [a.duration for a in job.history] == [timedelta(seconds=2)] * 2
    assert [a.error.splitlines()[0] for a in job.history] == [
        "ValueError: card declined 1",
        "ValueError: card declined 2",
    ]
    assert job.history[-1].error == job.error
    assert job.history[-1].finished_at == job.finished_at


def test_a_waiting_job_shows_the_attempts_so_far(backend, pool):
    [job_id] = enqueue_committed(backend, ("later", None))

    def handler(job_type: str, payload: Any) -> None:
        raise RuntimeError("not yet")

    later = {"retry_strategy_fn": lambda job, exc: RetrySpec(retries=3, delays=[3_600_000])}
    assert process_next_job(pool, handler, **later) is False
    job = story(backend, job_id)
    assert job.state == "retrying"
    [attempt] = job.history
    assert attempt.number == 1 and attempt.error is not None
    assert attempt.started_at is not None and attempt.started_at <= attempt.finished_at


@pytest.mark.parametrize("mode", ["held", "lease"])
def test_workers_record_every_attempt_of_a_batch(backend, mode):
    """batch_size=3, in both modes: each job's attempts, each with its own start."""
    ids = enqueue_committed(backend, ("a", 1), ("b", 2), ("flaky", 3))
    failed: list[int] = []

    def handler(job_type: str, payload: Any) -> None:
        if job_type == "flaky" and not failed:
            failed.append(payload)
            raise RuntimeError("first try fails")

    options: dict[str, Any] = {
        "batch_size": 3,
        "queue_worker_id": f"batch-{mode}",
        "retry_strategy_fn": lambda job, exc: RetrySpec(retries=1),
    }
    if mode == "lease":
        options["lease_ms"] = 5_000
    with running(backend, handler, **options):
        wait_until(
            lambda: backend.query(f"SELECT COUNT(*) FROM {backend.archived_job_table}")[0][0] == 3,
            description="the three jobs archived",
        )
    a, b, flaky = (story(backend, job_id) for job_id in ids)
    assert [len(job.history) for job in (a, b, flaky)] == [1, 1, 2]
    assert flaky.history[0].error is not None and flaky.history[0].error.startswith(
        "RuntimeError: first try fails"
    )
    for job in (a, b, flaky):
        last = job.history[-1]
        assert job.state == "succeeded" and last.succeeded
        assert last.started_at is not None and job.process_at <= last.started_at
        assert last.started_at <= last.finished_at == job.finished_at
        assert last.worker is not None and f" batch-{mode}-" in last.worker
    assert a.history[0].started_at != b.history[0].started_at


@pytest.mark.parametrize("lease_ms", [None, 5_000])
def test_a_timed_out_attempt_is_in_the_history(backend, lease_ms):
    [job_id] = enqueue_committed(backend, ("slow", None))
    calls: list[int] = []

    def handler(job_type: str, payload: Any) -> None:
        calls.append(1)
        if len(calls) == 1:
            time.sleep(1.0)

    options: dict[str, Any] = {
        "job_timeout_ms": 200,
        "queue_worker_id": "timed",
        "retry_strategy_fn": lambda job, exc: RetrySpec(retries=1),
        "lease_ms": lease_ms,
    }
    with running(backend, handler, **options):
        wait_until(lambda: story_or_none(backend, job_id), timeout=20, description="succeeded")
    timed_out, rerun = story(backend, job_id).history
    assert timed_out.error is not None and timed_out.error.startswith("JobTimedOut")
    assert timed_out.duration is not None and timed_out.duration >= timedelta(milliseconds=150)
    assert timed_out.worker is not None and " timed-" in timed_out.worker
    assert rerun.succeeded and rerun.number == 2


def test_discarding_and_purging_take_the_attempts_along(backend, pool):
    failing, flaky, fine = enqueue_committed(backend, ("bad", 1), ("flaky", 2), ("fine", 3))
    tried: set[str] = set()

    def handler(job_type: str, payload: Any) -> None:
        if job_type == "bad" or (job_type == "flaky" and job_type not in tried):
            tried.add(job_type)
            raise RuntimeError(job_type)

    options = {"retry_strategy_fn": lambda job, exc: RetrySpec(retries=1)}
    while process_next_job(pool, handler, **options) is not None:
        pass
    assert attempt_rows(backend) == 3  # bad twice, flaky once

    assert committed(backend, discard_failed, [failing]) == 1
    assert attempt_rows(backend) == 1
    assert committed(backend, delete_archived, status="success", queue="other") == 0
    assert attempt_rows(backend) == 1
    assert committed(backend, purge_archive, older_than=timedelta(0), status="success") == 2
    assert attempt_rows(backend) == 0
    with connection(backend) as conn:
        assert get_job(conn, flaky) is None and get_job(conn, fine) is None


def test_a_failure_moved_back_keeps_its_history(backend, pool):
    [job_id] = enqueue_committed(backend, ("bad", 1))
    outcomes = iter([RuntimeError("first"), None])

    def handler(job_type: str, payload: Any) -> None:
        error = next(outcomes)
        if error is not None:
            raise error

    assert process_next_job(pool, handler) is False
    assert committed(backend, retry_jobs, [job_id]) == 1
    assert process_next_job(pool, handler) is True
    job = story(backend, job_id)
    assert [(a.number, a.succeeded) for a in job.history] == [(1, False), (1, True)]


# Timings -------------------------------------------------------------------------------------


def put_archived(
    backend: Backend,
    queue: str,
    job_type: str,
    due: datetime,
    wait_s: float,
    run_s: float,
    status: str = "success",
) -> None:
    """An archived job whose times the test sets."""
    started = due + timedelta(seconds=wait_s)
    finished = started + timedelta(seconds=run_s)
    with connection(backend) as conn:
        dialect = dialect_of(conn, Tables(backend.job_table, backend.archived_job_table))
        at = dialect.encode_time
        dialect.execute(
            conn,
            f"INSERT INTO {backend.archived_job_table} (job_id, queue, job_type, payload, "
            "attempts, enqueued_at, process_at, status, finished_at, started_at, worker) "
            "VALUES (%s, %s, %s, 'null', 1, %s, %s, %s, %s, %s, 'w')",
            (
                dialect.default_id_strategy.encode(uuid.uuid4()),
                queue,
                job_type,
                at(due),
                at(due),
                status,
                at(finished),
                at(started),
            ),
        )
        conn.commit()


def test_timings_give_the_wait_and_run_percentiles_per_queue_type_and_hour(backend):
    now = T0 + timedelta(hours=5, minutes=30)
    hour = T0 + timedelta(hours=5)
    for n in range(1, 21):  # waits 1..20 s, runs 0.5..10 s, this hour
        put_archived(backend, "mail", "send", hour + timedelta(minutes=n), n, n / 2)
    for n in range(1, 5):  # the hour before: 4 jobs
        put_archived(backend, "mail", "send", hour - timedelta(minutes=50), 10 * n, n, "failure")
    put_archived(backend, "mail", "digest", hour, 0.25, 120)
    put_archived(backend, "mail", "send", T0 - timedelta(days=2), 1, 1)  # outside the window
    with connection(backend) as conn:
        rows = timings(conn, now=now, tables=Tables())
        summed = timings(conn, now=now, per_hour=False, job_type="send")
        other = timings(conn, now=now, queue="nothing")
    assert [(t.job_type, t.start, t.jobs) for t in rows] == [
        ("digest", hour, 1),
        ("send", hour - timedelta(hours=1), 4),
        ("send", hour, 20),
    ]
    digest, before, this = rows
    s = timedelta(seconds=1)
    assert (this.wait_p50, this.wait_p95, this.wait_max) == (10 * s, 19 * s, 20 * s)
    assert (this.run_p50, this.run_p95, this.run_max) == (5 * s, 9.5 * s, 10 * s)
    assert (before.wait_p50, before.wait_p95, before.wait_max) == (20 * s, 40 * s, 40 * s)
    assert (digest.wait_p50, digest.run_max) == (0.25 * s, 120 * s)
    [whole] = summed
    assert whole.jobs == 24 and whole.start == hour - timedelta(hours=23)
    assert whole.wait_max == 40 * s and whole.run_p50 == 4 * s  # 12th of 0.5, 1, 1, 1.5, 2, 2, …
    assert other == []
    assert this.as_dict()["wait_p95"] == 19.0


def test_timings_refuse_a_window_they_would_not_bound(backend):
    with connection(backend) as conn:
        for hours in (0, 24 * 7 + 1, "24", True):
            with pytest.raises(ConfigurationError, match="hours must be a whole number"):
                timings(conn, hours=hours)


def test_a_success_archived_by_workers_has_a_start_and_a_worker(backend, pool):
    [job_id] = enqueue_committed(backend, ("fine", None))
    thread_names: list[str] = []

    def handler(job_type: str, payload: Any) -> None:
        thread_names.append(threading.current_thread().name)

    with running(backend, handler, queue_worker_id="timed"):
        wait_until(lambda: story_or_none(backend, job_id), description="the job archived")
    with connection(backend) as conn:
        [timing] = timings(conn, tables=Tables())
    assert timing.jobs == 1 and timing.run_max >= timedelta(0)
    [attempt] = story(backend, job_id).history
    assert attempt.worker is not None and attempt.worker.endswith(f" {thread_names[0]}")


def story_or_none(backend: Backend, job_id: Any) -> Any:
    with connection(backend) as conn:
        job = get_job(conn, job_id)
    return job is not None and job.state == "succeeded"


def test_a_forked_process_names_its_attempts_and_leases_with_its_own_pid():
    """The pid is kept, not asked for with every job: a fork must not inherit its parent's."""
    from proletarian_di._engine.attempts import unique_name, worker_name

    parent = unique_name()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its names and leave at once
        os.write(write, f"{unique_name()}\n{worker_name('q')}".encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        token, name = pipe.read().split("\n")
    os.waitpid(pid, 0)
    host = socket.gethostname()
    assert parent.startswith(f"{host}:{os.getpid()}:")
    assert token.startswith(f"{host}:{pid}:") and len(token.rsplit(":", 1)[1]) == 16
    assert token != parent
    assert name == f"{host}:{pid} q"  # the main thread goes by the fallback

"""run_due_jobs: every due job, now, in the calling thread."""

from __future__ import annotations

import threading
from datetime import timedelta

from proletarian_di.router import JobRouter
from proletarian_di.testing import run_due_jobs

from backends import enqueue_committed


def test_runs_every_due_job_in_the_calling_thread_and_returns_the_count(backend, pool):
    threads_before = set(threading.enumerate())
    caller = threading.current_thread()
    ran = []

    def handler(job_type, payload):
        ran.append((job_type, payload, threading.current_thread()))

    enqueue_committed(backend, ("a", 1), ("b", 2), ("c", 3))
    enqueue_committed(backend, ("later", 4), process_in=timedelta(hours=1))
    enqueue_committed(backend, ("other_queue", 5), queue="reports")

    assert run_due_jobs(pool, handler) == 3
    assert [(t, p) for t, p, _ in ran] == [("a", 1), ("b", 2), ("c", 3)]
    assert all(thread is caller for _, _, thread in ran)
    assert not [t for t in threading.enumerate() if t not in threads_before]
    assert sorted(backend.jobs()) == [("later", 0, "default"), ("other_queue", 0, "reports")]
    assert run_due_jobs(pool, handler) == 0
    assert run_due_jobs(pool, handler, queue="reports") == 1


def test_due_retries_run_again_and_failures_are_archived(backend, pool):
    def handler(job_type, payload):
        raise RuntimeError("boom")

    enqueue_committed(backend, ("flaky", None))
    ran = run_due_jobs(pool, handler, retry_strategy_fn=lambda job, exc: {"retries": 2})
    assert ran == 3
    assert backend.archived() == [("flaky", "failure", 3)]


def test_max_jobs_bounds_a_handler_that_keeps_enqueueing(backend, pool):
    router = JobRouter()

    @router.handler("again")
    def again(job):
        from proletarian_di import enqueue

        enqueue(job.connection, "again", None)

    enqueue_committed(backend, ("again", None))
    assert run_due_jobs(pool, router, handler_fn_mode="advanced", max_jobs=5) == 5
    assert len(backend.archived()) == 5 and len(backend.jobs()) == 1


def test_a_fake_clock_walks_a_job_through_its_delayed_retries(backend, pool):
    from proletarian_di import RetrySpec
    from proletarian_di.testing import FakeClock

    clock = FakeClock()
    start = clock()
    enqueue_committed(backend, ("flaky", None), clock=clock)
    enqueue_committed(backend, ("tomorrow", None), clock=clock, process_in=timedelta(days=1))
    attempts = []

    def handler(job):
        attempts.append((job.job_type, job.attempts, clock()))
        if job.job_type == "flaky":
            raise ConnectionError("try later")

    options = {
        "handler_fn_mode": "advanced",
        "clock": clock,
        "retry_strategy_fn": lambda job, exc: RetrySpec(retries=2, delays=[60_000, 3_600_000]),
    }
    assert run_due_jobs(pool, handler, **options) == 1, "the retry waits for its delay"
    assert run_due_jobs(pool, handler, advance_clock=True, **options) == 3
    assert [(t, a) for t, a, _ in attempts] == [
        ("flaky", 1),
        ("flaky", 2),
        ("flaky", 3),
        ("tomorrow", 1),
    ]
    assert attempts[1][2] - start >= timedelta(minutes=1)
    assert attempts[2][2] - attempts[1][2] >= timedelta(hours=1)
    assert attempts[3][2] - start >= timedelta(days=1)
    assert sorted(backend.archived()) == [("flaky", "failure", 3), ("tomorrow", "success", 1)]


def test_advance_clock_needs_a_fake_clock(backend, pool):
    import pytest

    from proletarian_di import ConfigurationError

    with pytest.raises(ConfigurationError, match="advance_clock=True needs clock=FakeClock"):
        run_due_jobs(pool, lambda t, p: None, advance_clock=True)


def test_enqueued_jobs_lists_what_a_connection_enqueued_without_sql(backend):
    import contextlib

    from proletarian_di import enqueue
    from proletarian_di.testing import enqueued_jobs

    enqueue_committed(backend, ("send_email", {"to": "old"}), queue="email")
    enqueue_committed(backend, ("other", None), queue="reports")
    with contextlib.closing(backend.connect()) as conn:
        enqueue(conn, "send_email", {"to": "ada"}, queue="email")
        enqueue(conn, "index", {"id": 7}, queue="email", process_in=timedelta(hours=1))
        emails = enqueued_jobs(conn, queue="email", job_type="send_email")
        every = enqueued_jobs(conn, queue="email")
        conn.rollback()
        after = enqueued_jobs(conn, queue="email")
        conn.rollback()
    assert [j.payload for j in emails] == [{"to": "old"}, {"to": "ada"}]
    assert [(j.job_type, j.state) for j in every] == [
        ("send_email", "queued"),
        ("send_email", "queued"),
        ("index", "scheduled"),
    ]
    assert [j.payload for j in after] == [{"to": "old"}]

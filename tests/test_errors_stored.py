"""Every failed attempt keeps its error on the job row, and a failure keeps it in the archive."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from typing import Any

from proletarian_di import RetrySpec, create_queue_worker, process_next_job

from backends import enqueue_committed


def last_errors(backend: Any, table: str) -> list[Any]:
    return [row[0] for row in backend.query(f"SELECT last_error FROM proletarian.{table}")]


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2031, 1, 1, tzinfo=timezone.utc)

    def __call__(self) -> datetime:
        return self.now


def test_a_retried_attempt_keeps_its_error_and_the_next_attempt_sees_it(backend, pool):
    clock = Clock()
    enqueue_committed(backend, ("welcome", {}), clock=clock)
    seen: list[Any] = []

    def handler(job: Any) -> None:
        seen.append(job.last_error)
        job.payload["email"]

    options = {
        "handler_fn_mode": "advanced",
        "clock": clock,
        "retry_strategy_fn": lambda job, exc: RetrySpec(retries=2, delays=[1_000]),
    }
    assert process_next_job(pool, handler, **options) is False
    (stored,) = last_errors(backend, "job")
    assert stored.startswith("KeyError: 'email'\n\nTraceback (most recent call last):")
    assert 'job.payload["email"]' in stored
    clock.now += timedelta(seconds=1)
    assert process_next_job(pool, handler, **options) is False
    assert seen == [None, stored]


def test_a_failure_is_archived_with_its_error(backend, pool):
    enqueue_committed(backend, ("bad", None))

    def handler(job_type: str, payload: Any) -> None:
        raise ValueError("no such account")

    assert process_next_job(pool, handler) is False
    (stored,) = last_errors(backend, "archived_job")
    assert stored.startswith("ValueError: no such account")
    assert "Traceback" in stored


def test_a_success_after_a_failure_keeps_the_last_error_and_a_clean_one_has_none(backend, pool):
    clock = Clock()
    enqueue_committed(backend, ("flaky", None), ("fine", None), clock=clock)
    failed: list[str] = []

    def handler(job_type: str, payload: Any) -> None:
        if job_type == "flaky" and not failed:
            failed.append(job_type)
            raise TimeoutError("upstream slow")

    retry = {"clock": clock, "retry_strategy_fn": lambda job, exc: RetrySpec(retries=1)}
    while process_next_job(pool, handler, **retry) is not None:
        pass
    rows = dict(backend.query(f"SELECT job_type, last_error FROM {backend.archived_job_table}"))
    assert rows["fine"] is None
    assert rows["flaky"].startswith("TimeoutError: upstream slow")


def test_an_abandoned_attempt_records_how_long_it_ran(backend, pool):
    enqueue_committed(backend, ("stuck", None))
    started, release = threading.Event(), threading.Event()

    def handler(job_type: str, payload: Any) -> None:
        started.set()
        release.wait(30)

    worker = create_queue_worker(
        pool,
        handler,
        polling_interval_ms=10,
        await_termination_timeout_ms=100,
        retry_strategy_fn=lambda job, exc: RetrySpec(retries=1, delays=[60_000]),
        log=lambda event, data: None,
    )
    worker.start()
    assert started.wait(10)
    assert worker.stop() is False
    release.set()
    (stored,) = last_errors(backend, "job")
    assert stored.startswith("JobAbandoned: abandoned after ")
    assert "still running when stop() gave up waiting" in stored


def test_a_huge_error_is_bounded_and_keeps_its_end(backend, pool):
    enqueue_committed(backend, ("loud", None))
    message = "x" * 50_000 + " THE END"

    def handler(job_type: str, payload: Any) -> None:
        raise RuntimeError(message)

    assert process_next_job(pool, handler) is False
    (stored,) = last_errors(backend, "archived_job")
    assert len(stored) <= 8_000
    assert stored.startswith("RuntimeError: xxx")
    assert "… (cut) …" in stored


def frames(stored: str) -> list[str]:
    """The `File "…", line …, in …` lines of a stored traceback, in order."""
    return [line.strip() for line in stored.splitlines() if line.strip().startswith("File ")]


def test_the_stored_traceback_begins_at_the_handler_not_in_the_worker(backend, pool):
    enqueue_committed(backend, ("welcome", {}), ("welcome", {}))

    def handler(job_type: str, payload: Any) -> None:
        lookup(payload)

    def lookup(payload: Any) -> None:
        payload["email"]

    async def async_handler(job_type: str, payload: Any) -> None:
        lookup(payload)

    for fn in (handler, async_handler):
        assert process_next_job(pool, fn) is False
    for stored in last_errors(backend, "archived_job"):
        assert stored.startswith("KeyError: 'email'\n\nTraceback (most recent call last):")
        shown = frames(stored)
        assert shown[0].endswith("in handler") or shown[0].endswith("in async_handler"), stored
        assert shown[-1].endswith("in lookup")
        assert "proletarian_di" not in stored and "asyncio" not in stored


def test_an_error_in_the_library_itself_keeps_its_frames(backend, pool):
    from proletarian_di import JobRouter

    enqueue_committed(backend, ("nobody_handles_this", {}))
    assert process_next_job(pool, JobRouter()) is False
    (stored,) = last_errors(backend, "archived_job")
    assert stored.startswith("UnknownJobType")
    assert "proletarian_di" in frames(stored)[0] and "router.py" in frames(stored)[-1]

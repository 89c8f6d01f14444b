"""Job timeouts where they meet the other options: batches, advanced handlers, `max_running`,
a small pool. Each test is the regression test of one defect of the engine issue, held mode
(the held-transaction mode: the job's transaction holds its row while it runs).

A handler that is given up on blocks on an event the test releases at the end.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

from test_timeouts import running

from proletarian_di import RetrySpec, create_queue_worker

from backends import Backend, Events, enqueue_committed, wait_until


class Concurrency:
    """Counts the runs of each job type, and the most that ran at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = self.most = 0
        self.runs: dict[str, int] = {}
        self.overlapping: list[str] = []
        self._running: set[str] = set()

    @contextlib.contextmanager
    def run(self, job_type: str) -> Iterator[None]:
        with self.lock:
            self.runs[job_type] = self.runs.get(job_type, 0) + 1
            if job_type in self._running:
                self.overlapping.append(job_type)
            self._running.add(job_type)
            self.now += 1
            self.most = max(self.most, self.now)
        try:
            yield
        finally:
            with self.lock:
                self.now -= 1
                self._running.discard(job_type)


def test_a_timeout_in_a_batch_keeps_the_jobs_that_succeeded_before_it(
    backend: Backend, pool: Any
) -> None:
    """batch_size=3, the third job times out: the two before it are archived once, never run
    again (the timeout's commit used to release them unarchived)."""
    seen, release = Concurrency(), threading.Event()

    def handler(job_type: str, payload: Any) -> None:
        with seen.run(job_type):
            if job_type == "stuck":
                release.wait(30)

    enqueue_committed(backend, ("a", None))
    enqueue_committed(backend, ("b", None))
    enqueue_committed(backend, ("stuck", None))
    worker = create_queue_worker(
        pool, handler, batch_size=3, job_timeout_ms=300, polling_interval_ms=20, log=Events()
    )
    with running(worker, release):
        wait_until(lambda: len(backend.archived()) == 3, timeout=10, description="settled")
        time.sleep(0.5)  # time for a wrongly released job to be claimed again
        assert sorted(backend.archived()) == [
            ("a", "success", 1),
            ("b", "success", 1),
            ("stuck", "failure", 1),
        ]
        assert seen.runs == {"a": 1, "b": 1, "stuck": 1}
        assert worker.summary()["succeeded"] == 2 and worker.summary()["timed_out"] == 1


def test_an_advanced_handler_past_its_timeout_keeps_its_job_until_it_returns(
    backend: Backend, pool: Any
) -> None:
    """Its job is not claimed again while it still runs; once it returns, its writes are
    rolled back and its attempt is recorded as timed out; the retry then runs alone."""
    seen, release = Concurrency(), threading.Event()
    backend.execute("DROP TABLE IF EXISTS proletarian.notes")
    backend.execute("CREATE TABLE proletarian.notes (note VARCHAR(20))")

    def handler(job: Any) -> None:
        with seen.run(job.job_type):
            cursor = job.connection.cursor()
            cursor.execute("INSERT INTO proletarian.notes VALUES (%s)", (f"run {job.attempts}",))
            if job.attempts == 1:
                release.wait(30)

    enqueue_committed(backend, ("slow", None))
    events = Events()
    worker = create_queue_worker(
        pool,
        handler,
        handler_fn_mode="advanced",
        worker_threads=2,
        job_timeout_ms=300,
        polling_interval_ms=20,
        retry_strategy_fn=lambda job, exc: RetrySpec(1),
        log=events,
    )
    try:
        with running(worker, release):
            wait_until(lambda: events.named("job_timed_out"), timeout=10, description="timeout")
            time.sleep(0.5)  # the other thread polls meanwhile
            assert seen.runs == {"slow": 1}, "claimed again while its first run goes on"
            release.set()
            wait_until(lambda: backend.archived(), timeout=10, description="retried and done")
        assert seen.overlapping == []
        assert backend.archived() == [("slow", "success", 2)]
        [(error,)] = backend.query(f"SELECT last_error FROM {backend.archived_job_table}")
        assert error.startswith("JobTimedOut: ")
        assert backend.query("SELECT note FROM proletarian.notes") == [("run 2",)]
        assert worker.summary()["timed_out"] == 1
        assert events.named("attempt_not_recorded") == []
    finally:
        backend.execute("DROP TABLE proletarian.notes")


def test_an_advanced_handler_stuck_in_a_statement_has_it_cancelled_at_its_timeout(
    backend: Backend, pool: Any
) -> None:
    """A handler waiting on the database gets its statement cancelled, returns, and its
    attempt is recorded within seconds, not when the statement would have ended (30 s)."""
    sleep = "SELECT pg_sleep(30)" if backend.name == "postgresql" else "SELECT SLEEP(30)"

    def handler(job: Any) -> None:
        cursor = job.connection.cursor()
        cursor.execute(sleep)
        cursor.fetchall()

    enqueue_committed(backend, ("sleepy", None))
    worker = create_queue_worker(
        pool,
        handler,
        handler_fn_mode="advanced",
        job_timeout_ms=300,
        polling_interval_ms=20,
        log=Events(),
    )
    with running(worker, threading.Event()):
        wait_until(lambda: backend.archived(), timeout=10, description="recorded")
    assert backend.archived() == [("sleepy", "failure", 1)]
    [(error,)] = backend.query(f"SELECT last_error FROM {backend.archived_job_table}")
    assert error.startswith("JobTimedOut: ")


def _capped(backend: Backend, pool: Any, advanced: bool) -> Concurrency:
    """Four jobs that each block 1 s past a 150 ms timeout, max_running=1, four threads."""
    seen = Concurrency()

    def run(job_type: str) -> None:
        with seen.run(job_type):
            time.sleep(1.0)

    handler: Any = (lambda job: run(job.job_type)) if advanced else (lambda t, p: run(t))
    enqueue_committed(backend, *[(f"j{n}", None) for n in range(4)])
    worker = create_queue_worker(
        pool,
        handler,
        handler_fn_mode="advanced" if advanced else "default",
        worker_threads=4,
        max_running=1,
        job_timeout_ms=150,
        polling_interval_ms=20,
        log=Events(),
    )
    with running(worker, threading.Event()):
        wait_until(lambda: len(backend.archived()) == 4, timeout=20, description="all settled")
        wait_until(lambda: seen.now == 0, timeout=5, description="handlers returned")
    assert sorted(row[1] for row in backend.archived()) == ["failure"] * 4
    return seen


def test_max_running_holds_while_sync_handlers_run_past_their_timeout(
    backend: Backend, pool: Any
) -> None:
    """A timed-out handler still runs, so it keeps its running slot until it returns."""
    assert _capped(backend, pool, advanced=False).most == 1


def test_max_running_holds_while_advanced_handlers_run_past_their_timeout(
    backend: Backend, pool: Any
) -> None:
    assert _capped(backend, pool, advanced=True).most == 1


def test_timed_out_handlers_do_not_use_up_a_small_pool(backend: Backend) -> None:
    """A pool of two, one thread, five jobs that block past their timeout: each timed-out
    job's connection goes back to the pool, so the replacements keep settling jobs while
    the five handlers still block."""
    release = threading.Event()
    blocked: list[str] = []

    def handler(job_type: str, payload: Any) -> None:
        blocked.append(job_type)
        release.wait(30)

    small = backend.pool(2)
    enqueue_committed(backend, *[(f"j{n}", None) for n in range(5)])
    worker = create_queue_worker(
        small, handler, job_timeout_ms=150, polling_interval_ms=20, log=Events()
    )
    try:
        with running(worker, release):
            wait_until(lambda: len(backend.archived()) == 5, timeout=15, description="settled")
            assert len(blocked) == 5 and not release.is_set()
    finally:
        small.close()
    assert worker.summary()["timed_out"] == 5

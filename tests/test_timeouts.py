"""Job timeouts (`job_timeout_ms`, `job_timeouts`): a sync handler past its deadline is given up
on and its thread replaced; an async one is cancelled; both attempts fail with `JobTimedOut`.

Every behavioural test runs in the held-transaction mode (`lease_ms=None`) and in lease mode
where the mode matters. A handler that is given up on blocks on an event the test releases.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from proletarian_di import ConfigurationError, RetrySpec, create_queue_worker, process_next_job
from proletarian_di.worker import QueueWorker

from backends import Backend, Events, enqueue_committed, wait_until

WORKER_ID = "timeouts"
MODES = [pytest.param(None, id="held"), pytest.param(2000, id="lease")]


def make_worker(
    pool: Any, handler: Callable[..., Any], lease_ms: int | None, **options: Any
) -> QueueWorker:
    """One worker thread polling every 20 ms, in the given mode."""
    settings: dict[str, Any] = {
        "worker_threads": 1,
        "polling_interval_ms": 20,
        "queue_worker_id": WORKER_ID,
        "lease_ms": lease_ms,
        **options,
    }
    return create_queue_worker(pool, handler, **settings)


@contextlib.contextmanager
def running(worker: QueueWorker, release: threading.Event) -> Iterator[QueueWorker]:
    """Run the worker; on the way out, unblock any handler still waiting and stop it."""
    worker.start()
    try:
        yield worker
    finally:
        release.set()
        worker.stop()


def archived_error(backend: Backend, job_type: str) -> tuple[str, int, str]:
    """(status, attempts, last_error) of the one archived job of `job_type`."""
    [row] = backend.query(
        f"SELECT status, attempts, last_error FROM {backend.archived_job_table} "
        "WHERE job_type = %s",
        (job_type,),
    )
    return row[0], row[1], row[2] or ""


def waiting_row(backend: Backend, job_type: str) -> tuple[int, str, Any]:
    """(attempts, last_error, leased_by) of the one waiting job of `job_type`."""
    [row] = backend.query(
        f"SELECT attempts, last_error, leased_by FROM {backend.job_table} WHERE job_type = %s",
        (job_type,),
    )
    return row[0], row[1] or "", row[2]


def lockable_now(backend: Backend, job_type: str) -> bool:
    """Whether another connection's FOR UPDATE SKIP LOCKED can take the job's row."""
    with contextlib.closing(backend.connect()) as conn:
        cursor = conn.cursor()
        cursor.execute(
            f"SELECT job_id FROM {backend.job_table} WHERE job_type = %s FOR UPDATE SKIP LOCKED",
            (job_type,),
        )
        rows = cursor.fetchall()
        conn.rollback()
    return len(rows) == 1


class Blocking:
    """A sync handler: "stuck" jobs block until `release` is set; every run is noted with
    its thread."""

    def __init__(self, stuck_runs: int | None = None) -> None:
        self.release = threading.Event()
        self.stuck_runs = stuck_runs
        """How many runs of "stuck" block (None: all of them)."""
        self.runs: list[tuple[str, threading.Thread]] = []
        self.returned: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, job_type: str, payload: Any) -> None:
        with self._lock:
            self.runs.append((job_type, threading.current_thread()))
            stuck = [t for t, _ in self.runs if t == "stuck"]
            blocks = job_type == "stuck" and (
                self.stuck_runs is None or len(stuck) <= self.stuck_runs
            )
        if blocks:
            self.release.wait(30)
        self.returned.append(job_type)

    def threads(self, job_type: str) -> list[threading.Thread]:
        return [thread for t, thread in self.runs if t == job_type]


# Sync handlers ----------------------------------------------------------------------------


@pytest.mark.parametrize("lease_ms", MODES)
def test_a_sync_handler_past_its_timeout_fails_and_its_thread_is_replaced(
    backend: Backend, pool: Any, lease_ms: int | None
) -> None:
    """No retry: the attempt goes to the failure archive while the handler still blocks; a job
    enqueued meanwhile runs on `<id>-1`; the handler's late return changes nothing."""
    handler, events = Blocking(), Events()
    worker = make_worker(pool, handler, lease_ms, job_timeout_ms=300, log=events)
    [stuck_id] = enqueue_committed(backend, ("stuck", None))
    with running(worker, handler.release):
        wait_until(lambda: backend.archived(), timeout=15, description="stuck archived")
        assert handler.returned == [], "archived while its handler is still blocked"
        status, attempts, error = archived_error(backend, "stuck")
        assert (status, attempts) == ("failure", 1)
        assert "JobTimedOut" in error and "timed out after 0.3 s" in error
        [timed_out] = events.named("job_timed_out")
        assert timed_out["job_type"] == "stuck" and timed_out["timeout_ms"] == 300
        assert timed_out["job_id"] == stuck_id
        assert worker.summary()["timed_out"] == 1
        assert worker.summary()["failed"] == 1

        enqueue_committed(backend, ("next", None))
        wait_until(lambda: "next" in handler.returned, timeout=15, description="next ran")
        [old] = handler.threads("stuck")
        [new] = handler.threads("next")
        assert old.name == f"{WORKER_ID}-0" and old.is_alive(), "still blocked"
        assert new.name == f"{WORKER_ID}-1"
        wait_until(lambda: len(backend.archived()) == 2, timeout=15)
        before = sorted(backend.archived())
        assert before == [("next", "success", 1), ("stuck", "failure", 1)]

        handler.release.set()
        old.join(10)
        assert not old.is_alive(), "the abandoned thread ends once its handler returns"
        assert handler.returned == ["next", "stuck"]
        time.sleep(0.2)
        assert sorted(backend.archived()) == before, "the late outcome was discarded"
        assert backend.jobs() == []
        assert worker.summary()["succeeded"] == 1

        enqueue_committed(backend, ("after", None))
        wait_until(lambda: "after" in handler.returned, timeout=15, description="after ran")
        wait_until(lambda: len(backend.archived()) == 3, timeout=15)
        assert handler.threads("after")[0].name == f"{WORKER_ID}-1"
    assert worker.state == "stopped"
    assert worker.summary() == {
        "succeeded": 2,
        "failed": 1,
        "retried": 0,
        "abandoned": 0,
        "timed_out": 1,
        "snoozed": 0,
        "cancelled": 0,
    }


@pytest.mark.parametrize("lease_ms", MODES)
def test_a_timed_out_attempt_is_retried_and_its_row_is_free(
    backend: Backend, pool: Any, lease_ms: int | None
) -> None:
    """With a retry due in a minute, the job waits again with the timeout as its last error,
    its row lock or lease released, while the first handler still blocks."""
    handler, events = Blocking(), Events()
    worker = make_worker(
        pool,
        handler,
        lease_ms,
        job_timeout_ms=300,
        log=events,
        retry_strategy_fn=lambda job, exc: RetrySpec(1, [60_000]),
    )
    enqueue_committed(backend, ("stuck", None))
    with running(worker, handler.release):
        wait_until(lambda: worker.summary()["retried"] == 1, timeout=15, description="retry")
        assert handler.returned == [], "rescheduled while its handler is still blocked"
        attempts, error, leased_by = waiting_row(backend, "stuck")
        assert attempts == 1
        assert "JobTimedOut" in error and "timed out after 0.3 s" in error
        assert leased_by is None
        # (a worker's claim that finds nothing due may lock the row for a moment on MySQL)
        wait_until(lambda: lockable_now(backend, "stuck"), timeout=5, description="row free")
        assert len(events.named("job_timed_out")) == 1
        assert worker.summary()["timed_out"] == 1
        assert backend.archived() == []

        handler.release.set()
        [old] = handler.threads("stuck")
        old.join(10)
        assert not old.is_alive()
        time.sleep(0.2)
        assert waiting_row(backend, "stuck") == (attempts, error, None), "late outcome dropped"
        assert backend.archived() == []


@pytest.mark.parametrize("lease_ms", MODES)
def test_the_retry_after_a_timeout_can_succeed(
    backend: Backend, pool: Any, lease_ms: int | None
) -> None:
    """The first attempt blocks past its timeout, the retry (on the new thread) is quick: the
    job is archived as a success after two attempts, and stays so when the first returns."""
    handler = Blocking(stuck_runs=1)
    worker = make_worker(
        pool,
        handler,
        lease_ms,
        job_timeout_ms=300,
        retry_strategy_fn=lambda job, exc: RetrySpec(1),
    )
    enqueue_committed(backend, ("stuck", None))
    with running(worker, handler.release):
        wait_until(lambda: backend.archived(), timeout=15, description="stuck archived")
        assert backend.archived() == [("stuck", "success", 2)]
        first, second = handler.threads("stuck")
        assert first.is_alive() and first.name == f"{WORKER_ID}-0"
        assert second.name == f"{WORKER_ID}-1"
        assert handler.returned == ["stuck"], "only the retry returned so far"
        handler.release.set()
        first.join(10)
        assert not first.is_alive()
        time.sleep(0.2)
        assert backend.archived() == [("stuck", "success", 2)]
        assert backend.jobs() == []
    assert worker.summary()["succeeded"] == 1
    assert worker.summary()["retried"] == 1
    assert worker.summary()["timed_out"] == 1


# Async handlers ---------------------------------------------------------------------------


@pytest.mark.parametrize("lease_ms", MODES)
def test_an_async_handler_past_its_timeout_is_cancelled_on_its_own_thread(
    backend: Backend, pool: Any, lease_ms: int | None
) -> None:
    """The coroutine sees CancelledError, the attempt fails as timed out (cancelled), and the
    thread is not replaced: later jobs run on `<id>-0`."""
    cancelled: list[str] = []
    ran: list[tuple[str, str]] = []

    async def handler(job_type: str, payload: Any) -> None:
        ran.append((job_type, threading.current_thread().name))
        if job_type == "slow":
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.append(job_type)
                raise

    events = Events()
    worker = make_worker(pool, handler, lease_ms, job_timeout_ms=200, log=events)
    enqueue_committed(backend, ("slow", None))
    with running(worker, threading.Event()):
        wait_until(lambda: backend.archived(), timeout=15, description="slow archived")
        assert cancelled == ["slow"]
        status, attempts, error = archived_error(backend, "slow")
        assert (status, attempts) == ("failure", 1)
        assert "JobTimedOut" in error and "timed out after 0.2 s (cancelled)" in error
        enqueue_committed(backend, ("later", None))
        wait_until(lambda: len(backend.archived()) == 2, timeout=15, description="later ran")
        assert ran == [("slow", f"{WORKER_ID}-0"), ("later", f"{WORKER_ID}-0")]
        assert not any(t.name == f"{WORKER_ID}-1" for t in threading.enumerate())
    assert sorted(backend.archived()) == [("later", "success", 1), ("slow", "failure", 1)]
    assert worker.summary()["failed"] == 1 and worker.summary()["succeeded"] == 1
    assert worker.summary()["timed_out"] == 1
    [timed_out] = events.named("job_timed_out")
    assert timed_out["job_type"] == "slow" and timed_out["timeout_ms"] == 200
    assert events.named("handler_exception") == []


@pytest.mark.parametrize("lease_ms", MODES)
def test_an_async_handler_that_blocks_its_loop_is_given_up_on_like_a_sync_one(
    backend: Backend, pool: Any, lease_ms: int | None
) -> None:
    """A coroutine that never yields cannot be cancelled: past its timeout (and the grace for
    async handlers) the watchdog abandons it and a new thread takes its place."""
    release = threading.Event()
    ran: list[tuple[str, threading.Thread]] = []

    async def handler(job_type: str, payload: Any) -> None:
        ran.append((job_type, threading.current_thread()))
        if job_type == "stubborn":
            release.wait(30)  # blocks the event loop itself

    events = Events()
    worker = make_worker(pool, handler, lease_ms, job_timeout_ms=200, log=events)
    enqueue_committed(backend, ("stubborn", None))
    with running(worker, release):
        wait_until(lambda: backend.archived(), timeout=15, description="stubborn archived")
        status, attempts, error = archived_error(backend, "stubborn")
        assert (status, attempts) == ("failure", 1)
        assert "timed out after 0.2 s" in error
        assert [e["job_type"] for e in events.named("job_timed_out")] == ["stubborn"]
        enqueue_committed(backend, ("next", None))
        wait_until(lambda: len(backend.archived()) == 2, timeout=15, description="next ran")
        [(_, old), (_, new)] = ran
        assert old.is_alive() and new.name == f"{WORKER_ID}-1"
        release.set()
        old.join(10)
        assert not old.is_alive()
    assert sorted(backend.archived()) == [("next", "success", 1), ("stubborn", "failure", 1)]
    assert worker.summary()["timed_out"] == 1


def test_process_next_job_cancels_an_async_handler_but_not_a_sync_one(
    backend: Backend, pool: Any
) -> None:
    """Outside a worker there is no watchdog: only an async handler is bounded."""

    async def slow_async(job_type: str, payload: Any) -> None:
        await asyncio.sleep(30)

    def slow_sync(job_type: str, payload: Any) -> None:
        time.sleep(0.4)

    enqueue_committed(backend, ("async", None))
    began = time.monotonic()
    assert process_next_job(pool, slow_async, job_timeout_ms=100) is False
    # a bound on correctness, not speed: cancelled at its deadline, not when the sleep ends
    assert time.monotonic() - began < 10, "the coroutine was not cancelled at its deadline"
    assert "timed out after 0.1 s (cancelled)" in archived_error(backend, "async")[2]
    enqueue_committed(backend, ("sync", None))
    assert process_next_job(pool, slow_sync, job_timeout_ms=100) is True
    assert sorted(backend.archived()) == [("async", "failure", 1), ("sync", "success", 1)]


@pytest.mark.parametrize(
    "lease_ms",
    [
        pytest.param(None, id="held"),
        pytest.param(2000, id="lease"),
    ],
)
def test_the_rest_of_a_timed_out_jobs_batch_runs_while_it_still_blocks(
    backend: Backend, pool: Any, lease_ms: int | None
) -> None:
    """batch_size=3: the jobs claimed with the stuck one run on the new thread at once."""
    handler = Blocking()
    worker = make_worker(pool, handler, lease_ms, job_timeout_ms=300, batch_size=3)
    enqueue_committed(backend, ("stuck", None))
    enqueue_committed(backend, ("a", None), ("b", None))
    with running(worker, handler.release):
        wait_until(lambda: len(backend.archived()) == 3, timeout=5, description="all settled")
        [old] = handler.threads("stuck")
        assert old.is_alive(), "the stuck handler still blocks"
        assert sorted(backend.archived()) == [
            ("a", "success", 1),
            ("b", "success", 1),
            ("stuck", "failure", 1),
        ]


# Which jobs are bounded -------------------------------------------------------------------


@pytest.mark.parametrize(
    "options, patient, bounded",
    [
        pytest.param(
            {"job_timeout_ms": 200, "job_timeouts": {"patient": None}},
            "patient",
            "other",
            id="type-unbounded",
        ),
        pytest.param({"job_timeouts": {"quick": 150}}, "other", "quick", id="only-one-type"),
    ],
)
def test_job_timeouts_per_type_override_the_default(
    backend: Backend, pool: Any, options: dict[str, Any], patient: str, bounded: str
) -> None:
    """Both job types sleep 0.6 s: the unbounded one succeeds, the bounded one times out."""

    def handler(job_type: str, payload: Any) -> None:
        time.sleep(0.6)

    events = Events()
    worker = make_worker(pool, handler, None, log=events, **options)
    enqueue_committed(backend, (patient, None), (bounded, None))
    with running(worker, threading.Event()):
        wait_until(lambda: len(backend.archived()) == 2, timeout=15, description="both ran")
    assert sorted(backend.archived()) == sorted([(patient, "success", 1), (bounded, "failure", 1)])
    assert "JobTimedOut" in archived_error(backend, bounded)[2]
    assert [e["job_type"] for e in events.named("job_timed_out")] == [bounded]
    assert worker.summary()["timed_out"] == 1


@pytest.mark.parametrize("lease_ms", MODES)
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_job_within_its_timeout_is_unaffected(
    backend: Backend, pool: Any, lease_ms: int | None, kind: str
) -> None:
    """A job ending well within its timeout succeeds on the first thread, with no event."""
    ran: list[str] = []

    def sync_handler(job_type: str, payload: Any) -> None:
        time.sleep(0.05)
        ran.append(threading.current_thread().name)

    async def async_handler(job_type: str, payload: Any) -> None:
        await asyncio.sleep(0.05)
        ran.append(threading.current_thread().name)

    handler = sync_handler if kind == "sync" else async_handler
    events = Events()
    worker = make_worker(pool, handler, lease_ms, job_timeout_ms=5000, log=events)
    enqueue_committed(backend, ("fine", 1), ("fine", 2))
    with running(worker, threading.Event()):
        wait_until(lambda: len(backend.archived()) == 2, timeout=15, description="both ran")
        time.sleep(0.1)
    assert backend.archived() == [("fine", "success", 1), ("fine", "success", 1)]
    assert ran == [f"{WORKER_ID}-0", f"{WORKER_ID}-0"]
    assert events.named("job_timed_out") == []
    assert worker.summary()["timed_out"] == 0 and worker.summary()["succeeded"] == 2


# stop() -----------------------------------------------------------------------------------


@pytest.mark.parametrize("lease_ms", MODES)
def test_stop_while_a_timed_out_handler_still_blocks(
    backend: Backend, pool: Any, lease_ms: int | None
) -> None:
    """The timed-out job is already settled, so stop() has nothing to abandon: it returns
    True, with the handler still blocked, and the worker is stopped."""
    handler = Blocking()
    worker = make_worker(pool, handler, lease_ms, job_timeout_ms=300)
    enqueue_committed(backend, ("stuck", None))
    worker.start()
    try:
        wait_until(lambda: backend.archived(), timeout=15, description="stuck archived")
        [old] = handler.threads("stuck")
        assert old.is_alive()
        assert worker.stop() is True
        assert worker.state == "stopped"
        assert old.is_alive(), "stop() did not wait for the abandoned handler"
    finally:
        handler.release.set()
        worker.stop()
    old.join(10)
    assert not old.is_alive()
    assert backend.archived() == [("stuck", "failure", 1)]
    assert worker.summary()["abandoned"] == 0 and worker.summary()["timed_out"] == 1


@pytest.mark.parametrize("lease_ms", MODES)
def test_stop_abandons_a_job_still_within_its_timeout(
    backend: Backend, pool: Any, lease_ms: int | None
) -> None:
    """A job blocked within its (long) timeout when stop() gives up waiting is abandoned:
    stop() returns False, the timeout never fires, and the job waits to run again."""
    handler, events = Blocking(), Events()
    worker = make_worker(
        pool, handler, lease_ms, job_timeout_ms=60_000, await_termination_timeout_ms=200, log=events
    )
    enqueue_committed(backend, ("stuck", None))
    worker.start()
    try:
        wait_until(lambda: handler.runs, timeout=15, description="stuck running")
        assert worker.stop() is False
        assert worker.state == "stopped"
    finally:
        handler.release.set()
        worker.stop()
    [old] = handler.threads("stuck")
    old.join(10)
    assert not old.is_alive()
    assert backend.archived() == [], "an abandoned attempt spends no retry"
    attempts, error, leased_by = waiting_row(backend, "stuck")
    assert (attempts, leased_by) == (0, None)
    assert error.startswith("JobAbandoned: ") and "(abandonment 1 of 3)" in error
    assert worker.summary()["abandoned"] == 1 and worker.summary()["timed_out"] == 0
    assert events.named("job_timed_out") == []


# Bad values -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options, named",
    [
        pytest.param({"job_timeout_ms": 0}, "job_timeout_ms", id="zero"),
        pytest.param({"job_timeout_ms": -1}, "job_timeout_ms", id="negative"),
        pytest.param({"job_timeout_ms": "1"}, "job_timeout_ms", id="string"),
        pytest.param({"job_timeout_ms": True}, "job_timeout_ms", id="bool"),
        pytest.param({"job_timeouts": {"x": 0}}, "job_timeouts['x']", id="type-zero"),
        pytest.param({"job_timeouts": {"x": "5"}}, "job_timeouts['x']", id="type-string"),
        pytest.param({"job_timeouts": [1]}, "job_timeouts", id="not-a-mapping"),
        pytest.param({"job_timeouts": {"": 5}}, "job_timeouts", id="empty-type"),
    ],
)
def test_bad_timeouts_are_refused_naming_the_option(
    backend: Backend, pool: Any, options: dict[str, Any], named: str
) -> None:
    """The worker and process_next_job refuse them before touching the database."""
    enqueue_committed(backend, ("t", None))
    with pytest.raises(ConfigurationError, match=named.replace("[", r"\[")):
        create_queue_worker(pool, lambda t, p: None, **options)
    with pytest.raises(ConfigurationError, match=named.replace("[", r"\[")):
        process_next_job(pool, lambda t, p: None, **options)
    assert backend.jobs() == [("t", 0, "default")], "nothing ran"


def test_a_handler_returning_while_its_timeout_is_recorded_does_not_undo_the_record(
    backend: Backend, pool: Any
) -> None:
    """Held mode records a timed-out attempt on the job's own connection: the handler that
    returns meanwhile waits for the record before its thread lets go of that connection."""
    release = threading.Event()
    ran: list[int] = []

    def handler(job_type: str, payload: Any) -> None:
        ran.append(1)
        release.wait(10)

    def retry_later(job: Any, exc: BaseException) -> RetrySpec:
        release.set()  # the handler returns while the attempt is being recorded
        time.sleep(0.3)
        return RetrySpec(1, [3_600_000])

    worker = make_worker(pool, handler, None, job_timeout_ms=200, retry_strategy_fn=retry_later)
    enqueue_committed(backend, ("racing", None))
    with running(worker, release):
        wait_until(lambda: worker.summary()["retried"] == 1, timeout=15, description="retry")
        wait_until(lambda: worker.state == "running" and len(worker.threads()) == 1)
        attempts, error, _ = waiting_row(backend, "racing")
    assert attempts == 1 and "JobTimedOut" in error
    assert ran == [1]

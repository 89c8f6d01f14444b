"""Coroutine handlers and callbacks: awaited on the worker thread's own event loop."""

from __future__ import annotations

import asyncio
import threading
from collections import defaultdict
from typing import Any

from faults import EventLog, running, wait_for

from proletarian_di import RetrySpec, create_queue_worker, process_next_job
from proletarian_di.testing import run_due_jobs

from backends import enqueue_committed, write_effect


def test_an_async_handler_is_awaited_before_its_job_is_archived(backend, pool):
    enqueue_committed(backend, ("greet", {"name": "ada"}))
    ran = []

    async def handle(job_type: str, payload: Any) -> None:
        await asyncio.sleep(0.01)
        ran.append((job_type, payload["name"]))

    assert process_next_job(pool, handle) is True
    assert ran == [("greet", "ada")]
    assert backend.archived() == [("greet", "success", 1)]


def test_an_async_handler_that_raises_fails_like_any_other(backend, pool):
    enqueue_committed(backend, ("flaky", None))
    failures = []

    async def handle(job_type: str, payload: Any) -> None:
        await asyncio.sleep(0)
        raise ConnectionError("upstream down")

    async def strategy(job: Any, exc: BaseException) -> RetrySpec:
        await asyncio.sleep(0)
        return RetrySpec(retries=1)

    async def failed(job: Any, exc: BaseException) -> None:
        await asyncio.sleep(0)
        failures.append((job.attempts, str(exc)))

    options = {"retry_strategy_fn": strategy, "failed_job_fn": failed}
    assert process_next_job(pool, handle, **options) is False
    assert backend.jobs() == [("flaky", 1, "default")], "the async strategy's spec was used"
    assert process_next_job(pool, handle, **options) is False
    assert failures == [(2, "upstream down")]
    assert backend.archived() == [("flaky", "failure", 2)]


def test_an_advanced_async_handler_writes_through_the_jobs_connection(backend, pool, effects):
    enqueue_committed(backend, ("note", "hello"), ("note", "bye"))

    async def handle(job: Any) -> None:
        await asyncio.sleep(0)
        write_effect(job, job.payload)
        if job.payload == "bye":
            raise RuntimeError("after the write")

    assert run_due_jobs(pool, handle, handler_fn_mode="advanced") == 2
    assert effects() == ["hello"], "the failed coroutine's write was rolled back"


def test_a_handler_returning_an_awaitable_is_awaited(backend, pool):
    enqueue_committed(backend, ("x", None))
    done = []

    async def work() -> None:
        done.append(True)

    assert process_next_job(pool, lambda job_type, payload: work()) is True
    assert done == [True]


def test_each_worker_thread_keeps_one_loop_and_closes_it_on_stop(backend, pool):
    enqueue_committed(backend, *[("n", n) for n in range(20)])
    loops: dict[str, set[asyncio.AbstractEventLoop]] = defaultdict(set)
    lock = threading.Lock()

    async def handle(job_type: str, payload: Any) -> None:
        await asyncio.sleep(0.005)
        with lock:
            loops[threading.current_thread().name].add(asyncio.get_running_loop())

    worker = create_queue_worker(pool, handle, worker_threads=2, polling_interval_ms=10)
    with running(worker):
        wait_for(lambda: len(backend.archived()) == 20, what="all 20 jobs")
    assert loops and all(len(seen) == 1 for seen in loops.values()), "one loop per thread"
    assert all(loop.is_closed() for seen in loops.values() for loop in seen)
    assert worker.summary()["succeeded"] == 20


def test_process_next_job_inside_a_running_loop_still_awaits(backend, pool):
    enqueue_committed(backend, ("x", None))
    ran = []

    async def handle(job_type: str, payload: Any) -> None:
        ran.append(asyncio.get_running_loop())

    async def main() -> bool | None:
        return process_next_job(pool, handle)

    assert asyncio.run(main()) is True
    assert len(ran) == 1
    assert backend.archived() == [("x", "success", 1)]


def test_async_exceptions_are_logged_with_the_job(backend, pool):
    (job_id,) = enqueue_committed(backend, ("bad", None))
    log = EventLog()

    async def handle(job_type: str, payload: Any) -> None:
        raise KeyError("email")

    assert process_next_job(pool, handle, log=log) is False
    (event,) = log.named("handler_exception")
    assert event["job_id"] == job_id and isinstance(event["exception"], KeyError)

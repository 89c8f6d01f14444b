"""The worker's states: start, stop from anywhere and any number of times, threads that die."""

from __future__ import annotations

import contextlib
import threading
import time
from datetime import datetime, timezone
from typing import Any

from faults import EventLog, running, wait_for

from proletarian_di import create_queue_worker

from backends import enqueue_committed


def test_stop_from_inside_a_handler_lets_the_job_finish(backend, pool):
    enqueue_committed(backend, ("last", None))
    shutdowns, answers = [], []
    worker: Any = None

    def handler(job_type: str, payload: Any) -> None:
        answers.append(worker.stop())
        answers.append(worker.running)

    worker = create_queue_worker(
        pool, handler, polling_interval_ms=10, on_shutdown=lambda: shutdowns.append(1)
    )
    worker.start()
    wait_for(lambda: worker.state == "stopped", what="the worker to stop")
    assert answers == [True, False]
    assert backend.archived() == [("last", "success", 1)]
    assert shutdowns == [1]
    assert worker.stop() is True
    assert shutdowns == [1], "on_shutdown runs once"


def test_every_caller_of_stop_waits_for_the_same_drain(backend, pool):
    enqueue_committed(backend, ("slow", None))
    started, release = threading.Event(), threading.Event()
    shutdowns, results = [], []

    def handler(job_type: str, payload: Any) -> None:
        started.set()
        release.wait(10)

    worker = create_queue_worker(
        pool, handler, polling_interval_ms=10, on_shutdown=lambda: shutdowns.append(1)
    )
    worker.start()
    assert started.wait(10)
    stoppers = [threading.Thread(target=lambda: results.append(worker.stop())) for _ in range(3)]
    for thread in stoppers:
        thread.start()
    time.sleep(0.3)
    assert results == [], "no stop() returns while the job still runs"
    assert worker.state == "stopping"
    release.set()
    for thread in stoppers:
        thread.join(10)
    assert results == [True, True, True]
    assert shutdowns == [1]
    assert backend.archived() == [("slow", "success", 1)]


def test_stop_during_start_waits_for_the_start_then_stops(backend, pool):
    checking, errors = threading.Event(), []

    class SlowToCheck:
        """start()'s check takes half a second."""

        def __init__(self) -> None:
            self.first = True

        @contextlib.contextmanager
        def connection(self) -> Any:
            if self.first:
                self.first = False
                checking.set()
                time.sleep(0.5)
            with pool.connection() as conn:
                yield conn

    shutdowns = []
    worker = create_queue_worker(
        SlowToCheck(), lambda t, p: None, on_shutdown=lambda: shutdowns.append(1)
    )

    def start() -> None:
        try:
            worker.start()
        except Exception as exc:
            errors.append(exc)

    starter = threading.Thread(target=start)
    starter.start()
    assert checking.wait(10)
    assert worker.state == "starting"
    assert worker.stop() is True
    starter.join(10)
    assert errors == []
    assert worker.state == "stopped" and shutdowns == [1]


def test_a_thread_that_cannot_go_on_fails_the_worker_and_says_so(backend, pool):
    calls, shutdowns, log = [], [], EventLog()

    def clock() -> datetime:
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt("the clock broke")
        return datetime.now(timezone.utc)

    worker = create_queue_worker(
        pool,
        lambda t, p: None,
        clock=clock,
        polling_interval_ms=10,
        log=log,
        on_shutdown=lambda: shutdowns.append(1),
    )
    worker.start()
    wait_for(lambda: worker.state == "failed", what="the worker to fail")
    assert not worker.running
    assert isinstance(worker.failure, KeyboardInterrupt)
    (died,) = log.named("worker_thread_died")
    assert died["thread"] == "proletarian[default]-0"
    assert isinstance(died["exception"], KeyboardInterrupt)
    assert shutdowns == [1]
    assert worker.stop() is True


def test_a_handler_raising_keyboard_interrupt_fails_only_its_job(backend, pool):
    enqueue_committed(backend, ("bad", None), ("ok", None))

    def handler(job_type: str, payload: Any) -> None:
        if job_type == "bad":
            raise KeyboardInterrupt

    worker = create_queue_worker(pool, handler, polling_interval_ms=10, log=EventLog())
    with running(worker):
        wait_for(lambda: len(backend.archived()) == 2, what="both jobs archived")
        assert worker.running
    assert sorted(backend.archived()) == [("bad", "failure", 1), ("ok", "success", 1)]


def test_a_handler_calling_stop_during_a_drain_is_not_held_up(backend, pool):
    enqueue_committed(backend, ("slow", None))
    started, release, answers = threading.Event(), threading.Event(), []
    worker: Any = None

    def handler(job_type: str, payload: Any) -> None:
        started.set()
        release.wait(10)
        answers.append(worker.stop())

    worker = create_queue_worker(
        pool, handler, polling_interval_ms=10, await_termination_timeout_ms=3_000
    )
    worker.start()
    assert started.wait(10)
    threading.Timer(0.2, release.set).start()
    assert worker.stop() is True, "the job finished within the timeout: nothing abandoned"
    assert answers == [True]
    assert backend.archived() == [("slow", "success", 1)]

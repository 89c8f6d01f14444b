"""An idle worker polls from one thread, not from each: one claim per polling interval per
worker; a thread that finds work brings in the others."""

from __future__ import annotations

import threading
import time
from typing import Any

from proletarian_di import create_queue_worker

from backends import Backend, enqueue_committed, wait_until


def polls_by_thread(log: list[tuple[str, str]], since: int) -> dict[str, int]:
    counts: dict[str, int] = {}
    for event, thread in log[since:]:
        if event == "polling_for_jobs":
            counts[thread] = counts.get(thread, 0) + 1
    return counts


def test_an_idle_worker_of_eight_threads_polls_from_one(backend: Backend) -> None:
    log: list[tuple[str, str]] = []

    def record(event: str, data: Any) -> None:
        log.append((event, threading.current_thread().name))

    worker = create_queue_worker(
        backend.pool(9), lambda t, p: None, worker_threads=8, polling_interval_ms=20, log=record
    )
    with worker:
        wait_until(lambda: len(polls_by_thread(log, 0)) == 8, description="every thread's claim")
        time.sleep(0.1)  # the threads settle: seven sleep, one polls
        since = len(log)
        time.sleep(0.4)  # twenty polling intervals
        idle = polls_by_thread(log, since)
    assert len(idle) == 1, idle
    assert next(iter(idle.values())) >= 2, "the poller polls every interval"


def test_a_burst_brings_every_thread_in(backend: Backend) -> None:
    """Each job is held until eight threads run one at once: only sleeping threads woken by
    the ones that found work can make up the eight."""
    ran_on: set[str] = set()
    lock, all_in = threading.Lock(), threading.Event()

    def handler(job_type: str, payload: Any) -> None:
        with lock:
            ran_on.add(threading.current_thread().name)
            if len(ran_on) == 8:
                all_in.set()
        all_in.wait(10)

    worker = create_queue_worker(
        backend.pool(9), handler, worker_threads=8, polling_interval_ms=50, log=lambda e, d: None
    )
    with worker:
        time.sleep(0.2)  # idle: one thread polls, seven sleep
        enqueue_committed(backend, *[("t", n) for n in range(40)])
        wait_until(
            lambda: not backend.query(f"SELECT COUNT(*) FROM {backend.job_table}")[0][0],
            description="the burst",
        )
    assert len(ran_on) == 8, ran_on


def test_a_job_enqueued_while_idle_is_picked_up_by_the_poller(backend: Backend) -> None:
    ran: list[Any] = []
    worker = create_queue_worker(
        backend.pool(5),
        lambda t, p: ran.append(p),
        worker_threads=4,
        polling_interval_ms=20,
        log=lambda e, d: None,
    )
    with worker:
        time.sleep(0.2)
        for n in range(3):
            enqueue_committed(backend, ("t", n))
            wait_until(lambda n=n: n in ran, description=f"job {n}")
            time.sleep(0.1)  # idle again between jobs
    assert ran == [0, 1, 2]

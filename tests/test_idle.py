"""An idle worker polls from one thread, not from each: one claim per polling interval per
worker; a thread that finds work brings in the others. On PostgreSQL, while its listener is
up, it sleeps until the next due time it knows of, or the fallback polling interval; the
thread a job wakes claims from the job's priority (see tests/test_priorities.py)."""

from __future__ import annotations

import contextlib
import threading
import time
from datetime import timedelta
from typing import Any

import psycopg

from proletarian_di import RetrySpec, create_queue_worker, enqueue, enqueue_many
from proletarian_di._engine.frontier import Frontier
from proletarian_di._engine.wakeup import Wakeup
from proletarian_di._store.dialects import NOTIFY_CHANNEL, Wake, read_wake_payload

from backends import Backend, Events, enqueue_committed, wait_until


def polls_by_thread(log: list[tuple[str, str]], since: int) -> dict[str, int]:
    counts: dict[str, int] = {}
    for event, thread in log[since:]:
        if event == "polling_for_jobs":
            counts[thread] = counts.get(thread, 0) + 1
    return counts


def idle_polls(backend: Backend, **options: Any) -> dict[str, int]:
    """The claims each thread of an idle eight-thread worker made in 0.4 s (twenty polling
    intervals), once the threads settled."""
    log: list[tuple[str, str]] = []

    def record(event: str, data: Any) -> None:
        log.append((event, threading.current_thread().name))

    worker = create_queue_worker(
        backend.pool(9),
        lambda t, p: None,
        worker_threads=8,
        polling_interval_ms=20,
        log=record,
        **options,
    )
    with worker:
        wait_until(lambda: len(polls_by_thread(log, 0)) == 8, description="every thread's claim")
        time.sleep(0.1)  # the threads settle: seven sleep, one polls
        since = len(log)
        time.sleep(0.4)
        return polls_by_thread(log, since)


def test_an_idle_worker_of_eight_threads_polls_from_one(backend: Backend) -> None:
    """With the fallback as short as the polling interval, PostgreSQL polls as MySQL does."""
    idle = idle_polls(backend, fallback_polling_interval_ms=20)
    assert len(idle) == 1, idle
    assert next(iter(idle.values())) >= 2, "the poller polls every interval"


def test_a_listening_worker_sleeps_until_the_fallback_interval(pg: Backend) -> None:
    """Notified of every job, an idle PostgreSQL worker polls every fallback interval (5 s by
    default), not every polling interval."""
    assert idle_polls(pg) == {}
    idle = idle_polls(pg, fallback_polling_interval_ms=150)
    assert len(idle) == 1 and 1 <= next(iter(idle.values())) <= 4, idle


def test_a_listening_worker_wakes_when_a_scheduled_job_falls_due(pg: Backend) -> None:
    """The jobs' due times come with their notification, or are read when the listener
    connects, and are retries of its own: with a fallback of a minute, only they explain
    that every job runs."""
    ran: list[Any] = []
    enqueue_committed(pg, ("t", "known at start"), process_in=timedelta(seconds=0.6))
    attempts: list[int] = []

    def handler(job_type: str, payload: Any) -> None:
        ran.append(payload)
        if payload == "retried" and len(attempts) < 1:
            attempts.append(1)
            raise RuntimeError("once")

    events = Events()
    worker = create_queue_worker(
        pg.pool(3),
        handler,
        polling_interval_ms=20,
        fallback_polling_interval_ms=60_000,
        retry_strategy_fn=lambda job, exc: RetrySpec(retries=1, delays=[500]),
        log=events,
    )
    with worker:
        wait_until(lambda: "known at start" in ran, timeout=20, description="a job due at start")
        enqueue_committed(pg, ("t", "notified"), process_in=timedelta(seconds=0.5))
        wait_until(lambda: "notified" in ran, timeout=20, description="a notified due time")
        enqueue_committed(pg, ("t", "retried"))
        wait_until(lambda: ran.count("retried") == 2, timeout=20, description="its retry")
    assert len(events.named("polling_for_jobs")) < 40, "it slept in between"


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


def server_statements(backend: Backend) -> int:
    """Statements the server has run: MariaDB's `Questions` (this read included)."""
    [(_, value)] = backend.query("SHOW GLOBAL STATUS LIKE 'Questions'")
    return int(value)


def test_mysql_counts_one_claim_per_interval_for_an_idle_worker(
    mysql_backend: Backend,
) -> None:
    """From the server's own counter: an idle 8-thread worker at 100 ms runs about 10 claims
    (each with its ROLLBACK) a second, not 80. (PostgreSQL: `python -m bench`, whose
    statistics the server publishes late.)"""
    mysql_backend.reset()
    worker = create_queue_worker(
        mysql_backend.pool(9), lambda t, p: None, worker_threads=8, log=lambda e, d: None
    )
    with worker:
        time.sleep(1.0)  # started, and settled into idling
        before = server_statements(mysql_backend)
        time.sleep(2.0)
        ran = server_statements(mysql_backend) - before - 1
    assert 10 <= ran <= 70, f"{ran} statements in 2 s (two pollers would run over 80)"


def test_a_notification_says_the_jobs_priority_unless_it_is_0(pg: Backend) -> None:
    """`queue`, `queue@epoch` as before; `#priority` after either (enqueue, enqueue_many, a
    job due later); each read back for its own queue only."""
    with psycopg.connect(pg.url, autocommit=True) as listener:
        listener.execute(f"LISTEN {NOTIFY_CHANNEL}")
        with contextlib.closing(pg.connect()) as conn:
            enqueue(conn, "t", None, queue="mail", priority=10)
            conn.commit()
            enqueue_many(conn, [("t", 1), ("t", 2)], queue="mail", priority=-3)
            conn.commit()
            enqueue(conn, "t", None, queue="mail", priority=7, process_in=timedelta(hours=1))
            conn.commit()
            enqueue(conn, "t", None, queue="mail")
            conn.commit()
        payloads = [n.payload for n in listener.notifies(timeout=10, stop_after=4)]
    assert payloads[:2] == ["mail#10", "mail#-3"] and payloads[3] == "mail"
    at = payloads[2].removeprefix("mail@").removesuffix("#7")
    assert f"mail@{at}#7" == payloads[2] and float(at) > time.time() + 3500
    assert [read_wake_payload(p, "mail") for p in payloads] == [
        Wake(None, 10),
        Wake(None, -3),
        Wake(float(at), 7),
        Wake(None, 0),
    ]
    assert {read_wake_payload(p, "mai") for p in payloads} == {None}
    assert read_wake_payload("mail#x", "mail") is None


def test_the_thread_a_job_wakes_claims_from_the_jobs_priority() -> None:
    """A notification's priority, and a known due time's, go to the thread that wakes for
    them (the highest of several), once."""
    frontier = Frontier(60.0)
    wakeup = Wakeup(2, frontier)
    assert frontier.start(None) is None  # the first claim sweeps
    frontier.claimed(None, (0, 5))
    wakeup.wake(priority=3)
    wakeup.wake(priority=10)
    wakeup.idle(0.01)
    assert frontier.start(None) == (-10, 5)
    wakeup.idle(0.01)
    assert frontier.start(None) == (0, 5)
    wakeup.due_at(time.time() - 1, priority=4)
    wakeup.idle(0.01, fallback=5.0)
    assert frontier.start(None) == (-4, 5)

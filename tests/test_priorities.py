"""Priorities: among due jobs of a queue a worker claims the highest priority first, then
the earliest process_at; the claim stays an index scan from the worker's frontier, and a
job of higher priority than the frontier is claimed at the next sweep, or at once by an
idle worker."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from datetime import datetime, timedelta, timezone
from time import monotonic, sleep
from typing import Any

import pytest
from test_frontier import FakeTime

from proletarian_di import (
    ConfigurationError,
    RetrySpec,
    admin,
    create_queue_worker,
    enqueue,
    enqueue_async,
    enqueue_many,
    process_next_job,
)
from proletarian_di._common.checks import PRIORITY_LIMIT
from proletarian_di._engine.frontier import Frontier
from proletarian_di._engine.options import worker_settings
from proletarian_di._engine.runner import JobRunner, Slot
from proletarian_di._store.dialects import dialect_for

from backends import Backend, as_uuid, enqueue_committed, wait_until


def drain(backend: Backend, **options: Any) -> list[Any]:
    """Run every due job one at a time, as claims from the beginning; their payloads."""
    ran: list[Any] = []
    source = backend.pool(1)
    try:
        while process_next_job(source, lambda t, p: ran.append(p), **options):
            pass
    finally:
        source.close()
    return ran


def test_higher_priority_runs_first_then_the_earlier_job(backend: Backend) -> None:
    for payload, priority in (("a", 0), ("b", 5), ("c", -1), ("d", 5), ("e", 10), ("f", 0)):
        enqueue_committed(backend, ("t", payload), priority=priority)
    assert drain(backend) == ["e", "b", "d", "a", "f", "c"]


def test_a_due_job_of_low_priority_runs_before_a_scheduled_one_of_high(backend: Backend) -> None:
    enqueue_committed(backend, ("t", "later"), priority=9, process_in=timedelta(hours=1))
    enqueue_committed(backend, ("t", "now"), priority=-9)
    assert drain(backend) == ["now"]


def test_enqueue_many_gives_every_job_its_priority(backend: Backend) -> None:
    with contextlib.closing(backend.connect()) as conn:
        enqueue_many(conn, [("t", "low1"), ("t", "low2")])
        enqueue_many(conn, [("t", "high1"), ("t", "high2")], priority=3)
        conn.commit()
    ran = drain(backend)
    assert set(ran[:2]) == {"high1", "high2"} and set(ran[2:]) == {"low1", "low2"}
    stored = backend.query(f"SELECT payload, priority FROM {backend.archived_job_table}")
    assert sorted((p.strip('"'), n) for p, n in stored) == [
        ("high1", 3),
        ("high2", 3),
        ("low1", 0),
        ("low2", 0),
    ]


def test_the_handler_sees_the_priority_and_a_retry_keeps_it(backend: Backend) -> None:
    [job_id] = enqueue_committed(backend, ("flaky", None), priority=7)
    seen: list[tuple[int, int]] = []

    def handler(job: Any) -> None:
        seen.append((job.attempts, job.priority))
        if job.attempts == 1:
            raise RuntimeError("first attempt fails")

    source = backend.pool(1)
    try:
        options: dict[str, Any] = {
            "handler_fn_mode": "advanced",
            "retry_strategy_fn": lambda job, exc: RetrySpec(retries=1, delays=[0]),
        }
        assert process_next_job(source, handler, **options) is False
        [(priority,)] = backend.query(f"SELECT priority FROM {backend.job_table}")
        assert priority == 7
        assert process_next_job(source, handler, **options) is True
    finally:
        source.close()
    assert seen == [(1, 7), (2, 7)]
    with contextlib.closing(backend.connect()) as conn:
        info = admin.get_job(conn, job_id)
    assert info is not None and info.state == "succeeded" and info.priority == 7


def test_a_failed_job_retried_by_an_operator_keeps_its_priority(backend: Backend) -> None:
    [job_id] = enqueue_committed(backend, ("doomed", None), priority=4)
    source = backend.pool(1)
    try:
        fail = {"retry_strategy_fn": lambda job, exc: None}
        assert process_next_job(source, lambda t, p: 1 / 0, **fail) is False
        with contextlib.closing(backend.connect()) as conn:
            assert admin.retry_jobs(conn, [job_id]) == 1
            conn.commit()
            [info] = admin.list_jobs(conn, state="queued")
    finally:
        source.close()
    assert (info.job_id, info.priority) == (job_id, 4)


def test_priority_and_a_unique_key_together(backend: Backend) -> None:
    first, again = enqueue_committed(
        backend, ("t", "kept"), ("t", "dropped"), priority=2, unique_key="k"
    )
    assert again == first
    assert backend.query(f"SELECT priority FROM {backend.job_table}") == [(2,)]


@pytest.mark.parametrize(
    ("priority", "message"),
    [
        (True, "priority must be an int, got True"),
        (1.5, "priority must be an int, got 1.5"),
        ("1", "priority must be an int, got '1'"),
        (PRIORITY_LIMIT + 1, "priority must be between"),
        (-PRIORITY_LIMIT - 1, "priority must be between"),
    ],
)
def test_a_bad_priority_is_refused_and_writes_nothing(
    backend: Backend, priority: Any, message: str
) -> None:
    with contextlib.closing(backend.connect()) as conn:
        with pytest.raises(ConfigurationError, match=message):
            enqueue(conn, "t", None, priority=priority)
        with pytest.raises(ConfigurationError, match=message):
            enqueue_many(conn, [("t", None)], priority=priority)
        conn.commit()
    assert backend.query(f"SELECT COUNT(*) FROM {backend.job_table}") == [(0,)]


def test_the_extreme_priorities_are_stored_and_ordered(backend: Backend) -> None:
    enqueue_committed(backend, ("t", "lowest"), priority=-PRIORITY_LIMIT)
    enqueue_committed(backend, ("t", "highest"), priority=PRIORITY_LIMIT)
    assert drain(backend) == ["highest", "lowest"]


def test_enqueue_async_takes_a_priority(pg: Backend) -> None:
    import psycopg

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(pg.url) as aconn:
            await enqueue_async(aconn, "t", "low")
            await enqueue_async(aconn, "t", "high", priority=1)
            await aconn.commit()

    asyncio.run(main())
    assert drain(pg) == ["high", "low"]


# With the frontier ---------------------------------------------------------------------------


def test_a_higher_priority_behind_the_frontier_is_claimed_at_the_next_sweep(
    backend: Backend,
) -> None:
    enqueue_committed(backend, *[("t", f"low{n}") for n in range(3)])
    ran: list[str] = []
    time = FakeTime()
    runner = JobRunner(lambda t, p: ran.append(p), worker_settings(), None, Frontier(1.0, time))
    with contextlib.closing(backend.connect()) as conn:
        dialect = dialect_for(conn, backend.job_table, backend.archived_job_table)
        with dialect.attached(conn) as session:
            slot = Slot()
            assert runner.run_batch(session, slot) == [True]  # the first claim sweeps
            enqueue_committed(backend, ("t", "high"), priority=1)
            assert runner.run_batch(session, slot) == [True]  # from the frontier: behind it
            time.now = 1.0
            assert runner.run_batch(session, slot) == [True]  # the sweep finds it
            assert runner.run_batch(session, slot) == [True]
            assert runner.run_batch(session, slot) == []
    assert ran == ["low0", "low1", "high", "low2"]


def test_a_worker_runs_a_high_priority_job_enqueued_behind_its_backlog(backend: Backend) -> None:
    """The frontier is on the backlog's priority; the job of higher priority enqueued while
    the backlog runs is claimed within a sweep, long before the backlog is done.

    Each backlog job takes 20 ms, so the backlog outlasts a sweep interval (the polling
    interval, or ten times a slow claim's time on a loaded machine) many times over."""
    enqueue_committed(backend, *[("t", f"low{n}") for n in range(40)])
    ran: list[str] = []
    started, proceed = threading.Event(), threading.Event()

    def handler(job_type: str, payload: str) -> None:
        ran.append(payload)
        started.set()
        proceed.wait(10)
        sleep(0.02)

    worker = create_queue_worker(
        backend.pool(2), handler, worker_threads=1, polling_interval_ms=20, log=lambda e, d: None
    )
    worker.start()
    try:
        assert started.wait(10)
        enqueue_committed(backend, ("t", "high"), priority=1)
        proceed.set()
        wait_until(lambda: "high" in ran, description="the high-priority job")
    finally:
        worker.stop()
    assert ran.index("high") < 39, ran


def idle_worker(backend: Backend, handler: Any, **options: Any) -> Any:
    """A one-thread worker whose wake-ups alone can start a job behind its frontier within a
    second: on PostgreSQL it listens, sweeps every 2 s and polls every 5 s; MySQL polls (and
    sweeps) every 100 ms."""
    interval = 2_000 if backend.name == "postgresql" else 100
    return create_queue_worker(
        backend.pool(2),
        handler,
        worker_threads=1,
        polling_interval_ms=interval,
        fallback_polling_interval_ms=5_000,
        log=lambda e, d: None,
        **options,
    )


BEHIND = {
    "priority 10": (0, lambda conn: enqueue(conn, "t", "it", priority=10)),
    "enqueue_many": (0, lambda conn: enqueue_many(conn, [("t", "it"), ("t", 2)], priority=10)),
    "due in 50 ms": (
        0,
        lambda conn: enqueue(conn, "t", "it", priority=10, process_in=timedelta(seconds=0.05)),
    ),
    "priority 0 after -5": (-5, lambda conn: enqueue(conn, "t", "it")),
}


@pytest.mark.parametrize("lease_ms", [None, 5_000], ids=["held", "lease"])
@pytest.mark.parametrize("case", BEHIND)
def test_an_idle_worker_starts_a_job_behind_its_frontier_at_once(
    backend: Backend, case: str, lease_ms: int | None
) -> None:
    """Three jobs run, then one of higher priority than theirs is enqueued: behind the
    frontier they left. The worker starts it within a second, not at its next poll (5 s on
    PostgreSQL): the wake-up does not depend on the priority. (A bound for correctness, not
    a measure of speed.)"""
    backlog, enqueue_it = BEHIND[case]
    started: dict[Any, float] = {}
    options = {} if lease_ms is None else {"lease_ms": lease_ms}
    with idle_worker(backend, lambda t, p: started.setdefault(p, monotonic()), **options):
        enqueue_committed(backend, *[("t", n) for n in range(3)], priority=backlog)
        wait_until(lambda: len(started) == 3, description="the backlog")
        sleep(0.1)  # the worker is idle again
        with contextlib.closing(backend.connect()) as conn:
            enqueue_it(conn)
            conn.commit()
        committed = monotonic()
        wait_until(lambda: "it" in started, description="the job behind the frontier")
    assert started["it"] - committed < 1.0


def test_a_retry_of_a_high_priority_job_starts_when_it_falls_due(backend: Backend) -> None:
    """Its due time is known to the worker, and so is its priority (behind the frontier):
    the retry starts within a second of its 50 ms delay, not at the next poll."""
    starts: list[float] = []

    def handler(job_type: str, payload: Any) -> None:
        if payload == "it":
            starts.append(monotonic())
            if len(starts) == 1:
                raise RuntimeError("once")

    retry = RetrySpec(retries=1, delays=[50])
    with idle_worker(backend, handler, retry_strategy_fn=lambda job, exc: retry):
        enqueue_committed(backend, *[("t", n) for n in range(3)])
        enqueue_committed(backend, ("t", "it"), priority=10)
        wait_until(lambda: len(starts) == 2, description="the retry")
    assert starts[1] - starts[0] < 1.0


def test_the_postgres_claim_is_an_index_scan_in_priority_order(pg: Backend) -> None:
    """EXPLAIN of the worker's claim, from the beginning and from a position: the claim
    index gives the order, so there is no Sort and LIMIT stops at the first due job."""
    with contextlib.closing(pg.connect()) as conn:
        enqueue_many(conn, [("t", n) for n in range(2000)])
        enqueue_many(conn, [("t", n) for n in range(200)], priority=5)
        conn.commit()
        conn.execute(f"ANALYZE {pg.job_table}")
        dialect = dialect_for(conn, pg.job_table, pg.archived_job_table)
        now = datetime.now(timezone.utc)
        for start in (None, (-5, now - timedelta(hours=1)), (0, now - timedelta(hours=1))):
            params = dialect.claim_params("default", start, now, 1)
            plan = "\n".join(row[0] for row in conn.execute("EXPLAIN " + dialect.claim_sql, params))
            assert "Index Scan using job_queue_priority_process_at" in plan, plan
            assert "Sort" not in plan, plan
            assert "ROW((- priority), process_at) >=" in plan, plan
        conn.rollback()


def test_prepared_and_inline_claims_take_priorities(pg: Backend) -> None:
    """The worker's two hot paths: statements prepared on its connection, and inlined on an
    autocommit connection (process_next_job)."""
    enqueue_committed(pg, ("t", "low"), ("t", "mid"))
    enqueue_committed(pg, ("t", "high"), priority=2)
    with contextlib.closing(pg.connect()) as conn:
        conn.autocommit = True
        runner = JobRunner(lambda t, p: None, worker_settings())
        dialect = dialect_for(conn, pg.job_table, pg.archived_job_table)
        [row] = dialect.session(conn).claim("default", datetime.now(timezone.utc))
        assert (row[3], row[8]) == ('"high"', 2)
        conn.execute("ROLLBACK")
        with dialect.attached(conn) as session:
            assert runner.run_batch(session) == [True]
            rows = session.claim("default", datetime.now(timezone.utc))
            assert [(r[3], r[8]) for r in rows] == [('"low"', 0)]
            conn.execute("ROLLBACK")
    assert [as_uuid(r[0]) for r in pg.query(f"SELECT job_id FROM {pg.archived_job_table}")]

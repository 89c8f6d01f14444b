"""Lease mode where it meets batches, `stop()` and clocks that disagree: a claim of several
jobs starts only the first, so the jobs of a batch that never started run again with no
attempt charged; and leases are judged by the database's clock, never a host's."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import long_job_process
import pytest

from proletarian_di import create_queue_worker

from backends import Backend, Events, archive_by_id, as_uuid, enqueue_committed, wait_until


def waiting(backend: Backend) -> dict[str, tuple[int, Any, Any]]:
    """Each waiting job by payload: (attempts, leased_by, last_error)."""
    rows = backend.query(
        f"SELECT payload, attempts, leased_by, last_error FROM {backend.job_table}"
    )
    return {
        payload.strip('"'): (attempts, lease, error) for payload, attempts, lease, error in rows
    }


def three_jobs(backend: Backend) -> list[Any]:
    """ "first", "second" and "third", due in that order."""
    return [enqueue_committed(backend, ("t", name))[0] for name in ("first", "second", "third")]


def test_a_batch_whose_process_is_killed_runs_its_unstarted_jobs_uncharged(
    backend: Backend, tmp_path: Path
) -> None:
    """SIGKILL while the batch's first job runs: once the lease runs out, the first job's
    dead attempt is recorded, and the two that never started run with attempt 1."""
    ids = three_jobs(backend)
    events = tmp_path / "events"
    process = long_job_process.start(
        backend, events, "block", "--lease-ms", "1000", "--batch-size", "3", "--retries", "1"
    )
    try:
        wait_until(lambda: events.exists() and events.read_text(), timeout=30)
        process.send_signal(signal.SIGKILL)
        process.wait(30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        process.communicate(timeout=30)
    assert events.read_text().split("\n")[0] == "start first", events.read_text()
    before = waiting(backend)
    assert before["first"][0] == 1, "the started job's attempt is counted"
    assert before["second"][0] == before["third"][0] == 0, "the reserved ones are not"

    runs: list[str] = []
    worker = create_queue_worker(
        backend.pool(2),
        lambda job_type, payload: runs.append(payload),
        lease_ms=1000,
        polling_interval_ms=20,
        retry_strategy_fn=lambda job, exc: {"retries": 1},
        log=Events(),
    )
    with worker:
        wait_until(lambda: len(backend.archived()) == 3, timeout=20, description="all ran")
    archived = archive_by_id(backend)
    assert archived[as_uuid(ids[0])] == ("success", 2), "first: its dead attempt, then a run"
    assert archived[as_uuid(ids[1])] == ("success", 1)
    assert archived[as_uuid(ids[2])] == ("success", 1)
    assert sorted(runs) == ["first", "second", "third"]
    errors = dict(backend.query(f"SELECT payload, last_error FROM {backend.archived_job_table}"))
    assert "LeaseExpired" in errors['"first"']
    assert errors['"second"'] is None and errors['"third"'] is None


def test_stop_abandoning_a_batch_gives_its_unstarted_jobs_back_at_once(
    backend: Backend, pool: Any
) -> None:
    """The first job outlives `await_termination_timeout_ms`: the other two are back in the
    queue, unleased and uncharged, as soon as stop() returns, and the first runs again too,
    its retries unspent."""
    release = threading.Event()

    def handler(job_type: str, payload: Any) -> None:
        if payload == "first":
            release.wait(30)

    three_jobs(backend)
    worker = create_queue_worker(
        pool,
        handler,
        lease_ms=60_000,
        batch_size=3,
        polling_interval_ms=20,
        await_termination_timeout_ms=200,
        log=Events(),
    )
    worker.start()
    try:
        wait_until(lambda: waiting(backend)["first"][1] is not None, description="claimed")
        assert worker.stop() is False
        after = waiting(backend)
        assert after["second"][:2] == (0, None) and after["third"][:2] == (0, None)
        assert after["first"][:2] == (0, None)
        assert after["first"][2].startswith("JobAbandoned: ")
    finally:
        release.set()
    time.sleep(0.2)  # the abandoned handler returns: its outcome is discarded
    assert backend.archived() == []
    assert len(waiting(backend)) == 3


@pytest.mark.parametrize(
    "holder_skew_s, rescuer_skew_s",
    [pytest.param(-3.0, 0.0, id="holder-behind"), pytest.param(0.0, 3.0, id="rescuer-ahead")],
)
def test_leases_are_judged_by_the_database_clock(
    backend: Backend, pool: Any, holder_skew_s: float, rescuer_skew_s: float
) -> None:
    """Two workers, one whose clock is 3 s off, lease_ms=1000, a job that takes 2.5 s: it
    runs once, never twice at once: the holder's lease holds however late its clock is, and
    the other worker takes it over no earlier however early its clock is."""
    lock = threading.Lock()
    runs: list[str] = []
    running: list[str] = []
    overlaps: list[str] = []

    def handler_for(name: str) -> Any:
        def handler(job_type: str, payload: Any) -> None:
            with lock:
                runs.append(name)
                if running:
                    overlaps.append(name)
                running.append(name)
            time.sleep(2.5)
            with lock:
                running.remove(name)

        return handler

    def clock(skew_s: float) -> Any:
        return lambda: datetime.now(timezone.utc) + timedelta(seconds=skew_s)

    # due by every clock here, so that the holder takes it first
    enqueue_committed(backend, ("slow", "job"), clock=clock(-10.0))
    common: dict[str, Any] = {"lease_ms": 1000, "polling_interval_ms": 20, "log": Events()}
    holder = create_queue_worker(pool, handler_for("holder"), clock=clock(holder_skew_s), **common)
    rescuer = create_queue_worker(
        pool, handler_for("rescuer"), clock=clock(rescuer_skew_s), **common
    )
    with holder:
        wait_until(lambda: runs, timeout=10, description="the holder claims it")
        with rescuer:
            wait_until(lambda: backend.archived(), timeout=15, description="done")
            time.sleep(0.3)
    assert runs == ["holder"] and overlaps == []
    assert backend.archived() == [("slow", "success", 1)]


def test_a_batch_claim_runs_its_jobs_in_the_claims_order(backend: Backend, pool: Any) -> None:
    """The first job of a lease claim's batch is the one started at the claim; the reserved
    ones follow in order. Jobs written in the opposite order to their priorities (so that an
    UPDATE's RETURNING, in the table's order, lists the last to run first) still run first
    to last, and none is charged an attempt it did not start (seen in CI as a reserved job
    run before the started one)."""
    for name, priority in (("third", 0), ("second", 5), ("first", 10)):
        enqueue_committed(backend, ("t", name), priority=priority)
    order: list[str] = []
    if backend.name == "postgresql":  # the plan that returns the rows in the table's order
        from psycopg_pool import ConnectionPool

        options = "-c enable_nestloop=off -c enable_mergejoin=off"
        pool = ConnectionPool(
            backend.url, min_size=1, max_size=2, kwargs={"options": options}, open=True
        )
    worker = create_queue_worker(
        pool,
        lambda job_type, payload: order.append(payload),
        lease_ms=60_000,
        batch_size=3,
        polling_interval_ms=20,
        log=Events(),
    )
    try:
        with worker:
            wait_until(lambda: len(backend.archived()) == 3, description="all ran")
    finally:
        if backend.name == "postgresql":
            pool.close()
    assert order == ["first", "second", "third"]
    assert sorted(backend.archived()) == [("t", "success", 1)] * 3

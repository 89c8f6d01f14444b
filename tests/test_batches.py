"""Batch claiming under concurrency: several threads draining one queue in batches run
every job exactly once, without deadlocks (MariaDB's archive DELETE used to scan the job
table and wait on the rows other threads had claimed)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from faults import EventLog, Runs, running

from proletarian_di import create_queue_worker, enqueue_many

from backends import Backend, wait_until

JOBS = 300


def archived_successes(backend: Backend) -> int:
    """How many jobs the archive holds as succeeded."""
    rows = backend.query(
        f"SELECT COUNT(*) FROM {backend.archived_job_table} WHERE status = 'success'"
    )
    return int(rows[0][0])


@pytest.mark.parametrize(
    ("threads", "batch_size"),
    [(1, 20), (2, 5), (4, 5), (4, 13), (8, 1), (8, 20)],
)
def test_threads_drain_batches_running_each_job_once(
    backend: Backend, pool: Any, threads: int, batch_size: int
) -> None:
    """Every job runs once and is archived as success, and no poll fails, at 1 to 8 threads."""
    with pool.connection() as conn:
        enqueue_many(conn, [("batch", n) for n in range(JOBS)])
        conn.commit()
    runs, log = Runs(), EventLog()

    def handler(job_type: str, payload: int) -> None:
        """Count the run; take a moment, so other threads archive while this batch is held."""
        runs.record(payload)
        time.sleep(0.001)

    source = backend.pool(threads + 1)
    worker = create_queue_worker(
        source,
        handler,
        worker_threads=threads,
        batch_size=batch_size,
        polling_interval_ms=10,
        log=log,
    )
    try:
        with running(worker):
            wait_until(
                lambda: archived_successes(backend) == JOBS,
                timeout=15,
                description=f"{JOBS} jobs archived as success",
            )
    finally:
        source.close()
    assert log.named("polling_error") == []
    assert runs.duplicates() == {}
    assert sorted(runs.counts) == list(range(JOBS))
    assert backend.jobs() == []

"""The admin API and CLI on lease mode: a job under a live lease is "running" (listed, got,
counted, never cancelled, its worker never held up); an expired lease is "retrying"."""

from __future__ import annotations

import contextlib
import json
import threading
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from cli_fixtures.cli_db import TABLES, CliDB
from test_cli import run

from proletarian_di import QueueWorker, create_queue_worker
from proletarian_di.admin import cancel_jobs, get_job, list_jobs, queue_stats

from backends import (
    Backend,
    archive_by_id,
    committed,
    connection,
    enqueue_committed,
    wait_until,
)

WAITING_STATES = ("queued", "scheduled", "retrying")


def hold(backend: Backend, conn: Any) -> None:
    """Open a READ COMMITTED transaction on `conn` that fails after 3 s rather than hang on a
    row lock (at REPEATABLE READ InnoDB keeps the locks of every row a probe scanned)."""
    if backend.name == "mysql":
        conn.cursor().execute("SET SESSION innodb_lock_wait_timeout = 3")
        conn.cursor().execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        conn.begin()
    else:
        conn.execute("SET lock_timeout = '3s'")


def set_lease(
    backend: Backend, job_id: uuid.UUID, token: str, ends: datetime, table: str | None = None
) -> None:
    """Put a waiting job under lease `token` until `ends`, its attempt counted, as a lease
    claim does (with no worker behind it)."""
    key: Any = job_id
    if backend.name == "mysql":
        key, ends = job_id.bytes, ends.astimezone(timezone.utc).replace(tzinfo=None)
    backend.execute(
        f"UPDATE {table or backend.job_table} SET attempts = attempts + 1, leased_by = %s, "
        "process_at = %s WHERE job_id = %s",
        (token, ends, key),
    )


class Blocked:
    """A handler that blocks until released, and says when it started."""

    def __init__(self) -> None:
        self.started, self.release = threading.Event(), threading.Event()

    def __call__(self, job_type: str, payload: Any) -> None:
        self.started.set()
        self.release.wait(60)


@contextlib.contextmanager
def lease_worker(pool: Any, handler: Blocked, queue: str, **options: Any) -> Iterator[QueueWorker]:
    """A started lease-mode worker of `queue`; released and stopped when the block ends."""
    worker = create_queue_worker(
        pool, handler, queue=queue, lease_ms=5000, polling_interval_ms=20, **options
    )
    worker.start()
    try:
        yield worker
    finally:
        handler.release.set()
        worker.stop()


def test_a_leased_job_is_running_and_its_worker_is_never_held_up(
    backend: Backend, pool: Any
) -> None:
    handler = Blocked()
    [leased] = enqueue_committed(backend, ("slow", None), queue="lease")
    with lease_worker(pool, handler, "lease"):
        assert handler.started.wait(10)
        [later] = enqueue_committed(
            backend, ("later", None), queue="lease", process_in=timedelta(hours=1)
        )
        [waiting] = enqueue_committed(backend, ("waiting", None), queue="other")
        [spare] = enqueue_committed(backend, ("slow", None), queue="spare")

        # Cancelling passes the leased job over, by id or by filter, and does not count it.
        assert committed(backend, cancel_jobs, [leased]) == 0
        assert committed(backend, cancel_jobs, job_type="slow") == 1
        assert archive_by_id(backend) == {spare: ("cancelled", 0)}

        with connection(backend) as conn:
            hold(backend, conn)
            assert [job.job_id for job in list_jobs(conn, state="running")] == [leased]
            states = {job.job_id: job.state for job in list_jobs(conn)}
            assert states == {
                leased: "running",
                later: "scheduled",
                waiting: "queued",
                spare: "cancelled",
            }
            for state in WAITING_STATES:
                assert leased not in {job.job_id for job in list_jobs(conn, state=state)}
            assert [job.job_id for job in list_jobs(conn, state="scheduled")] == [later]
            job = get_job(conn, leased)
            assert job is not None and job.state == "running"
            assert job.attempts == 0, "finished attempts, as for a row-locked running job"
            assert job.process_at > datetime.now(timezone.utc)  # when the lease runs out

            stats = {row.queue: row for row in queue_stats(conn)}
            lease, other = stats["lease"], stats["other"]
            assert (lease.due, lease.scheduled, lease.running) == (1, 1, 1)
            assert lease.oldest_due is None  # the leased job's process_at is its lease's end
            assert (other.due, other.scheduled, other.running) == (1, 0, 0)

            # With the reads' transaction still open, the worker renews and settles its lease.
            handler.release.set()
            wait_until(lambda: leased in archive_by_id(backend), 20, description="slow done")
    assert archive_by_id(backend)[leased] == ("success", 1)


def test_an_expired_lease_is_retrying_and_a_live_one_running(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("proletarian_di.admin.jobs._SCAN_BATCH", 1)
    expired, live, queued = enqueue_committed(
        backend, ("expired", None), ("live", None), ("queued", None), queue="q"
    )
    now = datetime.now(timezone.utc)
    set_lease(backend, expired, "gone-host:1:dead", now - timedelta(minutes=1))
    set_lease(backend, live, "some-host:2:alive", now + timedelta(hours=1))
    with connection(backend) as conn:
        states = {job.job_id: job.state for job in list_jobs(conn)}
        assert states == {expired: "retrying", live: "running", queued: "queued"}
        assert [job.job_id for job in list_jobs(conn, state="running", limit=1)] == [live]
        assert [job.job_id for job in list_jobs(conn, state="retrying", limit=1)] == [expired]
        assert [job.job_id for job in list_jobs(conn, state="queued", limit=1)] == [queued]
        assert list_jobs(conn, state="scheduled") == []
        job = get_job(conn, expired)
        assert job is not None and (job.state, job.attempts) == ("retrying", 1)

        [stats] = queue_stats(conn)
        assert (stats.due, stats.scheduled, stats.running) == (3, 0, 1)
        assert stats.oldest_due is not None and stats.oldest_due >= timedelta(seconds=55)
        conn.rollback()

        assert cancel_jobs(conn, [expired, live, queued]) == 2
        conn.commit()
    assert archive_by_id(backend) == {expired: ("cancelled", 1), queued: ("cancelled", 0)}
    assert [row[0] for row in backend.jobs()] == ["live"]


def test_cli_lists_shows_counts_and_never_cancels_a_leased_job(backend: Backend, pool: Any) -> None:
    db = CliDB(backend)
    handler = Blocked()
    [leased] = db.enqueue(("slow", 1), queue="a")
    with lease_worker(pool, handler, "a", **TABLES):
        assert handler.started.wait(10)
        listed = run("jobs", "list", "--json", "-d", db.url)
        running = run("jobs", "list", "--json", "--state", "running", "-d", db.url)
        shown = run("jobs", "show", str(leased), "-d", db.url, env={"COLUMNS": "200"})
        table = run("jobs", "list", "-d", db.url, env={"COLUMNS": "80"})
        stats = run("stats", "--json", "-d", db.url)
        cancelled = run("jobs", "cancel", str(leased), "-d", db.url)
        for result in (listed, running, shown, table, stats, cancelled):
            assert result.exit_code == 0, result.output
        assert [(row["job_id"], row["state"]) for row in json.loads(listed.stdout)] == [
            (str(leased), "running")
        ]
        assert [row["job_id"] for row in json.loads(running.stdout)] == [str(leased)]
        assert any(line.split() == ["state", "running"] for line in shown.stdout.splitlines())
        assert str(leased) in table.stdout and "running" in table.stdout
        [row] = json.loads(stats.stdout)
        assert (row["queue"], row["due"], row["scheduled"], row["running"]) == ("a", 1, 0, 1)
        assert "cancelled 0 waiting jobs " in cancelled.stdout
        assert db.jobs() == [("slow", 1, "a")]  # the row counts the running attempt
        handler.release.set()
        wait_until(lambda: db.archived(), 20, description="slow done")
    assert db.archived() == [("slow", "success", 1)]

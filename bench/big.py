"""The big scenario: the queue at ten million archived and a million waiting jobs.

It loads the benchmark's tables as `--scenario dashboard` does (the waiting jobs over four
queues, the archive over the last 30 days, one in ten failed), then measures, on each
database:

- the claim: 2,000 no-op jobs of a queue of their own drained by a 4-thread worker beside
  the million waiting ones, in jobs/s and client / server CPU per job, against the same
  drain on empty tables;
- `admin.queue_stats` and `admin.overview`, what `proletarian-di stats` and the dashboard's
  overview read (median and worst of 5);
- `admin.prune_archive` with 15 days kept of succeeded jobs and 30 of failed ones, a
  batch of 500 per transaction: how many it deleted, in how long, and its slowest batch
  (the longest any row stays locked);
- the claim again, after the prune.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from rich.console import Console
from rich.table import Table

from proletarian_di import admin, enqueue_many

from . import dashboard
from .cpu import Figure, metered
from .db import JOB_TABLE, TABLES, Database
from .workers import make_worker

console = Console(highlight=False)
DRAIN_JOBS, THREADS, REPEATS = 2_000, 4, 5
QUEUE = "big-drain"
ADMIN_TABLES = admin.Tables(TABLES["job_table"], TABLES["archived_job_table"])


def drain_beside(db: Database) -> Figure:
    """DRAIN_JOBS jobs of a queue of their own, enqueued now, drained beside the rest."""
    with contextlib.closing(db.connect()) as conn:
        enqueue_many(
            conn, [("noop", {"n": n}) for n in range(DRAIN_JOBS)], queue=QUEUE, job_table=JOB_TABLE
        )
        conn.commit()
    worker = make_worker("ours", db, THREADS, 0.01, queue=QUEUE)
    figure = Figure(0.0, DRAIN_JOBS)
    try:
        with metered(db, figure):
            started = time.perf_counter()
            worker.start()
            while worker.done() < DRAIN_JOBS:
                time.sleep(0.01)
            figure.rate = DRAIN_JOBS / (time.perf_counter() - started)
    finally:
        worker.stop()
    return figure


def reading(db: Database, read: Callable[..., Any]) -> Callable[[], Any]:
    conn = db.connect()

    def run() -> None:
        read(conn, tables=ADMIN_TABLES)
        conn.rollback()

    return run


def prune(db: Database) -> tuple[int, float, float, int]:
    """(jobs deleted, seconds, slowest batch in ms, batches)."""
    deleted, batches, slowest = 0, 0, 0.0
    began = time.perf_counter()
    with contextlib.closing(db.connect()) as conn:
        last = time.perf_counter()
        for step in admin.prune_archive(
            conn,
            keep_succeeded=timedelta(days=15),
            keep_failed=timedelta(days=30),
            tables=ADMIN_TABLES,
        ):
            conn.commit()
            now = time.perf_counter()
            slowest = max(slowest, (now - last) * 1000)
            last = now
            deleted += step.jobs
            batches += 1
    return deleted, time.perf_counter() - began, slowest, batches


def _cpu(figure: Figure) -> str:
    client, server = figure.per_job(figure.client), figure.per_job(figure.server)
    return f"{figure.rate:,.0f} jobs/s, {client or 0:,.0f} / {server or 0:,.0f} µs"


def main(dbs: list[Database], host: str, waiting: int, archived: int) -> int:
    table = Table(title=f"{waiting:,} waiting and {archived:,} archived jobs")
    for column in ("database", "what", "figure"):
        table.add_column(column)
    for db in dbs:
        db.recreate()
        table.add_row(
            db.label, "claim, empty tables (client / server CPU per job)", _cpu(drain_beside(db))
        )
        console.print(f"[bold]{db.label}[/]: loading…")
        console.print(f"loaded in {dashboard.fill(db, waiting, archived):.0f} s")
        table.add_row(db.label, "claim beside them", _cpu(drain_beside(db)))
        for what, read in (
            ("admin.queue_stats (stats)", admin.queue_stats),
            ("admin.overview (the dashboard)", admin.overview),
        ):
            median, worst = dashboard.timed(reading(db, read), REPEATS)
            table.add_row(db.label, what, f"median {median:,.1f} ms, worst {worst:,.1f} ms")
        deleted, seconds, slowest, batches = prune(db)
        table.add_row(
            db.label,
            "prune_archive (15 days succeeded, 30 failed)",
            f"{deleted:,} deleted in {batches:,} batches, {seconds:,.1f} s, slowest batch "
            f"{slowest:,.0f} ms",
        )
        table.add_row(db.label, "claim after the prune", _cpu(drain_beside(db)))
        db.recreate()
    console.print(table)
    console.print(f"machine: {host}")
    return 0

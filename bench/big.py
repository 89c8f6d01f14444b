"""The big scenario: the queue at ten million archived and a million waiting jobs.

It loads the benchmark's tables as `--scenario dashboard` does (the waiting jobs over four
queues, the archive over the last 30 days, one in ten failed), then measures, on each
database:

- the claim: 2,000 no-op jobs of a queue of their own drained by a 4-thread worker beside
  the million waiting ones, in jobs/s and client / server CPU per job, against the same
  drain on empty tables;
- the workers' beats summing up the last day's hours into the outcomes table (as workers
  running over the day would have), hour by hour;
- `admin.queue_stats` and `admin.overview`, what `proletarian-di stats` and the dashboard's
  overview read, and the dashboard's pages (`PAGES`) through its app (median and worst of 5);
- `admin.prune_archive` with 15 days kept of succeeded jobs and 30 of failed ones, a
  batch of 500 per transaction: how many it deleted, in how long, and its slowest batch
  (the longest any row stays locked);
- the claim again, after the prune.

With `--partitioned` (PostgreSQL), the archive is first made a partitioned table: by
outcome (LIST on status), each outcome by day (RANGE on finished_at), so that retention per
outcome can drop whole days (`DROP TABLE` of a partition) and prune by batches only the
day at each cutoff. Its primary key must then hold the partition keys, `(job_id, status,
finished_at)`; a job is looked up by id in every partition's index (`admin.get_job` is
timed too).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
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
DAYS_BACK, DAYS_AHEAD = 32, 3
"""The days the partitioned archive has partitions for, around today (then a default one)."""
KEEP_SUCCEEDED, KEEP_FAILED = timedelta(days=15), timedelta(days=30)
QUEUE = "big-drain"
PAGES = (
    "/",
    "/queue?name=queue1",
    "/jobs",
    "/jobs?queue=queue1",
    "/jobs?state=queued",
    "/failed",
    "/failed/errors",
    "/workflows",
    "/search?q=type1&by=job_type",
    "/timings",
    "/timings?queue=queue1&job_type=type1",
    "/schedules",
    "/processes",
    "/health",
)
"""The dashboard's pages timed (in-process, through its ASGI app): every page that reads
the tables, with the job lists by queue and by state, a queue's page and the timing charts
of one queue and job type."""
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


def sum_up_day(db: Database) -> tuple[int, float, float]:
    """What running workers' beats would have done over the last day: every hour of it
    summed up into the outcomes table, one call per hour (hours, seconds, slowest in ms)."""
    try:
        from proletarian_di._store.dialects import dialect_of
        from proletarian_di._store.outcomes import sum_up
    except ImportError:  # a revision before the layout (--compare), or one with no sums
        from proletarian_di._outcomes import sum_up  # type: ignore[no-redef]

        def dialect_of(conn: Any, tables: Any) -> Any:  # type: ignore[misc]
            return tables.dialect(conn)

    hours, slowest = 0, 0.0
    began = time.perf_counter()
    with contextlib.closing(db.connect()) as conn:
        dialect = dialect_of(conn, ADMIN_TABLES)
        while True:
            last = time.perf_counter()
            summed = sum_up(conn, dialect, datetime.now(timezone.utc))
            conn.commit()
            if summed is None:
                break
            hours += 1
            slowest = max(slowest, (time.perf_counter() - last) * 1000)
    return hours, time.perf_counter() - began, slowest


def prune(db: Database) -> tuple[int, float, float, int]:
    """(jobs deleted, seconds, slowest batch in ms, batches)."""
    deleted, batches, slowest = 0, 0, 0.0
    began = time.perf_counter()
    with contextlib.closing(db.connect()) as conn:
        last = time.perf_counter()
        for step in admin.prune_archive(
            conn,
            keep_succeeded=KEEP_SUCCEEDED,
            keep_failed=KEEP_FAILED,
            tables=ADMIN_TABLES,
        ):
            conn.commit()
            now = time.perf_counter()
            slowest = max(slowest, (now - last) * 1000)
            last = now
            deleted += step.jobs
            batches += 1
    return deleted, time.perf_counter() - began, slowest, batches


def _day(offset: int) -> datetime:
    today = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    return today + timedelta(days=offset)


def _partition(status: str, offset: int) -> str:
    return f"{TABLES['archived_job_table']}_{status}_{_day(offset):%Y%m%d}"


def partition_archive(db: Database) -> None:
    """PostgreSQL: the archive made anew as a table partitioned by outcome, then by day."""
    archive = TABLES["archived_job_table"]
    name = archive.rpartition(".")[2]
    statements = [
        f"ALTER TABLE {archive} RENAME TO {name}_plain",
        f"CREATE TABLE {archive} (LIKE {archive}_plain INCLUDING DEFAULTS) "
        "PARTITION BY LIST (status)",
        f"DROP TABLE {archive}_plain",
        f"ALTER TABLE {archive} ADD PRIMARY KEY (job_id, status, finished_at)",
        f"CREATE INDEX {name}_finished_at ON {archive} (finished_at, queue, status)",
    ]
    for status in ("success", "failure", "cancelled"):
        parent = f"{archive}_{status}"
        statements += [
            f"CREATE TABLE {parent} PARTITION OF {archive} FOR VALUES IN ('{status}') "
            "PARTITION BY RANGE (finished_at)",
            f"CREATE TABLE {parent}_default PARTITION OF {parent} DEFAULT",
        ]
        statements += [
            f"CREATE TABLE {_partition(status, n)} PARTITION OF {parent} "
            f"FOR VALUES FROM ('{_day(n).isoformat()}') TO ('{_day(n + 1).isoformat()}')"
            for n in range(-DAYS_BACK, DAYS_AHEAD)
        ]
    statements.append(f"CREATE TABLE {archive}_other PARTITION OF {archive} DEFAULT")
    with contextlib.closing(db.connect()) as conn:
        for statement in statements:
            conn.execute(statement)
        conn.commit()


def drop_partitions(db: Database) -> tuple[int, float, int]:
    """Retention by dropping each outcome's whole days past its cutoff (and then pruning the
    day at the cutoff in batches): (jobs dropped, seconds, partitions dropped)."""
    now = datetime.now(timezone.utc)
    dropped, tables = 0, 0
    began = time.perf_counter()
    with contextlib.closing(db.connect()) as conn:
        for status, keep in (("success", KEEP_SUCCEEDED), ("failure", KEEP_FAILED)):
            for n in range(-DAYS_BACK, DAYS_AHEAD):
                if _day(n + 1) > now - keep:
                    break
                partition = _partition(status, n)
                dropped += conn.execute(f"SELECT count(*) FROM {partition}").fetchone()[0]
                conn.execute(f"DROP TABLE {partition}")
                conn.commit()
                tables += 1
    return dropped, time.perf_counter() - began, tables


def lookup(db: Database) -> Callable[[], Any]:
    """`admin.get_job` of an archived job from the middle of the archive, by id."""
    conn = db.connect()
    [(job_id,)] = conn.execute(
        f"SELECT job_id FROM {TABLES['archived_job_table']} WHERE finished_at < now() - "
        "interval '7 days' LIMIT 1"
    ).fetchall()

    def run() -> None:
        assert admin.get_job(conn, job_id, tables=ADMIN_TABLES) is not None
        conn.rollback()

    return run


def _cpu(figure: Figure) -> str:
    client, server = figure.per_job(figure.client), figure.per_job(figure.server)
    return f"{figure.rate:,.0f} jobs/s, {client or 0:,.0f} / {server or 0:,.0f} µs"


def main(
    dbs: list[Database], host: str, waiting: int, archived: int, partitioned: bool = False
) -> int:
    shape = ", the archive partitioned by outcome and day" if partitioned else ""
    table = Table(title=f"{waiting:,} waiting and {archived:,} archived jobs{shape}")
    for column in ("database", "what", "figure"):
        table.add_column(column)
    for db in dbs:
        if partitioned and db.name == "mysql":
            console.print("MySQL/MariaDB: --partitioned is PostgreSQL's; skipped")
            continue
        prepare = partition_archive if partitioned else None
        db.recreate()
        if prepare is not None:
            prepare(db)
        table.add_row(
            db.label, "claim, empty tables (client / server CPU per job)", _cpu(drain_beside(db))
        )
        console.print(f"[bold]{db.label}[/]: loading…")
        console.print(f"loaded in {dashboard.fill(db, waiting, archived, prepare):.0f} s")
        table.add_row(db.label, "claim beside them", _cpu(drain_beside(db)))
        hours, seconds, slowest = sum_up_day(db)
        table.add_row(
            db.label,
            "workers sum up the last day's hours (one per beat)",
            f"{hours} hours in {seconds * 1000:,.0f} ms, the slowest {slowest:,.0f} ms",
        )
        reads: list[tuple[str, Callable[[], Any]]] = [
            ("admin.queue_stats (stats)", reading(db, admin.queue_stats)),
            ("admin.overview (the dashboard)", reading(db, admin.overview)),
        ]
        if db.name != "mysql":
            reads.append(("admin.get_job of an archived job", lookup(db)))
        for path in PAGES:
            view = dashboard.page(db, path)
            if view is not None:
                reads.append((f"dashboard GET {path}", view))
        for what, read in reads:
            median, worst = dashboard.timed(read, REPEATS)
            table.add_row(db.label, what, f"median {median:,.1f} ms, worst {worst:,.1f} ms")
        if partitioned:
            jobs, seconds, partitions = drop_partitions(db)
            table.add_row(
                db.label,
                "whole days past the retention: DROP TABLE of each partition",
                f"{jobs:,} jobs in {partitions} partitions, {seconds:,.1f} s",
            )
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

"""The dashboard scenario: how long the overview takes on a large queue.

It fills the benchmark's tables with 100,000 waiting jobs (four queues) and 1,000,000
archived ones (finished over the last 30 days, one in ten failed, each with its start and
worker), then times what the dashboard's overview page runs on a first load
(`admin.overview`, reading the whole last day of the archive) and the page itself as it
refreshes, served by the dashboard app in-process (it keeps the hours that are over, and
reads the archive's current hour); and the timings page's queries (`admin.timings`, the
day's wait and run percentiles per queue and job type, ranked in SQL), and the page as it
refreshes (it keeps its read for a minute). It times them
again without the indexes that make it quick (on MySQL, the claim index's attempts and
leased_by; then the archive's `finished_at` index).
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from proletarian_di import admin

from .db import ARCHIVED_JOB_TABLE, JOB_TABLE, Database

console = Console(highlight=False)
WAITING, ARCHIVED, QUEUES = 100_000, 1_000_000, 4
REPEATS = 20
TABLES = admin.Tables(JOB_TABLE, ARCHIVED_JOB_TABLE)
FINISHED_INDEX = f"{ARCHIVED_JOB_TABLE.rpartition('.')[2]}_finished_at"
CLAIM_INDEX = f"{JOB_TABLE.rpartition('.')[2]}_queue_priority_process_at"

_POSTGRES_FILL = (
    f"INSERT INTO {JOB_TABLE} (job_id, queue, job_type, payload, attempts, enqueued_at, "
    "process_at) SELECT gen_random_uuid(), 'queue' || (n % {queues}), 'type' || (n % 10), "
    "'{{}}', n % 3 / 2, now() - interval '1 hour', now() - (n % 7) * interval '1 minute' "
    "+ (n % 5 / 4) * interval '1 day' FROM generate_series(1, {waiting}) AS n",
    f"INSERT INTO {ARCHIVED_JOB_TABLE} (job_id, queue, job_type, payload, attempts, "
    "enqueued_at, process_at, status, finished_at, started_at, worker) SELECT "
    "gen_random_uuid(), 'queue' || (n % {queues}), 'type' || (n % 10), '{{}}', 1, "
    "at - interval '5 seconds', at - interval '1 second' - (n % 60) * interval '100 ms', "
    "CASE WHEN n % 10 = 0 THEN 'failure' ELSE 'success' END, at, "
    "at - (n % 20) * interval '50 ms', 'bench:1 w-' || (n % 8) FROM (SELECT n, "
    "now() - n * interval '30 days' / {archived} AS at "
    "FROM generate_series(1, {archived}) AS n) AS s",
)
_MYSQL_SEQUENCE = (
    "WITH RECURSIVE seq (n) AS (SELECT {first} UNION ALL SELECT n + 1 FROM seq WHERE n < {last}) "
)
_MYSQL_CHUNK = 1_000_000
"""Rows a MySQL fill statement makes at most: a longer recursive sequence spills to a
temporary table on disk (MariaDB 10.11 then failed on ten million)."""
_MYSQL_FILL = (
    f"INSERT INTO {JOB_TABLE} (job_id, queue, job_type, payload, attempts, enqueued_at, "
    "process_at) " + _MYSQL_SEQUENCE + "SELECT "
    "UNHEX(REPLACE(UUID(), '-', '')), CONCAT('queue', n % {queues}), CONCAT('type', n % 10), "
    "'{{}}', (n % 3) DIV 2, UTC_TIMESTAMP(6) - INTERVAL 1 HOUR, UTC_TIMESTAMP(6) - INTERVAL "
    "(n % 7) MINUTE + INTERVAL ((n % 5) DIV 4) DAY FROM seq",
    f"INSERT INTO {ARCHIVED_JOB_TABLE} (job_id, queue, job_type, payload, attempts, "
    "enqueued_at, process_at, status, finished_at, started_at, worker) "
    + _MYSQL_SEQUENCE
    + "SELECT UNHEX(REPLACE(UUID(), '-', '')), CONCAT('queue', n % {queues}), "
    "CONCAT('type', n % 10), '{{}}', 1, at - INTERVAL 5 SECOND, "
    "at - INTERVAL (1000000 + (n % 60) * 100000) MICROSECOND, "
    "IF(n % 10 = 0, 'failure', 'success'), at, at - INTERVAL ((n % 20) * 50000) MICROSECOND, "
    "CONCAT('bench:1 w-', n % 8) "
    "FROM (SELECT n, UTC_TIMESTAMP(6) - INTERVAL n * (2592000000000 DIV {archived}) MICROSECOND "
    "AS at FROM seq) AS s",
)


def fill(
    db: Database,
    waiting: int = WAITING,
    archived: int = ARCHIVED,
    prepare: Callable[[Database], Any] | None = None,
) -> float:
    """Load the tables with `waiting` jobs and `archived` ones, made anew (and then given to
    `prepare`); the seconds it took."""
    began = time.perf_counter()
    db.recreate()
    if prepare is not None:
        prepare(db)
    mysql = db.name == "mysql"
    sizes = {"waiting": waiting, "archived": archived, "queues": QUEUES}
    with contextlib.closing(db.connect()) as conn:
        cursor = conn.cursor()
        if mysql:
            for setting in ("cte_max_recursion_depth", "max_recursive_iterations"):
                with contextlib.suppress(Exception):
                    cursor.execute(f"SET SESSION {setting} = {_MYSQL_CHUNK + 1}")
            for statement, rows in zip(_MYSQL_FILL, (waiting, archived), strict=True):
                for first in range(1, rows + 1, _MYSQL_CHUNK):
                    last = min(rows, first + _MYSQL_CHUNK - 1)
                    cursor.execute(statement.format(first=first, last=last, **sizes))
                    conn.commit()
        else:
            for statement in _POSTGRES_FILL:
                cursor.execute(statement.format(**sizes))
        conn.commit()
        for table in (JOB_TABLE, ARCHIVED_JOB_TABLE):
            cursor.execute(f"ANALYZE TABLE {table}" if mysql else f"ANALYZE {table}")
            if mysql:
                cursor.fetchall()
        conn.commit()
    return time.perf_counter() - began


def timed(action: Callable[[], Any], repeats: int = REPEATS) -> tuple[float, float]:
    """(median, worst) milliseconds of `repeats` runs, after one to warm the caches."""
    action()
    runs = []
    for _ in range(repeats):
        began = time.perf_counter()
        action()
        runs.append((time.perf_counter() - began) * 1000)
    return statistics.median(runs), max(runs)


def queries(db: Database) -> Callable[[], Any]:
    """What the overview page asks the database on its first load, on one connection."""
    conn = db.connect()

    def run() -> None:
        admin.overview(conn, tables=TABLES)
        conn.rollback()

    return run


def timings_queries(db: Database) -> Callable[[], Any]:
    """What the timings page asks the database: the day's timings, whole and per hour."""
    conn = db.connect()

    def run() -> None:
        admin.timings(conn, per_hour=False, tables=TABLES)
        admin.timings(conn, tables=TABLES)
        conn.rollback()

    return run


def page(db: Database, path: str = "/") -> Callable[[], Any] | None:
    """GET of a dashboard page (the overview), through the app in-process (None without it)."""
    try:
        import httpx

        from proletarian_di.contrib.dashboard import dashboard
    except ImportError:
        return None
    app = dashboard(db.pool(2), tables=TABLES)
    transport = httpx.ASGITransport(app=app)

    def run() -> None:
        import asyncio

        async def get() -> None:
            async with httpx.AsyncClient(transport=transport, base_url="http://dashboard") as c:
                response = await c.get(path)
                response.raise_for_status()

        asyncio.run(get())

    return run


def drop_finished_index(db: Database) -> bool:
    """Drop the archive's finished_at index; False if there is none."""
    sql = (
        f"ALTER TABLE {ARCHIVED_JOB_TABLE} DROP INDEX {FINISHED_INDEX}"
        if db.name == "mysql"
        else f"DROP INDEX {ARCHIVED_JOB_TABLE.rpartition('.')[0]}.{FINISHED_INDEX}"
    )
    try:
        db.execute(sql)
    except Exception:
        return False
    return True


def narrow_claim_index(db: Database) -> bool:
    """MySQL: the claim index without the columns the overview counts by (as before schema
    step 9); False elsewhere."""
    if db.name != "mysql":
        return False
    db.execute(
        f"ALTER TABLE {JOB_TABLE} DROP INDEX {CLAIM_INDEX}, "
        f"ADD INDEX {CLAIM_INDEX} (queue, priority_rank, process_at)"
    )
    return True


WITHOUT = (
    ("without the claim index's attempts, leased_by", narrow_claim_index),
    (f"and without {FINISHED_INDEX}", drop_finished_index),
)
"""What the overview then runs without, one index after another, to show what each is for."""


def main(dbs: list[Database], host: str) -> int:
    table = Table(title=f"Dashboard overview: {WAITING:,} waiting jobs, {ARCHIVED:,} archived")
    for column in ("database", "what", "indexes", "median ms", "worst ms"):
        table.add_column(column, justify="right" if "ms" in column else "left")
    for db in dbs:
        console.print(f"[bold]{db.label}[/]: loading…")
        console.print(f"loaded in {fill(db):.0f} s")
        checks = [
            ("admin.overview (a first load)", queries(db)),
            ("overview page (GET /), refreshing", page(db)),
            ("admin.timings (the day, whole and per hour)", timings_queries(db)),
            ("timings page (GET /timings), its read kept a minute", page(db, "/timings")),
        ]
        for label, take_away in (("all", None), *WITHOUT):
            if take_away is not None and not take_away(db):
                continue
            for what, action in checks:
                if action is not None:
                    median, worst = timed(action)
                    table.add_row(db.label, what, label, f"{median:.1f}", f"{worst:.1f}")
        db.recreate()
    console.print(table)
    console.print(f"machine: {host}")
    return 0

"""The bulk scenario: how long a confirmed bulk action on many failed jobs takes.

It fills the benchmark's archive with `failed` failures among nine times as many successes,
all finished over the last day (an outage's failures, among the day's work; ids ordered by
time, as the queue's own are), then runs what the dashboard runs once the user confirms a
bulk retry or discard of every failure: `admin.in_batches` of `admin.BATCH_SIZE` jobs, a
commit after each. It prints the seconds each took and the jobs moved, checked against the
tables.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from rich.console import Console
from rich.table import Table

from proletarian_di import admin

from .db import ARCHIVED_JOB_TABLE, JOB_TABLE, Database

console = Console(highlight=False)
TABLES = admin.Tables(JOB_TABLE, ARCHIVED_JOB_TABLE)
SUCCEEDED_PER_FAILED = 9
ERROR = "RuntimeError: the outage"
"""The failures' error, the group the actions take."""

_COLUMNS = (
    f"INSERT INTO {ARCHIVED_JOB_TABLE} (job_id, queue, job_type, payload, attempts, "
    "enqueued_at, process_at, status, finished_at, last_error) "
)
_POSTGRES_FILL = (
    _COLUMNS + "SELECT (lpad(to_hex((extract(epoch FROM at) * 1000)::bigint), 12, '0') || "
    "substr(md5(n::text), 1, 20))::uuid, 'queue' || (n % 4), 'type' || (n % 10), '{{}}', 1, "
    "at - interval '5 seconds', at - interval '1 second', "
    "CASE WHEN n % {every} = 0 THEN 'failure' ELSE 'success' END, at, "
    "CASE WHEN n % {every} = 0 THEN 'RuntimeError: the outage' || chr(10) || 'Traceback' END "
    "FROM (SELECT n, now() - n * interval '1 day' / {rows} AS at "
    "FROM generate_series(1, {rows}) AS n) AS s"
)
_MYSQL_FILL = (
    _COLUMNS + "WITH RECURSIVE seq (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq "
    "WHERE n < {rows}) SELECT UNHEX(CONCAT(LPAD(HEX(FLOOR(UNIX_TIMESTAMP(at) * 1000)), 12, "
    "'0'), SUBSTR(MD5(n), 1, 20))), CONCAT('queue', n % 4), CONCAT('type', n % 10), '{{}}', "
    "1, at - INTERVAL 5 SECOND, at - INTERVAL 1 SECOND, "
    "IF(n % {every} = 0, 'failure', 'success'), at, "
    "IF(n % {every} = 0, CONCAT('RuntimeError: the outage', CHAR(10), 'Traceback'), NULL) "
    "FROM (SELECT n, UTC_TIMESTAMP(6) - INTERVAL n * (86400000000 DIV {rows}) MICROSECOND "
    "AS at FROM seq) AS s"
)


def fill(db: Database, failed: int) -> None:
    """The archive anew: `failed` failures, each among `SUCCEEDED_PER_FAILED` successes."""
    db.recreate()
    every = SUCCEEDED_PER_FAILED + 1
    sizes = {"rows": failed * every, "every": every}
    with contextlib.closing(db.connect()) as conn:
        cursor = conn.cursor()
        if db.name == "mysql":
            for setting in ("cte_max_recursion_depth", "max_recursive_iterations"):
                with contextlib.suppress(Exception):
                    cursor.execute(f"SET SESSION {setting} = {sizes['rows'] + 1}")
            cursor.execute(_MYSQL_FILL.format(**sizes))
            conn.commit()
            cursor.execute(f"ANALYZE TABLE {ARCHIVED_JOB_TABLE}")
            cursor.fetchall()
        else:
            cursor.execute(_POSTGRES_FILL.format(**sizes))
            conn.commit()
            cursor.execute(f"ANALYZE {ARCHIVED_JOB_TABLE}")
        conn.commit()


def confirmed(action: Callable[..., int]) -> Callable[[Any], int]:
    """What the dashboard runs on a confirmed bulk `action` of a group of failures (the
    failures page's: its error's headline), here every failure."""

    def run(conn: Any) -> int:
        until = datetime.now(timezone.utc)
        done = 0
        for moved in admin.in_batches(conn, action, tables=TABLES, until=until, error=ERROR):
            conn.commit()
            done += moved
        return done

    return run


def _count(db: Database, table: str, where: str = "") -> int:
    return int(db.query(f"SELECT COUNT(*) FROM {table}{where}")[0][0])


def main(dbs: list[Database], host: str, failed: int) -> int:
    every = SUCCEEDED_PER_FAILED + 1
    title = f"Bulk actions: {failed:,} failed jobs among {failed * every:,} archived"
    table = Table(title=title)
    for column in ("database", "action", "jobs", "seconds", "jobs/s"):
        table.add_column(column, justify="left" if column in ("database", "action") else "right")
    failures = " WHERE status = 'failure'"
    status = 0
    for db in dbs:
        for name, action, moved_to in (
            ("retry (in_batches, confirmed)", admin.retry_jobs, JOB_TABLE),
            ("discard (in_batches, confirmed)", admin.discard_failed, None),
        ):
            console.print(f"[bold]{db.label}[/]: loading…")
            fill(db, failed)
            run = confirmed(action)
            with contextlib.closing(db.connect()) as conn:
                began = time.perf_counter()
                done = run(conn)
                seconds = time.perf_counter() - began
            left = _count(db, ARCHIVED_JOB_TABLE, failures)
            arrived = _count(db, moved_to) if moved_to else done
            if done != failed or left or arrived != failed:
                console.print(
                    f"[red]{name}: moved {done}, {left} failures left, {arrived} queued[/]"
                )
                status = 1
            table.add_row(db.label, name, f"{done:,}", f"{seconds:.1f}", f"{done / seconds:,.0f}")
        db.recreate()
    console.print(table)
    console.print(f"machine: {host}")
    return status

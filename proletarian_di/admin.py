"""Operator queries on any connection of either database: queue statistics, retrying failed
jobs, pruning the archive, schema checks.

The CLI uses them, and so can your own tools. Like `enqueue`, none of them commits:
they run in the caller's transaction, and the caller commits (or rolls back a read).
Table names are validated identifiers and every value is a query parameter.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from ._dialects import Dialect, check_table_name, dialect_for
from ._options import DEFAULT_ARCHIVED_JOB_TABLE, DEFAULT_JOB_TABLE
from ._types import Connection
from .schema import check_schema

__all__ = [
    "DEFAULT_TABLES",
    "QueueStats",
    "Tables",
    "check",
    "missing_columns",
    "purge_archive",
    "queue_stats",
    "recent_failures",
    "retry_failed",
    "waiting",
]


@dataclasses.dataclass
class QueueStats:
    """One queue's numbers: waiting jobs from the job table, outcomes from the archive."""

    queue: str
    due: int = 0
    scheduled: int = 0
    oldest_due: timedelta | None = None
    succeeded_last_hour: int = 0
    failed_last_hour: int = 0
    succeeded: int = 0
    failed: int = 0

    def as_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        oldest = self.oldest_due
        data["oldest_due_seconds"] = None if oldest is None else round(oldest.total_seconds(), 3)
        del data["oldest_due"]
        return data


@dataclasses.dataclass(frozen=True)
class Tables:
    """The queue tables the admin functions work on (validated `schema.table` names)."""

    job_table: str = DEFAULT_JOB_TABLE
    archived_job_table: str = DEFAULT_ARCHIVED_JOB_TABLE

    def __post_init__(self) -> None:
        check_table_name(self.job_table, "job_table")
        check_table_name(self.archived_job_table, "archived_job_table")

    def dialect(self, conn: Connection) -> Dialect:
        return dialect_for(conn, self.job_table, self.archived_job_table)


DEFAULT_TABLES = Tables()


def check(
    conn: Connection,
    *,
    tables: Tables = DEFAULT_TABLES,
) -> None:
    """Raise `UnsupportedDatabase` or `SchemaError` when workers could not run here.

    The one exception to "never ends the transaction": it rolls back what it read.
    """
    check_schema(conn, tables.job_table, tables.archived_job_table)


def missing_columns(
    conn: Connection,
    *,
    tables: Tables = DEFAULT_TABLES,
) -> dict[str, list[str]]:
    """Columns a queue table lacks, per table (empty when both match)."""
    dialect = tables.dialect(conn)
    columns = dialect.columns.split(", ")
    expected = {
        tables.job_table: columns,
        tables.archived_job_table: [*columns, "status", "finished_at"],
    }
    missing: dict[str, list[str]] = {}
    for table, names in expected.items():
        present = dialect.table_columns(conn, table)
        lacking = [name for name in names if name not in present]
        if lacking:
            missing[table] = lacking
    return missing


def queue_stats(
    conn: Connection,
    *,
    now: datetime | None = None,
    tables: Tables = DEFAULT_TABLES,
) -> list[QueueStats]:
    """Per queue: due, scheduled, oldest due wait; succeeded/failed (last hour, and in all)."""
    dialect = tables.dialect(conn)
    now = now or datetime.now(timezone.utc)
    t_now, t_hour = dialect.encode_time(now), dialect.encode_time(now - timedelta(hours=1))
    waiting_rows = dialect.fetchall(
        conn,
        "SELECT queue, "
        "SUM(CASE WHEN process_at <= %s THEN 1 ELSE 0 END), "
        "SUM(CASE WHEN process_at > %s THEN 1 ELSE 0 END), "
        "MIN(CASE WHEN process_at <= %s THEN process_at END) "
        f"FROM {tables.job_table} GROUP BY queue",
        (t_now, t_now, t_now),
    )
    archived_rows = dialect.fetchall(
        conn,
        "SELECT queue, "
        "SUM(CASE WHEN status = 'success' AND finished_at >= %s THEN 1 ELSE 0 END), "
        "SUM(CASE WHEN status = 'failure' AND finished_at >= %s THEN 1 ELSE 0 END), "
        "SUM(CASE WHEN status = 'success' THEN 1 ELSE 0 END), "
        "SUM(CASE WHEN status = 'failure' THEN 1 ELSE 0 END) "
        f"FROM {tables.archived_job_table} GROUP BY queue",
        (t_hour, t_hour),
    )
    by_queue: dict[str, QueueStats] = {}
    for queue, due, scheduled, oldest in waiting_rows:
        entry = by_queue.setdefault(queue, QueueStats(queue))
        entry.due, entry.scheduled = int(due or 0), int(scheduled or 0)
        if oldest is not None:
            entry.oldest_due = max(timedelta(0), now - dialect.decode_time(oldest))
    for queue, ok_hour, failed_hour, ok, failed in archived_rows:
        entry = by_queue.setdefault(queue, QueueStats(queue))
        entry.succeeded_last_hour, entry.failed_last_hour = int(ok_hour or 0), int(failed_hour or 0)
        entry.succeeded, entry.failed = int(ok or 0), int(failed or 0)
    return [by_queue[name] for name in sorted(by_queue)]


def _failure_filter(
    dialect: Dialect,
    queue: str | None,
    job_type: str | None,
    since: datetime | None,
    until: datetime | None,
) -> tuple[str, list[Any]]:
    where, params = ["status = 'failure'"], []
    for clause, value in (
        ("queue = %s", queue),
        ("job_type = %s", job_type),
        ("finished_at >= %s", since and dialect.encode_time(since)),
        ("finished_at < %s", until and dialect.encode_time(until)),
    ):
        if value is not None:
            where.append(clause)
            params.append(value)
    return " AND ".join(where), params


def retry_failed(
    conn: Connection,
    *,
    queue: str | None = None,
    job_type: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    dry_run: bool = False,
    tables: Tables = DEFAULT_TABLES,
) -> int:
    """Move failed archived jobs back into the queue, due now, with fresh attempts.

    Filters: queue, job type, and when the job failed (`since` <= finished_at < `until`).
    Returns how many jobs moved (or would move, with `dry_run`). Commit to keep them.
    """
    dialect = tables.dialect(conn)
    where, params = _failure_filter(dialect, queue, job_type, since, until)
    if dry_run:
        sql = f"SELECT COUNT(*) FROM {tables.archived_job_table} WHERE {where}"
        return int(dialect.fetchall(conn, sql, params)[0][0])
    return dialect.requeue(conn, where, params, datetime.now(timezone.utc))


def purge_archive(
    conn: Connection,
    *,
    older_than: timedelta,
    status: str | None = None,
    queue: str | None = None,
    dry_run: bool = False,
    now: datetime | None = None,
    tables: Tables = DEFAULT_TABLES,
) -> int:
    """Delete archived jobs that finished more than `older_than` ago; returns how many.

    Commit to make it stick.
    """
    dialect = tables.dialect(conn)
    now = now or datetime.now(timezone.utc)
    where, params = ["finished_at < %s"], [dialect.encode_time(now - older_than)]
    for clause, value in (("status = %s", status), ("queue = %s", queue)):
        if value is not None:
            where.append(clause)
            params.append(value)
    condition = " AND ".join(where)
    if dry_run:
        sql = f"SELECT COUNT(*) FROM {tables.archived_job_table} WHERE {condition}"
        return int(dialect.fetchall(conn, sql, params)[0][0])
    return dialect.execute_count(
        conn, f"DELETE FROM {tables.archived_job_table} WHERE {condition}", params
    )


def recent_failures(
    conn: Connection,
    limit: int = 5,
    *,
    tables: Tables = DEFAULT_TABLES,
) -> list[tuple[uuid.UUID, str, str, int, datetime]]:
    """The latest failed jobs as (job_id, queue, job_type, attempts, finished_at)."""
    dialect = tables.dialect(conn)
    rows = dialect.fetchall(
        conn,
        "SELECT job_id, queue, job_type, attempts, finished_at "
        f"FROM {tables.archived_job_table} WHERE status = 'failure' "
        "ORDER BY finished_at DESC LIMIT %s",
        (limit,),
    )
    strategy = dialect.default_id_strategy
    return [
        (strategy.decode(job_id), queue, job_type, int(attempts), dialect.decode_time(at))
        for job_id, queue, job_type, attempts, at in rows
    ]


def waiting(
    conn: Connection,
    queues: Sequence[str],
    *,
    tables: Tables = DEFAULT_TABLES,
) -> int:
    """How many jobs of these queues are still in the job table (due or not)."""
    dialect = tables.dialect(conn)
    marks = ", ".join(["%s"] * len(queues))
    sql = f"SELECT COUNT(*) FROM {tables.job_table} WHERE queue IN ({marks})"
    return int(dialect.fetchall(conn, sql, list(queues))[0][0])

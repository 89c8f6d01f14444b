"""Operator SQL for the CLI: connections from URLs, stats, retry-failed, purge, schema checks.

The queue itself never needs these statements; they live here, beside the
CLI, so the core stays small. Table names are validated identifiers and every
value is a query parameter.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from ._dialects import Dialect, check_table_name, dialect_for, dialect_name
from ._options import DEFAULT_ARCHIVED_JOB_TABLE, DEFAULT_JOB_TABLE
from ._secrets import libpq_url, malformed, mask, parse_mysql_url, postgres_problem, split_url

POSTGRES_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg")
MYSQL_SCHEMES = ("mysql", "mysql+pymysql", "mariadb")
CONNECT_TIMEOUT = 10


class DatabaseURLError(ValueError):
    """A database URL that names no supported database, or is malformed; its message is masked."""


def url_dialect(url: str) -> str:
    """'postgresql' or 'mysql' for a usable database URL, else `DatabaseURLError`.

    A malformed URL is refused here, before a driver parses it and echoes it in its errors.
    """
    parts = split_url(url)
    scheme = parts.scheme.lower() if parts else ""
    if scheme in POSTGRES_SCHEMES:
        problem = postgres_problem(libpq_url(url))
        if problem:
            raise DatabaseURLError(malformed("database URL", url, problem))
        return "postgresql"
    if scheme in MYSQL_SCHEMES:
        try:
            parse_mysql_url(url)
        except ValueError as exc:
            raise DatabaseURLError(str(exc)) from None
        return "mysql"
    raise DatabaseURLError(
        f"unsupported database URL {mask(url)!r}: use postgresql://user:password@host/db "
        "or mysql://user:password@host/db"
    )


def connect(url: str, timeout: int = CONNECT_TIMEOUT) -> Any:
    """A new connection (psycopg 3 or PyMySQL) for a database URL, not in autocommit."""
    if url_dialect(url) == "postgresql":
        import psycopg

        return psycopg.connect(libpq_url(url), connect_timeout=timeout)
    import pymysql

    return pymysql.connect(
        **parse_mysql_url(url), charset="utf8mb4", autocommit=False, connect_timeout=timeout
    )


def is_unreachable(exc: BaseException) -> bool:
    """True for errors that mean the database server cannot be reached or refused us."""
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    try:
        import psycopg

        if isinstance(exc, psycopg.OperationalError):
            return True
    except ImportError:
        pass
    try:
        import pymysql

        if isinstance(exc, pymysql.err.OperationalError):
            return True
    except ImportError:
        pass
    return False


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


class Admin:
    """Operator queries on one connection, for one pair of queue tables."""

    def __init__(
        self,
        conn: Any,
        job_table: str = DEFAULT_JOB_TABLE,
        archived_job_table: str = DEFAULT_ARCHIVED_JOB_TABLE,
    ) -> None:
        self.conn = conn
        self.job_table = check_table_name(job_table, "job_table")
        self.archived_job_table = check_table_name(archived_job_table, "archived_job_table")
        self.dialect: Dialect = dialect_for(conn, job_table, archived_job_table)
        self.name = dialect_name(conn)

    def _time(self, value: datetime) -> Any:
        return self.dialect.encode_time(value)

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows as tuples, whatever row factory or cursor class the connection has."""
        cursor = self.dialect.cursor(self.conn)
        try:
            cursor.execute(sql, tuple(params))
            return list(cursor.fetchall()) if cursor.description else []
        finally:
            cursor.close()

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        cursor = self.dialect.cursor(self.conn)
        try:
            cursor.execute(sql, tuple(params))
            return int(cursor.rowcount)
        finally:
            cursor.close()

    # Checks ------------------------------------------------------------------

    def check(self) -> None:
        """Raise `UnsupportedDatabase` or `SchemaError` when workers could not run here."""
        self.dialect.check_server(self.conn)

    def missing_columns(self) -> dict[str, list[str]]:
        """Columns a queue table lacks, per table (empty when both match)."""
        columns = self.dialect.columns.split(", ")
        expected = {
            self.job_table: columns,
            self.archived_job_table: [*columns, "status", "finished_at"],
        }
        missing: dict[str, list[str]] = {}
        for table, names in expected.items():
            lacking = []
            for name in names:
                try:
                    self._rows(f"SELECT {name} FROM {table} WHERE 1 = 0")
                except Exception:
                    lacking.append(name)
                finally:
                    self.conn.rollback()
            if lacking:
                missing[table] = lacking
        return missing

    # Stats -------------------------------------------------------------------

    def stats(self, now: datetime | None = None) -> list[QueueStats]:
        """Per queue: due, scheduled, oldest due wait; succeeded/failed (last hour, all)."""
        now = now or datetime.now(timezone.utc)
        t_now, t_hour = self._time(now), self._time(now - timedelta(hours=1))
        by_queue: dict[str, QueueStats] = {}
        try:
            waiting = self._rows(
                "SELECT queue, "
                "SUM(CASE WHEN process_at <= %s THEN 1 ELSE 0 END), "
                "SUM(CASE WHEN process_at > %s THEN 1 ELSE 0 END), "
                "MIN(CASE WHEN process_at <= %s THEN process_at END) "
                f"FROM {self.job_table} GROUP BY queue",
                (t_now, t_now, t_now),
            )
            archived = self._rows(
                "SELECT queue, "
                "SUM(CASE WHEN status = 'success' AND finished_at >= %s THEN 1 ELSE 0 END), "
                "SUM(CASE WHEN status = 'failure' AND finished_at >= %s THEN 1 ELSE 0 END), "
                "SUM(CASE WHEN status = 'success' THEN 1 ELSE 0 END), "
                "SUM(CASE WHEN status = 'failure' THEN 1 ELSE 0 END) "
                f"FROM {self.archived_job_table} GROUP BY queue",
                (t_hour, t_hour),
            )
        finally:
            self.conn.rollback()
        for queue, due, scheduled, oldest in waiting:
            entry = by_queue.setdefault(queue, QueueStats(queue))
            entry.due, entry.scheduled = int(due or 0), int(scheduled or 0)
            if oldest is not None:
                entry.oldest_due = max(timedelta(0), now - self.dialect.decode_time(oldest))
        for queue, ok_hour, failed_hour, ok, failed in archived:
            entry = by_queue.setdefault(queue, QueueStats(queue))
            entry.succeeded_last_hour, entry.failed_last_hour = (
                int(ok_hour or 0),
                int(failed_hour or 0),
            )
            entry.succeeded, entry.failed = int(ok or 0), int(failed or 0)
        return [by_queue[name] for name in sorted(by_queue)]

    # Retry failed --------------------------------------------------------------

    def _failure_filter(
        self,
        queue: str | None,
        job_type: str | None,
        since: datetime | None,
        until: datetime | None,
    ) -> tuple[str, list[Any]]:
        where, params = ["status = 'failure'"], []
        if queue is not None:
            where.append("queue = %s")
            params.append(queue)
        if job_type is not None:
            where.append("job_type = %s")
            params.append(job_type)
        if since is not None:
            where.append("finished_at >= %s")
            params.append(self._time(since))
        if until is not None:
            where.append("finished_at < %s")
            params.append(self._time(until))
        return " AND ".join(where), params

    def retry_failed(
        self,
        queue: str | None = None,
        job_type: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        dry_run: bool = False,
        now: datetime | None = None,
    ) -> int:
        """Move failed archived jobs back into the queue, due now with fresh attempts.

        Filters: queue, job type, and when the job failed (`since` <= finished_at
        < `until`). Returns how many jobs moved (or would move, with `dry_run`).
        """
        now = now or datetime.now(timezone.utc)
        where, params = self._failure_filter(queue, job_type, since, until)
        archive, job, columns = self.archived_job_table, self.job_table, self.dialect.columns
        try:
            if dry_run:
                return int(
                    self._rows(f"SELECT COUNT(*) FROM {archive} WHERE {where}", params)[0][0]
                )
            if self.name == "postgresql":
                moved = self._rows(
                    f"WITH moved AS (DELETE FROM {archive} WHERE {where} RETURNING *) "
                    f"INSERT INTO {job} ({columns}) "
                    "SELECT job_id, queue, job_type, payload, 0, enqueued_at, %s FROM moved "
                    "RETURNING job_id",
                    [*params, self._time(now)],
                )
                count = len(moved)
            else:
                count = self._move_mysql(where, params, now)
            self.conn.commit()
            return count
        finally:
            self.conn.rollback()

    def _move_mysql(self, where: str, params: list[Any], now: datetime) -> int:
        archive, job, columns = self.archived_job_table, self.job_table, self.dialect.columns
        self._execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        self.conn.begin()
        ids = [
            row[0]
            for row in self._rows(f"SELECT job_id FROM {archive} WHERE {where} FOR UPDATE", params)
        ]
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ", ".join(["%s"] * len(chunk))
            self._execute(
                f"INSERT INTO {job} ({columns}) "
                "SELECT job_id, queue, job_type, payload, 0, enqueued_at, %s "
                f"FROM {archive} WHERE job_id IN ({marks})",
                [self._time(now), *chunk],
            )
            self._execute(f"DELETE FROM {archive} WHERE job_id IN ({marks})", chunk)
        return len(ids)

    # Purge ---------------------------------------------------------------------

    def purge_archive(
        self,
        older_than: timedelta,
        status: str | None = None,
        queue: str | None = None,
        dry_run: bool = False,
        now: datetime | None = None,
    ) -> int:
        """Delete archived jobs that finished more than `older_than` ago; returns how many."""
        now = now or datetime.now(timezone.utc)
        where, params = ["finished_at < %s"], [self._time(now - older_than)]
        if status is not None:
            where.append("status = %s")
            params.append(status)
        if queue is not None:
            where.append("queue = %s")
            params.append(queue)
        condition = " AND ".join(where)
        archive = self.archived_job_table
        try:
            if dry_run:
                return int(
                    self._rows(f"SELECT COUNT(*) FROM {archive} WHERE {condition}", params)[0][0]
                )
            count = self._execute(f"DELETE FROM {archive} WHERE {condition}", params)
            self.conn.commit()
            return count
        finally:
            self.conn.rollback()

    # Failures, for the demo and for operators ------------------------------------

    def recent_failures(self, limit: int = 5) -> list[tuple[uuid.UUID, str, str, int, datetime]]:
        """The latest failed jobs as (job_id, queue, job_type, attempts, finished_at)."""
        try:
            rows = self._rows(
                "SELECT job_id, queue, job_type, attempts, finished_at "
                f"FROM {self.archived_job_table} WHERE status = 'failure' "
                "ORDER BY finished_at DESC LIMIT %s",
                (limit,),
            )
        finally:
            self.conn.rollback()
        strategy = self.dialect.default_id_strategy
        return [
            (strategy.decode(job_id), queue, job_type, int(attempts), self.dialect.decode_time(at))
            for job_id, queue, job_type, attempts, at in rows
        ]

    def waiting(self, queues: Sequence[str]) -> int:
        """How many jobs of these queues are still in the job table (due or not)."""
        marks = ", ".join(["%s"] * len(queues))
        try:
            return int(
                self._rows(
                    f"SELECT COUNT(*) FROM {self.job_table} WHERE queue IN ({marks})",
                    list(queues),
                )[0][0]
            )
        finally:
            self.conn.rollback()

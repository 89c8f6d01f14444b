"""The results table: one row per finished task, written in the job's own transaction.

The archive keeps a job's status, payload and last error but has no column for a
return value, so the backend keeps `<job_table>_results` beside the queue tables
(`proletarian.job_results` by default): the schema's own results table (step `results`),
where any worker keeps a handler's return value too, and `admin.get_result` reads it. The
backend creates it where the schema predates that step. The worker writes a task's row through the
job's connection, so it commits exactly once, with the job's archive, or not at all.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ..._store.dialects import dialect_name
from ..._store.tables import (
    DEFAULT_ARCHIVED_JOB_TABLE,
    DEFAULT_JOB_TABLE,
    check_table_name,
)
from ..._store.tables import (
    results_table as companion_results_table,
)
from ...errors import ConfigurationError

MAX_RESULT_BYTES = 64 * 1024
"""The default bound on a stored return value (its JSON, in UTF-8 bytes), and on errors."""

_DDL = {
    "postgresql": (
        "CREATE TABLE IF NOT EXISTS {table} ("
        " job_id UUID PRIMARY KEY,"
        " status VARCHAR(16) NOT NULL,"
        " return_value TEXT,"
        " errors TEXT,"
        " attempts INTEGER NOT NULL,"
        " worker_id VARCHAR(255),"
        " started_at TIMESTAMPTZ,"
        " finished_at TIMESTAMPTZ NOT NULL)"
    ),
    "mysql": (
        "CREATE TABLE IF NOT EXISTS {table} ("
        " job_id BINARY(16) PRIMARY KEY,"
        " status VARCHAR(16) NOT NULL,"
        " return_value MEDIUMTEXT,"
        " errors MEDIUMTEXT,"
        " attempts INTEGER NOT NULL,"
        " worker_id VARCHAR(255),"
        " started_at DATETIME(6),"
        " finished_at DATETIME(6) NOT NULL"
        ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
    ),
}


class ResultTooLarge(ValueError):
    """A task's return value whose JSON exceeds the backend's MAX_RESULT_BYTES."""


def results_table(job_table: str = DEFAULT_JOB_TABLE) -> str:
    """The results table that goes with `job_table`: `<job_table>_results`, the schema's
    own (step `results`), where workers keep any handler's return value too."""
    return check_table_name(companion_results_table(check_table_name(job_table)), "results table")


def _key(dialect: str, job_id: uuid.UUID) -> Any:
    return job_id.bytes if dialect == "mysql" else job_id


def _when(dialect: str, moment: datetime | None) -> datetime | None:
    """A time for a MySQL DATETIME: naive UTC (a naive one is taken as UTC already)."""
    if moment is None or dialect != "mysql" or moment.tzinfo is None:
        return moment
    return moment.astimezone(timezone.utc).replace(tzinfo=None)


def encode_return_value(value: Any, limit: int = MAX_RESULT_BYTES) -> str:
    """The JSON of a return value; `ResultTooLarge` past `limit` bytes, TypeError if not JSON."""
    text = json.dumps(value, ensure_ascii=False)
    size = len(text.encode())
    if size > limit:
        raise ResultTooLarge(
            f"the task returned {size} bytes of JSON, more than the {limit} bytes stored "
            "(raise MAX_RESULT_BYTES in the backend's OPTIONS, or return less)"
        )
    return text


def encode_errors(errors: Sequence[dict[str, str]], limit: int = MAX_RESULT_BYTES) -> str:
    """The JSON of a list of `{exception_class_path, traceback}`, tracebacks cut to `limit`."""
    share = max(256, limit // max(1, len(errors)) - 200)
    kept = [
        {
            **e,
            "traceback": e["traceback"]
            if len(e["traceback"]) <= share
            else "…" + e["traceback"][-share:],
        }
        for e in errors
    ]
    return json.dumps(kept, ensure_ascii=False)


def write_result(
    conn: Any,
    job_table: str,
    job_id: uuid.UUID,
    *,
    status: str,
    return_value: str | None,
    errors: str | None,
    attempts: int,
    worker_id: str,
    started_at: datetime | None,
    finished_at: datetime,
) -> None:
    """Record a finished task on `conn` (the job's own connection), in its transaction."""
    dialect = dialect_name(conn)
    table = results_table(job_table)
    key = _key(dialect, job_id)
    cur = conn.cursor()
    try:
        cur.execute(f"DELETE FROM {table} WHERE job_id = %s", (key,))
        cur.execute(
            f"INSERT INTO {table} (job_id, status, return_value, errors, attempts, worker_id,"
            " started_at, finished_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
            (
                key,
                status,
                return_value,
                errors,
                attempts,
                worker_id,
                _when(dialect, started_at),
                _when(dialect, finished_at),
            ),
        )
    finally:
        cur.close()


@dataclass(frozen=True)
class StoredResult:
    """A results row as read back; times are aware (UTC)."""

    status: str
    return_value: Any
    errors: list[dict[str, str]]
    attempts: int
    worker_id: str | None
    started_at: datetime | None
    finished_at: datetime


def _aware(moment: datetime | None) -> datetime | None:
    if moment is not None and moment.tzinfo is None:
        return moment.replace(tzinfo=timezone.utc)
    return moment


def read_result(conn: Any, job_table: str, job_id: uuid.UUID) -> StoredResult | None:
    """The results row of `job_id` on a driver connection, or None."""
    dialect = dialect_name(conn)
    cur = conn.cursor()
    try:
        cur.execute(
            "SELECT status, return_value, errors, attempts, worker_id, started_at, finished_at"
            f" FROM {results_table(job_table)} WHERE job_id = %s",
            (_key(dialect, job_id),),
        )
        row = cur.fetchone()
    finally:
        cur.close()
    if row is None:
        return None
    status, value, errors, attempts, worker_id, started_at, finished_at = row
    return StoredResult(
        status=status,
        return_value=None if value is None else json.loads(value),
        errors=json.loads(errors) if errors else [],
        attempts=attempts,
        worker_id=worker_id,
        started_at=_aware(started_at),
        finished_at=_aware(finished_at),  # type: ignore[arg-type]
    )


def archived_at(conn: Any, archived_job_table: str, job_id: uuid.UUID) -> datetime | None:
    """When the archive row of `job_id` says the job finished (aware, UTC), or None."""
    dialect = dialect_name(conn)
    cur = conn.cursor()
    try:
        cur.execute(
            f"SELECT finished_at FROM {check_table_name(archived_job_table, 'archive table')}"
            " WHERE job_id = %s",
            (_key(dialect, job_id),),
        )
        row = cur.fetchone()
    finally:
        cur.close()
    return None if row is None else _aware(row[0])


def create_results_table(conn: Any, job_table: str = DEFAULT_JOB_TABLE) -> None:
    """Create the results table on a driver connection if missing (no commit)."""
    cur = conn.cursor()
    try:
        cur.execute(_DDL[dialect_name(conn)].format(table=results_table(job_table)))
    finally:
        cur.close()


def install(
    using: str = "default",
    job_table: str = DEFAULT_JOB_TABLE,
    archived_job_table: str = DEFAULT_ARCHIVED_JOB_TABLE,
) -> None:
    """Install (or upgrade) the queue tables and the results table on Django's database
    `using`, through a connection of their own; safe to run any number of times."""
    from ...schema import install_schema
    from ._connections import data_source

    source = data_source(using, size=1)
    try:
        with source.connection() as conn:
            install_schema(conn, job_table, archived_job_table)
            create_results_table(conn, job_table)
            conn.commit()
    finally:
        source.close()


def check_limit(value: Any) -> int:
    """MAX_RESULT_BYTES from the backend's OPTIONS: a positive int."""
    if type(value) is not int or value <= 0:
        raise ConfigurationError(f"MAX_RESULT_BYTES must be a positive int, got {value!r}")
    return value

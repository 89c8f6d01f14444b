"""How long jobs waited and ran, per queue, job type and clock hour (`timings`).

Read from the archive's rows that finished in the window (its `finished_at` index bounds the
read), each job's last attempt: its wait from when it was due (`process_at`) to its start
(`started_at`), its run from that start to `finished_at`. The percentiles are nearest-rank
ones, ranked in SQL (`Dialect.percentiles`: PostgreSQL's `percentile_disc`, window functions
on MySQL 8.0 and MariaDB 10.6), so only one row per queue, job type and hour comes back,
however many jobs finished.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone
from typing import Any

from .._common.types import Connection
from .._store.dialects import Dialect, dialect_of
from .._store.tables import DEFAULT_TABLES, Tables
from ..errors import ConfigurationError
from ._checks import _utc

HOUR = timedelta(hours=1)
MAX_HOURS = 7 * 24
"""The longest window `admin.timings` reads."""


@dataclasses.dataclass(frozen=True)
class Timing:
    """The jobs of one queue and job type whose last attempt finished from `start` on, in its
    clock hour (or in the whole window, when not read per hour): how many, and the 50th and
    95th percentiles and the maximum of their wait (from when they were due to when the
    attempt started) and run (from that start to its end). Jobs archived without a start
    (cancelled ones, or archived before the schema's attempts step) are not counted."""

    queue: str
    job_type: str
    start: datetime
    jobs: int
    wait_p50: timedelta
    wait_p95: timedelta
    wait_max: timedelta
    run_p50: timedelta
    run_p95: timedelta
    run_max: timedelta

    def as_dict(self) -> dict[str, Any]:
        """The fields for JSON: the start in ISO 8601, the durations as seconds."""
        data = dataclasses.asdict(self)
        data["start"] = self.start.isoformat()
        for name, value in data.items():
            if isinstance(value, timedelta):
                data[name] = round(value.total_seconds(), 6)
        return data


def timings(
    conn: Connection,
    *,
    hours: int = 24,
    per_hour: bool = True,
    queue: str | None = None,
    job_type: str | None = None,
    now: datetime | None = None,
    tables: Tables = DEFAULT_TABLES,
) -> list[Timing]:
    """How long the jobs that finished in the last `hours` (the current clock hour and those
    before it, 1 to a week's) waited and ran, per queue and job type: per clock hour, or
    over the whole window (`per_hour=False`); of one queue or job type if given. By queue,
    job type, then hour; an hour in which no job of theirs finished is left out.

    Each job's last attempt counts: its wait from when it was due to when it started, its
    run from then to its end; `Timing` holds the 50th and 95th percentiles (nearest rank)
    and the maximum of each. The read is bounded by the archive's `finished_at` index."""
    if isinstance(hours, bool) or not isinstance(hours, int) or not 1 <= hours <= MAX_HOURS:
        raise ConfigurationError(
            f"hours must be a whole number from 1 to {MAX_HOURS}, got {hours!r}"
        )
    dialect = dialect_of(conn, tables)
    end = _utc(now or datetime.now(timezone.utc))
    since = end.replace(minute=0, second=0, microsecond=0) - (hours - 1) * HOUR
    return read(conn, dialect, tables.archived_job_table, since, hours, per_hour, queue, job_type)


_PERCENTILES = (0.5, 0.95)


def read(
    conn: Any,
    dialect: Dialect,
    table: str,
    since: datetime,
    slots: int,
    per_hour: bool,
    queue: str | None,
    job_type: str | None,
) -> list[Timing]:
    """The timings of the archive's jobs that finished from `since` on, in `slots` clock hours
    (`per_hour`) or as one slot, by queue, job type, then hour."""
    at, end = dialect.encode_time(since), dialect.encode_time(since + slots * HOUR)
    slot = dialect.hours_since("finished_at") if per_hour else "0"
    wait = dialect.seconds_between("process_at", "started_at")
    run = dialect.seconds_between("started_at", "finished_at")
    where = "finished_at >= %s AND finished_at < %s AND started_at IS NOT NULL"
    params: list[Any] = [at] if per_hour else []
    params += [at, end]
    for column, value in (("queue", queue), ("job_type", job_type)):
        if value is not None:
            where += f" AND {column} = %s"
            params.append(value)
    source = (
        f"SELECT {slot} AS slot, queue, job_type, {wait} AS wait, {run} AS run "
        f"FROM {table} WHERE {where}"
    )
    sql = dialect.percentiles(source, ("wait", "run"), _PERCENTILES)
    rows = sorted(
        (queue_name, type_name, int(number), int(jobs), *map(_seconds, seconds))
        for number, queue_name, type_name, jobs, *seconds in dialect.fetchall(conn, sql, params)
    )
    return [Timing(row[0], row[1], since + row[2] * HOUR, *row[3:]) for row in rows]


def _seconds(value: Any) -> timedelta:
    """A duration from SQL seconds; a negative one (a start before the job was due, by a
    clock behind) is none."""
    return timedelta(seconds=max(float(value or 0), 0.0))

"""How long jobs waited and ran, per queue, job type and clock hour (`timings`), or clock
minute of the last hour (`last_hour_timings`).

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
from ._checks import _check_positive, _utc
from ._sql import _Where
from .jobs import MAX_LIMIT

HOUR = timedelta(hours=1)
MINUTE = timedelta(minutes=1)
LAST_HOUR_MINUTES = 60
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


@dataclasses.dataclass(frozen=True)
class TimingsPage:
    """One page of `timings_page`: at most `per_page` queue and job type pairs, by queue then
    job type, each as its `Timing` over the whole window with its hours' `Timing`s;
    `next_after`, the pair the next page starts after (None after the last page)."""

    groups: list[tuple[Timing, list[Timing]]]
    next_after: tuple[str, str] | None


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
    dialect, since = _window(conn, hours, now, tables)
    window = _Window(tables.archived_job_table, since, hours, queue, job_type)
    return read(conn, dialect, window, per_hour)


def timings_page(
    conn: Connection,
    *,
    after: tuple[str, str] | None = None,
    per_page: int = 50,
    hours: int = 24,
    queue: str | None = None,
    job_type: str | None = None,
    now: datetime | None = None,
    tables: Tables = DEFAULT_TABLES,
) -> TimingsPage:
    """One page of `timings`: the first `per_page` queue and job type pairs after `after`
    (a page's `next_after`; None: from the first), each over the window and hour by hour.
    Only the page's pairs are ranked, so it returns at most `per_page` times `hours + 1`
    rows however many pairs there are, in three statements; pages neither repeat nor skip
    a pair, whatever finishes meanwhile."""
    _check_positive(per_page, "per_page")
    if per_page > MAX_LIMIT:
        raise ConfigurationError(f"per_page must be at most {MAX_LIMIT}, got {per_page!r}")
    if after is not None and not (
        isinstance(after, tuple) and len(after) == 2 and all(isinstance(v, str) for v in after)
    ):
        raise ConfigurationError(f"after must be a (queue, job_type) pair, got {after!r}")
    dialect, since = _window(conn, hours, now, tables)
    window = _Window(tables.archived_job_table, since, hours, queue, job_type)
    pairs = _pairs(conn, dialect, window, after, per_page + 1)
    shown = pairs[:per_page]
    if not shown:
        return TimingsPage([], None)
    window = dataclasses.replace(window, first=shown[0], last=shown[-1])
    wholes = {(t.queue, t.job_type): t for t in read(conn, dialect, window, False)}
    hourly: dict[tuple[str, str], list[Timing]] = {}
    for hour in read(conn, dialect, window, True):
        hourly.setdefault((hour.queue, hour.job_type), []).append(hour)
    groups = [(wholes[pair], hourly.get(pair, [])) for pair in shown if pair in wholes]
    return TimingsPage(groups, shown[-1] if len(pairs) > per_page else None)


def last_hour_timings(
    conn: Connection,
    *,
    queue: str | None = None,
    job_type: str | None = None,
    now: datetime | None = None,
    tables: Tables = DEFAULT_TABLES,
) -> list[Timing]:
    """How long the jobs that finished in the last hour waited and ran, as `timings` tells
    it, per queue, job type and clock minute: the current minute so far and the 59 before it
    (a minute in which none of theirs finished is left out); of one queue or job type if
    given. One statement, through the archive's `finished_at` index over the hour."""
    end = _utc(now or datetime.now(timezone.utc))
    since = end.replace(second=0, microsecond=0) - (LAST_HOUR_MINUTES - 1) * MINUTE
    window = _Window(
        tables.archived_job_table, since, LAST_HOUR_MINUTES, queue, job_type, slot=MINUTE
    )
    return read(conn, dialect_of(conn, tables), window, True)


def _window(
    conn: Connection, hours: int, now: datetime | None, tables: Tables
) -> tuple[Dialect, datetime]:
    """The dialect, and the start of the window of `hours` clock hours ending with now's."""
    if isinstance(hours, bool) or not isinstance(hours, int) or not 1 <= hours <= MAX_HOURS:
        raise ConfigurationError(
            f"hours must be a whole number from 1 to {MAX_HOURS}, got {hours!r}"
        )
    end = _utc(now or datetime.now(timezone.utc))
    since = end.replace(minute=0, second=0, microsecond=0) - (hours - 1) * HOUR
    return dialect_of(conn, tables), since


_PERCENTILES = (0.5, 0.95)


@dataclasses.dataclass(frozen=True)
class _Window:
    """The archive's rows a read takes: finished in `slots` clock hours from `since`, with a
    start, of the queue and job type if given, and of the pairs from `first` to `last`."""

    table: str
    since: datetime
    slots: int
    queue: str | None
    job_type: str | None
    first: tuple[str, str] | None = None
    last: tuple[str, str] | None = None
    slot: timedelta = HOUR
    """How long a slot is: a clock hour, or a clock minute."""

    def where(self, dialect: Dialect, after: tuple[str, str] | None = None) -> _Where:
        """The conditions, past `after` if given."""
        end = self.since + self.slots * self.slot
        where = _Where("started_at IS NOT NULL")
        where.add("finished_at >= %s", dialect.encode_time(self.since))
        where.add("finished_at < %s", dialect.encode_time(end))
        where.given("queue = %s", self.queue).given("job_type = %s", self.job_type)
        for pair, beyond, at_pair in (
            (after, ">", ">"),
            (self.first, ">", ">="),
            (self.last, "<", "<="),
        ):
            if pair is not None:
                clause = f"(queue {beyond} %s OR (queue = %s AND job_type {at_pair} %s))"
                where.add(clause, pair[0], pair[0], pair[1])
        return where


def _pairs(
    conn: Any, dialect: Dialect, window: _Window, after: tuple[str, str] | None, count: int
) -> list[tuple[str, str]]:
    """The first `count` queue and job type pairs of the window after `after`, in order."""
    where = window.where(dialect, after)
    sql = (
        f"SELECT queue, job_type FROM {window.table} WHERE {where.sql} "
        f"GROUP BY queue, job_type ORDER BY queue, job_type LIMIT {int(count)}"
    )
    return [(queue, job_type) for queue, job_type in dialect.fetchall(conn, sql, where.params)]


def read(conn: Any, dialect: Dialect, window: _Window, per_hour: bool) -> list[Timing]:
    """The timings of the window's jobs, per clock hour (`per_hour`) or over the whole
    window, by queue, job type, then hour."""
    if not per_hour:
        slot = "0"
    elif window.slot == HOUR:
        slot = dialect.hours_since("finished_at")
    else:
        slot = f"FLOOR({dialect.seconds_since('finished_at')} / {int(window.slot.total_seconds())})"
    wait = dialect.seconds_between("process_at", "started_at")
    run = dialect.seconds_between("started_at", "finished_at")
    where = window.where(dialect)
    params = [dialect.encode_time(window.since)] if per_hour else []
    params += where.params
    source = (
        f"SELECT {slot} AS slot, queue, job_type, {wait} AS wait, {run} AS run "
        f"FROM {window.table} WHERE {where.sql}"
    )
    sql = dialect.percentiles(source, ("wait", "run"), _PERCENTILES)
    rows = sorted(
        (queue_name, type_name, int(number), int(jobs), *map(_seconds, seconds))
        for number, queue_name, type_name, jobs, *seconds in dialect.fetchall(conn, sql, params)
    )
    return [Timing(row[0], row[1], window.since + row[2] * window.slot, *row[3:]) for row in rows]


def _seconds(value: Any) -> timedelta:
    """A duration from SQL seconds; a negative one (a start before the job was due, by a
    clock behind) is none."""
    return timedelta(seconds=max(float(value or 0), 0.0))

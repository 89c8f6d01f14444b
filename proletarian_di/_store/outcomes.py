"""The archive's outcomes of the last day, clock hour by clock hour, for `admin.overview`
and `admin.queue_stats`.

An hour that is over no longer changes, save when a retry or a purge removes archived rows
or a worker with a lagging clock archives into it late. So workers sum each hour up once it
has been over for `SUM_UP_AFTER` (`sum_up`, from their registry's beat) into the outcomes
table (`<job table>_hourly_outcomes`, schema step "hourly_outcomes"), and readers read the
summed hours there and only the rest from the archive: a day of ten million archived jobs a
month is 24 rows per queue instead of 330,000. A retry or a purge of archived jobs drops
the summed hours it changes (`Dialect.forget_hours`), to be read from the archive again.

Changes no worker made (a backfill, an import, a restore, a DELETE by hand) are caught by the
recheck (`recheck`, from the same beat, schema step "outcomes_checked"): a summed hour whose
sums were last found true `RECHECK_AFTER` ago is counted again, and its sums replaced when
they differ; `recount` does it for one hour at once (`admin.recount_hours`).

Where no hour is summed up (an older schema, no worker running), `HourlyOutcomes` keeps the
hours that are over between calls of one process, checks them with one count of their rows,
and reads again only the current hour, or everything when the count no longer matches.
"""

from __future__ import annotations

import dataclasses
import threading
from datetime import datetime, timedelta, timezone
from typing import Any

from ..errors import ArgumentTypeError
from .dialects import Dialect
from .statuses import FAILURE, SUCCESS, outcome, status_in

DAY_HOURS = 24
HOUR = timedelta(hours=1)
SETTLE = timedelta(minutes=1)
"""An hour is kept once it ended this long ago, so jobs committing as it ends are in it."""
SUM_UP_AFTER = timedelta(minutes=5)
"""An hour is summed up in the outcomes table once it ended this long ago: jobs committing
as it ended, and those of a worker whose clock is up to this far behind, are in it."""
KEEP_SUMMED = timedelta(days=2)
"""Summed hours older than this are deleted: readers read the last day."""
RECHECK_AFTER = timedelta(minutes=15)
"""A summed hour is counted again once its sums were last found true this long ago."""
TOTAL = ""
"""The queue of the row that says an hour is summed up (its `archived`: every row of it)."""

Outcomes = dict[str, list[list[int]]]
"""Per queue, `DAY_HOURS` [succeeded, failed] pairs, oldest hour first."""


@dataclasses.dataclass(frozen=True)
class _Hour:
    rows: int
    """Every archived row that finished in the hour, whatever its status: what is checked."""
    outcomes: dict[str, list[int]]
    """Per queue, [succeeded, failed]."""


_EMPTY = _Hour(0, {})
_NEVER = datetime.min.replace(tzinfo=timezone.utc)


def first_hour(now: datetime) -> datetime:
    """When the last day's first clock hour began: 23 hours before the current one."""
    return _hour_of(now) - (DAY_HOURS - 1) * HOUR


class HourlyOutcomes:
    """The archive's succeeded and failed jobs per queue and clock hour, kept between
    `admin.overview` calls for the hours that are over, so that a page refreshing every few
    seconds reads only the current hour of a large archive.

    Each call checks the kept hours against one count of their rows and reads them again
    when it changed (a retry, a purge, a job archived late). Keep one per database and
    tables; it is safe to share between threads.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._table: str | None = None
        self._hours: dict[datetime, _Hour] = {}

    def read(self, conn: Any, dialect: Dialect, table: str, now: datetime) -> Outcomes:
        """The last day's outcomes per queue: the current clock hour and the 23 before it,
        a job that finished after `now` (a clock ahead) in the current one."""
        since = first_hour(now)
        summed = _summed(conn, dialect, since, now)
        if summed:
            read_from = since + len(summed) * HOUR
            return _by_queue(since, {**summed, **_read(conn, dialect, table, read_from)})
        kept = self._kept(table, since)
        read_from = since + len(kept) * HOUR
        if kept and _rows(conn, dialect, table, since, read_from) != sum(
            hour.rows for hour in kept.values()
        ):
            kept, read_from = {}, since
        hours = {**kept, **_read(conn, dialect, table, read_from)}
        over = (since + n * HOUR for n in range(DAY_HOURS - 1))
        with self._lock:
            self._hours = {
                start: hours.get(start, _EMPTY) for start in over if start + HOUR + SETTLE <= now
            }
        return _by_queue(since, hours)

    def _kept(self, table: str, since: datetime) -> dict[datetime, _Hour]:
        """The kept hours from `since` on, as long as they follow one another, before the
        current one."""
        with self._lock:
            if self._table not in (None, table):
                raise ArgumentTypeError(
                    f"this HourlyOutcomes keeps the hours of {self._table}, not of {table}: "
                    "keep one per table"
                )
            self._table = table
            kept: dict[datetime, _Hour] = {}
            while len(kept) < DAY_HOURS - 1 and (start := since + len(kept) * HOUR) in self._hours:
                kept[start] = self._hours[start]
            return kept


def _by_queue(since: datetime, hours: dict[datetime, _Hour]) -> Outcomes:
    """Per queue, a [succeeded, failed] pair per hour from `since`; later hours in the last."""
    outcomes: Outcomes = {}
    for start, hour in hours.items():
        index = min(int((start - since) / HOUR), DAY_HOURS - 1)
        for queue, (succeeded, failed) in hour.outcomes.items():
            counts = outcomes.setdefault(queue, [[0, 0] for _ in range(DAY_HOURS)])
            counts[index][0] += succeeded
            counts[index][1] += failed
    return outcomes


def _rows(conn: Any, dialect: Dialect, table: str, start: datetime, end: datetime) -> int:
    """How many archived rows finished in [start, end)."""
    [(count,)] = dialect.fetchall(
        conn,
        f"SELECT COUNT(*) FROM {table} WHERE finished_at >= %s AND finished_at < %s",
        (dialect.encode_time(start), dialect.encode_time(end)),
    )
    return int(count)


def _read(conn: Any, dialect: Dialect, table: str, start: datetime) -> dict[datetime, _Hour]:
    """The archive from `start` on (an hour's start), hour by hour."""
    at = dialect.encode_time(start)
    rows: dict[datetime, int] = {}
    outcomes: dict[datetime, dict[str, list[int]]] = {}
    for offset, queue, status, count in dialect.fetchall(
        conn,
        f"SELECT {dialect.hours_since('finished_at')}, queue, status, COUNT(*) "
        f"FROM {table} WHERE finished_at >= %s GROUP BY 1, 2, 3",
        (at, at),
    ):
        hour = start + int(offset) * HOUR
        rows[hour] = rows.get(hour, 0) + int(count)
        if outcome(status) in (SUCCESS, FAILURE):
            pair = outcomes.setdefault(hour, {}).setdefault(queue, [0, 0])
            pair[outcome(status) == FAILURE] += int(count)
    return {hour: _Hour(count, outcomes.get(hour, {})) for hour, count in rows.items()}


def _summed(conn: Any, dialect: Dialect, since: datetime, now: datetime) -> dict[datetime, _Hour]:
    """The hours from `since` that the outcomes table sums up, as long as they follow one
    another, before the current one; none where there is no such table."""
    table = dialect.outcomes_table
    if not dialect.table_columns(conn, table):
        return {}
    current = _hour_of(now)
    hours: dict[datetime, _Hour] = {}
    whole: set[datetime] = set()
    for hour, queue, succeeded, failed, archived in dialect.fetchall(
        conn,
        f"SELECT hour, queue, succeeded, failed, archived FROM {table} "
        "WHERE hour >= %s AND hour < %s",
        (dialect.encode_time(since), dialect.encode_time(current)),
    ):
        start = _utc(dialect.decode_time(hour))
        entry = hours.setdefault(start, _Hour(0, {}))
        if queue == TOTAL:
            whole.add(start)
            hours[start] = _Hour(int(archived), entry.outcomes)
        else:
            entry.outcomes[queue] = [int(succeeded), int(failed)]
    summed: dict[datetime, _Hour] = {}
    while (start := since + len(summed) * HOUR) in whole and start < current:
        summed[start] = hours[start]
    return summed


def sum_up(conn: Any, dialect: Dialect, now: datetime) -> datetime | None:
    """Sum up the latest hour of the last day that has been over for `SUM_UP_AFTER` and is
    not summed up yet, from the archive into the outcomes table, and delete summed hours
    older than `KEEP_SUMMED`: the hour summed up, or None when none was missing. On an
    autocommit connection each statement commits by itself; the rows of an hour go before
    the row that says it is summed up, so a reader never takes half an hour for a whole."""
    table = dialect.outcomes_table
    since = first_hour(now)
    summed = {
        _utc(dialect.decode_time(hour))
        for (hour,) in dialect.fetchall(
            conn,
            f"SELECT hour FROM {table} WHERE queue = %s AND hour >= %s",
            (TOTAL, dialect.encode_time(since)),
        )
    }
    last = _hour_of(now) - HOUR
    if last + HOUR + SUM_UP_AFTER > now:
        last -= HOUR
    missing = (last - n * HOUR for n in range(DAY_HOURS))
    hour = next((start for start in missing if start >= since and start not in summed), None)
    if hour is None:
        return None
    checked = now if _checks(conn, dialect) else None
    _write(conn, dialect, hour, _count(conn, dialect, hour), checked)
    dialect.execute(
        conn,
        f"DELETE FROM {table} WHERE hour < %s",
        (dialect.encode_time(now - KEEP_SUMMED),),
    )
    return hour


def recheck(conn: Any, dialect: Dialect, now: datetime) -> datetime | None:
    """Count again the summed hour of the last day that was checked longest ago, if that was
    `RECHECK_AFTER` ago or more (or never), replacing its sums if they differ (`recount`):
    when the next check falls due (`now` or earlier: one more is due), or None when there is
    nothing to check (no hour summed up, or a schema without check times)."""
    if not _checks(conn, dialect):
        return None
    checks = summed_hours(conn, dialect, first_hour(now), now)
    if not checks:
        return None
    oldest = min(checks, key=lambda hour: checks[hour] or _NEVER)
    last = checks[oldest]
    if last is None or last + RECHECK_AFTER <= now:
        recount(conn, dialect, oldest, now)
        checks[oldest] = now
    return min(at or _NEVER for at in checks.values()) + RECHECK_AFTER


def recount(conn: Any, dialect: Dialect, hour: datetime, now: datetime) -> bool:
    """Count a summed hour of the archive again and replace its sums if they differ, noting
    `now` as its check time where the schema keeps one: whether they differed. The hour's
    rows go in one statement and come back with the row that says it is summed up last, so
    a reader meanwhile counts the hour from the archive."""
    table, at = dialect.outcomes_table, dialect.encode_time(hour)
    counted = _count(conn, dialect, hour)
    counted[TOTAL] = (0, 0, sum(archived for _, _, archived in counted.values()))
    stored = {
        queue: (int(succeeded), int(failed), int(archived))
        for queue, succeeded, failed, archived in dialect.fetchall(
            conn,
            f"SELECT queue, succeeded, failed, archived FROM {table} WHERE hour = %s",
            (at,),
        )
    }
    checks = _checks(conn, dialect)
    if stored == counted:
        if checks:
            dialect.execute(
                conn,
                f"UPDATE {table} SET checked_at = %s WHERE hour = %s AND queue = %s",
                (dialect.encode_time(now), at, TOTAL),
            )
        return False
    dialect.execute(conn, f"DELETE FROM {table} WHERE hour = %s", (at,))
    del counted[TOTAL]
    _write(conn, dialect, hour, counted, now if checks else None)
    return True


def summed_hours(
    conn: Any, dialect: Dialect, since: datetime, now: datetime
) -> dict[datetime, datetime | None]:
    """The summed hours from `since` to the current one: when each was last found true
    (None: never, or a schema without check times); none on a schema without the table."""
    columns = dialect.table_columns(conn, dialect.outcomes_table)
    if not columns:
        return {}
    column = "checked_at" if "checked_at" in columns else "NULL"
    return {
        _utc(dialect.decode_time(hour)): None if at is None else _utc(dialect.decode_time(at))
        for hour, at in dialect.fetchall(
            conn,
            f"SELECT hour, {column} FROM {dialect.outcomes_table} "
            "WHERE queue = %s AND hour >= %s AND hour < %s",
            (TOTAL, dialect.encode_time(since), dialect.encode_time(_hour_of(now))),
        )
    }


def _count(conn: Any, dialect: Dialect, hour: datetime) -> dict[str, tuple[int, int, int]]:
    """The archive's rows that finished in the hour, per queue: (succeeded, failed, all)."""
    rows = dialect.fetchall(
        conn,
        f"SELECT queue, SUM(CASE WHEN {status_in('status', SUCCESS)} THEN 1 ELSE 0 END), "
        f"SUM(CASE WHEN {status_in('status', FAILURE)} THEN 1 ELSE 0 END), COUNT(*) "
        f"FROM {dialect.archived_job_table} WHERE finished_at >= %s AND finished_at < %s "
        "GROUP BY queue",
        (dialect.encode_time(hour), dialect.encode_time(hour + HOUR)),
    )
    return {queue: (int(ok), int(failed), int(count)) for queue, ok, failed, count in rows}


def _write(
    conn: Any,
    dialect: Dialect,
    hour: datetime,
    counted: dict[str, tuple[int, int, int]],
    checked: datetime | None,
) -> None:
    """An hour's sums per queue, then the row that says it is summed up (with its check time,
    where the schema keeps one)."""
    at = dialect.encode_time(hour)

    def insert(values: tuple[Any, ...], extra: str = "") -> None:
        dialect.execute(
            conn,
            f"INSERT INTO {dialect.outcomes_table} (hour, queue, succeeded, failed, archived"
            f"{extra}) VALUES ({', '.join(['%s'] * len(values))}) "
            f"{dialect.unless_exists('hour, queue')}",
            values,
        )

    for queue, counts in counted.items():
        insert((at, queue, *counts))
    total = (at, TOTAL, 0, 0, sum(archived for _, _, archived in counted.values()))
    if checked is None:
        insert(total)
    else:
        insert((*total, dialect.encode_time(checked)), ", checked_at")


def _checks(conn: Any, dialect: Dialect) -> bool:
    """Whether the outcomes table keeps each hour's check time (schema step
    "outcomes_checked")."""
    return "checked_at" in dialect.table_columns(conn, dialect.outcomes_table)


def _hour_of(at: datetime) -> datetime:
    return at.replace(minute=0, second=0, microsecond=0)


def _utc(value: datetime) -> datetime:
    return value.astimezone(timezone.utc)

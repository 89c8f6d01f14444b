"""The archive's outcomes of the last day, clock hour by clock hour, for `admin.overview`.

An hour that is over no longer changes, save when a retry or a purge removes archived rows
or a worker with a lagging clock archives into it late. So `HourlyOutcomes` keeps such
hours' counts between calls, checks them with one count of their rows, and reads again only
the current hour, or everything when the count no longer matches.
"""

from __future__ import annotations

import dataclasses
import threading
from datetime import datetime, timedelta
from typing import Any

from ._dialects import Dialect
from .errors import ArgumentTypeError

DAY_HOURS = 24
HOUR = timedelta(hours=1)
SETTLE = timedelta(minutes=1)
"""An hour is kept once it ended this long ago, so jobs committing as it ends are in it."""

Outcomes = dict[str, list[list[int]]]
"""Per queue, `DAY_HOURS` [succeeded, failed] pairs, oldest hour first."""


@dataclasses.dataclass(frozen=True)
class _Hour:
    rows: int
    """Every archived row that finished in the hour, whatever its status: what is checked."""
    outcomes: dict[str, list[int]]
    """Per queue, [succeeded, failed]."""


_EMPTY = _Hour(0, {})


def first_hour(now: datetime) -> datetime:
    """When the last day's first clock hour began: 23 hours before the current one."""
    return now.replace(minute=0, second=0, microsecond=0) - (DAY_HOURS - 1) * HOUR


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
        if status in ("success", "failure"):
            pair = outcomes.setdefault(hour, {}).setdefault(queue, [0, 0])
            pair[status == "failure"] += int(count)
    return {hour: _Hour(count, outcomes.get(hour, {})) for hour, count in rows.items()}

"""The queues at a glance: `queue_stats` (the CLI's numbers), `overview` and `overview_page`
(a dashboard's, with the last day hour by hour), the hourly sums they read (`hourly_sums`,
`recount_hours`), `throughput`, the latest failures (`recent_failures`), the jobs still
waiting in some queues (`waiting`), and the schema checks (`check`, `missing_columns`)."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from .._common.types import Connection
from .._engine import pauses as _pauses
from .._store.dependencies import BLOCKED_SQL
from .._store.dialects import Dialect, dialect_of
from .._store.outcomes import DAY_HOURS as _DAY_HOURS
from .._store.outcomes import HOUR as _HOUR
from .._store.outcomes import HourlyOutcomes, first_hour, recount, summed_hours
from .._store.statuses import FAILURE, SUCCESS, outcome, status_in
from .._store.tables import DEFAULT_TABLES, Tables
from ..errors import ArgumentTypeError, ConfigurationError
from ..schema import check_schema
from ._checks import _check_positive, _utc
from ._sql import _LEASED, _NOT_LEASED, _Where
from .jobs import MAX_EXAMINED, MAX_LIMIT


@dataclasses.dataclass
class QueueStats:
    """One queue's numbers: waiting jobs from the job table, outcomes from the archive, and
    whether it is paused."""

    queue: str
    due: int = 0
    scheduled: int = 0
    running: int = 0
    oldest_due: timedelta | None = None
    succeeded_last_hour: int = 0
    failed_last_hour: int = 0
    succeeded_last_day: int = 0
    failed_last_day: int = 0
    paused: bool = False
    blocked: int = 0
    """Jobs waiting on others (`depends_on`): neither due nor scheduled for any time."""

    def as_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        oldest = self.oldest_due
        data["oldest_due_seconds"] = None if oldest is None else round(oldest.total_seconds(), 3)
        del data["oldest_due"]
        return data


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
    dialect = dialect_of(conn, tables)
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
    """Per queue: due (running ones included), scheduled, blocked (waiting on other jobs),
    running now (held by a worker, row lock or live lease), oldest due wait;
    succeeded/failed in the last hour and the last day; paused. A paused queue with no jobs
    is listed too.

    Running jobs are told as the overview tells them: live leases counted in the same read of
    the job table, row locks found without scanning it for them (`_held`: on MySQL the first
    due rows of each queue, where workers claim, are probed).

    The last day is the overview's: the current clock hour and the 23 before it, read from
    the hours workers summed up (`HourlyOutcomes`) and the archive's rest through its
    `finished_at` index, so the answer does not slow down as the archive grows.

    A job under a live lease counts as due, not scheduled (its process_at is when the lease
    runs out), and not in the oldest due wait; an expired lease is due from when it ran out."""
    dialect = dialect_of(conn, tables)
    now = now or datetime.now(timezone.utc)
    t_now, t_hour = dialect.encode_time(now), dialect.encode_time(now - timedelta(hours=1))
    with dialect.admin_read(conn):
        waiting_rows = dialect.fetchall(
            conn,
            "SELECT queue, COUNT(*), "
            "COUNT(CASE WHEN process_at > %s AND leased_by IS NULL THEN 1 END), "
            f"COUNT(CASE WHEN {_LEASED} THEN 1 END), "
            f"COUNT(CASE WHEN process_at > {BLOCKED_SQL} THEN 1 END){_oldest_column(dialect)} "
            f"FROM {tables.job_table} GROUP BY queue",
            (t_now,) * (2 + dialect.oldest_in_scan),
        )
        last_hour = dialect.fetchall(
            conn,
            f"SELECT queue, SUM(CASE WHEN {status_in('status', SUCCESS)} THEN 1 ELSE 0 END), "
            f"SUM(CASE WHEN {status_in('status', FAILURE)} THEN 1 ELSE 0 END) "
            f"FROM {tables.archived_job_table} WHERE finished_at >= %s GROUP BY queue",
            (t_hour,),
        )
        last_day = HourlyOutcomes().read(conn, dialect, tables.archived_job_table, _utc(now))
        by_queue: dict[str, QueueStats] = {}
        unleased_due: dict[str, int] = {}
        for queue, total, later, leased, blocked, *_ in waiting_rows:
            entry = by_queue.setdefault(queue, QueueStats(queue))
            entry.blocked = int(blocked)
            entry.scheduled = int(later) - entry.blocked
            entry.due = int(total) - int(later)  # a live lease's job counts as due
            entry.running = int(leased)
            unleased_due[queue] = entry.due - entry.running
        for queue, oldest in _oldest_due(conn, dialect, waiting_rows, now).items():
            by_queue[queue].oldest_due = max(timedelta(0), now - oldest)
        for queue, ok, failed in last_hour:
            entry = by_queue.setdefault(queue, QueueStats(queue))
            entry.succeeded_last_hour, entry.failed_last_hour = int(ok or 0), int(failed or 0)
        for queue, hours in last_day.items():
            entry = by_queue.setdefault(queue, QueueStats(queue))
            entry.succeeded_last_day = sum(ok for ok, _ in hours)
            entry.failed_last_day = sum(failed for _, failed in hours)
        for queue, _ in _held(conn, dialect, tables, now, unleased_due):
            by_queue[queue].running += 1
    for queue in _pauses.paused_queues(conn, dialect):
        by_queue.setdefault(queue, QueueStats(queue)).paused = True
    return [by_queue[name] for name in sorted(by_queue)]


@dataclasses.dataclass(frozen=True)
class ThroughputBucket:
    """Jobs archived in [start, start + the bucket's length): succeeded and failed."""

    start: datetime
    succeeded: int
    failed: int


@dataclasses.dataclass
class QueueOverview:
    """One queue at a glance, as a dashboard shows it: its waiting jobs by state, its
    outcomes over the last day (in all and hour by hour), and whether it is paused."""

    queue: str
    queued: int = 0
    scheduled: int = 0
    retrying: int = 0
    running: int = 0
    succeeded_last_day: int = 0
    failed_last_day: int = 0
    oldest_due: timedelta | None = None
    paused: bool = False
    last_day: list[ThroughputBucket] = dataclasses.field(default_factory=list)
    """The last day's outcomes, a clock hour per bucket, oldest first: the last bucket is
    the current hour so far."""
    blocked: int = 0
    """Jobs waiting on others (`depends_on`): neither due nor scheduled for any time."""

    def as_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        oldest = data.pop("oldest_due")
        data["oldest_due_seconds"] = None if oldest is None else round(oldest.total_seconds(), 3)
        for bucket in data["last_day"]:
            bucket["start"] = bucket["start"].isoformat()
        return data


_PROBED_PER_QUEUE = 200
"""Where the database cannot list held rows, the overview probes this many of each queue's
due rows, first in claim order: workers claim there, so that is where running jobs are."""


@dataclasses.dataclass
class OverviewPage:
    """One page of the overview: its queues by name, which page of how many it is, how many
    queues there are in all, and the last day's outcomes summed over every queue."""

    queues: list[QueueOverview]
    page: int
    pages: int
    total: int
    last_day: list[ThroughputBucket]


def overview(
    conn: Connection,
    *,
    now: datetime | None = None,
    tables: Tables = DEFAULT_TABLES,
    outcomes: HourlyOutcomes | None = None,
) -> list[QueueOverview]:
    """Per queue: queued, scheduled, retrying and running jobs, successes and failures in the
    last day (the current clock hour and the 23 before it), the oldest due job's wait, and
    whether it is paused; by name.

    It reads the job table once (on MySQL, its claim index alone), the archive's last day
    through its `finished_at` index, and probes only rows a worker may hold, so it stays quick
    on large tables (where the rows must be probed, as on MariaDB, at most `MAX_EXAMINED` in
    all: with many queues, `overview_page` probes each page's). Pass the same `outcomes` to
    each call of a refreshing page: it keeps the hours that are over, so that only the
    current hour of the archive is read again."""
    return _overview(conn, now, tables, outcomes, None, None)[0]


def overview_page(
    conn: Connection,
    *,
    page: int = 1,
    per_page: int = 50,
    now: datetime | None = None,
    tables: Tables = DEFAULT_TABLES,
    outcomes: HourlyOutcomes | None = None,
) -> OverviewPage:
    """One page of `overview`: the `per_page` queues of page `page` (from 1; a page past the
    last is empty), so that a page's size and its probe of running jobs stay bounded however
    many queues there are (its probe reads at most `MAX_EXAMINED` rows). The statements it
    runs are as many whatever the number of queues."""
    _check_positive(page, "page")
    _check_positive(per_page, "per_page")
    if per_page > MAX_LIMIT:
        raise ConfigurationError(f"per_page must be at most {MAX_LIMIT}, got {per_page!r}")
    shown, total, summed = _overview(conn, now, tables, outcomes, (page - 1) * per_page, per_page)
    return OverviewPage(shown, page, max(1, -(-total // per_page)), total, summed)


def queue_overview(
    conn: Connection,
    queue: str,
    *,
    now: datetime | None = None,
    tables: Tables = DEFAULT_TABLES,
    outcomes: HourlyOutcomes | None = None,
) -> QueueOverview:
    """One queue of `overview`, read alone (its rows of the job table only): zeros for a
    queue with no jobs."""
    if not isinstance(queue, str):
        raise ArgumentTypeError(f"queue must be a str, got {queue!r}")
    return _overview(conn, now, tables, outcomes, None, None, queue)[0][0]


def _overview(
    conn: Connection,
    now: datetime | None,
    tables: Tables,
    outcomes: HourlyOutcomes | None,
    offset: int | None,
    count: int | None,
    only: str | None = None,
) -> tuple[list[QueueOverview], int, list[ThroughputBucket]]:
    """The queues from `offset` by name, `count` of them (None: all), or the queue `only`;
    how many there are in all; the last day's outcomes over all of them. Only the queues
    shown are probed."""
    dialect = dialect_of(conn, tables)
    now = _utc(now or datetime.now(timezone.utc))
    at = dialect.encode_time(now)
    by_queue: dict[str, QueueOverview] = {}

    def entry(queue: str) -> QueueOverview:
        return by_queue.setdefault(queue, QueueOverview(queue))

    with dialect.admin_read(conn):
        rows = dialect.fetchall(
            conn,
            f"SELECT queue, COUNT(*), "
            f"COUNT(CASE WHEN {_LEASED} THEN 1 END), "
            f"COUNT(CASE WHEN {_NOT_LEASED} AND attempts > 0 THEN 1 END), "
            f"COUNT(CASE WHEN attempts = 0 AND process_at > %s AND leased_by IS NULL "
            f"THEN 1 END), COUNT(CASE WHEN process_at > {BLOCKED_SQL} THEN 1 END)"
            f"{_oldest_column(dialect)} FROM {tables.job_table} "
            f"{'' if only is None else 'WHERE queue = %s '}GROUP BY queue",
            (at,) * (3 + dialect.oldest_in_scan) + (() if only is None else (only,)),
        )
        for queue, total, leased, retrying, later, blocked, *_ in rows:
            item = entry(queue)
            item.running, item.retrying, item.blocked = int(leased), int(retrying), int(blocked)
            item.scheduled = int(later) - item.blocked
            item.queued = int(total) - item.running - item.retrying - int(later)
        outcomes = HourlyOutcomes() if outcomes is None else outcomes
        hourly = outcomes.read(conn, dialect, tables.archived_job_table, now)
        for queue in hourly:
            entry(queue)
        for queue in _pauses.paused_queues(conn, dialect):
            entry(queue).paused = True
        names = sorted(by_queue) if only is None else [entry(only).queue]
        if offset is not None:
            names = names[offset : offset + (count or len(names))]
        shown = [by_queue[name] for name in names]
        for queue, oldest in _oldest_due(conn, dialect, rows, now, names).items():
            by_queue[queue].oldest_due = max(timedelta(0), now - _utc(oldest))
        due = {item.queue: item.queued + item.retrying for item in shown}
        for queue, attempts in _held(conn, dialect, tables, now, due):
            item = entry(queue)
            item.running += 1
            if attempts:
                item.retrying -= 1
            else:
                item.queued -= 1
    since = first_hour(now)
    summed = [[0, 0] for _ in range(_DAY_HOURS)]
    for counts in hourly.values():
        for n, (succeeded, failed) in enumerate(counts):
            summed[n][0] += succeeded
            summed[n][1] += failed
    for item in shown:
        counts = hourly.get(item.queue, [[0, 0]] * _DAY_HOURS)
        item.last_day = [
            ThroughputBucket(since + n * _HOUR, succeeded, failed)
            for n, (succeeded, failed) in enumerate(counts)
        ]
        item.succeeded_last_day = sum(bucket.succeeded for bucket in item.last_day)
        item.failed_last_day = sum(bucket.failed for bucket in item.last_day)
    last_day = [ThroughputBucket(since + n * _HOUR, ok, bad) for n, (ok, bad) in enumerate(summed)]
    return shown, len(by_queue), last_day


@dataclasses.dataclass(frozen=True)
class HourlySums:
    """The hours of the last day that workers summed up, which the overview and `stats` read
    instead of the archive, and when they were last found true."""

    hours: int
    """How many of the last day's hours are summed up (the current one never is)."""
    checked_at: datetime | None
    """The oldest of their last checks against the archive: each matched it then or later.
    None when no hour is summed up, or one has not been checked (it was summed up before
    schema step outcomes_checked)."""


def hourly_sums(
    conn: Connection,
    *,
    now: datetime | None = None,
    tables: Tables = DEFAULT_TABLES,
) -> HourlySums:
    """How many of the last day's hours the overview and `stats` read from workers' sums,
    and since when each has been found true (see `recount_hours`); one read of at most 23
    rows."""
    dialect = dialect_of(conn, tables)
    now = _utc(now or datetime.now(timezone.utc))
    checks = summed_hours(conn, dialect, first_hour(now), now)
    times = [at for at in checks.values() if at is not None]
    return HourlySums(len(checks), min(times) if len(times) == len(checks) and times else None)


@dataclasses.dataclass(frozen=True)
class RecountedHours:
    """What `recount_hours` did: the summed hours it counted again, and those whose sums it
    replaced because the archive no longer matched them."""

    checked: list[datetime]
    changed: list[datetime]


def recount_hours(
    conn: Connection,
    *,
    since: datetime | None = None,
    now: datetime | None = None,
    tables: Tables = DEFAULT_TABLES,
) -> RecountedHours:
    """Count every summed hour from `since` (default: the last day's first) to the current
    one again from the archive, and replace the sums of those that no longer match it (a
    backfill, an import, a restore, rows deleted by hand), now rather than at the workers'
    next recheck; each hour's check time is set to `now`. One read of the archive per hour,
    through its `finished_at` index; oldest first."""
    dialect = dialect_of(conn, tables)
    now = _utc(now or datetime.now(timezone.utc))
    since = first_hour(now) if since is None else _utc(since)
    checked = sorted(summed_hours(conn, dialect, since, now))
    changed = [hour for hour in checked if recount(conn, dialect, hour, now)]
    return RecountedHours(checked, changed)


def oldest_due_waits(
    conn: Connection, *, now: datetime | None = None, tables: Tables = DEFAULT_TABLES
) -> dict[str, timedelta]:
    """How long each queue's oldest due job has waited, as `queue_stats` tells it, and
    only that: one read of the job table by queue (and, where the dialect needs it, of
    the claim index), no archive, no probe of held rows."""
    dialect = dialect_of(conn, tables)
    now = now or datetime.now(timezone.utc)
    with dialect.admin_read(conn):
        rows = dialect.fetchall(
            conn,
            f"SELECT queue{_oldest_column(dialect)} FROM {tables.job_table} GROUP BY queue",
            (dialect.encode_time(now),) * dialect.oldest_in_scan,
        )
        oldest = _oldest_due(conn, dialect, rows, now)
    return {queue: max(timedelta(0), now - at) for queue, at in oldest.items()}


def _oldest_column(dialect: Dialect) -> str:
    """The oldest due job's column of a GROUP BY queue of the job table (its `%s` is now),
    where the dialect reads it in that scan."""
    return ", MIN(CASE WHEN process_at <= %s THEN process_at END)" if dialect.oldest_in_scan else ""


def _oldest_due(
    conn: Connection,
    dialect: Dialect,
    rows: Sequence[Sequence[Any]],
    now: datetime,
    shown: Sequence[str] | None = None,
) -> dict[str, datetime]:
    """The oldest due process_at of each queue of the GROUP BY's `rows` (of those `shown`):
    its last column, or read from the claim index (`Dialect.oldest_due`)."""
    if not dialect.oldest_in_scan:
        waiting = {row[0] for row in rows}
        queues = sorted(waiting) if shown is None else [q for q in shown if q in waiting]
        return dialect.oldest_due(conn, queues, now)
    return {row[0]: dialect.decode_time(row[-1]) for row in rows if row[-1] is not None}


def _held(
    conn: Connection, dialect: Dialect, tables: Tables, now: datetime, due: dict[str, int]
) -> list[tuple[str, int]]:
    """(queue, attempts) of each due row a worker holds locked now, not under a lease, of
    these queues (with their due jobs). Where the database cannot narrow the rows down, the
    first rows of each queue in claim order are probed (where workers claim): up to
    `_PROBED_PER_QUEUE` of each, `MAX_EXAMINED` in all, in one statement."""
    held = dialect.held_rows(conn)
    at = dialect.encode_time(now)
    if held.narrowed:
        candidates = dialect.fetchall(
            conn,
            f"SELECT job_id, queue, attempts FROM {tables.job_table} "
            f"WHERE process_at <= %s AND leased_by IS NULL AND {held.condition}",
            (at, *held.params),
        )
    else:
        shares = _shares({queue: min(count, _PROBED_PER_QUEUE) for queue, count in due.items()})
        head = dialect.claim_statement("leased_by IS NULL AND ", "job_id, queue, attempts")
        head = head.removesuffix(" FOR UPDATE SKIP LOCKED")
        params = [
            p for queue, n in shares.items() for p in dialect.claim_params(queue, None, now, n)
        ]
        candidates = (
            dialect.fetchall(conn, " UNION ALL ".join([f"({head})"] * len(shares)), params)
            if shares
            else []
        )
    candidates = [row for row in candidates if row[1] in due]
    ids = [row[0] for row in candidates]
    locked = set(ids) if held.exact else dialect.probe_held(conn, ids)
    return [(queue, int(attempts)) for job_id, queue, attempts in candidates if job_id in locked]


def _shares(needs: dict[str, int]) -> dict[str, int]:
    """Rows to probe per queue: what each needs, `MAX_EXAMINED` in all, shared evenly among
    the queues that need more than an even share (the queues needing none left out)."""
    budget, shares = MAX_EXAMINED, {}
    ordered = sorted((need, queue) for queue, need in needs.items() if need > 0)
    for n, (need, queue) in enumerate(ordered):
        take = min(need, budget // (len(ordered) - n))
        if take > 0:
            shares[queue] = take
            budget -= take
    return shares


def throughput(
    conn: Connection,
    *,
    hours: int = 24,
    buckets: int = 24,
    queue: str | None = None,
    now: datetime | None = None,
    tables: Tables = DEFAULT_TABLES,
) -> list[ThroughputBucket]:
    """Jobs archived as succeeded and failed over the last `hours`, in `buckets` equal
    slices, oldest first (every slice listed, empty ones as zeros); of one queue if given."""
    for name, value in (("hours", hours), ("buckets", buckets)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ArgumentTypeError(f"{name} must be a positive int, got {value!r}")
    dialect = dialect_of(conn, tables)
    end = _utc(now or datetime.now(timezone.utc))
    start = end - timedelta(hours=hours)
    width = timedelta(hours=hours) / buckets
    at = dialect.encode_time(start)
    where = (
        _Where()
        .add("finished_at >= %s", at)
        .add("finished_at < %s", dialect.encode_time(end))
        .given("queue = %s", queue)
    )
    slot = dialect.seconds_since("finished_at")
    sql = (
        f"SELECT FLOOR({slot} / %s) AS slot, status, COUNT(*) FROM {tables.archived_job_table} "
        f"WHERE {where.sql} GROUP BY 1, 2"
    )
    seconds = width.total_seconds()
    rows = dialect.fetchall(conn, sql, (at, seconds, *where.params))
    counts = [[0, 0] for _ in range(buckets)]
    for index, status, count in rows:
        n = min(int(index), buckets - 1)
        if outcome(status) in (SUCCESS, FAILURE):
            counts[n][outcome(status) == FAILURE] += int(count)
    return [
        ThroughputBucket(start + width * n, succeeded, failed)
        for n, (succeeded, failed) in enumerate(counts)
    ]


MINUTE = timedelta(minutes=1)
LAST_HOUR_MINUTES = 60


def last_hour(
    conn: Connection,
    queues: Sequence[str],
    *,
    now: datetime | None = None,
    tables: Tables = DEFAULT_TABLES,
) -> dict[str, list[ThroughputBucket]]:
    """The jobs of these queues archived as succeeded and failed in the last hour, a clock
    minute per bucket, oldest first: the current minute so far and the 59 before it (a job
    that finished after `now`, by a clock ahead, in the last). One read of the archive,
    through its `finished_at` index, at most 120 rows per queue."""
    dialect = dialect_of(conn, tables)
    end = _utc(now or datetime.now(timezone.utc))
    start = end.replace(second=0, microsecond=0) - (LAST_HOUR_MINUTES - 1) * MINUTE
    counts = {queue: [[0, 0] for _ in range(LAST_HOUR_MINUTES)] for queue in queues}
    if queues:
        at = dialect.encode_time(start)
        marks = ", ".join(["%s"] * len(queues))
        rows = dialect.fetchall(
            conn,
            f"SELECT FLOOR({dialect.seconds_since('finished_at')} / 60), queue, status, "
            f"COUNT(*) FROM {tables.archived_job_table} WHERE finished_at >= %s "
            f"AND queue IN ({marks}) AND {status_in('status', SUCCESS, FAILURE)} "
            "GROUP BY 1, 2, 3",
            (at, at, *queues),
        )
        for index, queue, status, count in rows:
            if queue in counts:
                n = min(max(int(index), 0), LAST_HOUR_MINUTES - 1)
                counts[queue][n][outcome(status) == FAILURE] += int(count)
    return {
        queue: [
            ThroughputBucket(start + n * MINUTE, succeeded, failed)
            for n, (succeeded, failed) in enumerate(minutes)
        ]
        for queue, minutes in counts.items()
    }


def recent_failures(
    conn: Connection,
    limit: int = 5,
    *,
    tables: Tables = DEFAULT_TABLES,
) -> list[tuple[uuid.UUID, str, str, int, datetime]]:
    """The latest failed jobs as (job_id, queue, job_type, attempts, finished_at)."""
    dialect = dialect_of(conn, tables)
    rows = dialect.fetchall(
        conn,
        "SELECT job_id, queue, job_type, attempts, finished_at "
        f"FROM {tables.archived_job_table} WHERE {status_in('status', FAILURE)} "
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
    dialect = dialect_of(conn, tables)
    marks = ", ".join(["%s"] * len(queues))
    sql = f"SELECT COUNT(*) FROM {tables.job_table} WHERE queue IN ({marks})"
    return int(dialect.fetchall(conn, sql, list(queues))[0][0])

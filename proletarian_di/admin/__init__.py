"""Operator queries on any connection of either database: queue statistics, listing and
inspecting jobs, retrying failed jobs, cancelling waiting ones, pruning the archive, listing
periodic schedules and live workers, pausing and resuming queues, schema checks.

The CLI uses them, and so can your own tools. Like `enqueue`, none of them commits:
they run in the caller's transaction, and the caller commits (or rolls back a read).
Table names are validated identifiers and every value is a query parameter.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple

from .._common.types import Connection
from .._engine import pauses as _pauses
from .._engine import registry as _registry
from .._engine.registry import WorkerInfo, WorkerThread
from .._store import dependencies as _dependencies
from .._store.dependencies import BLOCKED_AT, BLOCKED_SQL
from .._store.dialects import Dialect, dialect_of
from .._store.dialects.base import HeldRows
from .._store.outcomes import DAY_HOURS as _DAY_HOURS
from .._store.outcomes import HOUR as _HOUR
from .._store.outcomes import HourlyOutcomes, first_hour
from .._store.tables import (
    DEFAULT_TABLES,
    UPGRADE_HINT,
    Tables,
    attempt_table,
    periodic_table,
    workers_table,
)
from ..errors import ArgumentTypeError, ConfigurationError, SchemaError
from ..periodic import Schedule, next_tick
from ..schema import check_schema
from ..serializers import Serializer, check_serializer
from . import explain as _explain
from . import timings as _timings
from .explain import Explanation
from .timings import MAX_HOURS, Timing

__all__ = [
    "BATCH_SIZE",
    "DEFAULT_TABLES",
    "HEADLINE_CHARS",
    "MAX_EXAMINED",
    "MAX_LIMIT",
    "SEARCH_FIELDS",
    "SEARCH_ROWS",
    "STALE_AFTER",
    "STATES",
    "Attempt",
    "ErrorGroup",
    "ErrorGroups",
    "Explanation",
    "HourlyOutcomes",
    "JobInfo",
    "JobPage",
    "JobSearch",
    "OverviewPage",
    "Pruned",
    "QueueOverview",
    "QueueStats",
    "Tables",
    "ThroughputBucket",
    "Timing",
    "WorkerInfo",
    "WorkerThread",
    "WorkflowInfo",
    "cancel_jobs",
    "check",
    "delete_archived",
    "discard_failed",
    "error_headline",
    "explain_job",
    "failure_groups",
    "find_jobs",
    "get_job",
    "get_result",
    "get_workflow",
    "id_fragment",
    "in_batches",
    "list_jobs",
    "list_jobs_page",
    "list_schedules",
    "list_workers",
    "missing_columns",
    "overview",
    "overview_page",
    "prune_archive",
    "prune_workers",
    "purge_archive",
    "queue_stats",
    "recent_failures",
    "retry_failed",
    "retry_jobs",
    "still_needed",
    "throughput",
    "timings",
    "waiting",
]

STATES = (
    "blocked",
    "queued",
    "scheduled",
    "retrying",
    "running",
    "succeeded",
    "failed",
    "cancelled",
)
"""A job's states: the first five in the job table, the last three in the archive. A
`blocked` job waits on others (`depends_on`, `Workflow`)."""

MAX_LIMIT = 1000
"""The most jobs one `list_jobs` call returns."""

MAX_EXAMINED = 2000
"""The most rows one `list_jobs_page` or `overview_page` call reads to tell jobs' states by
default: where the database cannot list the rows workers hold, the rows are probed, and the
probe of a large table is bounded by this, not by the table."""

_LEASED = "leased_by IS NOT NULL AND process_at > %s"
"""A job under a live lease (its `%s` is now): a lease-mode worker runs it, its row unlocked,
and its process_at is when the lease runs out. An expired lease is due, to be rescued."""
_NOT_LEASED = "(leased_by IS NULL OR process_at <= %s)"
_WAITING = {
    "blocked": f"attempts = 0 AND process_at > {BLOCKED_SQL}",
    "queued": "attempts = 0 AND process_at <= %s",
    "scheduled": f"attempts = 0 AND process_at > %s AND process_at < {BLOCKED_SQL}",
    "retrying": f"attempts > 0 AND {_NOT_LEASED}",
    "running": "",
}
_ARCHIVED = {"succeeded": "success", "failed": "failure", "cancelled": "cancelled"}
_STATE_OF_STATUS = {status: state for state, status in _ARCHIVED.items()}
_ORDER = "ORDER BY enqueued_at DESC, job_id DESC"
_SCAN_BATCH = 200
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

HEADLINE_CHARS = 200
"""The most characters of an error's first line that name its group (see `error_headline`)."""

_HEADLINE = {
    "postgresql": "LEFT(split_part(last_error, %s, 1), {n})",
    "mysql": "LEFT(SUBSTRING_INDEX(last_error, %s, 1), {n})",
}
"""An error's headline in SQL; its `%s` is a line feed (a parameter: no escapes to agree on)."""


def error_headline(error: str | None) -> str | None:
    """An error's first line (`Type: message`, as a failed attempt stores it), cut to
    `HEADLINE_CHARS` characters: what names its group in `failure_groups`, and what the
    `error` filters match."""
    return None if error is None else error.split("\n", 1)[0][:HEADLINE_CHARS]


def _headline_sql(dialect: Dialect) -> str:
    return _HEADLINE[dialect.name].format(n=HEADLINE_CHARS)


def _check_error(error: Any) -> str | None:
    """An `error` filter: a first line as `error_headline` gives it (None: any error)."""
    if error is None:
        return None
    if not isinstance(error, str) or not error or "\n" in error or len(error) > HEADLINE_CHARS:
        raise ConfigurationError(
            f"error must be an error's first line (one line of 1 to {HEADLINE_CHARS} "
            f"characters, as error_headline gives it), got {error!r}"
        )
    return error


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
    """Per queue: due (running ones included), scheduled, running now (held by a worker,
    row lock or live lease), oldest due wait; succeeded/failed in the last hour and the last
    day; paused. A paused queue with no jobs is listed too.

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
            f"COUNT(CASE WHEN {_LEASED} THEN 1 END){_oldest_column(dialect)} "
            f"FROM {tables.job_table} GROUP BY queue",
            (t_now,) * (2 + dialect.oldest_in_scan),
        )
        last_hour = dialect.fetchall(
            conn,
            "SELECT queue, SUM(CASE WHEN status = 'success' THEN 1 ELSE 0 END), "
            "SUM(CASE WHEN status = 'failure' THEN 1 ELSE 0 END) "
            f"FROM {tables.archived_job_table} WHERE finished_at >= %s GROUP BY queue",
            (t_hour,),
        )
        last_day = HourlyOutcomes().read(conn, dialect, tables.archived_job_table, _utc(now))
        by_queue: dict[str, QueueStats] = {}
        unleased_due: dict[str, int] = {}
        for queue, total, scheduled, leased, *_ in waiting_rows:
            entry = by_queue.setdefault(queue, QueueStats(queue))
            entry.scheduled = int(scheduled)
            entry.due = int(total) - entry.scheduled  # a live lease's job counts as due
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


def _overview(
    conn: Connection,
    now: datetime | None,
    tables: Tables,
    outcomes: HourlyOutcomes | None,
    offset: int | None,
    count: int | None,
) -> tuple[list[QueueOverview], int, list[ThroughputBucket]]:
    """The queues from `offset` by name, `count` of them (None: all); how many there are in
    all; the last day's outcomes over all of them. Only the queues shown are probed."""
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
            f"THEN 1 END){_oldest_column(dialect)} "
            f"FROM {tables.job_table} GROUP BY queue",
            (at,) * (3 + dialect.oldest_in_scan),
        )
        for queue, total, leased, retrying, scheduled, *_ in rows:
            item = entry(queue)
            item.running, item.retrying, item.scheduled = int(leased), int(retrying), int(scheduled)
            item.queued = int(total) - item.running - item.retrying - item.scheduled
        outcomes = HourlyOutcomes() if outcomes is None else outcomes
        hourly = outcomes.read(conn, dialect, tables.archived_job_table, now)
        for queue in hourly:
            entry(queue)
        for queue in _pauses.paused_queues(conn, dialect):
            entry(queue).paused = True
        names = sorted(by_queue)
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
        if status in ("success", "failure"):
            counts[n][status == "failure"] += int(count)
    return [
        ThroughputBucket(start + width * n, succeeded, failed)
        for n, (succeeded, failed) in enumerate(counts)
    ]


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One run of a job, as its history keeps it: its number (from 1; a run that `stop()`
    abandoned keeps its number, which runs again), when it started (None: unknown, a run
    whose lease ran out), when it ended, the worker that ran it (`host:pid thread`; a
    dead lease's `host:pid`), and its error (None: it succeeded)."""

    number: int
    started_at: datetime | None
    finished_at: datetime
    worker: str | None
    error: str | None

    @property
    def duration(self) -> timedelta | None:
        """How long it ran (None when its start is unknown)."""
        return None if self.started_at is None else self.finished_at - self.started_at

    @property
    def succeeded(self) -> bool:
        return self.error is None

    def as_dict(self) -> dict[str, Any]:
        """The fields for JSON: times in ISO 8601, the duration in seconds."""
        duration = self.duration
        return {
            **dataclasses.asdict(self),
            "started_at": self.started_at and self.started_at.isoformat(),
            "finished_at": self.finished_at.isoformat(),
            "duration_seconds": None if duration is None else duration.total_seconds(),
        }


@dataclasses.dataclass(frozen=True)
class JobInfo:
    """One job as an operator sees it, waiting or archived; every time is an aware UTC datetime.

    `state` is one of `STATES`; `payload` is decoded (its raw text when it cannot be);
    `finished_at` is None while the job waits; `error` is the last failed attempt's error
    (a failure's own once archived), None when no attempt failed; `priority` is the one
    it was enqueued with. `payload_truncated`: the listing read only the payload's first
    characters (see `list_jobs_page`), and `payload` is that text, not decoded. `history`:
    every finished attempt, oldest first (`get_job` reads it; listings leave it empty).
    `progress`: what a running job last reported (`Job.report_progress`), as its worker's
    last beat wrote it (`get_job` reads it; None otherwise). `group_key`: the one it was
    enqueued with, while it waits or runs (`get_job` reads it; the archive does not keep it).
    `workflow_id`, `parents` and `children`: the workflow it belongs to, the jobs it waits on
    (`depends_on`) and those that wait on it (`get_job` reads them).
    """

    job_id: uuid.UUID
    queue: str
    job_type: str
    payload: Any
    attempts: int
    state: str
    enqueued_at: datetime
    process_at: datetime
    finished_at: datetime | None
    error: str | None
    priority: int = 0
    payload_truncated: bool = False
    history: tuple[Attempt, ...] = ()
    progress: Any = None
    group_key: str | None = None
    workflow_id: uuid.UUID | None = None
    parents: tuple[uuid.UUID, ...] = ()
    children: tuple[uuid.UUID, ...] = ()

    @property
    def error_headline(self) -> str | None:
        """The error's first line (`Type: message`), as `error_headline` gives it."""
        return error_headline(self.error)

    @property
    def cursor(self) -> str:
        """This job's place in `list_jobs`' order as text, for `before=` (an HTTP query, say):
        `<enqueued_at in microseconds since 1970>.<job_id>`."""
        return f"{(self.enqueued_at - _EPOCH) // timedelta(microseconds=1)}.{self.job_id}"

    def as_dict(self) -> dict[str, Any]:
        """The fields for JSON, the id and the times (ISO 8601) as strings."""
        data = dataclasses.asdict(self)
        data["job_id"] = str(self.job_id)
        for name in ("enqueued_at", "process_at", "finished_at"):
            data[name] = data[name] and data[name].isoformat()
        data["history"] = [attempt.as_dict() for attempt in self.history]
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
    since = end.replace(minute=0, second=0, microsecond=0) - (hours - 1) * _HOUR
    return _timings.read(
        conn, dialect, tables.archived_job_table, since, hours, per_hour, queue, job_type
    )


@dataclasses.dataclass(frozen=True)
class JobPage:
    """One page of `list_jobs_page`: its jobs, newest first; `next_before`, the cursor of the
    next page (None after the last); `partial` when the page stopped at its bound of rows
    examined before it found `limit` jobs (the next page goes on from there); `examined`,
    the rows it read to tell the jobs' states."""

    jobs: list[JobInfo]
    next_before: str | None
    partial: bool
    examined: int


class _Where:
    """SQL conditions joined by AND, with their parameters in order."""

    def __init__(self, *clauses: str) -> None:
        self.clauses = list(clauses)
        self.params: list[Any] = []

    def add(self, clause: str, *params: Any) -> _Where:
        """`clause` with its parameters."""
        self.clauses.append(clause)
        self.params.extend(params)
        return self

    def given(self, clause: str, value: Any) -> _Where:
        """`clause` with its one parameter, unless the value is None."""
        return self if value is None else self.add(clause, value)

    def headline(self, dialect: Dialect, error: str | None) -> _Where:
        """Only jobs whose error's first line is `error` (None: any job)."""
        if error is None:
            return self
        return self.add(f"{_headline_sql(dialect)} = %s", "\n", error)

    def copy(self) -> _Where:
        where = _Where(*self.clauses)
        where.params = list(self.params)
        return where

    def ids(self, dialect: Dialect, job_ids: Sequence[uuid.UUID] | None) -> _Where:
        """Only these jobs (None: any job)."""
        if job_ids is None:
            return self
        encode = dialect.default_id_strategy.encode
        return self.add(f"job_id IN ({', '.join(['%s'] * len(job_ids))})", *map(encode, job_ids))

    @property
    def sql(self) -> str:
        """The conditions as one (true when there are none)."""
        return " AND ".join(self.clauses) or "1 = 1"


@dataclasses.dataclass(frozen=True)
class _Query:
    """What `list_jobs` and `get_job` look for (times aware UTC)."""

    state: str | None = None
    queue: str | None = None
    job_type: str | None = None
    enqueued_since: datetime | None = None
    enqueued_until: datetime | None = None
    finished_since: datetime | None = None
    finished_until: datetime | None = None
    job_id: uuid.UUID | None = None
    error: str | None = None
    condition: tuple[str, tuple[Any, ...]] | None = None
    """More SQL, with its parameters, that a row must match (a search's)."""

    def in_job_table(self) -> bool:
        """Whether waiting jobs can match (they have no finished_at)."""
        finished = self.finished_since is not None or self.finished_until is not None
        return self.state in (None, *_WAITING) and not finished

    def in_archive(self) -> bool:
        """Whether archived jobs can match."""
        return self.state in (None, *_ARCHIVED)


def list_jobs(
    conn: Connection,
    *,
    queue: str | None = None,
    job_type: str | None = None,
    state: str | None = None,
    limit: int = 100,
    enqueued_since: datetime | None = None,
    enqueued_until: datetime | None = None,
    finished_since: datetime | None = None,
    finished_until: datetime | None = None,
    before: JobInfo | str | None = None,
    error: str | None = None,
    tables: Tables = DEFAULT_TABLES,
    serializer: Serializer | None = None,
) -> list[JobInfo]:
    """Jobs, waiting and archived, newest first (by enqueued_at, then job_id): at most
    `limit` (1 to `MAX_LIMIT`), of one `state` if given (see `STATES`).

    Filters: queue, job type, `enqueued_since` <= enqueued_at < `enqueued_until`,
    `finished_since` <= finished_at < `finished_until` (archived jobs only), and `error`, the
    (last) error's first line as `error_headline` gives it. Pages: pass the
    last job of a page, or its `cursor` string, as `before` to get the next one. "running"
    is a job whose row a worker holds locked now, probed without blocking anyone (see the
    admin docs for what each database does), or one under a live lease (`leased_by` set,
    `process_at`, the lease's end, still ahead). Roll back or commit afterwards.

    It reads on until it has `limit` jobs or none are left; `list_jobs_page` bounds that.
    """
    query = _Query(
        _check_state(state),
        queue,
        job_type,
        _moment(enqueued_since, "enqueued_since"),
        _moment(enqueued_until, "enqueued_until"),
        _moment(finished_since, "finished_since"),
        _moment(finished_until, "finished_until"),
        error=_check_error(error),
    )
    count, after = _check_limit(limit), _after(before)
    codec = check_serializer(serializer)
    dialect = dialect_of(conn, tables)
    with dialect.admin_read(conn):
        return _collect(conn, dialect, tables, query, count, after, codec).jobs


def list_jobs_page(
    conn: Connection,
    *,
    queue: str | None = None,
    job_type: str | None = None,
    state: str | None = None,
    limit: int = 100,
    before: JobInfo | str | None = None,
    max_examined: int = MAX_EXAMINED,
    payload_chars: int | None = None,
    error: str | None = None,
    tables: Tables = DEFAULT_TABLES,
    serializer: Serializer | None = None,
) -> JobPage:
    """One page of `list_jobs` whose work is bounded, for pages anyone may load (a dashboard):
    it reads at most `max_examined` rows (at least `limit`) in a few statements, however
    large the tables, and says when it stopped there (`JobPage.partial`: a state that only a
    probe of row locks tells, such as "running" on MariaDB, can need more).

    `payload_chars`: read only the first this many characters of each payload (in SQL); a
    longer payload is that text, undecoded, with `payload_truncated` set. None: whole payloads.
    `error`: only jobs whose (last) error's first line is this (see `error_headline`).
    """
    query = _Query(_check_state(state), queue, job_type, error=_check_error(error))
    count, after = _check_limit(limit), _after(before)
    _check_positive(max_examined, "max_examined")
    if payload_chars is not None:
        _check_positive(payload_chars, "payload_chars")
    codec = check_serializer(serializer)
    dialect = dialect_of(conn, tables)
    with dialect.admin_read(conn):
        return _collect(
            conn,
            dialect,
            tables,
            query,
            count,
            after,
            codec,
            max(max_examined, count),
            payload_chars,
        )


def get_job(
    conn: Connection,
    job_id: uuid.UUID | str,
    *,
    tables: Tables = DEFAULT_TABLES,
    serializer: Serializer | None = None,
) -> JobInfo | None:
    """The job with this id, waiting or archived, with its history, or None if there is
    none."""
    query = _Query(job_id=_job_id(job_id))
    codec = check_serializer(serializer)
    dialect = dialect_of(conn, tables)
    with dialect.admin_read(conn):
        found = _collect(conn, dialect, tables, query, 1, None, codec).jobs
        if not found:
            return None
        job = found[0]
        return dataclasses.replace(
            job,
            history=_history(conn, dialect, tables, job),
            progress=_progress(conn, dialect, tables, job),
            group_key=_group_key(conn, dialect, tables, job),
            **_graph(conn, dialect, job),
        )


def _graph(conn: Connection, dialect: Dialect, job: JobInfo) -> dict[str, Any]:
    """A job's workflow, parents and children (none on a schema without them)."""
    if not _dependencies.has_tables(conn, dialect):
        return {}
    ids = dialect.default_id_strategy
    key = ids.encode(job.job_id)
    deps = dialect.dependencies_table
    row = dialect.fetchone(
        conn, f"SELECT workflow_id FROM {dialect.workflows_table} WHERE job_id = %s", (key,)
    )

    def read(sql: str) -> tuple[uuid.UUID, ...]:
        return tuple(sorted(ids.decode(r[0]) for r in dialect.fetchall(conn, sql, (key,))))

    return {
        "workflow_id": None if row is None else ids.decode(row[0]),
        "parents": read(f"SELECT parent_id FROM {deps} WHERE job_id = %s"),
        "children": read(f"SELECT job_id FROM {deps} WHERE parent_id = %s"),
    }


@dataclasses.dataclass(frozen=True)
class WorkflowInfo:
    """A workflow (`Workflow.enqueue`): its name and jobs, each with its `parents` and
    `children`, in the order they were added; `finished` once every job has ended."""

    workflow_id: uuid.UUID
    name: str
    jobs: tuple[JobInfo, ...]

    @property
    def finished(self) -> bool:
        return all(job.finished_at is not None for job in self.jobs)

    @property
    def states(self) -> dict[str, int]:
        """How many of its jobs are in each state."""
        counts: dict[str, int] = {}
        for job in self.jobs:
            counts[job.state] = counts.get(job.state, 0) + 1
        return counts


def get_workflow(
    conn: Connection,
    workflow_id: uuid.UUID | str,
    *,
    tables: Tables = DEFAULT_TABLES,
    serializer: Serializer | None = None,
) -> WorkflowInfo | None:
    """The workflow with this id, its jobs and their states; None if there is none (or its
    jobs were purged)."""
    dialect = dialect_of(conn, tables)
    with dialect.admin_read(conn):
        if not _dependencies.has_tables(conn, dialect):
            return None
        ids = dialect.default_id_strategy
        rows = dialect.fetchall(
            conn,
            f"SELECT job_id, name FROM {dialect.workflows_table} WHERE workflow_id = %s",
            (ids.encode(_job_id(workflow_id)),),
        )
    jobs = [get_job(conn, ids.decode(r[0]), tables=tables, serializer=serializer) for r in rows]
    found = sorted((job for job in jobs if job is not None), key=lambda j: j.enqueued_at)
    if not found:
        return None
    return WorkflowInfo(_job_id(workflow_id), rows[0][1], tuple(found))


def get_result(
    conn: Connection, job_id: uuid.UUID | str, *, tables: Tables = DEFAULT_TABLES
) -> Any:
    """The value the job's handler returned, kept with the job when it succeeded (decoded
    from JSON); None if it returned None, has not succeeded (yet), returned a value that is
    not JSON, or there is no such job. A retry that succeeds again replaces it; purging the
    archived job deletes it."""
    dialect = dialect_of(conn, tables)
    with dialect.admin_read(conn):
        if not dialect.table_columns(conn, dialect.results_table):
            return None
        key = dialect.default_id_strategy.encode(_job_id(job_id))
        row = dialect.fetchone(
            conn,
            f"SELECT r.return_value FROM {dialect.results_table} r JOIN "
            f"{tables.archived_job_table} a ON a.job_id = r.job_id "
            "WHERE r.job_id = %s AND a.status = 'success'",
            (key,),
        )
    return None if row is None or row[0] is None else json.loads(row[0])


def _group_key(conn: Connection, dialect: Dialect, tables: Tables, job: JobInfo) -> str | None:
    """A waiting or running job's group key (None: none, or a schema without the column)."""
    if job.finished_at is not None or "group_key" not in dialect.table_columns(
        conn, tables.job_table
    ):
        return None
    key = dialect.default_id_strategy.encode(job.job_id)
    row = dialect.fetchone(
        conn, f"SELECT group_key FROM {tables.job_table} WHERE job_id = %s", (key,)
    )
    return row[0] if row is not None and row[0] else None


def _progress(conn: Connection, dialect: Dialect, tables: Tables, job: JobInfo) -> Any:
    """A running job's progress, from the live worker that runs it (None if it reported
    none, or the schema predates the live workers' table)."""
    table = workers_table(tables.job_table)
    if job.state != "running" or not dialect.table_columns(conn, table):
        return None
    for worker in _registry.read_workers(conn, dialect, table, job.queue, STALE_AFTER):
        for thread in worker.threads:
            if thread.job_id == job.job_id and thread.progress is not None:
                return thread.progress
    return None


def explain_job(
    conn: Connection,
    job_id: uuid.UUID | str,
    *,
    now: datetime | None = None,
    tables: Tables = DEFAULT_TABLES,
) -> Explanation | None:
    """Why the job with this id is not running now, or None if there is no such job: its
    state (as `get_job` tells it) and a sentence for each thing that holds it back (its
    queue paused, scheduled or retrying until a time, its queue's `max_running` full, with
    the running jobs that hold the slots, its queue's or group's rate limit spent until a
    time, no live worker polling its queue). A running or
    finished job has no reasons; `Explanation.note` then says who runs it, or when it ended.

    The workers are the live workers' registry's (see `list_workers`); on a schema without
    it, nothing is said about workers. A few small reads, whatever the tables' size."""
    wanted = _job_id(job_id)
    at = _utc(now or datetime.now(timezone.utc))
    dialect = dialect_of(conn, tables)
    with dialect.admin_read(conn):
        held = dialect.held_rows(conn)
        query = _Query(job_id=wanted)
        sql, params = _select(dialect, tables, query, held, None, at, 1, 1)
        rows = dialect.fetchall(conn, sql, params)
        found = _infos(conn, dialect, rows, held, at, check_serializer(None), 1)
        if not found:
            return None
        job = dataclasses.replace(found[0], group_key=_group_key(conn, dialect, tables, found[0]))
        registry = workers_table(tables.job_table)
        workers = None
        if dialect.table_columns(conn, registry):
            workers = _registry.read_workers(conn, dialect, registry, found[0].queue, STALE_AFTER)
        return _explain.explain(_explain.Facts(conn, dialect, job, at, workers))


def _history(
    conn: Connection, dialect: Dialect, tables: Tables, job: JobInfo
) -> tuple[Attempt, ...]:
    """The job's finished attempts, oldest first: the failed ones from the attempt table, then
    its success from the archive, in one statement."""
    key = dialect.default_id_strategy.encode(job.job_id)
    rows = dialect.fetchall(
        conn,
        f"SELECT attempt, started_at, finished_at, worker, error, 0 FROM "
        f"{attempt_table(tables.job_table)} WHERE job_id = %s UNION ALL "
        "SELECT attempts, started_at, finished_at, worker, NULL, 1 FROM "
        f"{tables.archived_job_table} WHERE job_id = %s AND status = 'success'",
        (key, key),
    )

    attempts = []
    for n, started, finished, worker, error, last in rows:
        ended = _utc(dialect.decode_time(finished))
        began = None if started is None else _utc(dialect.decode_time(started))
        attempts.append((last, ended, Attempt(int(n), began, ended, worker, error)))
    return tuple(attempt for *_, attempt in sorted(attempts, key=lambda row: row[:2]))


def _collect(
    conn: Connection,
    dialect: Dialect,
    tables: Tables,
    query: _Query,
    limit: int,
    after: tuple[datetime, uuid.UUID] | None,
    codec: Serializer,
    max_examined: int | None = None,
    payload_chars: int | None = None,
) -> JobPage:
    """Up to `limit` jobs matching `query` after `after`; a waiting state, which the lock
    probe decides, may take more than one batch of rows: with `max_examined`, two at most
    (the page's worth, then the rest of the bound), else as many as it takes."""
    now = datetime.now(timezone.utc)
    held = dialect.held_rows(conn)
    exact = query.state is None or query.state in _ARCHIVED
    batch = limit if exact else max(limit, _SCAN_BATCH)
    if max_examined is not None:
        batch = min(batch, max_examined)
    found: list[JobInfo] = []
    examined = 0
    last: JobInfo | None = None
    full = False
    while query.in_job_table() or query.in_archive():
        sql, params = _select(dialect, tables, query, held, after, now, batch, payload_chars)
        rows = dialect.fetchall(conn, sql, params)
        examined += len(rows)
        infos = _infos(conn, dialect, rows, held, now, codec, payload_chars)
        found.extend(info for info in infos if query.state in (None, info.state))
        full = len(rows) == batch
        if infos:
            last = infos[-1]
        if len(found) >= limit or not full:
            break
        if max_examined is not None:
            batch = max_examined - examined
            if batch <= 0:
                break
        after = infos[-1].enqueued_at, infos[-1].job_id
    jobs = found[:limit]
    partial = len(jobs) < limit and full
    if len(jobs) == limit:
        next_before: str | None = jobs[-1].cursor
    else:
        next_before = last.cursor if partial and last is not None else None
    return JobPage(jobs, next_before, partial, examined)


def _select(
    dialect: Dialect,
    tables: Tables,
    query: _Query,
    held: HeldRows,
    after: tuple[datetime, uuid.UUID] | None,
    now: datetime,
    limit: int,
    payload_chars: int | None = None,
    archive_query: _Query | None = None,
) -> tuple[str, list[Any]]:
    """The SELECT of the next `limit` rows after `after`, newest first, from the tables
    `query` can find jobs in (`archive_query`, when given, is the archive's); each row ends
    with its `held` flag (1: maybe locked by a running worker), its priority and its
    `leased` flag (1: under a live lease, running)."""
    columns = dialect.columns
    if payload_chars is not None:
        prefix = f"LEFT(payload, {int(payload_chars) + 1}) AS payload"
        columns = columns.replace("payload", prefix, 1)
    branches = []
    if query.in_job_table():
        branches.append(_job_rows(dialect, tables.job_table, query, held, after, now, columns))
    if query.in_archive():
        archived = archive_query or query
        branches.append(
            _archived_rows(dialect, tables.archived_job_table, archived, after, columns)
        )
    if len(branches) == 1:
        sql, params = branches[0]
        return f"{sql} {_ORDER} LIMIT %s", [*params, limit]
    (first, first_params), (second, second_params) = branches
    return (
        f"SELECT * FROM (({first} {_ORDER} LIMIT %s) UNION ALL ({second} {_ORDER} LIMIT %s)) "
        f"AS page {_ORDER} LIMIT %s",
        [*first_params, limit, *second_params, limit, limit],
    )


def _matching(dialect: Dialect, query: _Query, after: tuple[datetime, uuid.UUID] | None) -> _Where:
    """The conditions both tables share: id, queue, job type, enqueued range, page start."""
    encode, key = dialect.encode_time, dialect.default_id_strategy.encode
    where = (
        _Where()
        .given("job_id = %s", query.job_id and key(query.job_id))
        .given("queue = %s", query.queue)
        .given("job_type = %s", query.job_type)
        .headline(dialect, query.error)
        .given("enqueued_at >= %s", query.enqueued_since and encode(query.enqueued_since))
        .given("enqueued_at < %s", query.enqueued_until and encode(query.enqueued_until))
    )
    if query.condition is not None:
        where.add(query.condition[0], *query.condition[1])
    if after is not None:
        at, job_id = encode(after[0]), key(after[1])
        where.add("(enqueued_at < %s OR (enqueued_at = %s AND job_id < %s))", at, at, job_id)
    return where


def _job_rows(
    dialect: Dialect,
    table: str,
    query: _Query,
    held: HeldRows,
    after: tuple[datetime, uuid.UUID] | None,
    now: datetime,
    columns: str,
) -> tuple[str, list[Any]]:
    """The job table's part: the state's condition, whether each row may be held, and
    whether it is under a live lease."""
    at = dialect.encode_time(now)
    where = _matching(dialect, query, after)
    if query.state == "running":
        where.add(f"({held.condition} OR {_LEASED})", *held.params, at)
    elif query.state is not None:
        condition = _WAITING[query.state]
        where.add(condition, *[at] * condition.count("%s"))
    columns = (
        f"{columns}, NULL AS status, NULL AS finished_at, last_error, "
        f"CASE WHEN {held.condition} THEN 1 ELSE 0 END AS held, priority, "
        f"CASE WHEN {_LEASED} THEN 1 ELSE 0 END AS leased"
    )
    sql = f"SELECT {columns} FROM {table} WHERE {where.sql}"
    return sql, [*held.params, at, *where.params]


def _archived_rows(
    dialect: Dialect,
    table: str,
    query: _Query,
    after: tuple[datetime, uuid.UUID] | None,
    columns: str,
) -> tuple[str, list[Any]]:
    """The archive's part: the state's status and the finished range."""
    encode = dialect.encode_time
    where = (
        _matching(dialect, query, after)
        .given("status = %s", _ARCHIVED.get(query.state or ""))
        .given("finished_at >= %s", query.finished_since and encode(query.finished_since))
        .given("finished_at < %s", query.finished_until and encode(query.finished_until))
    )
    columns = f"{columns}, status, finished_at, last_error, 0 AS held, priority, 0 AS leased"
    return f"SELECT {columns} FROM {table} WHERE {where.sql}", where.params


def _infos(
    conn: Connection,
    dialect: Dialect,
    rows: list[tuple[Any, ...]],
    held: HeldRows,
    now: datetime,
    codec: Serializer,
    payload_chars: int | None = None,
) -> list[JobInfo]:
    """The rows as jobs; the job rows that may be held are probed (on this page only), but
    not those under a live lease: they run, and a probe's lock could hold up their worker,
    which renews and settles its lease without SKIP LOCKED."""
    maybe = [row[0] for row in rows if row[10] and not row[12]]
    held_now = set(maybe) if held.exact else dialect.probe_held(conn, maybe)
    return [
        _info(dialect, row, bool(row[12]) or row[0] in held_now, now, codec, payload_chars)
        for row in rows
    ]


def _info(
    dialect: Dialect,
    row: tuple[Any, ...],
    running: bool,
    now: datetime,
    codec: Serializer,
    payload_chars: int | None = None,
) -> JobInfo:
    """One row of `_select` as a job, its state told from its table, lock or lease, and
    times."""
    raw_id, queue, job_type, text, attempts, enqueued, due, status, finished, error = row[:10]
    priority = row[11]
    if len(row) > 12 and row[12]:
        attempts -= 1  # a live lease's row counts the attempt in progress: finished ones only
    process_at = _utc(dialect.decode_time(due))
    if status is not None:
        state = _STATE_OF_STATUS.get(status, status)
    elif running:
        state = "running"
    elif attempts > 0:
        state = "retrying"
    elif process_at >= BLOCKED_AT:
        state = "blocked"
    else:
        state = "scheduled" if process_at > now else "queued"
    truncated = payload_chars is not None and len(text) > payload_chars
    return JobInfo(
        job_id=dialect.default_id_strategy.decode(raw_id),
        queue=queue,
        job_type=job_type,
        payload=text[:payload_chars] if truncated else _decode(codec, text),
        attempts=int(attempts),
        state=state,
        enqueued_at=_utc(dialect.decode_time(enqueued)),
        process_at=process_at,
        finished_at=None if finished is None else _utc(dialect.decode_time(finished)),
        error=error,
        priority=int(priority),
        payload_truncated=truncated,
    )


def _decode(codec: Serializer, text: str) -> Any:
    """The payload, or its raw text when it cannot be decoded (an operator still sees it)."""
    try:
        return codec.decode(text)
    except Exception:
        return text


def _utc(value: datetime) -> datetime:
    """The same moment in UTC (psycopg returns the session's time zone)."""
    return value.astimezone(timezone.utc)


def _moment(value: Any, name: str) -> datetime | None:
    """A time filter as an aware UTC datetime; a naive one means UTC, as in the CLI."""
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise ConfigurationError(f"{name} must be a datetime, got {value!r}")
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else _utc(value)


def _check_limit(limit: Any) -> int:
    """A page size from 1 to `MAX_LIMIT`: a page is one bounded query and probe."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise ConfigurationError(
            f"limit must be a whole number from 1 to {MAX_LIMIT}, got {limit!r}"
        )
    return limit


def _check_positive(value: Any, name: str) -> int:
    """A whole number >= 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{name} must be a whole number >= 1, got {value!r}")
    return value


def _check_state(state: Any) -> str | None:
    """One of `STATES`, or None for any."""
    if state is not None and state not in STATES:
        raise ConfigurationError(f"unknown state {state!r}; valid states: {', '.join(STATES)}")
    return state


def _job_id(value: Any) -> uuid.UUID:
    """A job id from a `uuid.UUID` or its string."""
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, str):
        try:
            return uuid.UUID(value)
        except ValueError:
            pass
    raise ConfigurationError(f"job id {value!r} is not a UUID (a uuid.UUID or its string)")


def _job_ids(job_ids: Any) -> list[uuid.UUID] | None:
    """Job ids without repeats (None: no ids given)."""
    if job_ids is None:
        return None
    if isinstance(job_ids, (str, bytes, uuid.UUID)):
        raise ConfigurationError(f"job_ids must be a list of job ids, got {job_ids!r}")
    return list(dict.fromkeys(map(_job_id, job_ids)))


def _after(before: Any) -> tuple[datetime, uuid.UUID] | None:
    """Where a page starts: after this job (a `JobInfo` or its `cursor`)."""
    if before is None:
        return None
    if isinstance(before, JobInfo):
        return before.enqueued_at, before.job_id
    if isinstance(before, str):
        micros, _, job_id = before.partition(".")
        try:
            return _EPOCH + timedelta(microseconds=int(micros)), uuid.UUID(job_id)
        except (ValueError, OverflowError):
            pass
    raise ConfigurationError(f"before must be a JobInfo or its cursor string, got {before!r}")


def _failures(
    dialect: Dialect,
    job_ids: list[uuid.UUID] | None,
    queue: str | None,
    job_type: str | None,
    since: datetime | None,
    until: datetime | None,
    error: str | None = None,
) -> _Where:
    """Archived failures, by id and filters (`since` <= finished_at < `until`, the error's
    first line)."""
    start, end = _moment(since, "since"), _moment(until, "until")
    return (
        _Where("status = 'failure'")
        .ids(dialect, job_ids)
        .given("queue = %s", queue)
        .given("job_type = %s", job_type)
        .headline(dialect, _check_error(error))
        .given("finished_at >= %s", start and dialect.encode_time(start))
        .given("finished_at < %s", end and dialect.encode_time(end))
    )


@dataclasses.dataclass(frozen=True)
class _Bulk:
    """What a bulk action acts on (the rows of `table` matching `where`) and how it moves
    them: `move(conn, where_sql, params)` returns how many moved."""

    dialect: Dialect
    table: str
    where: _Where
    move: Callable[[Connection, str, list[Any]], int]

    def count(self, conn: Connection) -> int:
        return _count(conn, self.dialect, self.table, self.where)

    def run(self, conn: Connection, where: _Where | None = None) -> int:
        """Move the rows matching `where` (by default, all of them)."""
        where = where or self.where
        with self.dialect.admin_write(conn):
            return self.move(conn, where.sql, where.params)

    def batches(self, conn: Connection, size: int) -> Iterator[int]:
        """One batch of at most `size` jobs per step, by id (a keyset over the primary key,
        so that each job is taken once, a running one passed over included)."""
        after: Any = None
        while True:
            where = self.where.copy()
            if after is not None:
                where.add("job_id > %s", after)
            with self.dialect.admin_write(conn):
                ids = [
                    row[0]
                    for row in self.dialect.fetchall(
                        conn,
                        f"SELECT job_id FROM {self.table} WHERE {where.sql} "
                        "ORDER BY job_id LIMIT %s",
                        [*where.params, size],
                    )
                ]
                marks = ", ".join(["%s"] * len(ids))
                taken = self.where.copy().add(f"job_id IN ({marks})", *ids)
                moved = self.run(conn, taken) if ids else 0
            yield moved
            if len(ids) < size:
                return
            after = ids[-1]


def _failed_plan(
    conn: Connection,
    job_ids: list[uuid.UUID] | None,
    *,
    requeue: bool,
    queue: str | None = None,
    job_type: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    error: str | None = None,
    tables: Tables = DEFAULT_TABLES,
) -> _Bulk:
    """Archived failures, to move back into the queue (`requeue`) or to delete."""
    dialect = dialect_of(conn, tables)
    where = _failures(dialect, job_ids, queue, job_type, since, until, error)
    if not requeue:
        return _Bulk(dialect, tables.archived_job_table, where, dialect.purge_archived)
    now = datetime.now(timezone.utc)
    return _Bulk(
        dialect,
        tables.archived_job_table,
        where,
        lambda c, sql, params: dialect.requeue(c, sql, params, now),
    )


def _act(
    conn: Connection,
    plan: Callable[..., _Bulk],
    job_ids: list[uuid.UUID] | None,
    dry_run: bool,
    **filters: Any,
) -> int:
    """Count (`dry_run`) or move the jobs of `plan` in one go; none for an empty id list."""
    if job_ids == []:
        return 0
    bulk = plan(conn, job_ids, **filters)
    return bulk.count(conn) if dry_run else bulk.run(conn)


_retry_plan = functools.partial(_failed_plan, requeue=True)
_discard_plan = functools.partial(_failed_plan, requeue=False)


def retry_jobs(
    conn: Connection,
    job_ids: Iterable[uuid.UUID | str] | None = None,
    *,
    queue: str | None = None,
    job_type: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    error: str | None = None,
    dry_run: bool = False,
    tables: Tables = DEFAULT_TABLES,
) -> int:
    """Move failed jobs (archived as `failure`) back into the queue: same id and payload,
    attempts reset to 0, last error kept, due now. Returns how many moved (or would move,
    with `dry_run`).

    By ids, by filters (queue, job type, `since` <= failed at < `until`, the `error`'s first
    line as `error_headline` gives it), or both; with neither, every failure. Only archived
    failures move: an id that names anything else (waiting, succeeded, cancelled, unknown)
    is not counted. Commit to keep them. `in_batches` moves many in bounded transactions.
    """
    return _act(
        conn,
        _retry_plan,
        _job_ids(job_ids),
        dry_run,
        queue=queue,
        job_type=job_type,
        since=since,
        until=until,
        error=error,
        tables=tables,
    )


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
    return retry_jobs(
        conn,
        queue=queue,
        job_type=job_type,
        since=since,
        until=until,
        dry_run=dry_run,
        tables=tables,
    )


def _selection(
    call: str,
    refused: str,
    job_ids: Iterable[uuid.UUID | str] | None,
    *filters: Any,
) -> list[uuid.UUID] | None:
    """The ids of a call that acts on jobs by ids, filters or both; with neither it is
    refused, so that no call acts on every job by accident."""
    ids = _job_ids(job_ids)
    if ids is None and all(value is None for value in filters):
        raise ConfigurationError(
            f"{call} needs job ids or a filter (queue, job_type, error, ...); it does not {refused}"
        )
    return ids


def discard_failed(
    conn: Connection,
    job_ids: Iterable[uuid.UUID | str] | None = None,
    *,
    queue: str | None = None,
    job_type: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    error: str | None = None,
    dry_run: bool = False,
    tables: Tables = DEFAULT_TABLES,
) -> int:
    """Delete failed jobs (archived as `failure`) for good; returns how many (or would go,
    with `dry_run`). Commit to keep it.

    By ids, by filters (queue, job type, `since` <= failed at < `until`, the `error`'s first
    line), or both; ids or a queue, job type or error at least, so that no call discards
    every failure by accident. Only archived failures go: an id naming a waiting, running,
    succeeded or cancelled job is not counted. It touches the archive only, so it never
    waits on a running job's locked row.
    """
    ids = _selection("discard_failed", "discard every failure", job_ids, queue, job_type, error)
    return _act(
        conn,
        _discard_plan,
        ids,
        dry_run,
        queue=queue,
        job_type=job_type,
        since=since,
        until=until,
        error=error,
        tables=tables,
    )


def _cancel_plan(
    conn: Connection,
    job_ids: list[uuid.UUID] | None,
    *,
    queue: str | None = None,
    job_type: str | None = None,
    state: str | None = None,
    error: str | None = None,
    enqueued_until: datetime | None = None,
    tables: Tables = DEFAULT_TABLES,
) -> _Bulk:
    if state not in (None, "blocked", "queued", "scheduled", "retrying"):
        raise ConfigurationError(
            "cancel_jobs cancels waiting jobs: state must be blocked, queued, scheduled or "
            f"retrying, got {state!r}"
        )
    dialect = dialect_of(conn, tables)
    now = datetime.now(timezone.utc)
    at = dialect.encode_time(now)
    end = _moment(enqueued_until, "enqueued_until")
    where = (
        _Where()
        .ids(dialect, job_ids)
        .given("queue = %s", queue)
        .given("job_type = %s", job_type)
        .headline(dialect, _check_error(error))
        .given("enqueued_at < %s", end and dialect.encode_time(end))
        .add(_NOT_LEASED, at)
    )
    if state is not None:
        where.add(_WAITING[state], *[at] * _WAITING[state].count("%s"))
    return _Bulk(
        dialect,
        tables.job_table,
        where,
        lambda c, sql, params: dialect.cancel_waiting(c, sql, params, now),
    )


def cancel_jobs(
    conn: Connection,
    job_ids: Iterable[uuid.UUID | str] | None = None,
    *,
    queue: str | None = None,
    job_type: str | None = None,
    state: str | None = None,
    error: str | None = None,
    enqueued_until: datetime | None = None,
    dry_run: bool = False,
    tables: Tables = DEFAULT_TABLES,
) -> int:
    """Archive waiting jobs (blocked, queued, scheduled, retrying) as `cancelled`, finished
    now, their
    attempts as they are. Returns how many were cancelled (with `dry_run`, how many are
    waiting and not under a live lease: a job running under a row lock is counted, though
    it would be passed over). Commit to keep it.

    By ids, by filters (queue, job type, one waiting `state`, the last `error`'s first line,
    enqueued_at < `enqueued_until`), or both; ids or a queue, job type, state or error at
    least, so that no call cancels every job by accident. A running job (row locked, or
    under a live lease) is never cancelled: it is passed over, neither waited for nor
    counted, and so is anything already archived. A job whose lease ran out is waiting to
    be rescued: it is cancelled.
    """
    ids = _selection(
        "cancel_jobs", "cancel every waiting job", job_ids, queue, job_type, state, error
    )
    return _act(
        conn,
        _cancel_plan,
        ids,
        dry_run,
        queue=queue,
        job_type=job_type,
        state=state,
        error=error,
        enqueued_until=enqueued_until,
        tables=tables,
    )


BATCH_SIZE = 500
"""How many jobs one step of `in_batches` acts on by default."""
PRUNE_BATCH_SIZE = 500
"""How many archived jobs one step of `prune_archive` deletes by default."""

_PLANS: dict[Callable[..., int], Callable[..., _Bulk]] = {
    retry_jobs: _retry_plan,
    cancel_jobs: _cancel_plan,
    discard_failed: _discard_plan,
}


def in_batches(
    conn: Connection,
    action: Callable[..., int],
    job_ids: Iterable[uuid.UUID | str] | None = None,
    *,
    batch_size: int = BATCH_SIZE,
    **filters: Any,
) -> Iterator[int]:
    """`action` (`retry_jobs`, `cancel_jobs` or `discard_failed`, with its ids and filters)
    a batch of at most `batch_size` jobs at a time, in the caller's transaction; yields how
    many each batch moved. Commit after each, so that no transaction holds the locks of
    more than a batch however many jobs match:

        for moved in admin.in_batches(conn, admin.retry_jobs, queue="email"):
            conn.commit()

    The batches go through the matching jobs once, by id: a job that comes to match later
    (a newer failure) may or may not be taken; pass `until` (or `enqueued_until`) to leave
    them out."""
    plan = _PLANS.get(action)
    if plan is None:
        raise ConfigurationError(
            f"in_batches runs retry_jobs, cancel_jobs or discard_failed, got {action!r}"
        )
    _check_positive(batch_size, "batch_size")
    if action is not retry_jobs:
        keys = ("queue", "job_type", "state", "error")
        name = getattr(action, "__name__", "")
        _selection(name, "act on every job", job_ids, *(filters.get(key) for key in keys))
    ids = _job_ids(job_ids)
    if ids == []:
        return iter(())
    return plan(conn, ids, **filters).batches(conn, batch_size)


def pause_queue(conn: Connection, queue: str, *, tables: Tables = DEFAULT_TABLES) -> bool:
    """Pause `queue`: its workers, in every process, finish the jobs in hand and claim no more
    until it is resumed (within one polling interval; at once on PostgreSQL, whose workers
    are notified). Enqueueing goes on. False if it was paused already. Commit to keep it."""
    dialect = dialect_of(conn, tables)
    return _pauses.pause(conn, dialect, queue, datetime.now(timezone.utc))


def resume_queue(conn: Connection, queue: str, *, tables: Tables = DEFAULT_TABLES) -> bool:
    """Resume a paused `queue`: its workers claim again. False if it was not paused. Commit
    to keep it."""
    return _pauses.resume(conn, dialect_of(conn, tables), queue)


def paused_queues(conn: Connection, *, tables: Tables = DEFAULT_TABLES) -> dict[str, datetime]:
    """The paused queues, each with when it was paused (UTC)."""
    paused = _pauses.paused_queues(conn, dialect_of(conn, tables))
    return {queue: _utc(at) for queue, at in paused.items()}


def _archive_filter(
    dialect: Dialect,
    older_than: timedelta | None,
    status: str | None,
    queue: str | None,
    now: datetime,
) -> _Where:
    """Archived jobs that finished more than `older_than` ago, with this status, of this queue."""
    where = _Where()
    if older_than is not None:
        where.add("finished_at < %s", dialect.encode_time(now - older_than))
    return where.given("status = %s", status).given("queue = %s", queue)


def delete_archived(
    conn: Connection,
    *,
    older_than: timedelta | None = None,
    status: str | None = None,
    queue: str | None = None,
    tables: Tables = DEFAULT_TABLES,
) -> int:
    """Delete archived jobs that finished more than `older_than` ago, have this `status`
    (success, failure, cancelled) and are of this queue; returns how many. Commit to keep it.

    At least one filter is needed, so that no call empties the archive by accident.
    """
    if older_than is None and status is None and queue is None:
        raise ConfigurationError(
            "delete_archived needs a filter (older_than, status or queue); it does not empty "
            "the archive"
        )
    if older_than is not None and not isinstance(older_than, timedelta):
        raise ConfigurationError(f"older_than must be a timedelta, got {older_than!r}")
    if status is not None:
        status = _ARCHIVED.get(status, status)
        if status not in _STATE_OF_STATUS:
            raise ConfigurationError(
                f"unknown status {status!r}; valid statuses: {', '.join(_STATE_OF_STATUS)}"
            )
    dialect = dialect_of(conn, tables)
    where = _archive_filter(dialect, older_than, status, queue, datetime.now(timezone.utc))
    with dialect.admin_write(conn):
        return dialect.purge_archived(conn, where.sql, where.params)


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
    dialect = dialect_of(conn, tables)
    where = _archive_filter(dialect, older_than, status, queue, now or datetime.now(timezone.utc))
    if dry_run:
        needed = dialect.still_needed(conn)
        if needed:
            where.add(f"NOT {needed}")
        return _count(conn, dialect, tables.archived_job_table, where)
    with dialect.admin_write(conn):
        return dialect.purge_archived(conn, where.sql, where.params)


def still_needed(
    conn: Connection,
    *,
    older_than: timedelta,
    status: str | None = None,
    queue: str | None = None,
    now: datetime | None = None,
    tables: Tables = DEFAULT_TABLES,
) -> int:
    """How many of the archived jobs `purge_archive` would delete with these filters it
    keeps instead, because jobs still waiting need them: the parents of a blocked job,
    and the jobs of a workflow that has not finished."""
    dialect = dialect_of(conn, tables)
    needed = dialect.still_needed(conn)
    if not needed:
        return 0
    where = _archive_filter(dialect, older_than, status, queue, now or datetime.now(timezone.utc))
    return _count(conn, dialect, tables.archived_job_table, where.add(needed))


class Pruned(NamedTuple):
    """One step of `prune_archive`: how many archived `jobs` of a state ("succeeded",
    "failed", "cancelled") it deleted (a dry run: would delete), finished before `before`."""

    state: str
    jobs: int
    before: datetime


def prune_archive(
    conn: Connection,
    *,
    keep_succeeded: timedelta | None = None,
    keep_failed: timedelta | None = None,
    keep_cancelled: timedelta | None = None,
    batch_size: int = PRUNE_BATCH_SIZE,
    dry_run: bool = False,
    now: datetime | None = None,
    tables: Tables = DEFAULT_TABLES,
) -> Iterator[Pruned]:
    """Delete the archived jobs of each outcome that finished longer ago than its retention
    (an outcome without one is kept), and their attempts: a batch of at most `batch_size`
    at a time, oldest first, in the caller's transaction. Commit after each, so that no
    transaction holds more than a batch's row locks however much is due:

        for step in admin.prune_archive(conn, keep_succeeded=timedelta(days=1),
                                        keep_failed=timedelta(days=30)):
            conn.commit()

    A batch deletes by primary key the rows it found by the archive's `finished_at`
    index, so it locks only those rows: never the rows workers are archiving; and it starts
    at the last batch's finish time, so it never walks back over the index entries of the
    rows deleted before it (which the server keeps until a vacuum or purge). With
    `dry_run`, one `Pruned` per outcome counts what would go, and nothing is deleted.
    """
    kept = {"succeeded": keep_succeeded, "failed": keep_failed, "cancelled": keep_cancelled}
    if all(keep is None for keep in kept.values()):
        raise ConfigurationError(
            "prune_archive needs a retention (keep_succeeded, keep_failed or keep_cancelled); "
            "an outcome without one is kept"
        )
    for state, keep in kept.items():
        if keep is not None and (not isinstance(keep, timedelta) or keep < timedelta(0)):
            raise ConfigurationError(f"keep_{state} must be a timedelta >= 0, got {keep!r}")
    _check_positive(batch_size, "batch_size")
    return _pruned(conn, kept, batch_size, dry_run, now or datetime.now(timezone.utc), tables)


def _pruned(
    conn: Connection,
    kept: dict[str, timedelta | None],
    batch_size: int,
    dry_run: bool,
    now: datetime,
    tables: Tables,
) -> Iterator[Pruned]:
    dialect = dialect_of(conn, tables)
    archive = tables.archived_job_table
    for state, keep in kept.items():
        if keep is None:
            continue
        before = now - keep
        params = (dialect.encode_time(before), _ARCHIVED[state])
        due = "finished_at < %s AND status = %s"
        if dry_run:
            where = _Where().add(due, *params)
            count = _count(conn, dialect, archive, where)
            yield Pruned(state, count, before)
            continue
        select = f"SELECT job_id, finished_at FROM {archive} WHERE "
        first = f"{select}{due} ORDER BY finished_at LIMIT %s"
        after = f"{select}finished_at >= %s AND {due} ORDER BY finished_at LIMIT %s"
        last: Any = None
        while True:
            with dialect.admin_write(conn):  # MySQL: at READ COMMITTED, no gap locks
                if last is None:
                    rows = dialect.fetchall(conn, first, (*params, batch_size))
                else:  # past the batches deleted, whose dead index entries a scan would visit
                    rows = dialect.fetchall(conn, after, (last, *params, batch_size))
                if not rows:
                    break
                ids = [row[0] for row in rows]
                last = rows[-1][1]
                marks = ", ".join(["%s"] * len(ids))
                count = dialect.purge_archived(conn, f"job_id IN ({marks})", ids)
            yield Pruned(state, count, before)
            if len(ids) < batch_size:
                break


def _count(conn: Connection, dialect: Dialect, table: str, where: _Where) -> int:
    """How many rows of `table` match."""
    sql = f"SELECT COUNT(*) FROM {table} WHERE {where.sql}"
    return int(dialect.fetchall(conn, sql, where.params)[0][0])


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
    dialect = dialect_of(conn, tables)
    marks = ", ".join(["%s"] * len(queues))
    sql = f"SELECT COUNT(*) FROM {tables.job_table} WHERE queue IN ({marks})"
    return int(dialect.fetchall(conn, sql, list(queues))[0][0])


def list_schedules(
    conn: Connection, *, tables: Tables = DEFAULT_TABLES, now: datetime | None = None
) -> list[Schedule]:
    """The periodic schedules recorded beside these tables, by name, each with its next run
    after the later of its last tick and `now`."""
    dialect = dialect_of(conn, tables)
    now = now or datetime.now(timezone.utc)
    if not dialect.table_columns(conn, periodic_table(tables.job_table)):
        raise SchemaError(
            f"there is no {periodic_table(tables.job_table)} table for the schedules: "
            + UPGRADE_HINT
        )
    rows = dialect.fetchall(
        conn,
        "SELECT name, cron, timezone, job_type, queue, last_tick, updated_at "
        f"FROM {periodic_table(tables.job_table)} ORDER BY name",
    )
    schedules = []
    for name, cron, zone, job_type, queue, last, updated in rows:
        last, updated = dialect.decode_time(last), dialect.decode_time(updated)
        upcoming = next_tick(cron, zone, max(last, now))
        schedules.append(Schedule(name, cron, zone, job_type, queue, last, upcoming, updated))
    return schedules


SEARCH_ROWS = 10_000
"""The most rows of each table that one `find_jobs` or `failure_groups` call reads where no
index narrows them down (an id's end, a job type or payload substring; the failures grouped
by error): the newest ones."""

SEARCH_FIELDS = ("any", "id", "job_type", "payload")
"""What `find_jobs` looks in: "any" is the id (when the text is hex), job type and payload."""

_SEARCH_CHARS = 200
_ID_TEXT = re.compile(r"[0-9a-f-]+")
_ID_HEX = {
    "postgresql": "replace(CAST(job_id AS text), '-', '')",
    "mysql": "LOWER(HEX(job_id))",
}
"""A job id as 32 lower-case hex digits, in SQL."""


@dataclasses.dataclass(frozen=True)
class ErrorGroup:
    """The failures whose error starts with the same line (`Type: message`, see
    `error_headline`; None: failures with no error recorded): how many, the newest's time."""

    error: str | None
    count: int
    newest: datetime


@dataclasses.dataclass(frozen=True)
class ErrorGroups:
    """What `failure_groups` found: its groups, most failures first; `examined`, the failures
    it read; `partial` when it stopped at its bound, leaving older failures out."""

    groups: list[ErrorGroup]
    examined: int
    partial: bool


def failure_groups(
    conn: Connection,
    *,
    queue: str | None = None,
    job_type: str | None = None,
    max_examined: int = SEARCH_ROWS,
    tables: Tables = DEFAULT_TABLES,
) -> ErrorGroups:
    """Failed jobs grouped by their error's first line: each group's count and newest
    failure, most failures first. It reads the newest `max_examined` failures (of this queue
    and job type) through the archive's `finished_at` index, and says when there were more;
    `retry_jobs(error=...)` and the others count and act on a whole group."""
    _check_positive(max_examined, "max_examined")
    dialect = dialect_of(conn, tables)
    where = _failures(dialect, None, queue, job_type, None, None)
    sql = (
        "SELECT headline, COUNT(*), MAX(finished_at) FROM ("
        f"SELECT {_headline_sql(dialect)} AS headline, finished_at "
        f"FROM {tables.archived_job_table} WHERE {where.sql} "
        "ORDER BY finished_at DESC LIMIT %s) AS recent GROUP BY headline"
    )
    rows = dialect.fetchall(conn, sql, ["\n", *where.params, max_examined])
    groups = [
        ErrorGroup(error, int(count), _utc(dialect.decode_time(newest)))
        for error, count, newest in rows
    ]
    groups.sort(key=lambda group: (-group.count, -group.newest.timestamp(), group.error or ""))
    examined = sum(group.count for group in groups)
    return ErrorGroups(groups, examined, examined >= max_examined)


@dataclasses.dataclass(frozen=True)
class JobSearch:
    """What `find_jobs` found: its jobs, newest first; `more` when more matched than the
    `limit` it returns; `cut_short` when the part of the search no index serves read only the
    newest `searched` rows of a table, and older ones were not searched."""

    jobs: list[JobInfo]
    more: bool
    cut_short: bool
    searched: int


def id_fragment(text: str) -> str | None:
    """A job id, or its start or end, as lower-case hex digits without dashes: None when
    `text` is not hex digits (dashes allowed between them), or has more than 32."""
    text = text.strip().lower()
    digits = text.replace("-", "")
    if not _ID_TEXT.fullmatch(text) or not 1 <= len(digits) <= 32:
        return None
    return digits


def find_jobs(
    conn: Connection,
    text: str,
    *,
    by: str = "any",
    limit: int = 50,
    max_examined: int = SEARCH_ROWS,
    payload_chars: int | None = None,
    tables: Tables = DEFAULT_TABLES,
    serializer: Serializer | None = None,
) -> JobSearch:
    """Jobs, waiting and archived, found by `text`: at most `limit`, newest first.

    `by` (see `SEARCH_FIELDS`): "id" finds a whole id, or the jobs whose id starts or ends
    with these hex digits (dashes ignored; anything else is refused); "job_type" and
    "payload", the jobs whose job type or payload contains `text` (case-sensitive); "any",
    all three (the id only when `text` is hex). A whole id and an id's start are found
    through the primary key, however large the tables; the rest reads at most the newest
    `max_examined` rows of each table, and the result says when it stopped there.
    """
    if by not in SEARCH_FIELDS:
        raise ConfigurationError(f"by must be one of {', '.join(SEARCH_FIELDS)}, got {by!r}")
    if not isinstance(text, str) or not text.strip() or len(text) > _SEARCH_CHARS:
        raise ConfigurationError(
            f"a search needs 1 to {_SEARCH_CHARS} characters of text, got {text!r}"
        )
    if "\x00" in text:
        raise ConfigurationError(f"a search cannot contain a NUL character, got {text!r}")
    digits = id_fragment(text) if by in ("any", "id") else None
    if by == "id" and digits is None:
        raise ConfigurationError(
            f"{text!r} is not a job id nor the start or end of one: give 1 to 32 hex digits "
            "(0-9, a-f), with or without dashes"
        )
    count = _check_limit(limit)
    _check_positive(max_examined, "max_examined")
    if payload_chars is not None:
        _check_positive(payload_chars, "payload_chars")
    codec = check_serializer(serializer)
    dialect = dialect_of(conn, tables)
    key = dialect.default_id_strategy.encode
    indexed: list[tuple[str, list[Any]]] = []
    scanned: list[tuple[str, list[Any]]] = []
    if digits is not None and len(digits) == 32:
        indexed.append(("job_id = %s", [key(uuid.UUID(digits))]))
    elif digits is not None:
        low, high = (uuid.UUID(digits.ljust(32, pad)) for pad in "0f")
        indexed.append(("job_id >= %s AND job_id <= %s", [key(low), key(high)]))
        scanned.append((f"{_ID_HEX[dialect.name]} LIKE %s", ["%" + digits]))
    contains = "%" + re.sub(r"[!%_]", r"!\g<0>", text) + "%"
    for field in ("job_type", "payload"):
        if by in ("any", field):
            scanned.append((f"{field} LIKE %s ESCAPE '!'", [contains]))
    now = datetime.now(timezone.utc)
    cut_short = False
    queries = []
    with dialect.admin_read(conn):
        for table in (tables.job_table, tables.archived_job_table):
            found, cut = _candidates(conn, dialect, table, indexed, scanned, count, max_examined)
            cut_short = cut_short or cut
            marks = ", ".join(["%s"] * len(found)) or "NULL"
            queries.append(_Query(condition=(f"job_id IN ({marks})", tuple(found))))
        held = dialect.held_rows(conn)
        sql, params = _select(
            dialect, tables, queries[0], held, None, now, count + 1, payload_chars, queries[1]
        )
        rows = dialect.fetchall(conn, sql, params)
        infos = _infos(conn, dialect, rows, held, now, codec, payload_chars)
    return JobSearch(infos[:count], len(infos) > count, cut_short, max_examined)


def _candidates(
    conn: Connection,
    dialect: Dialect,
    table: str,
    indexed: list[tuple[str, list[Any]]],
    scanned: list[tuple[str, list[Any]]],
    limit: int,
    max_examined: int,
) -> tuple[list[Any], bool]:
    """The ids (as stored) of up to `limit` + 1 rows of `table` per condition, newest first:
    the `indexed` ones through the primary key, the `scanned` ones among the newest
    `max_examined` rows; and whether there were older rows left unsearched."""
    found: dict[Any, None] = {}
    for condition, params in indexed:
        sql = f"SELECT job_id FROM {table} WHERE {condition} ORDER BY job_id DESC LIMIT %s"
        found.update(
            dict.fromkeys(row[0] for row in dialect.fetchall(conn, sql, [*params, limit + 1]))
        )
    if not scanned:
        return list(found), False
    beyond = dialect.fetchall(
        conn,
        f"SELECT job_id FROM {table} ORDER BY job_id DESC LIMIT 1 OFFSET %s",
        [max_examined],
    )
    where = _Where(f"({' OR '.join(condition for condition, _ in scanned)})")
    where.params = [param for _, params in scanned for param in params]
    if beyond:
        where.add("job_id > %s", beyond[0][0])
    sql = f"SELECT job_id FROM {table} WHERE {where.sql} ORDER BY job_id DESC LIMIT %s"
    found.update(
        dict.fromkeys(row[0] for row in dialect.fetchall(conn, sql, [*where.params, limit + 1]))
    )
    return list(found), bool(beyond)


STALE_AFTER = timedelta(seconds=_registry.STALE_AFTER_S)
"""A worker whose row was not refreshed for this long is "stale": its process is gone."""


def _registry_table(conn: Connection, tables: Tables) -> tuple[Dialect, str]:
    dialect = dialect_of(conn, tables)
    table = workers_table(tables.job_table)
    if not dialect.table_columns(conn, table):
        raise SchemaError(f"there is no {table} table for the live workers: " + UPGRADE_HINT)
    return dialect, table


def list_workers(
    conn: Connection,
    *,
    queue: str | None = None,
    stale_after: timedelta = STALE_AFTER,
    tables: Tables = DEFAULT_TABLES,
) -> list[WorkerInfo]:
    """The running workers (each `QueueWorker`, in every process) of these tables, or of
    `queue`: host, pid, threads and what each runs, by queue, host and pid. A worker whose
    heartbeat stopped more than `stale_after` ago (by the database's clock) is listed with
    state "stale" until pruned (`prune_workers`, or any worker's heartbeat, after
    15 minutes). `SchemaError` if the tables predate the live workers' table."""
    if not isinstance(stale_after, timedelta) or stale_after <= timedelta(0):
        raise ConfigurationError(f"stale_after must be a positive timedelta, got {stale_after!r}")
    dialect, table = _registry_table(conn, tables)
    return _registry.read_workers(conn, dialect, table, queue, stale_after)


def prune_workers(
    conn: Connection,
    *,
    older_than: timedelta = STALE_AFTER,
    tables: Tables = DEFAULT_TABLES,
) -> int:
    """Delete the rows of workers not seen for `older_than` (stale by default): processes
    that died without a word. Returns how many. Commit to keep it. A live worker pruned by
    a bound shorter than its beat writes its row again at its next beat."""
    if not isinstance(older_than, timedelta) or older_than <= timedelta(0):
        raise ConfigurationError(f"older_than must be a positive timedelta, got {older_than!r}")
    dialect, table = _registry_table(conn, tables)
    with dialect.admin_write(conn):
        return _registry.prune(conn, dialect, table, older_than.total_seconds())

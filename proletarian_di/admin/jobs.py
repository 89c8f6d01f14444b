"""Jobs as an operator sees them, waiting and archived: `JobInfo` and its `Attempt`s,
`list_jobs`, `list_jobs_page` and `get_job`, and the reading they share (the SELECT over
both tables, newest first, and the probe that tells a running job from a waiting one),
which `search` and `explain` read jobs through too."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from .._common.types import Connection
from .._engine import registry as _registry
from .._store import dependencies as _dependencies
from .._store.dependencies import BLOCKED_AT
from .._store.dialects import Dialect, dialect_of
from .._store.dialects.base import HeldRows
from .._store.statuses import SUCCESS, status_in
from .._store.tables import DEFAULT_TABLES, Tables, attempt_table, workers_table
from ..errors import ConfigurationError
from ..serializers import Serializer, SerializerName, check_serializer, jsonable
from ._checks import _check_positive, _job_id, _moment, _utc
from ._sql import _ARCHIVED, _CLAIMABLE, _LEASED, _STATE_OF_STORED, _WAITING, _Where
from .headline import _check_error, error_headline
from .workers import STALE_AFTER

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

_ORDER = "ORDER BY enqueued_at DESC, job_id DESC"
_SCAN_BATCH = 200
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


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
    (`depends_on`) and those that wait on it (`get_job` reads them); `parent_states`, each
    parent's state now ("waiting" until it ends, then "succeeded", "failed", "cancelled", or
    "missing" when it was deleted), and `wait_for`, what this job needs of them ("success" or
    "complete"). A blocked job is never due by a time: its `process_at` is a placeholder past
    any real one, which `never_due` tells and `as_dict` leaves out; `waits_for` says in words
    what it waits for.
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
    parent_states: tuple[tuple[uuid.UUID, str], ...] = ()
    wait_for: str | None = None

    @property
    def never_due(self) -> bool:
        """Whether it had no due time: blocked, or cancelled while it was (its `process_at`
        is then a placeholder, not a time to show)."""
        return self.process_at >= BLOCKED_AT

    @property
    def waits_for(self) -> str | None:
        """What a blocked job waits for, in words ("after 2 of its 3 parents succeed"), as
        far as this read knows (a listing reads no parents); None unless it is blocked."""
        if self.state != "blocked":
            return None
        if not self.parent_states:
            return "after the jobs it depends on"
        total = len(self.parent_states)
        if self.wait_for != "complete":
            for job_id, state in self.parent_states:
                if state in _GAVE_UP:
                    return (
                        f"never: job {job_id}, which it depends on, {_GAVE_UP[state]}; "
                        "it is to be cancelled"
                    )
        waiting = sum(1 for _, state in self.parent_states if state == "waiting")
        if not waiting:
            return "now: all its parents have ended, and it is about to be released"
        end = "succeed" if self.wait_for != "complete" else "end"
        parents = "parent" if total == 1 else "parents"
        return f"after {waiting} of its {total} {parents} {end}"

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
        """The fields for JSON, the id and the times (ISO 8601) as strings, the payload as
        plain JSON values (a Transit payload's keywords, sets and times too: `jsonable`)."""
        data = dataclasses.asdict(self)
        data["job_id"] = str(self.job_id)
        data["payload"] = jsonable(self.payload)
        for name in ("enqueued_at", "process_at", "finished_at"):
            data[name] = data[name] and data[name].isoformat()
        if self.never_due:
            data["process_at"] = None
        data["waits_for"] = self.waits_for
        data["history"] = [attempt.as_dict() for attempt in self.history]
        return data


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
    error: str | tuple[str, ...] | None = None
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
    error: str | Sequence[str] | None = None,
    tables: Tables = DEFAULT_TABLES,
    serializer: Serializer | SerializerName | None = None,
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
    error: str | Sequence[str] | None = None,
    tables: Tables = DEFAULT_TABLES,
    serializer: Serializer | SerializerName | None = None,
    finished_since: datetime | None = None,
    finished_until: datetime | None = None,
) -> JobPage:
    """One page of `list_jobs` whose work is bounded, for pages anyone may load (a dashboard):
    it reads at most `max_examined` rows (at least `limit`) in a few statements, however
    large the tables, and says when it stopped there (`JobPage.partial`: a state that only a
    probe of row locks tells, such as "running" on MariaDB, can need more).

    `payload_chars`: read only the first this many characters of each payload (in SQL); a
    longer payload is that text, undecoded, with `payload_truncated` set. None: whole payloads.
    `error`: only jobs whose (last) error's first line is this (see `error_headline`).
    `finished_since` <= finished_at < `finished_until`: archived jobs only, as `list_jobs`
    (a bounded range of the archive's `finished_at` index, such as a chart's hour).
    """
    query = _Query(
        _check_state(state),
        queue,
        job_type,
        finished_since=_moment(finished_since, "finished_since"),
        finished_until=_moment(finished_until, "finished_until"),
        error=_check_error(error),
    )
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
    serializer: Serializer | SerializerName | None = None,
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
        return _detailed(conn, dialect, tables, found)[0]


Among = tuple[str, list[Any]]
"""Which jobs a read is about: an SQL list, or subquery, of their stored ids for `IN (…)`,
and its parameters."""


def _among(dialect: Dialect, jobs: list[JobInfo]) -> Among:
    keys = [dialect.default_id_strategy.encode(job.job_id) for job in jobs]
    return ", ".join(["%s"] * len(keys)), keys


def _detailed(
    conn: Connection,
    dialect: Dialect,
    tables: Tables,
    jobs: list[JobInfo],
    among: Among | None = None,
) -> list[JobInfo]:
    """The jobs (`among`, all of them) with what only `get_job` reads: history, progress,
    group key, place in a graph; a few statements for them all, however many they are."""
    among = among or _among(dialect, jobs)
    histories = _histories(conn, dialect, tables, among)
    progress = _progress(conn, dialect, tables, jobs)
    groups = _group_keys(conn, dialect, tables, jobs, among)
    graphs = _graphs(conn, dialect, among)
    return [
        dataclasses.replace(
            job,
            history=histories.get(job.job_id, ()),
            progress=progress.get(job.job_id),
            group_key=groups.get(job.job_id),
            **graphs.get(job.job_id, {}),
        )
        for job in jobs
    ]


def _graph(conn: Connection, dialect: Dialect, job: JobInfo) -> dict[str, Any]:
    """A job's workflow, parents and children (none on a schema without them)."""
    return _graphs(conn, dialect, _among(dialect, [job])).get(job.job_id, {})


def _graphs(conn: Connection, dialect: Dialect, among: Among) -> dict[uuid.UUID, dict[str, Any]]:
    """The jobs' workflows, parents (with how each ended, read from where each parent is now:
    its archived status, or still waiting, or missing) and children, by job (none on a schema
    without them)."""
    if not _dependencies.has_tables(conn, dialect):
        return {}
    ids, (listed, params) = dialect.default_id_strategy, among
    deps = dialect.dependencies_table
    graphs: dict[uuid.UUID, dict[str, Any]] = {}

    def of(raw: Any) -> dict[str, Any]:
        return graphs.setdefault(ids.decode(raw), {"parents": [], "children": []})

    for job_id, workflow_id in dialect.fetchall(
        conn,
        f"SELECT job_id, workflow_id FROM {dialect.workflows_table} WHERE job_id IN ({listed})",
        params,
    ):
        of(job_id)["workflow_id"] = ids.decode(workflow_id)
    for job_id, parent, wait_for, status in dialect.fetchall(
        conn,
        f"SELECT d.job_id, d.parent_id, d.wait_for, CASE WHEN j.job_id IS NOT NULL THEN NULL "
        f"ELSE COALESCE(a.status, 'missing') END FROM {deps} d "
        f"LEFT JOIN {dialect.job_table} j ON j.job_id = d.parent_id "
        f"LEFT JOIN {dialect.archived_job_table} a ON a.job_id = d.parent_id "
        f"WHERE d.job_id IN ({listed})",
        params,
    ):
        state = _PARENT_STATES.get(status or "", status or "waiting")
        of(job_id)["parents"].append((ids.decode(parent), state))
        of(job_id)["wait_for"] = wait_for
    for parent, job_id in dialect.fetchall(
        conn, f"SELECT parent_id, job_id FROM {deps} WHERE parent_id IN ({listed})", params
    ):
        of(parent)["children"].append(ids.decode(job_id))
    for graph in graphs.values():
        parents = sorted(graph.pop("parents"))
        graph["parents"] = tuple(parent for parent, _ in parents)
        graph["parent_states"] = tuple(parents)
        graph["children"] = tuple(sorted(graph["children"]))
    return graphs


_PARENT_STATES = {**_STATE_OF_STORED, "missing": "missing"}
_GAVE_UP = {"failed": "failed", "cancelled": "was cancelled", "missing": "was deleted"}
"""A parent's ends that cancel a job waiting for its success, in words."""


def _group_key(conn: Connection, dialect: Dialect, tables: Tables, job: JobInfo) -> str | None:
    """A waiting or running job's group key (None: none, or a schema without the column)."""
    return _group_keys(conn, dialect, tables, [job], _among(dialect, [job])).get(job.job_id)


def _group_keys(
    conn: Connection, dialect: Dialect, tables: Tables, jobs: list[JobInfo], among: Among
) -> dict[uuid.UUID, str]:
    """The group keys of those of the jobs that wait or run (none on a schema without the
    column)."""
    if all(job.finished_at is not None for job in jobs) or "group_key" not in (
        dialect.table_columns(conn, tables.job_table)
    ):
        return {}
    rows = dialect.fetchall(
        conn,
        f"SELECT job_id, group_key FROM {tables.job_table} WHERE job_id IN ({among[0]})",
        among[1],
    )
    return {dialect.default_id_strategy.decode(row[0]): row[1] for row in rows if row[1]}


def _progress(
    conn: Connection, dialect: Dialect, tables: Tables, jobs: list[JobInfo]
) -> dict[uuid.UUID, Any]:
    """The running jobs' progress, from the live workers that run them (none for a job that
    reported none, or on a schema without the live workers' table)."""
    running = {job.job_id: job.queue for job in jobs if job.state == "running"}
    table = workers_table(tables.job_table)
    if not running or not dialect.table_columns(conn, table):
        return {}
    queue = next(iter(running.values())) if len(set(running.values())) == 1 else None
    return {
        thread.job_id: thread.progress
        for worker in _registry.read_workers(conn, dialect, table, queue, STALE_AFTER)
        for thread in worker.threads
        if thread.job_id in running and thread.progress is not None
    }


def _histories(
    conn: Connection, dialect: Dialect, tables: Tables, among: Among
) -> dict[uuid.UUID, tuple[Attempt, ...]]:
    """The jobs' finished attempts, oldest first: the failed ones from the attempt table, then
    its success from the archive, in one statement."""
    listed, params = among
    rows = dialect.fetchall(
        conn,
        f"SELECT job_id, attempt, started_at, finished_at, worker, error, 0 FROM "
        f"{attempt_table(tables.job_table)} WHERE job_id IN ({listed}) UNION ALL "
        "SELECT job_id, attempts, started_at, finished_at, worker, NULL, 1 FROM "
        f"{tables.archived_job_table} WHERE job_id IN ({listed}) AND "
        f"{status_in('status', SUCCESS)}",
        [*params, *params],
    )
    attempts: dict[uuid.UUID, list[tuple[Any, datetime, Attempt]]] = {}
    for raw_id, n, started, finished, worker, error, last in rows:
        ended = _utc(dialect.decode_time(finished))
        began = None if started is None else _utc(dialect.decode_time(started))
        attempt = Attempt(int(n), began, ended, worker, error)
        key = dialect.default_id_strategy.decode(raw_id)
        attempts.setdefault(key, []).append((last, ended, attempt))
    return {
        job_id: tuple(attempt for *_, attempt in sorted(found, key=lambda row: row[:2]))
        for job_id, found in attempts.items()
    }


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
    if max_examined is not None:
        return _collect_bounded(
            conn, dialect, tables, query, limit, after, codec, max_examined, payload_chars
        )
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


def _collect_bounded(
    conn: Connection,
    dialect: Dialect,
    tables: Tables,
    query: _Query,
    limit: int,
    after: tuple[datetime, uuid.UUID] | None,
    codec: Serializer,
    max_examined: int,
    payload_chars: int | None,
) -> JobPage:
    """`_collect` from at most `max_examined` rows of each table it reads, newest first:
    each statement walks a window of the `(enqueued_at, job_id)` index and returns only the
    rows in it that match, and the window's last row (where the next page goes on), so a
    filter that matches nothing costs the window, not the table. With both tables, only
    the matches newer than the nearer of their windows' ends are sure to come in order."""
    now = datetime.now(timezone.utc)
    held = dialect.held_rows(conn)
    parts = [part for part in ("job", "archive") if _in(query, part)]
    # The first window a page's worth (most pages end there; a waiting state the lock
    # probe decides takes a batch, every candidate of it), the next the rest of the bound.
    exact = query.state is None or query.state in _ARCHIVED
    window = min(limit if exact else max(limit, _SCAN_BATCH), max_examined)
    found: list[JobInfo] = []
    examined = 0
    edge: JobInfo | None = None
    while True:
        frontier: JobInfo | None = None
        matches: list[JobInfo] = []
        for part in parts:
            take = limit if exact else window
            sql, params = _window(
                dialect, tables, query, held, after, now, part, (window, take), payload_chars
            )
            rows = dialect.fetchall(conn, sql, params)
            infos = _infos(
                conn, dialect, [row[:-2] for row in rows], held, now, codec, payload_chars
            )
            hits = [info for info, row in zip(infos, rows, strict=True) if row[-2]]
            if len(hits) >= take:  # the page's worth: the window goes on after the last
                hits, end, scanned = hits[:take], hits[take - 1], int(rows[take - 1][-1])
            elif rows and int(rows[-1][-1]) == window:
                end, scanned = infos[-1], window
            else:  # the window passed the table's end
                end, scanned = None, int(rows[-1][-1]) if rows else 0
            examined += scanned
            matches.extend(hits)
            if end is not None and (frontier is None or _position(end) > _position(frontier)):
                frontier = end
        matches.sort(key=_position, reverse=True)
        if frontier is not None:
            matches = [info for info in matches if _position(info) >= _position(frontier)]
        found.extend(info for info in matches if query.state in (None, info.state))
        edge = frontier
        if len(found) >= limit or frontier is None or examined >= max_examined:
            break
        after = frontier.enqueued_at, frontier.job_id
        window = max_examined - examined
    jobs = found[:limit]
    partial = len(jobs) < limit and edge is not None
    if len(jobs) == limit:
        next_before: str | None = jobs[-1].cursor
    else:
        next_before = edge.cursor if partial and edge is not None else None
    return JobPage(jobs, next_before, partial, examined)


def _in(query: _Query, part: str) -> bool:
    return query.in_job_table() if part == "job" else query.in_archive()


def _position(job: JobInfo) -> tuple[datetime, uuid.UUID]:
    """Where a job is in the listing's order (newest first: the greater, the sooner)."""
    return job.enqueued_at, job.job_id


def _window(
    dialect: Dialect,
    tables: Tables,
    query: _Query,
    held: HeldRows,
    after: tuple[datetime, uuid.UUID] | None,
    now: datetime,
    part: str,
    sizes: tuple[int, int],
    payload_chars: int | None,
) -> tuple[str, list[Any]]:
    """The next `window` rows of one table (`part`: "job" or "archive") in the listing's
    order, of which only those that match `query` come back, `limit` and one at most, and
    the window's last row whatever it is (`sizes`: window, limit); each ends with whether it
    matches and its place in the window."""
    window, limit = sizes
    columns = _columns(dialect, payload_chars)
    if part == "job":
        columns, params, where = _job_part(dialect, query, held, after, now, columns, False)
        table = tables.job_table
    else:
        columns, where = _archived_part(dialect, query, after, columns, False)
        params, table = [], tables.archived_job_table
    scanned = _scanned(dialect, query, after)
    inner = (
        f"SELECT {columns}, CASE WHEN {where.sql} THEN 1 ELSE 0 END AS hit FROM {table} "
        f"WHERE {scanned.sql} {_ORDER} LIMIT {int(window)}"
    )
    sql = (
        f"SELECT * FROM (SELECT w.*, ROW_NUMBER() OVER ({_ORDER}) AS place FROM ({inner}) AS w) "
        f"AS windowed WHERE hit = 1 OR place = {int(window)} ORDER BY place LIMIT {int(limit) + 1}"
    )
    return sql, [*params, *where.params, *scanned.params]


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
    columns = _columns(dialect, payload_chars)
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


def _columns(dialect: Dialect, payload_chars: int | None) -> str:
    """The columns both tables share, the payload cut at `payload_chars` (and one more, to
    tell it was cut) where given."""
    if payload_chars is None:
        return dialect.columns
    prefix = f"LEFT(payload, {int(payload_chars) + 1}) AS payload"
    return dialect.columns.replace("payload", prefix, 1)


def _matching(
    dialect: Dialect, query: _Query, after: tuple[datetime, uuid.UUID] | None, ranged: bool = True
) -> _Where:
    """The conditions both tables share: id, queue, job type, enqueued range, page start;
    without the last two unless `ranged` (`_scanned` has them)."""
    key = dialect.default_id_strategy.encode
    where = (
        _Where()
        .given("job_id = %s", query.job_id and key(query.job_id))
        .given("queue = %s", query.queue)
        .given("job_type = %s", query.job_type)
        .headline(dialect, query.error)
    )
    if query.condition is not None:
        where.add(query.condition[0], *query.condition[1])
    scanned = _scanned(dialect, query, after)
    if ranged and scanned.clauses:
        where.add(scanned.sql, *scanned.params)
    return where


def _scanned(dialect: Dialect, query: _Query, after: tuple[datetime, uuid.UUID] | None) -> _Where:
    """The conditions on the enqueued order itself, a range of the tables' `(enqueued_at,
    job_id)` indexes: the enqueued range and the page's start."""
    encode, key = dialect.encode_time, dialect.default_id_strategy.encode
    where = (
        _Where()
        .given("enqueued_at >= %s", query.enqueued_since and encode(query.enqueued_since))
        .given("enqueued_at < %s", query.enqueued_until and encode(query.enqueued_until))
    )
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
    columns, params, where = _job_part(dialect, query, held, after, now, columns)
    return f"SELECT {columns} FROM {table} WHERE {where.sql}", [*params, *where.params]


def _job_part(
    dialect: Dialect,
    query: _Query,
    held: HeldRows,
    after: tuple[datetime, uuid.UUID] | None,
    now: datetime,
    columns: str,
    ranged: bool = True,
) -> tuple[str, list[Any], _Where]:
    """`_job_rows`' columns, their parameters, and its conditions (`_matching`'s
    `ranged`)."""
    at = dialect.encode_time(now)
    where = _matching(dialect, query, after, ranged)
    claimed = f"{held.condition} AND {_CLAIMABLE}"
    if query.state == "running":
        where.add(f"(({claimed}) OR {_LEASED})", *held.params, at, at)
    elif query.state is not None:
        condition = _WAITING[query.state]
        where.add(condition, *[at] * condition.count("%s"))
    columns = (
        f"{columns}, NULL AS status, NULL AS finished_at, last_error, "
        f"CASE WHEN {claimed} THEN 1 ELSE 0 END AS held, priority, "
        f"CASE WHEN {_LEASED} THEN 1 ELSE 0 END AS leased"
    )
    return columns, [*held.params, at, at], where


def _archived_rows(
    dialect: Dialect,
    table: str,
    query: _Query,
    after: tuple[datetime, uuid.UUID] | None,
    columns: str,
) -> tuple[str, list[Any]]:
    """The archive's part: the state's status and the finished range."""
    columns, where = _archived_part(dialect, query, after, columns)
    return f"SELECT {columns} FROM {table} WHERE {where.sql}", where.params


def _archived_part(
    dialect: Dialect,
    query: _Query,
    after: tuple[datetime, uuid.UUID] | None,
    columns: str,
    ranged: bool = True,
) -> tuple[str, _Where]:
    """`_archived_rows`' columns and its conditions (`_matching`'s `ranged`)."""
    encode = dialect.encode_time
    where = (
        _matching(dialect, query, after, ranged)
        .status(_ARCHIVED.get(query.state or ""))
        .given("finished_at >= %s", query.finished_since and encode(query.finished_since))
        .given("finished_at < %s", query.finished_until and encode(query.finished_until))
    )
    columns = f"{columns}, status, finished_at, last_error, 0 AS held, priority, 0 AS leased"
    return columns, where


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
        state = _STATE_OF_STORED.get(status, status)
    elif process_at >= BLOCKED_AT:
        state = "blocked"
    elif running:
        state = "running"
    elif attempts > 0:
        state = "retrying"
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


def _check_limit(limit: Any) -> int:
    """A page size from 1 to `MAX_LIMIT`: a page is one bounded query and probe."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise ConfigurationError(
            f"limit must be a whole number from 1 to {MAX_LIMIT}, got {limit!r}"
        )
    return limit


def _check_state(state: Any) -> str | None:
    """One of `STATES`, or None for any."""
    if state is not None and state not in STATES:
        raise ConfigurationError(f"unknown state {state!r}; valid states: {', '.join(STATES)}")
    return state


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

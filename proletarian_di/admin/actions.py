"""What an operator does to jobs and queues: retry or discard failed jobs (`retry_jobs`,
`retry_failed`, `discard_failed`), cancel waiting ones (`cancel_jobs`) or make them due at
another time (`reschedule_jobs`), each in one go or `in_batches`, and pause and resume
queues.

Each bulk action is a plan (`_Bulk`: the rows it acts on and how it moves them), which
counts them (`dry_run`), moves them all, or moves them a batch at a time."""

from __future__ import annotations

import dataclasses
import functools
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime, timezone
from typing import Any

from .._common.types import Connection
from .._engine import pauses as _pauses
from .._store.dependencies import BLOCKED_SQL, LATEST_DUE
from .._store.dialects import Dialect, dialect_of
from .._store.tables import DEFAULT_TABLES, Tables
from ..errors import ConfigurationError
from ._checks import _check_positive, _job_ids, _moment, _utc
from ._sql import _NOT_LEASED, _WAITING, _count, _failures, _Where
from .headline import _check_error


@dataclasses.dataclass(frozen=True)
class _Bulk:
    """What a bulk action acts on (the rows of `table` matching `where`) and how it moves
    them: `move(conn, where_sql, params)` returns how many moved."""

    dialect: Dialect
    table: str
    where: _Where
    move: Callable[[Connection, str, list[Any]], int]
    archived: bool = False
    """Rows of the archive, which no worker changes: a batch locks the rows it picks and
    moves them by id alone (the filter again, on PostgreSQL, went down the `finished_at`
    index through every matching row beside the ids, in each statement of every batch)."""

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
        lock = " FOR UPDATE" if self.archived else ""
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
                        f"ORDER BY job_id LIMIT %s{lock}",
                        [*where.params, size],
                    )
                ]
                marks = ", ".join(["%s"] * len(ids))
                taken = _Where() if self.archived else self.where.copy()
                taken.add(f"job_id IN ({marks})", *ids)
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
    error: str | Sequence[str] | None = None,
    at: datetime | None = None,
    tables: Tables = DEFAULT_TABLES,
) -> _Bulk:
    """Archived failures, to move back into the queue (`requeue`), due `at` (None: now), or
    to delete."""
    dialect = dialect_of(conn, tables)
    where = _failures(dialect, job_ids, queue, job_type, since, until, error)
    if not requeue:
        return _Bulk(dialect, tables.archived_job_table, where, dialect.purge_archived, True)
    due = _due(at)
    return _Bulk(
        dialect,
        tables.archived_job_table,
        where,
        lambda c, sql, params: dialect.requeue(c, sql, params, due),
        True,
    )


def _due(at: datetime | None) -> datetime:
    """When a retried or rescheduled job falls due: `at` in UTC (None: now); refused at or
    past `LATEST_DUE`, where a job would look blocked."""
    due = _moment(at, "at") or datetime.now(timezone.utc)
    if due >= LATEST_DUE:
        raise ConfigurationError(f"at must be before {LATEST_DUE:%Y-%m-%d}, got {due}")
    return due


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
    error: str | Sequence[str] | None = None,
    at: datetime | None = None,
    dry_run: bool = False,
    tables: Tables = DEFAULT_TABLES,
) -> int:
    """Move failed jobs (archived as `failure`) back into the queue: same id and payload,
    attempts reset to 0, last error kept, due now (or `at`, an aware datetime or a naive
    one in UTC). Returns how many moved (or would move, with `dry_run`).

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
        at=at,
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
    error: str | Sequence[str] | None = None,
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


def _waiting_where(
    dialect: Dialect,
    job_ids: list[uuid.UUID] | None,
    queue: str | None,
    job_type: str | None,
    state: str | None,
    error: str | Sequence[str] | None,
    enqueued_until: datetime | None,
    at: Any,
) -> _Where:
    """The waiting jobs an action on the queue's table selects (`at`: now, encoded)."""
    end = _moment(enqueued_until, "enqueued_until")
    where = (
        _Where()
        .ids(dialect, job_ids)
        .given("queue = %s", queue)
        .given("job_type = %s", job_type)
        .headline(dialect, _check_error(error))
        .given("enqueued_at < %s", end and dialect.encode_time(end))
    )
    if state is not None:
        where.add(_WAITING[state], *[at] * _WAITING[state].count("%s"))
    return where


def _cancel_plan(
    conn: Connection,
    job_ids: list[uuid.UUID] | None,
    *,
    queue: str | None = None,
    job_type: str | None = None,
    state: str | None = None,
    error: str | Sequence[str] | None = None,
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
    where = _waiting_where(dialect, job_ids, queue, job_type, state, error, enqueued_until, at)
    where.add(_NOT_LEASED, at)
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
    error: str | Sequence[str] | None = None,
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


RESCHEDULABLE = ("queued", "scheduled", "retrying")
"""The states of the jobs `reschedule_jobs` moves: waiting, and not on other jobs."""


def _reschedule_plan(
    conn: Connection,
    job_ids: list[uuid.UUID] | None,
    *,
    queue: str | None = None,
    job_type: str | None = None,
    state: str | None = None,
    error: str | Sequence[str] | None = None,
    enqueued_until: datetime | None = None,
    at: datetime | None = None,
    tables: Tables = DEFAULT_TABLES,
) -> _Bulk:
    if state not in (None, *RESCHEDULABLE):
        raise ConfigurationError(
            "reschedule_jobs moves waiting jobs: state must be queued, scheduled or retrying, "
            f"got {state!r}"
        )
    dialect = dialect_of(conn, tables)
    due = dialect.encode_time(_due(at))
    now = dialect.encode_time(datetime.now(timezone.utc))
    where = _waiting_where(dialect, job_ids, queue, job_type, state, error, enqueued_until, now)
    # Not leased (an expired lease's row is the rescue's), and not blocked.
    where.add(f"leased_by IS NULL AND process_at < {BLOCKED_SQL}")
    table = tables.job_table

    def move(c: Connection, sql: str, params: list[Any]) -> int:
        # Lock the rows first, passing over those a worker holds (a running job), then
        # update them by primary key.
        ids = [
            row[0]
            for row in dialect.fetchall(
                c, f"SELECT job_id FROM {table} WHERE {sql} FOR UPDATE SKIP LOCKED", params
            )
        ]
        for start in range(0, len(ids), BATCH_SIZE):
            among, chunk = dialect.any_of("job_id", ids[start : start + BATCH_SIZE])
            dialect.execute(c, f"UPDATE {table} SET process_at = %s WHERE {among}", [due, *chunk])
        return len(ids)

    return _Bulk(dialect, table, where, move)


def reschedule_jobs(
    conn: Connection,
    job_ids: Iterable[uuid.UUID | str] | None = None,
    *,
    at: datetime | None = None,
    queue: str | None = None,
    job_type: str | None = None,
    state: str | None = None,
    error: str | Sequence[str] | None = None,
    enqueued_until: datetime | None = None,
    dry_run: bool = False,
    tables: Tables = DEFAULT_TABLES,
) -> int:
    """Make waiting jobs (queued, scheduled, retrying) due `at` (an aware datetime, or a
    naive one in UTC; None: now, to run them now), their attempts and last error as they
    are. Returns how many moved (with `dry_run`, how many match: a job running under a row
    lock is counted, though it would be passed over). Commit to keep it. A failed job runs
    again through `retry_jobs`, whose `at` does the same.

    By ids, by filters (queue, job type, one of the `RESCHEDULABLE` states, the last
    `error`'s first line, enqueued_at < `enqueued_until`), or both; ids or a queue, job
    type, state or error at least, so that no call moves every job by accident. A blocked
    job (waiting on other jobs) is left alone, as is a running one (row locked, or under a
    lease, even one that ran out, which the rescue takes back); `at` must be before
    `LATEST_DUE`. Workers see a job made due sooner at their next poll."""
    ids = _selection(
        "reschedule_jobs", "reschedule every waiting job", job_ids, queue, job_type, state, error
    )
    return _act(
        conn,
        _reschedule_plan,
        ids,
        dry_run,
        queue=queue,
        job_type=job_type,
        state=state,
        error=error,
        enqueued_until=enqueued_until,
        at=at,
        tables=tables,
    )


BATCH_SIZE = 500
"""How many jobs one step of `in_batches` acts on by default."""


_PLANS: dict[Callable[..., int], Callable[..., _Bulk]] = {
    retry_jobs: _retry_plan,
    cancel_jobs: _cancel_plan,
    discard_failed: _discard_plan,
    reschedule_jobs: _reschedule_plan,
}


def in_batches(
    conn: Connection,
    action: Callable[..., int],
    job_ids: Iterable[uuid.UUID | str] | None = None,
    *,
    batch_size: int = BATCH_SIZE,
    **filters: Any,
) -> Iterator[int]:
    """`action` (`retry_jobs`, `cancel_jobs`, `discard_failed` or `reschedule_jobs`, with
    its ids and filters)
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
            "in_batches runs retry_jobs, cancel_jobs, discard_failed or reschedule_jobs, "
            f"got {action!r}"
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

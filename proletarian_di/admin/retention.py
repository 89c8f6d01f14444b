"""How long the archive keeps finished jobs: `prune_archive` (a retention per outcome, a
batch at a time), `purge_archive` and `delete_archived` (by age, status and queue), and
`still_needed`, the archived jobs a purge keeps because waiting jobs need them."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple

from .._common.types import Connection
from .._store.dialects import Dialect, dialect_of
from .._store.statuses import status_in
from .._store.tables import DEFAULT_TABLES, Tables
from ..errors import ConfigurationError
from ._checks import _check_positive
from ._sql import _ARCHIVED, _STATE_OF_STATUS, _count, _Where

PRUNE_BATCH_SIZE = 500
"""How many archived jobs one step of `prune_archive` deletes by default."""


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
    return where.status(status).given("queue = %s", queue)


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
        params = (dialect.encode_time(before),)
        due = f"finished_at < %s AND {status_in('status', _ARCHIVED[state])}"
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

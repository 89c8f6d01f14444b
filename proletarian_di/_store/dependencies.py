"""Jobs that wait for other jobs (`enqueue(depends_on=...)`, `Workflow`).

A dependent job is written *blocked*: its process_at is `BLOCKED_AT`, past any time a job may
be due, so no claim sees it; it is listed in `<job table>_blocked`, and one row of
`<job table>_dependencies` per parent says which job it waits on and what for (`wait_for`:
"success", or "complete": any end). When a parent ends, in the transaction that archives it,
its rows get its status (`parent_status`), and each of its dependents that waits on nothing
more is released (due now) or, when it needed a success the parent did not give, cancelled
with an error that names the parent, and so on down the graph (`ended`).

There is no counter per dependent: a parent writes its own rows, and only one that finds no
other parent still running locks the dependent, so the parents of a fan-in never queue on
one row. Two last parents that commit in the same instant may each see the other still
running; and a parent archived while no worker watched (a worker before any dependent
existed, an operator's cancel, another program on the tables) writes no rows at all. The
sweep (`sweep`, a worker's registry thread, every `SWEEP_EVERY_S`) settles both from the
archive. A release is a conditional UPDATE of a still-blocked row, so whoever makes it, it
happens once, and never before the last parent's end has committed.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone
from typing import Any

from ..errors import ConfigurationError, SchemaError
from .dialects import Dialect
from .tables import UPGRADE_HINT

BLOCKED_AT = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc)
"""The process_at of a blocked job: later than any job may be due (`LATEST_DUE`)."""
LATEST_DUE = datetime(9999, 12, 30, tzinfo=timezone.utc)
"""A job must be due before this, so that a blocked one is told apart in any time zone."""
BLOCKED_SQL = "'9999-12-31'"
"""A literal between `LATEST_DUE` and `BLOCKED_AT` whatever the session's time zone: a
waiting job whose process_at is past it is blocked."""
WAIT_FOR = ("success", "complete")
FAILED = ("failure", "cancelled", "missing")
"""A parent's ends that cancel a dependent waiting for its success ("missing": deleted before
its end was known)."""
RECHECK_BELOW = 16
"""A parent that leaves its dependent waiting on this many others or fewer looks at it again
once it has committed (see `recheck`); the sweep settles the rest of the rare races."""
SWEEP_EVERY_S = 1.0
SWEEP_BATCH = 200
"""The most blocked jobs one sweep looks at (the next sweep goes on after the last)."""
SETTLE_BATCH = 10_000
"""The most jobs just blocked that one statement looks at for parents that ended already."""

EDGE_COLUMNS = (("parent_id", "uuid"), ("job_id", "uuid"), ("wait_for", "text"))
BLOCKED_COLUMNS = (("job_id", "uuid"), ("wait_for", "text"), ("blocked_at", "timestamptz"))
"""The columns of a dependency as `block` writes it, with their PostgreSQL types."""

Wake = Callable[[str, int], None]
"""Told of each released job: its queue and priority (a worker wakes to claim it)."""


def check_wait_for(value: Any) -> str:
    if value not in WAIT_FOR:
        raise ConfigurationError(f"when must be 'success' or 'complete', got {value!r}")
    return str(value)


def check_parents(value: Any) -> list[uuid.UUID]:
    """`depends_on` as job ids: an iterable of UUIDs (or their text), each once."""
    if isinstance(value, (str, bytes, uuid.UUID)) or not isinstance(value, Iterable):
        raise ConfigurationError(
            f"depends_on must be a list of job ids (as enqueue returns them), got {value!r}"
        )
    parents: list[uuid.UUID] = []
    for item in value:
        try:
            parent = item if isinstance(item, uuid.UUID) else uuid.UUID(str(item))
        except ValueError:
            raise ConfigurationError(f"depends_on holds {item!r}, which is not a job id") from None
        if parent not in parents:
            parents.append(parent)
    return parents


def has_tables(conn: Any, dialect: Dialect) -> bool:
    return bool(dialect.table_columns(conn, dialect.blocked_table))


def require_tables(conn: Any, dialect: Dialect, what: str) -> None:
    """Refuse `what` on a schema older than the workflows step, before anything is written."""
    if not has_tables(conn, dialect):
        raise tables_missing(dialect, what)


def tables_missing(dialect: Dialect, what: str) -> SchemaError:
    return SchemaError(
        f"{what} keeps its jobs in {dialect.dependencies_table} and "
        f"{dialect.workflows_table}, which this schema lacks (it is older than the "
        f"workflows step); nothing was written: {UPGRADE_HINT}"
    )


def blocked_now(conn: Any, dialect: Dialect) -> bool:
    """Whether some job is blocked now (on a schema with the tables)."""
    return dialect.fetchone(conn, f"SELECT 1 FROM {dialect.blocked_table} LIMIT 1") is not None


def _shown(raw_id: Any) -> str:
    return (
        str(uuid.UUID(bytes=bytes(raw_id)))
        if isinstance(raw_id, (bytes, bytearray))
        else str(raw_id)
    )


def block(
    conn: Any,
    dialect: Dialect,
    edges: Sequence[tuple[Any, Any, str]],
    now: datetime,
    wake: Wake,
) -> None:
    """Make the jobs just inserted (due at `BLOCKED_AT`) wait on their parents, `edges` of
    (parent, child, wait_for) in raw ids, each parent written before or checked by
    `check_known`, in the enqueue's transaction, in a bounded number of statements; those
    whose parents have all ended already are released or cancelled at once."""
    waits = dict((child, wait_for) for _, child, wait_for in edges)
    children = list(waits)
    dialect.insert_values(conn, dialect.dependencies_table, EDGE_COLUMNS, edges)
    at = dialect.encode_time(now)
    dialect.insert_values(
        conn,
        dialect.blocked_table,
        BLOCKED_COLUMNS,
        [(child, wait_for, at) for child, wait_for in waits.items()],
    )
    for start in range(0, len(children), SETTLE_BATCH):
        chunk = children[start : start + SETTLE_BATCH]
        if _settle_gone(conn, dialect, chunk):
            for child in chunk:
                resolve(conn, dialect, child, waits[child], now, wake)


def check_known(conn: Any, dialect: Dialect, parents: Sequence[Any]) -> None:
    """Refuse parents that are neither waiting nor archived, before anything is written; and
    a schema without the dependencies' tables."""
    require_tables(conn, dialect, "depends_on")
    known_ends(parents, dialect.fetchall(conn, *known_statement(dialect, parents)))


def known_statement(dialect: Dialect, parents: Sequence[Any]) -> tuple[str, list[Any]]:
    """The SELECT of the parents that exist: (id, None) for one waiting or running, (id, its
    archived status) for one that ended."""
    marks = ", ".join(["%s"] * len(parents))
    return (
        f"SELECT job_id, NULL FROM {dialect.job_table} WHERE job_id IN ({marks}) UNION ALL "
        f"SELECT job_id, status FROM {dialect.archived_job_table} WHERE job_id IN ({marks})",
        [*parents, *parents],
    )


def known_ends(parents: Sequence[Any], rows: Sequence[tuple[Any, Any]]) -> dict[Any, str | None]:
    """`known_statement`'s rows as each parent's end (None: it has not ended); a
    `ConfigurationError` naming the first parent that is neither waiting nor archived."""
    found = {
        bytes(row[0]) if isinstance(row[0], (bytes, bytearray)) else row[0]: row[1] for row in rows
    }
    unknown = [p for p in parents if p not in found]
    if unknown:
        raise ConfigurationError(
            f"depends_on names job {_shown(unknown[0])}, which is neither waiting nor archived "
            "(never enqueued, not committed yet, or purged); nothing was written"
        )
    return {parent: found[parent] for parent in parents}


def _settle_gone(conn: Any, dialect: Dialect, children: Sequence[Any]) -> bool:
    """Give the rows of these jobs' parents that have left the job table their archived
    status ("missing" if the archive lost them too); whether any had."""
    if not children:
        return False
    marks = ", ".join(["%s"] * len(children))
    gone = dialect.fetchall(
        conn,
        f"SELECT d.parent_id, a.status FROM {dialect.dependencies_table} d "
        f"LEFT JOIN {dialect.job_table} j ON j.job_id = d.parent_id "
        f"LEFT JOIN {dialect.archived_job_table} a ON a.job_id = d.parent_id "
        f"WHERE d.job_id IN ({marks}) AND d.parent_status IS NULL AND j.job_id IS NULL",
        children,
    )
    for parent, status in {(row[0], row[1]) for row in gone}:
        dialect.execute(
            conn,
            f"UPDATE {dialect.dependencies_table} SET parent_status = %s "
            "WHERE parent_id = %s AND parent_status IS NULL",
            (status or "missing", parent),
        )
    return bool(gone)


Waiting = list[tuple[Any, str]]
"""Blocked jobs (raw id, wait_for) to look at again once a transaction has committed."""


def ended(
    conn: Any, dialect: Dialect, parents: Sequence[Any], status: str, now: datetime, wake: Wake
) -> Waiting:
    """Jobs just archived with `status`, in the transaction that archives them: write their
    end on the rows of the jobs that wait on them, and release or cancel each of those that
    waits on nothing more (and so on down the graph). Returns the dependents left waiting on
    no more than `RECHECK_BELOW` others, which may have ended in transactions this one could
    not see: `recheck` them once this one has committed."""
    deps = dialect.dependencies_table
    again: Waiting = []
    todo = [(parent, status) for parent in parents]
    while todo:
        parent, status = todo.pop()
        update = (
            f"UPDATE {deps} SET parent_status = %s WHERE parent_id = %s AND parent_status IS NULL"
        )
        if dialect.update_returns:
            children = dialect.fetchall(
                conn, update + " RETURNING job_id, wait_for", (status, parent)
            )
        else:
            children = dialect.fetchall(
                conn,
                f"SELECT job_id, wait_for FROM {deps} WHERE parent_id = %s "
                "AND parent_status IS NULL",
                (parent,),
            )
            if children:
                dialect.execute(conn, update, (status, parent))
        for child, wait_for in sorted(children):
            cause = (parent, status) if wait_for == "success" and status != "success" else None
            if cause is None:
                waiting = _waits(conn, dialect, child)
                if waiting:
                    if waiting <= RECHECK_BELOW:
                        again.append((child, wait_for))
                    continue
            if resolve(conn, dialect, child, wait_for, now, wake, cause) == "cancelled":
                todo.append((child, "cancelled"))
    return again


def recheck(conn: Any, dialect: Dialect, waiting: Waiting, now: datetime, wake: Wake) -> None:
    """After the transaction of `ended` has committed, in one of its own: release or cancel
    those of `waiting` whose last parents ended in transactions that committed meanwhile (two
    last parents ending at once each see the other still running)."""
    dialect.begin(conn)
    try:
        for child, wait_for in sorted(waiting):
            resolve(conn, dialect, child, wait_for, now, wake, skip_locked=True)
        dialect.commit(conn)
    except BaseException:
        dialect.rollback(conn)
        raise


def parents_of(conn: Any, dialect: Dialect, child: Any) -> list[tuple[Any, str, str | None]]:
    """Each parent of `child` (raw ids), by id: its id, what the child waits for, and how
    the parent ended, read from where the parent is now (its archived status; None while it
    waits or runs; "missing" when neither table has it), not from what was written down when
    it ended, which a parent that ended while no worker watched never wrote."""
    return [
        (row[0], row[1], row[2])
        for row in dialect.fetchall(
            conn,
            f"SELECT d.parent_id, d.wait_for, CASE WHEN j.job_id IS NOT NULL THEN NULL "
            f"ELSE COALESCE(a.status, 'missing') END FROM {dialect.dependencies_table} d "
            f"LEFT JOIN {dialect.job_table} j ON j.job_id = d.parent_id "
            f"LEFT JOIN {dialect.archived_job_table} a ON a.job_id = d.parent_id "
            "WHERE d.job_id = %s ORDER BY d.parent_id",
            (child,),
        )
    ]


def _waits(conn: Any, dialect: Dialect, child: Any) -> int:
    """How many parents of `child` have not ended, as far as this transaction sees (counted
    up to `RECHECK_BELOW` + 1)."""
    row = dialect.fetchone(
        conn,
        f"SELECT COUNT(*) FROM (SELECT 1 FROM {dialect.dependencies_table} WHERE job_id = %s "
        f"AND parent_status IS NULL LIMIT {RECHECK_BELOW + 1}) pending",
        (child,),
    )
    return int(row[0])


def resolve(
    conn: Any,
    dialect: Dialect,
    child: Any,
    wait_for: str,
    now: datetime,
    wake: Wake,
    cause: tuple[Any, str] | None = None,
    skip_locked: bool = False,
) -> str | None:
    """Release or cancel a blocked job that waits on nothing more (or whose `cause`, a parent
    and its status, cancels it): "released", "cancelled", or None when it still waits, has
    left already, or (`skip_locked`) another transaction holds it."""
    lock = " FOR UPDATE SKIP LOCKED" if skip_locked else " FOR UPDATE"
    row = dialect.fetchone(
        conn,
        f"SELECT queue, priority FROM {dialect.job_table} WHERE job_id = %s AND process_at = %s"
        + lock,
        (child, dialect.encode_time(BLOCKED_AT)),
    )
    if row is None:
        return None
    if cause is None:
        if _waits(conn, dialect, child):  # read again under the lock: its end committed
            return None
        if wait_for == "success":
            cause = dialect.fetchone(
                conn,
                f"SELECT parent_id, parent_status FROM {dialect.dependencies_table} "
                "WHERE job_id = %s AND parent_status IN (%s, %s, %s) LIMIT 1",
                (child, *FAILED),
            )
    unblock = f"DELETE FROM {dialect.blocked_table} WHERE job_id = %s"
    if cause is not None:
        parent, status = cause
        said = {"failure": "failed", "cancelled": "was cancelled"}.get(
            status, "is gone (deleted before it ended)"
        )
        dialect.execute(
            conn,
            f"UPDATE {dialect.job_table} SET last_error = %s WHERE job_id = %s",
            (f"Cancel: job {_shown(parent)}, which this job depends on, {said}", child),
        )
        dialect.cancel_waiting(conn, "job_id = %s", (child,), now)
        dialect.execute(conn, unblock, (child,))
        return "cancelled"
    dialect.execute(
        conn,
        f"UPDATE {dialect.job_table} SET process_at = %s WHERE job_id = %s AND process_at = %s",
        (dialect.encode_time(now), child, dialect.encode_time(BLOCKED_AT)),
    )
    dialect.execute(conn, unblock, (child,))
    queue, priority = row[0], int(row[1])
    dialect.announce_due(conn, queue, priority)
    wake(queue, priority)
    return "released"


def sweep(
    conn: Any, dialect: Dialect, now: datetime, after: Any = None, wake: Wake = lambda q, p: None
) -> tuple[int, Any]:
    """Settle what the parents' own transactions could not (see the module's docstring), for
    up to `SWEEP_BATCH` blocked jobs from past `after`, in the caller's transaction:
    (how many were released or cancelled, where the next sweep goes on; None: from the
    start). A blocked job another transaction holds is passed over."""
    blocked = dialect.blocked_table
    since = "" if after is None else "WHERE job_id > %s "
    rows = dialect.fetchall(
        conn,
        f"SELECT job_id, wait_for FROM {blocked} {since}ORDER BY job_id LIMIT {SWEEP_BATCH}",
        () if after is None else (after,),
    )
    settled = 0
    for child, wait_for in rows:
        held = dialect.fetchone(
            conn,
            f"SELECT process_at FROM {dialect.job_table} WHERE job_id = %s FOR UPDATE SKIP LOCKED",
            (child,),
        )
        if held is None:
            if not dialect.fetchone(
                conn, f"SELECT 1 FROM {dialect.job_table} WHERE job_id = %s", (child,)
            ):  # cancelled or deleted by hand: its parents' rows stay for the graph
                dialect.execute(conn, f"DELETE FROM {blocked} WHERE job_id = %s", (child,))
            continue
        _settle_gone(conn, dialect, [child])
        if resolve(conn, dialect, child, wait_for, now, wake) is not None:
            settled += 1
    return settled, (rows[-1][0] if len(rows) == SWEEP_BATCH else None)

"""Jobs that wait for other jobs (`enqueue(depends_on=...)`, `Workflow`).

A dependent job is written *blocked*: its process_at is `BLOCKED_AT`, past any time a job may
be due, so no claim sees it; it is listed in `<job table>_blocked`, and one row of
`<job table>_dependencies` per parent says which job it waits on and what for (`wait_for`:
"success", or "complete": any end). When a parent ends (in the transaction that archives
it, or for a worker's success right after that commits, in one of its own: its archive's
round trip asked whether a job waits on it, see `Steps.ends_after_commit`), its rows get its
status (`parent_status`), and each of its dependents that waits on nothing
more is released (due now) or, when it needed a success the parent did not give, cancelled
with an error that names the parent, and so on down the graph (`ended`): a few set
statements per level of the graph, whatever the fan-out, so a parent's transaction holds
its locks briefly however many jobs wait on it. On PostgreSQL the transaction that blocks
a job tells listening workers (`GRAPH_CHANNEL`), so an idle one does not wait for its beat.

There is no counter per dependent: a parent writes its own rows, and only one that finds no
other parent still running locks the dependent, so the parents of a fan-in never queue on
one row. Two last parents that commit in the same instant may each see the other still
running; and a parent archived while no worker watched (a worker before any dependent
existed, an operator's cancel, another program on the tables) writes no rows at all. The
sweep (`sweep`, a worker's registry thread, every `SWEEP_EVERY_S`) settles both from the
archive, and a worker that died between its success's commit and writing its ends; it
passes over rows another transaction holds, so it never waits on a parent's own worker. A
release is a conditional UPDATE of a still-blocked row, so whoever makes it, it happens
once, and never before the last parent's end has committed.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone
from typing import Any

from ..errors import ConfigurationError, SchemaError
from .dialects import Dialect
from .statuses import outcome
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
GRAPH_CHANNEL = "proletarian_di_graph"
"""Where PostgreSQL tells listening workers, once it commits, that a transaction blocked a
job: an idle worker writes its jobs' ends from its next one, not from its next beat."""
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
    dialect.announce(conn, GRAPH_CHANNEL, "")
    for start in range(0, len(children), SETTLE_BATCH):
        chunk = children[start : start + SETTLE_BATCH]
        if _settle_gone(conn, dialect, chunk):
            _settle(conn, dialect, {_key(child): waits[child] for child in chunk}, now, wake)


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
        bytes(row[0]) if isinstance(row[0], (bytes, bytearray)) else row[0]: (
            None if row[1] is None else outcome(row[1])
        )
        for row in rows
    }
    unknown = [p for p in parents if p not in found]
    if unknown:
        raise ConfigurationError(
            f"depends_on names job {_shown(unknown[0])}, which is neither waiting nor archived "
            "(never enqueued, not committed yet, or purged); nothing was written"
        )
    return {parent: found[parent] for parent in parents}


def _settle_gone(
    conn: Any, dialect: Dialect, children: Sequence[Any], skip_locked: bool = False
) -> bool:
    """Give these jobs' rows of parents that have left the job table their archived status
    ("missing" if the archive lost them too); whether any had. With `skip_locked` (the
    sweep), rows another transaction holds are passed over: the parent's worker writing
    them after its archive committed (`Steps.ends_after_commit`) is not waited for."""
    if not children:
        return False
    deps = dialect.dependencies_table
    among, params = dialect.any_of("d.job_id", children)
    gone = dialect.fetchall(
        conn,
        f"SELECT d.parent_id, d.job_id, a.status FROM {deps} d "
        f"LEFT JOIN {dialect.job_table} j ON j.job_id = d.parent_id "
        f"LEFT JOIN {dialect.archived_job_table} a ON a.job_id = d.parent_id "
        f"WHERE {among} AND d.parent_status IS NULL AND j.job_id IS NULL",
        params,
    )
    ends: dict[tuple[Any, str], list[Any]] = {}
    for parent, child, status in gone:
        ends.setdefault((parent, outcome(status) if status else "missing"), []).append(child)
    for (parent, status), rows in ends.items():
        if skip_locked:
            among, params = dialect.any_of("job_id", rows)
            rows = [
                row[0]
                for row in dialect.fetchall(
                    conn,
                    f"SELECT job_id FROM {deps} WHERE parent_id = %s AND {among} "
                    "AND parent_status IS NULL FOR UPDATE SKIP LOCKED",
                    [parent, *params],
                )
            ]
            if not rows:
                continue
        among, params = dialect.any_of("job_id", rows)
        dialect.execute(
            conn,
            f"UPDATE {deps} SET parent_status = %s WHERE parent_id = %s AND {among} "
            "AND parent_status IS NULL",
            [status, parent, *params],
        )
    return bool(gone)


Waiting = list[tuple[Any, str]]
"""Blocked jobs (raw id, wait_for) to look at again once a transaction has committed."""


def ended(
    conn: Any, dialect: Dialect, parents: Sequence[Any], status: str, now: datetime, wake: Wake
) -> Waiting:
    """Jobs just archived with `status`, in the transaction that archives them: write their
    end on the rows of the jobs that wait on them, and release or cancel those that wait on
    nothing more, then the jobs that waited on those cancelled, level by level down the
    graph. A few statements per level, whatever the fan-out (see `_settle`). Returns the
    dependents left waiting on no more than `RECHECK_BELOW` others, which may have ended in
    transactions this one could not see: `recheck` them once this one has committed."""
    again: Waiting = []
    level = list(parents)
    while level:
        waits = _write_ends(conn, dialect, level, status)
        doomed = [c for c, w in waits.items() if w == "success" and status != "success"]
        rest = {c: w for c, w in waits.items() if not (w == "success" and status != "success")}
        _, failed, waiting = _release(conn, dialect, rest, now, wake)
        again.extend(waiting)
        level, status = _cancel(conn, dialect, [*doomed, *failed], now), "cancelled"
    return again


def _write_ends(conn: Any, dialect: Dialect, parents: Sequence[Any], status: str) -> dict[Any, str]:
    """Give every row of these parents their end, in one statement: {dependent: wait_for}."""
    deps = dialect.dependencies_table
    among, params = dialect.any_of("parent_id", parents)
    update = f"UPDATE {deps} SET parent_status = %s WHERE {among} AND parent_status IS NULL"
    if dialect.update_returns:
        rows = dialect.fetchall(conn, update + " RETURNING job_id, wait_for", [status, *params])
    else:
        rows = dialect.fetchall(
            conn,
            f"SELECT job_id, wait_for FROM {deps} WHERE {among} AND parent_status IS NULL",
            params,
        )
        if rows:
            dialect.execute(conn, update, [status, *params])
    return {_key(child): wait_for for child, wait_for in rows}


def _key(raw_id: Any) -> Any:
    return bytes(raw_id) if isinstance(raw_id, bytearray) else raw_id


def _release(
    conn: Any,
    dialect: Dialect,
    waits: dict[Any, str],
    now: datetime,
    wake: Wake,
    skip_locked: bool = False,
) -> tuple[list[Any], list[Any], Waiting]:
    """Release those of these blocked jobs ({raw id: wait_for}) that wait on nothing more,
    in four statements: lock those that no running parent holds back (so that the parents
    of a fan-in never queue on one row), read their rows again under the lock (an end that
    committed meanwhile), release the rest, and unblock them. Returns those released, the
    locked ones that needed a success a parent did not give (to cancel), and those left
    waiting on no more than `RECHECK_BELOW` others."""
    if not waits:
        return [], [], []
    job, deps, blocked_at = dialect.job_table, dialect.dependencies_table, BLOCKED_AT
    among, params = dialect.any_of("j.job_id", sorted(waits))
    lock = " FOR UPDATE SKIP LOCKED" if skip_locked else " FOR UPDATE"
    locked = {
        _key(row[0]): (row[1], int(row[2]))
        for row in dialect.fetchall(
            conn,
            f"SELECT j.job_id, j.queue, j.priority FROM {job} j WHERE {among} "
            f"AND j.process_at = %s AND NOT EXISTS (SELECT 1 FROM {deps} d "
            "WHERE d.job_id = j.job_id AND d.parent_status IS NULL) ORDER BY j.job_id" + lock,
            [*params, dialect.encode_time(blocked_at)],
        )
    }
    pending: set[Any] = set()
    failed: set[Any] = set()
    if locked:
        among, params = dialect.any_of("job_id", sorted(locked))
        for child, status in dialect.fetchall(
            conn,
            f"SELECT job_id, parent_status FROM {deps} WHERE {among} "
            "AND (parent_status IS NULL OR parent_status IN (%s, %s, %s))",
            [*params, *FAILED],
        ):
            child = _key(child)
            if status is None:
                pending.add(child)
            elif waits[child] == "success":
                failed.add(child)
    free = sorted(c for c in locked if c not in pending and c not in failed)
    if free:
        among, params = dialect.any_of("job_id", free)
        dialect.execute(
            conn,
            f"UPDATE {job} SET process_at = %s WHERE {among} AND process_at = %s",
            [dialect.encode_time(now), *params, dialect.encode_time(blocked_at)],
        )
        dialect.execute(conn, f"DELETE FROM {dialect.blocked_table} WHERE {among}", params)
        for queue, priority in sorted({locked[child] for child in free}):
            dialect.announce_due(conn, queue, priority)
            wake(queue, priority)
    done = {*free, *failed}
    left = sorted(c for c in waits if c not in done)
    waiting: Waiting = []
    if left:
        among, params = dialect.any_of("job_id", left)
        waiting = [
            (child, waits[_key(child)])
            for (child,) in dialect.fetchall(
                conn,
                f"SELECT job_id FROM {deps} WHERE {among} AND parent_status IS NULL "
                f"GROUP BY job_id HAVING COUNT(*) <= {RECHECK_BELOW}",
                params,
            )
        ]
    return free, sorted(failed), waiting


def _cancel(
    conn: Any, dialect: Dialect, children: Sequence[Any], now: datetime, skip_locked: bool = False
) -> list[Any]:
    """Cancel these blocked jobs, each with an error that names a parent whose end cancels
    it, in four statements; the raw ids of those cancelled (still blocked, and with
    `skip_locked`, not held by another transaction)."""
    if not children:
        return []
    job, deps = dialect.job_table, dialect.dependencies_table
    among, params = dialect.any_of("job_id", sorted(set(children)))
    lock = " FOR UPDATE SKIP LOCKED" if skip_locked else " FOR UPDATE"
    locked = [
        _key(row[0])
        for row in dialect.fetchall(
            conn,
            f"SELECT job_id FROM {job} WHERE {among} AND process_at = %s ORDER BY job_id" + lock,
            [*params, dialect.encode_time(BLOCKED_AT)],
        )
    ]
    if not locked:
        return []
    said = (
        "CASE d.parent_status WHEN 'failure' THEN 'failed' WHEN 'cancelled' THEN "
        "'was cancelled' ELSE 'is gone (deleted before it ended)' END"
    )
    error = (
        f"CONCAT('Cancel: job ', {dialect.id_text('d.parent_id')}, "
        f"', which this job depends on, ', {said})"
    )
    among, params = dialect.any_of("j.job_id", locked)
    dialect.execute(
        conn,
        f"UPDATE {job} j SET last_error = (SELECT {error} FROM {deps} d "
        "WHERE d.job_id = j.job_id AND d.parent_status IN (%s, %s, %s) "
        f"ORDER BY d.parent_id LIMIT 1) WHERE {among}",
        [*FAILED, *params],
    )
    among, params = dialect.any_of("job_id", locked)
    dialect.cancel_waiting(conn, among, params, now)
    dialect.execute(conn, f"DELETE FROM {dialect.blocked_table} WHERE {among}", params)
    return locked


def _settle(
    conn: Any,
    dialect: Dialect,
    waits: dict[Any, str],
    now: datetime,
    wake: Wake,
    skip_locked: bool = False,
) -> int:
    """Release or cancel those of these blocked jobs ({raw id: wait_for}) that wait on
    nothing more, and cancel down the graph under those cancelled; how many of these were
    released or cancelled."""
    released, failed, _ = _release(conn, dialect, waits, now, wake, skip_locked)
    cancelled = _cancel(conn, dialect, failed, now, skip_locked)
    if cancelled:
        ended(conn, dialect, cancelled, "cancelled", now, wake)
    return len(released) + len(cancelled)


def recheck(conn: Any, dialect: Dialect, waiting: Waiting, now: datetime, wake: Wake) -> None:
    """After the transaction of `ended` has committed, in one of its own: release or cancel
    those of `waiting` whose last parents ended in transactions that committed meanwhile (two
    last parents ending at once each see the other still running)."""
    dialect.begin(conn)
    try:
        _settle(conn, dialect, {_key(c): w for c, w in waiting}, now, wake, skip_locked=True)
        dialect.commit(conn)
    except BaseException:
        dialect.rollback(conn)
        raise


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
    waits = {_key(child): wait_for for child, wait_for in rows}
    settled = 0
    if waits:
        among, params = dialect.any_of("job_id", sorted(waits))
        present = {
            _key(row[0])
            for row in dialect.fetchall(
                conn, f"SELECT job_id FROM {dialect.job_table} WHERE {among}", params
            )
        }
        gone = sorted(set(waits) - present)
        if gone:  # cancelled or deleted by hand: its parents' rows stay for the graph
            among, params = dialect.any_of("job_id", gone)
            dialect.execute(conn, f"DELETE FROM {blocked} WHERE {among}", params)
        waits = {child: waits[child] for child in sorted(present)}
        _settle_gone(conn, dialect, list(waits), skip_locked=True)
        settled = _settle(conn, dialect, waits, now, wake, skip_locked=True)
    return settled, (rows[-1][0] if len(rows) == SWEEP_BATCH else None)

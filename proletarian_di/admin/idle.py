"""Why a live worker's idle threads claim nothing from a queue now (`idle_reasons`), as the
dashboard's processes page shows it beside each idle thread.

Each reason is one `queue_holds` finds (the queue paused, `max_running` full, rate limited
until a time), or that no job of the queue is due and free to claim: read from the first due
rows of the queue in `(queue, process_at)` order, a bounded range of its index, with the
rows a worker runs now told apart as `queue_holds` and the overview tell them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from .._common.types import Connection
from .._store.dialects import Dialect, dialect_of
from .._store.tables import DEFAULT_TABLES, Tables
from ..errors import ConfigurationError
from ._checks import _utc
from .explain import queue_holds
from .jobs import MAX_LIMIT

DUE_PROBED = 50
"""The due rows of a queue read to tell whether one is free to claim: when the first this
many all run now, whether another is free is not known, and no reason is given."""

KINDS = ("paused", "max_running", "rate_limited", "no_due_job")
"""The reasons' kinds, in the order they are looked for: the first that holds is given."""


@dataclasses.dataclass(frozen=True)
class IdleReason:
    """Why the idle threads of a queue's live workers claim nothing now: its `kind` (one of
    `KINDS`), the sentence that says so (`reason`, as `explain_job` says it of a due job for
    a hold), and until when for a rate limit."""

    queue: str
    kind: str
    reason: str
    until: datetime | None = None


def idle_reasons(
    conn: Connection,
    queues: Sequence[str],
    *,
    now: datetime | None = None,
    tables: Tables = DEFAULT_TABLES,
) -> dict[str, IdleReason | None]:
    """For each queue, why its live workers' idle threads claim nothing now: the queue is
    paused, its `max_running` slots are all taken, it is rate limited until a time, or no
    job of it is due and free (none due, or every due one running). None where nothing
    known holds it back: a due job waits for a thread's next poll, or the first
    `DUE_PROBED` due jobs all run now and whether another is free is not read.

    At most `MAX_LIMIT` queues; a few statements whatever their number."""
    if isinstance(queues, str) or len(queues) > MAX_LIMIT:
        raise ConfigurationError(f"queues must be a list of at most {MAX_LIMIT} queue names")
    at = _utc(now or datetime.now(timezone.utc))
    dialect = dialect_of(conn, tables)
    names = list(dict.fromkeys(queues))
    with dialect.admin_read(conn):
        free = _free_due(conn, dialect, tables, names, at)
    holds = queue_holds(conn, {q: bool(free[q]) for q in names}, now=at, tables=tables)
    found: dict[str, IdleReason | None] = {}
    for queue in names:
        held = {hold.kind: hold for hold in holds[queue]}
        kind = next((k for k in KINDS[:3] if k in held), None)
        if kind is not None:
            found[queue] = IdleReason(queue, kind, held[kind].reason, held[kind].until)
        elif free[queue] is False:
            found[queue] = IdleReason(queue, "no_due_job", _nothing_due(queue))
        else:
            found[queue] = None
    return found


def _nothing_due(queue: str) -> str:
    return f"no job of queue {queue!r} is due and free to claim now"


def _free_due(
    conn: Connection, dialect: Dialect, tables: Tables, queues: list[str], at: datetime
) -> dict[str, bool | None]:
    """Whether each queue has a due job no worker runs now (None: its first `DUE_PROBED`
    due jobs all run, and the rest are not read). A row under an expired lease is free: a
    lease-mode worker claims it again."""
    if not queues:
        return {}
    maybe = dialect.held_rows(conn)
    head = (
        f"SELECT queue, job_id, leased_by, CASE WHEN {maybe.condition} THEN 1 ELSE 0 END "
        f"FROM {tables.job_table} WHERE queue = %s AND process_at <= %s "
        f"ORDER BY process_at LIMIT {DUE_PROBED}"
    )
    params = [p for queue in queues for p in (*maybe.params, queue, dialect.encode_time(at))]
    rows = dialect.fetchall(conn, " UNION ALL ".join([f"({head})"] * len(queues)), params)
    by_queue: dict[str, list[tuple[Any, Any]]] = {queue: [] for queue in queues}
    candidates = []
    for queue, job_id, leased_by, flagged in rows:
        by_queue[queue].append((job_id, leased_by))
        if leased_by is None and int(flagged):
            candidates.append(job_id)
    held = set(candidates) if maybe.exact else dialect.probe_held(conn, candidates)
    free: dict[str, bool | None] = {}
    for queue, found in by_queue.items():
        if any(leased is not None or job_id not in held for job_id, leased in found):
            free[queue] = True
        else:
            free[queue] = None if len(found) == DUE_PROBED else False
    return free

"""The SQL the admin modules share: the condition of each waiting state and the status of
each archived one, `_Where` (conditions joined by AND, with their parameters), the archived
failures a filter picks (`_failures`), and a count of the rows that match (`_count`)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from .._common.types import Connection
from .._store.dependencies import BLOCKED_SQL
from .._store.dialects import Dialect
from .._store.statuses import CLOJURE_STATUSES, FAILURE, SPELLINGS, status_in
from ._checks import _moment
from .headline import _check_error, _headline_sql

_LEASED = "leased_by IS NOT NULL AND process_at > %s"
"""A job under a live lease (its `%s` is now): a lease-mode worker runs it, its row unlocked,
and its process_at is when the lease runs out. An expired lease is due, to be rescued."""
_NOT_LEASED = "(leased_by IS NULL OR process_at <= %s)"
_CLAIMABLE = "leased_by IS NULL AND process_at <= %s"
"""A row a held-mode worker may have claimed (its `%s` is now): due, so neither blocked nor
scheduled, and not leased. Only such a row, locked, is running: a lock on any other row is
someone else's (a sweep, an enqueue's check, an action), never a job's run."""
_WAITING = {
    "blocked": f"attempts = 0 AND process_at > {BLOCKED_SQL}",
    "queued": "attempts = 0 AND process_at <= %s",
    "scheduled": f"attempts = 0 AND process_at > %s AND process_at < {BLOCKED_SQL}",
    "retrying": f"attempts > 0 AND {_NOT_LEASED}",
    "running": "",
}
_ARCHIVED = {"succeeded": "success", "failed": "failure", "cancelled": "cancelled"}
_STATE_OF_STATUS = {status: state for state, status in _ARCHIVED.items()}
_STATE_OF_STORED = {
    **_STATE_OF_STATUS,
    **{clojure: _STATE_OF_STATUS[status] for clojure, status in CLOJURE_STATUSES.items()},
}
"""The state of each status an archived row may hold, Proletarian's (":failure") too."""


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

    def status(self, status: str | None) -> _Where:
        """Only archived rows with the outcome `status` ("success", "failure", "cancelled"),
        in either side's spelling (None: any)."""
        if status is None:
            return self
        spellings = SPELLINGS.get(status, (status,))
        return self.add(f"status IN ({', '.join(['%s'] * len(spellings))})", *spellings)

    def headline(self, dialect: Dialect, error: str | tuple[str, ...] | None) -> _Where:
        """Only jobs whose error's first line is `error`, or one of them (None: any job)."""
        if error is None:
            return self
        if isinstance(error, tuple):
            marks = ", ".join(["%s"] * len(error))
            return self.add(f"{_headline_sql(dialect)} IN ({marks})", "\n", *error)
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


def _failures(
    dialect: Dialect,
    job_ids: list[uuid.UUID] | None,
    queue: str | None,
    job_type: str | None,
    since: datetime | None,
    until: datetime | None,
    error: str | Sequence[str] | None = None,
) -> _Where:
    """Archived failures, by id and filters (`since` <= finished_at < `until`, the error's
    first line)."""
    start, end = _moment(since, "since"), _moment(until, "until")
    return (
        _Where(status_in("status", FAILURE))
        .ids(dialect, job_ids)
        .given("queue = %s", queue)
        .given("job_type = %s", job_type)
        .headline(dialect, _check_error(error))
        .given("finished_at >= %s", start and dialect.encode_time(start))
        .given("finished_at < %s", end and dialect.encode_time(end))
    )


def _count(conn: Connection, dialect: Dialect, table: str, where: _Where) -> int:
    """How many rows of `table` match."""
    sql = f"SELECT COUNT(*) FROM {table} WHERE {where.sql}"
    return int(dialect.fetchall(conn, sql, where.params)[0][0])

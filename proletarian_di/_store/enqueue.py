"""Enqueue jobs on the caller's connection, inside the caller's transaction.

Nothing here commits: the job exists exactly when the caller's transaction
commits (the outbox pattern).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, cast

from .._common.checks import (
    check_clock,
    check_id_strategy,
    check_job_type_style,
    check_name,
    check_priority,
    check_queue,
    keyword_job_type,
)
from .._common.types import Connection, EnqueueOptions
from ..errors import ArgumentTypeError, ConfigurationError, PayloadError, SchemaError
from ..jobs import DEFAULT_QUEUE
from ..serializers import DEFAULT_SERIALIZER, check_serializer
from . import dependencies as _dependencies
from .connections import (
    AsyncStatements,
    async_driver_connection,
    async_statements,
    driver_connection,
)
from .dialects import Dialect, connection_kind, dialect_named
from .dialects.base import UNIQUE_TRIES
from .dialects.postgresql import PostgresDialect
from .tables import DEFAULT_ARCHIVED_JOB_TABLE, DEFAULT_JOB_TABLE, UPGRADE_HINT, check_table_name
from .tracing import current_trace_context, missing_column

if TYPE_CHECKING:
    from typing_extensions import Unpack

BATCH_SIZE = 5_000


def _due(now: datetime, process_at: datetime | None, process_in: timedelta | None) -> datetime:
    """When the job is due, in UTC; the past means now."""
    if process_at is not None:
        if not isinstance(process_at, datetime):
            raise ConfigurationError(f"process_at must be a datetime, got {process_at!r}")
        if process_at.tzinfo is None or process_at.utcoffset() is None:
            raise ConfigurationError(
                "process_at must be timezone-aware (e.g. datetime.now(timezone.utc)), "
                f"got naive {process_at.isoformat()}"
            )
        due, option = max(process_at, now), f"process_at={process_at.isoformat()}"
    elif process_in is not None:
        if not isinstance(process_in, timedelta):
            raise ConfigurationError(f"process_in must be a timedelta, got {process_in!r}")
        option = f"process_in={process_in}"
        try:
            due = now + max(process_in, timedelta(0))
        except OverflowError:
            due = None
    else:
        return now
    try:
        if due is not None and due < _dependencies.LATEST_DUE:
            return due.astimezone(timezone.utc)
    except OverflowError:
        pass
    raise ConfigurationError(
        f"{option} is too far ahead: a job must be due before 9999-12-30 00:00 UTC (later "
        "times mark jobs that wait on others)"
    )


def check_encoded(text: Any, codec: Any) -> None:
    """A custom serializer's output, checked before anything is written: text the drivers
    can send (the default serializer checks its own)."""
    if not isinstance(text, str):
        raise PayloadError(f"serializer {codec!r} must encode to a str, got {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise PayloadError(
            f"serializer {codec!r} encoded a payload to text with a lone surrogate at "
            f"position {exc.start}, which has no UTF-8 encoding"
        ) from None


def _dialect(
    conn: Any, job_table: str, asynchronous: bool, archive: str = DEFAULT_ARCHIVED_JOB_TABLE
) -> Dialect:
    """The dialect of `conn`, checked before anything is written: a synchronous psycopg 3
    or PyMySQL connection for `enqueue`, a psycopg `AsyncConnection` or an asyncpg
    connection for `enqueue_async` (SQLAlchemy's are unwrapped before)."""
    name, is_async = connection_kind(conn)
    kind = f"{type(conn).__module__}.{type(conn).__qualname__}"
    if is_async and not asynchronous:
        raise ArgumentTypeError(
            f"enqueue needs a synchronous connection, got the async {kind}: "
            "use `await enqueue_async(conn, ...)`"
        )
    if asynchronous and not is_async:
        raise ArgumentTypeError(
            f"enqueue_async needs a psycopg AsyncConnection, an asyncpg connection or a "
            f"SQLAlchemy AsyncSession/AsyncConnection, got {kind}: "
            "use `enqueue(conn, ...)` with it"
        )
    if archive is not DEFAULT_ARCHIVED_JOB_TABLE:
        archive = check_table_name(archive, "archived_job_table")
    return dialect_named(name, check_table_name(job_table, "job_table"), archive)


_OPTIONS = frozenset(EnqueueOptions.__annotations__)


class _Prepared:
    """Rows ready to insert, with their ids and their dialect, for one enqueue call.

    Every option is checked, and every payload encoded, before anything is written.
    """

    def __init__(
        self,
        conn: Connection,
        jobs: Iterable[tuple[str, Any]],
        options: Mapping[str, Any],
        asynchronous: bool = False,
        wait_for: str = "success",
        blocked: bool = False,
    ) -> None:
        unknown = sorted(set(options) - _OPTIONS)
        if unknown:
            raise ConfigurationError(
                f"unknown enqueue option(s) {', '.join(unknown)}; "
                f"valid options: {', '.join(sorted(_OPTIONS))}"
            )
        job_table = options.get("job_table", DEFAULT_JOB_TABLE)
        archive = options.get("archived_job_table", DEFAULT_ARCHIVED_JOB_TABLE)
        self.dialect = _dialect(conn, job_table, asynchronous, archive)
        queue = check_queue(options.get("queue", DEFAULT_QUEUE))
        keyword_types = check_job_type_style(options.get("job_type_style", "plain")) == "keyword"
        codec = check_serializer(options.get("serializer"))
        strategy = check_id_strategy(options.get("job_id_strategy"))
        self.strategy = strategy = strategy or self.dialect.default_id_strategy
        key = options.get("unique_key")
        self.unique_key = None if key is None else check_name(key, "unique_key")
        group = options.get("group_key")
        group = None if group is None else check_name(group, "group_key")
        self.grouped = group is not None
        priority = check_priority(options.get("priority", 0))
        self.now = now = check_clock(options.get("clock"))()
        due = _due(now, options.get("process_at"), options.get("process_in"))
        self.parents: list[Any] = []
        self.wait_for = wait_for
        parents = options.get("depends_on")
        if parents is not None:
            parents = _dependencies.check_parents(parents)
            self.wait_for = _dependencies.check_wait_for(wait_for)
            if parents:
                _refuse_with_parents(options)
                due = _dependencies.BLOCKED_AT
            self.parents = [strategy.encode(parent) for parent in parents]
        if blocked:  # a workflow's job, whose parents the workflow writes with it
            _refuse_with_parents(options)
            due = _dependencies.BLOCKED_AT
        self.job_table = job_table
        self.trace_context = trace = current_trace_context()
        self.ids: list[uuid.UUID] = []
        self.rows: list[tuple[Any, ...]] = []
        for job_type, payload in jobs:
            check_name(job_type, "job_type")
            if keyword_types:
                job_type = keyword_job_type(job_type)
            job_id = strategy.generate()
            self.ids.append(job_id)
            raw_id, encoded = strategy.encode(job_id), codec.encode(payload)
            if codec is not DEFAULT_SERIALIZER:
                check_encoded(encoded, codec)
            row = (raw_id, queue, job_type, encoded, now, due, priority, trace)
            self.rows.append(row if group is None else (*row, group))

    def check_parents(self, conn: Any) -> None:
        """Refuse `depends_on` naming a job that does not exist, before anything is written."""
        if self.parents:
            _dependencies.check_known(conn, self.dialect, self.parents)

    def block(self, conn: Any, ids: Sequence[Any]) -> None:
        """Make the jobs just written (raw ids) wait on their parents, in the same transaction."""
        if self.parents:
            edges = [(parent, child, self.wait_for) for child in ids for parent in self.parents]
            _dependencies.block(conn, self.dialect, edges, self.now, _no_wake)

    def schema_error(self, exc: BaseException) -> SchemaError | None:
        """The clear error for an INSERT into a job table that does not exist, or a traced
        INSERT the schema has no column for; else None."""
        if _no_such_table(exc, self.job_table):
            return self.dialect.missing_table(self.job_table, "job_table")
        if self.grouped and "group_key" in str(exc) and missing_column(exc, "", "group_key"):
            return SchemaError(
                f"enqueue with a group_key keeps it in {self.job_table}.group_key, which this "
                f"schema lacks (it is older than the group_keys step); nothing was written: "
                f"{UPGRADE_HINT}"
            )
        if self.trace_context is None:
            return None
        return missing_column(exc, self.job_table)


def _no_wake(queue: str, priority: int) -> None:
    """A dependent released at its enqueue wakes workers by notification (on PostgreSQL)."""


def _refuse_with_parents(options: Mapping[str, Any]) -> None:
    """The options a job that waits on others cannot take (yet), refused by name."""
    for option, why in (
        ("unique_key", "a job that waits on others holds no unique key"),
        ("process_at", "it falls due when its last parent ends"),
        ("process_in", "it falls due when its last parent ends"),
    ):
        if options.get(option) is not None:
            raise ConfigurationError(f"depends_on cannot be given with {option}: {why}")


_UNDEFINED_TABLE = "42P01"  # PostgreSQL's SQLSTATE
_NO_SUCH_TABLE = 1146  # MySQL's ER_NO_SUCH_TABLE (PyMySQL's first argument)


def _no_such_table(exc: BaseException, job_table: str) -> bool:
    """Whether an INSERT failed because `job_table` does not exist on this database (a
    wrong `job_table`, or the schema not installed)."""
    code = exc.args[0] if exc.args else None
    if getattr(exc, "sqlstate", None) != _UNDEFINED_TABLE and code != _NO_SUCH_TABLE:
        return False
    return job_table.rpartition(".")[2] in str(exc)


def enqueue(
    conn: Connection, job_type: str, payload: Any = None, **options: Unpack[EnqueueOptions]
) -> uuid.UUID:
    """Insert a job on `conn` and return its id; never commits.

    `conn` is a psycopg 3 or PyMySQL connection, or a SQLAlchemy `Session` or
    `Connection` on one (`postgresql+psycopg://`, `mysql+pymysql://`): the job is
    written in its current transaction, begun as SQLAlchemy would if none is open,
    and a transaction that has already failed is a `TransactionAborted` error.

    Options (`EnqueueOptions`): `queue` (default "default"), `process_at` (aware
    datetime) which wins over `process_in` (timedelta) (a time in the past or a
    negative duration means now), `priority` (default 0; among due jobs of a queue,
    higher runs first), `unique_key`, `job_table` (and `archived_job_table`, where
    `depends_on` looks for jobs that ended), `serializer`, `job_id_strategy`, `clock`,
    `group_key` (a tenant, say: fair workers take turns across a queue's
    group keys, `create_queue_worker(fair=True)`), `depends_on` (job ids: the job is
    blocked until every one of them has succeeded, and cancelled if one fails for good or is
    cancelled; see `Workflow` for more). The payload is encoded first, so a payload that
    cannot be serialized writes nothing.

    With `unique_key`, at most one job of the queue holds the key while it waits, is
    retried or runs: if one does, nothing is written and its id is returned, and the
    caller's transaction stays usable (no error is raised and caught).

    Inside an OpenTelemetry span, the span's trace context is kept with the job, so that
    its run joins the trace (`proletarian_di.contrib.opentelemetry`).
    """
    return _enqueue_one(conn, job_type, payload, options)


def _enqueue_one(
    conn: Connection, job_type: str, payload: Any, options: Mapping[str, Any]
) -> uuid.UUID:
    """`enqueue` (a `Workflow`'s job with a unique key too)."""
    conn = driver_connection(conn)
    prepared = _Prepared(conn, [(job_type, payload)], options)
    prepared.dialect.check_rows(conn, prepared.rows, prepared.unique_key)
    prepared.check_parents(conn)
    try:
        if prepared.unique_key is None:
            prepared.dialect.insert_one(conn, prepared.rows[0])
            prepared.block(conn, [prepared.rows[0][0]])
            return prepared.ids[0]
        holder = prepared.dialect.insert_unique(conn, prepared.rows[0], prepared.unique_key)
    except Exception as exc:
        error = prepared.schema_error(exc)
        if error is None:
            raise
        raise error from exc
    return prepared.ids[0] if holder is None else prepared.strategy.decode(holder)


def enqueue_many(
    conn: Connection, jobs: Iterable[tuple[str, Any]], **options: Unpack[EnqueueOptions]
) -> list[uuid.UUID]:
    """Insert many `(job_type, payload)` jobs, one statement per batch; ids in order.

    Same options and the same outbox semantics as `enqueue`: every payload is
    encoded before anything is written, and nothing is committed.
    """
    if options.get("unique_key") is not None:
        raise ConfigurationError(
            "enqueue_many takes no unique_key (one key is for one job): enqueue each job "
            "with its own key"
        )
    conn = driver_connection(conn)
    prepared = _Prepared(conn, jobs, options)
    prepared.dialect.check_rows(conn, prepared.rows, None)
    prepared.check_parents(conn)
    try:
        for start in range(0, len(prepared.rows), BATCH_SIZE):
            prepared.dialect.insert_many(conn, prepared.rows[start : start + BATCH_SIZE])
        prepared.block(conn, [row[0] for row in prepared.rows])
    except Exception as exc:
        error = prepared.schema_error(exc)
        if error is None:
            raise
        raise error from exc
    return prepared.ids


async def _enqueue_dependent(statements: AsyncStatements, prepared: _Prepared) -> None:
    """`enqueue_async` of a job with `depends_on`, written as `enqueue` writes it, in a few
    statements: blocked while a parent has not ended; due at once when they all have, as
    it needs; when one has ended as it must not (a failure for a job that waits for
    success), blocked with that end written down, for a worker's sweep to cancel (within
    `SWEEP_EVERY_S`; `enqueue` cancels it at once)."""
    dialect = cast(PostgresDialect, prepared.dialect)
    if await statements.fetchone("SELECT to_regclass(%s)", (dialect.blocked_table,)) == (None,):
        raise _dependencies.tables_missing(dialect, "depends_on")
    parents, wait_for = prepared.parents, prepared.wait_for
    known = await statements.fetchall(*_dependencies.known_statement(dialect, parents))
    ends = _dependencies.known_ends(parents, known)
    failed = wait_for == "success" and any(end in _dependencies.FAILED for end in ends.values())
    blocked = failed or None in ends.values()
    row = prepared.rows[0]
    child = row[0]
    await statements.execute(*dialect.insert_statement((*row[:5], prepared.now, *row[6:])))
    if blocked:  # as text: asyncpg sends the largest datetime as 'infinity'
        await statements.execute(
            f"UPDATE {dialect.job_table} SET process_at = CAST(CAST(%s AS text) AS timestamptz) "
            "WHERE job_id = %s",
            (_dependencies.BLOCKED_AT.isoformat(), child),
        )
    columns = (*_dependencies.EDGE_COLUMNS, ("parent_status", "text"))
    edges = [(parent, child, wait_for, ends[parent]) for parent in parents]
    await statements.execute(*dialect.values_statement(dialect.dependencies_table, columns, edges))
    if blocked:
        at = dialect.encode_time(prepared.now)
        await statements.execute(
            *dialect.values_statement(
                dialect.blocked_table, _dependencies.BLOCKED_COLUMNS, [(child, wait_for, at)]
            )
        )


async def enqueue_async(
    aconn: Connection, job_type: str, payload: Any = None, **options: Unpack[EnqueueOptions]
) -> uuid.UUID:
    """`enqueue` for an async connection, in the caller's transaction; never commits.

    `aconn` is a psycopg `AsyncConnection`, an asyncpg connection (inside its
    `transaction()`), or a SQLAlchemy `AsyncSession`/`AsyncConnection` on either
    (`postgresql+psycopg://`, `postgresql+asyncpg://`). Same options, ids and
    notifications as `enqueue`.
    """
    aconn = await async_driver_connection(aconn)
    prepared = _Prepared(aconn, [(job_type, payload)], options, asynchronous=True)
    row, key, dialect = prepared.rows[0], prepared.unique_key, prepared.dialect
    statements = async_statements(aconn, dialect)
    try:
        if prepared.parents:
            await _enqueue_dependent(statements, prepared)
            return prepared.ids[0]
        if key is None:
            await statements.execute(*dialect.insert_statement(row))
            return prepared.ids[0]
        for _ in range(UNIQUE_TRIES):
            if await statements.fetchone(*dialect.insert_statement(row, key)) is not None:
                return prepared.ids[0]
            holder = await statements.fetchone(dialect.holder_sql, (row[1], key))
            if holder is not None:
                return prepared.strategy.decode(holder[0])
    except Exception as exc:
        error = prepared.schema_error(exc)
        if error is None:
            raise
        raise error from exc
    raise ConfigurationError(  # pragma: no cover - as in Dialect.insert_unique
        f"enqueue: the job holding unique key {key!r} kept leaving the queue; enqueue it again"
    )

"""What every database's dialect has: the statements they share and the driver-agnostic
helpers (table names, connection unwrapping, timestamps)."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import socket
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple

from ...errors import (
    ArgumentTypeError,
    ConfigurationError,
    ProletarianError,
    SchemaError,
    UnsupportedDatabase,
)
from ...job_ids import JobIdStrategy
from ..tables import (
    attempt_table,
    blocked_table,
    check_table_name,
    claims_table,
    dependencies_table,
    outcomes_table,
    rate_table,
    results_table,
    workflows_table,
)

JobRow = tuple[Any, str, str, str, int, datetime, datetime, "str | None", int, "str | None"]
"""A claimed job: id, queue, type, payload, attempts, enqueued_at, process_at, last_error,
priority, trace_context (times as the driver returns them)."""
LeasedRow = tuple[
    Any, str, str, str, int, datetime, datetime, "str | None", int, "str | None", bool, "str | None"
]
"""A job claimed in lease mode: a `JobRow`'s first nine columns (attempts and process_at as
they were before the claim), the lease it was under, if any (a lease that expired: see
`reserved`), whether the claim started it (counted its attempt) or only reserved it, and the
trace context: the trace context is last in both."""
RESERVED = "~"
"""Lease mode: the mark before a claim's token on the jobs of its batch it has not started
yet; their attempt is counted only when they start (`Dialect.start_leased`), so a batch whose
worker dies leaves its unstarted jobs to run again with no attempt charged."""


class LeaseClaim(NamedTuple):
    """A lease mode claim: up to `limit` due jobs of `queue` at `now`, from position `start`,
    under the lease `token` for `lease_ms` (`Dialect.lease_claim`'s arguments, in order)."""

    queue: str
    now: datetime
    limit: int
    start: Any
    lease_ms: int
    token: str


def row_extras(rows: Sequence[Sequence[Any]]) -> tuple[bool, bool, bool]:
    """Whether any of these enqueued rows has a priority, a trace context, a group key: the
    optional columns a statement inserting them all must name."""
    return (
        any(row[6] for row in rows),
        any(row[7] is not None for row in rows),
        any(len(row) > 8 and row[8] is not None for row in rows),
    )


class GroupSlots(NamedTuple):
    """A rate limit by group key, as a fair claim reads it: a group whose bucket (`prefix`
    and the key) has all `limit` slots started within `period_ms` is passed over in the
    claim's SQL. A key longer than `longest` (its bucket is a digest) is left to the caller."""

    prefix: str
    longest: int
    limit: int
    period_ms: int


def reserved(token: str) -> str:
    """The lease of a job its claim took but has not started yet."""
    return RESERVED + token


def died_running(lease: str | None) -> bool:
    """Whether a job's expired lease (as claimed) was a run that never finished: a started
    job's lease, not a reservation."""
    return lease is not None and not lease.startswith(RESERVED)


UNIQUE_TRIES = 3
"""How often `insert_unique` tries again when the job holding the key left in between."""

EARLIEST = datetime(1, 1, 1, tzinfo=timezone.utc)
"""The earliest process_at (both databases store year 1)."""
FIRST_POSITION = (-(2**31), EARLIEST)
"""Where a claim from the beginning of a queue starts: before every (-priority, process_at)."""


def unwrap_connection(conn: Any) -> Any:
    """The driver connection under pool wrappers such as DBUtils' (`._con`)."""
    for _ in range(4):
        if _driver(type(conn)) is not None:
            return conn
        inner = getattr(conn, "_con", None)
        if inner is None:
            break
        conn = inner
    return conn


_DRIVERS = {"psycopg": "postgresql", "pymysql": "mysql", "asyncpg": "postgresql"}
_ASYNC_CONNECTIONS = frozenset(
    {("psycopg", "AsyncConnection"), ("asyncpg", "Connection"), ("asyncpg", "PoolConnectionProxy")}
)
"""(driver, class name) of the async connections `enqueue_async` takes; an asyncpg pool's
connections (`pool.acquire()`) are proxies."""
_UNSUPPORTED = {
    "psycopg2": "psycopg2 is not supported: use psycopg 3 (pip install psycopg)",
    "MySQLdb": "mysqlclient (MySQLdb) is not supported: use PyMySQL (pip install PyMySQL)",
    "mysql": "mysql-connector is not supported: use PyMySQL (pip install PyMySQL)",
    "aiomysql": "aiomysql is not supported: use PyMySQL (pip install PyMySQL)",
    "asyncmy": "asyncmy is not supported: use PyMySQL (pip install PyMySQL)",
    "sqlite3": "SQLite has no SELECT … FOR UPDATE SKIP LOCKED: use PostgreSQL or MySQL",
}
_KINDS: dict[type, tuple[str, bool]] = {}


def _driver(cls: type) -> str | None:
    """The top-level package of the first class in `cls`'s MRO that comes from a driver."""
    for klass in cls.__mro__:
        root = klass.__module__.partition(".")[0]
        if root in _DRIVERS or root in _UNSUPPORTED or root == "psycopg_pool":
            return root
    return None


def _classify(conn: Any) -> tuple[str, bool]:
    """(dialect, is_async) for a connection; a clear error for anything else."""
    cls = type(conn)
    name = f"{cls.__module__}.{cls.__qualname__}"
    root = _driver(cls)
    if root in _DRIVERS:
        if any(
            (k.__module__.partition(".")[0], k.__name__) in _ASYNC_CONNECTIONS for k in cls.__mro__
        ):
            return _DRIVERS[root], True
        if root == "asyncpg":
            raise ArgumentTypeError(
                f"got {name} where an asyncpg connection is needed: pass one of its connections, "
                "e.g. `async with pool.acquire() as conn: await enqueue_async(conn, ...)`"
            )
        if hasattr(conn, "cursor"):
            return _DRIVERS[root], False
    if root in _UNSUPPORTED:
        raise UnsupportedDatabase(f"unsupported connection {name}: {_UNSUPPORTED[root]}")
    if callable(getattr(conn, "connection", None)) and not hasattr(conn, "cursor"):
        raise ArgumentTypeError(
            f"got a pool ({name}) where a connection is needed: pass one of its connections, "
            "e.g. `with pool.connection() as conn: enqueue(conn, ...)`"
        )
    raise UnsupportedDatabase(
        f"unsupported connection type {name}: use a psycopg 3 connection (PostgreSQL) "
        "or a PyMySQL connection (MySQL/MariaDB)"
    )


def connection_kind(conn: Any) -> tuple[str, bool]:
    """('postgresql' or 'mysql', whether it is an async connection), cached per class."""
    cls = type(conn)
    kind = _KINDS.get(cls)
    if kind is None:
        inner = unwrap_connection(conn)
        kind = _classify(inner)
        if inner is conn:
            _KINDS[cls] = kind
    return kind


def dialect_name(conn: Any) -> str:
    """'postgresql' or 'mysql' for a synchronous connection (psycopg 3 or PyMySQL)."""
    name, is_async = connection_kind(conn)
    if is_async:
        raise ArgumentTypeError(
            f"{type(conn).__qualname__} is an async connection: use `await enqueue_async(conn, "
            "...)`, or a synchronous psycopg.Connection"
        )
    return name


def shutdown_socket(fd: int) -> None:
    """Cut a connection's socket from another thread: the server sees it close and rolls
    back, and the thread using the connection gets a clean error on its next call."""
    with contextlib.suppress(OSError), socket.socket(fileno=os.dup(fd)) as sock:
        sock.shutdown(socket.SHUT_RDWR)


class TransactionLost(ProletarianError):
    """The job's transaction ended inside a callback: its savepoint and row locks are gone.

    The runner tags it with the callback (`stage`) and the callback's own exception
    (`cause`), if it raised one.
    """

    stage: str = "handler"
    cause: BaseException | None = None


class RunningSlots(NamedTuple):
    """The `size` locks that jobs of one queue take to run, over every process using the
    database (`max_running`): a job runs holding one, and none runs without one."""

    size: int
    key: int
    """PostgreSQL: the advisory locks' first key (the slot, 1 to size, is the second)."""
    prefix: str
    """MySQL: the names of the GET_LOCK locks, before the slot's number."""


def running_slots(job_table: str, queue: str, size: int) -> RunningSlots:
    """The slots of `queue` in these tables: the same for every process."""
    digest = hashlib.blake2s(f"{job_table}\0{queue}".encode(), digest_size=8).digest()
    key = int.from_bytes(digest[:4], "big", signed=True)
    return RunningSlots(size, key, f"proletarian_di.{digest.hex()}.")


class Runs(NamedTuple):
    """How the last attempts of jobs archived together ran: when each started (in the order
    of their ids; None: unknown), and the worker that ran them (one thread runs a batch)."""

    started: Sequence[datetime | None]
    worker: str | None


NO_RUNS = Runs((), None)


class Session:
    """A connection as the runner uses it: the per-job statements of its dialect, with what
    the dialect set up on this connection (PostgreSQL prepares statements on a worker's
    connection, MySQL sets its isolation). Made by `Dialect.session` or `Dialect.attached`.
    """

    def __init__(self, dialect: Dialect, conn: Any) -> None:
        self.dialect, self.conn = dialect, conn
        self.ahead: list[JobRow] | None = None
        """Rows claimed in the round trip of the last commit (`archive_commit_and_claim`),
        locked in the open transaction that follows it, until `claimed_ahead` takes them."""
        self.ahead_after: str | None = None
        """The group key a fair turn's first scan claimed ahead past (`fair_after`)."""

    def can_claim_ahead(self, job_ids: Sequence[Any], slots: RunningSlots | None) -> bool:
        """Whether `archive_commit_and_claim` can make the next claim in the archive's round
        trip here (a worker's own session, where its dialect can); asked before the claim's
        start is taken, since taking it may begin a sweep (`Frontier.start`)."""
        return False

    def probes_ends(self, job_ids: Sequence[Any]) -> bool:
        """Whether `archive_and_commit` and `archive_commit_and_claim` can read, in their
        own round trip, whether a job waits on the jobs they archive (`probe`)."""
        return False

    def archive_commit_and_claim(
        self,
        job_ids: Sequence[Any],
        finished_at: datetime,
        queue: str,
        limit: int = 1,
        start: Any = None,
        slots: RunningSlots | None = None,
        runs: Runs = NO_RUNS,
        fair_after: str | None = None,
        probe: bool = False,
    ) -> bool:
        """`archive_and_commit`, then `claim` the next jobs (now is `finished_at`; with
        `slots`, `claim_in_slot`; with `fair_after`, a fair turn's first scan past that
        group key, as `fair_claim`) in the same round trip, keeping their rows in `ahead`:
        one round trip per job instead of two. Only where `can_claim_ahead` said so. The
        archive's errors are raised; a claim that failed after the commit is rolled back,
        for the next claim to make again. With `probe` (where `probes_ends`), whether a job
        waits on one of `job_ids`, read before their archive; else False."""
        self.ahead_after = fair_after
        waited, self.ahead = self._archive_then_claim(
            job_ids, finished_at, queue, limit, start, slots, runs, fair_after, probe
        )
        if self.ahead is None:
            self.dialect.rollback(self.conn)
        return waited

    def _archive_then_claim(
        self,
        job_ids: Sequence[Any],
        finished_at: datetime,
        queue: str,
        limit: int,
        start: Any,
        slots: RunningSlots | None,
        runs: Runs,
        fair_after: str | None,
        probe: bool,
    ) -> tuple[bool, list[JobRow] | None]:
        """The dialect's one round trip of `archive_commit_and_claim`: whether a job waits
        on one of `job_ids` (read with `probe`), and the claimed rows, or None if the claim
        failed after the commit."""
        raise NotImplementedError

    def claimed_ahead(self) -> list[JobRow] | None:
        """The rows `archive_commit_and_claim` claimed (their transaction open), once; None
        when nothing was claimed ahead."""
        rows, self.ahead = self.ahead, None
        return rows

    def drop_ahead(self) -> None:
        """Give the rows claimed ahead back unrun (roll their transaction back)."""
        if self.claimed_ahead() is not None:
            self.dialect.rollback(self.conn)

    def begin(self) -> None:
        """Open the claim's transaction, where the connection is in autocommit."""
        self.dialect.begin(self.conn)

    def fair_claim(self, queue: str, after: str, now: datetime) -> list[Any]:
        """BEGIN, and a held-mode fair turn's first scan (`Dialect.fair_claim` past `after`):
        its row, group key last, or none."""
        self.begin()
        row = self.dialect.fair_claim(self.conn, queue, after, now, lease=False)
        return [] if row is None else [row]

    def claim(self, queue: str, now: datetime, limit: int = 1, start: Any = None) -> list[JobRow]:
        """Lock the first due jobs of `queue` (up to `limit`) in priority order, then by
        process_at, from `start` on (a `position`; None: from the beginning), skipping rows
        others hold."""
        return self.dialect.claim(self.conn, queue, now, limit, start)

    def claim_in_slot(
        self, slots: RunningSlots, queue: str, now: datetime, limit: int = 1, start: Any = None
    ) -> list[JobRow]:
        """`claim`, if one of the queue's running slots is free: it is taken for the job's
        transaction (none is taken, and nothing claimed, when no job is due)."""
        return self.dialect.claim_in_slot(self.conn, slots, queue, now, limit, start)

    def take_running_slot(self, slots: RunningSlots) -> bool:
        """Begin the claim's transaction holding one of `slots`, for a claim of its own (a
        fair one): whether one was free (if not, the transaction is open, holding none)."""
        return self.dialect.take_running_slot(self.conn, slots)

    def release_slot(self) -> None:
        """Give back the slot `claim_in_slot` took, once the job's transaction has ended
        (where the database does not do it with the transaction)."""

    def keep_slot(self, slots: RunningSlots) -> bool:
        """Before the job's transaction commits while its handler still runs (a timeout):
        keep the running slot it holds past the commit, until `release_slot`. Whether a
        slot is kept (the connection must then stay with the thread)."""
        return False

    def archive_and_commit(
        self,
        job_ids: Sequence[Any],
        finished_at: datetime,
        runs: Runs = NO_RUNS,
        probe: bool = False,
    ) -> bool:
        """Archive successful jobs, with how they ran, and commit. With `probe`, whether a
        job waits on one of them, read first; else False."""
        waited = probe and self.dialect.waited_on(self.conn, job_ids)
        self.dialect.archive(
            self.conn, job_ids, "success", finished_at, started=runs.started, worker=runs.worker
        )
        self.dialect.commit(self.conn)
        return waited


class Dialect:
    """Statements and driver calls for one database; built once per table pair."""

    name = ""
    default_id_strategy: JobIdStrategy
    claim_queue = "queue = %s"
    """The claim's condition on the queue; with `claim_from` and `claim_order`, the claim
    index's own order, from a position in it."""
    claim_from = "(-priority, process_at) >= (%s, %s)"
    claim_order = "-priority, process_at"
    time_param = "%s::timestamptz"
    """A time parameter where its type cannot be told from the statement (it may be NULL)."""
    db_now = "statement_timestamp()"
    """The database's clock, which judges leases: every host's worker sees them expire at
    the same time, however far its own clock is off."""
    lease_end = "statement_timestamp() + make_interval(secs => %s)"
    """When a lease taken or renewed now runs out, by the database's clock; its parameter
    is the lease in seconds (`lease_seconds`)."""

    update_returns = True
    """Whether an UPDATE can return the rows it changed (`RETURNING`)."""

    def __init__(self, job_table: str, archived_job_table: str) -> None:
        self.job_table = check_table_name(job_table, "job_table")
        self.archived_job_table = check_table_name(archived_job_table, "archived_job_table")
        self.claims_table = claims_table(self.job_table)
        job, archive = self.job_table, self.archived_job_table
        self.columns = "job_id, queue, job_type, payload, attempts, enqueued_at, process_at"
        self._inserts: dict[tuple[str, ...], str] = {}
        self.insert_sql = self.insert_into(())
        self.claim_sql = self.claim_statement()
        self.reschedule_sql = (
            f"UPDATE {job} SET attempts = %s, process_at = %s, last_error = %s, leased_by = NULL "
            "WHERE job_id = %s"
        )
        self.snooze_sql = f"UPDATE {job} SET process_at = %s, leased_by = NULL WHERE job_id = %s"
        self.lease_select_sql = self.claim_statement(
            columns=f"{self.columns}, last_error, priority, leased_by, trace_context"
        )
        # A leased job's row counts its attempt from the claim on, and its process_at is when
        # the lease runs out; settling it takes both back, so that the outcome is written as
        # in the held-transaction mode (the archive's process_at is when the job was due).
        self.settle_sql = (
            f"UPDATE {job} SET attempts = attempts - %s, leased_by = NULL, process_at = %s "
            "WHERE job_id = %s AND leased_by = %s"
        )
        # A claim given back unrun leaves the row as it was: its attempts (a started job's
        # was counted), its process_at and the lease it was under (an expired one's dead
        # attempt is still to be recorded).
        self.give_back_sql = (
            f"UPDATE {job} SET attempts = attempts - CASE WHEN leased_by = %s THEN 1 ELSE 0 "
            "END, leased_by = %s, process_at = %s WHERE job_id = %s AND leased_by IN (%s, %s)"
        )
        self.start_leased_sql = (
            f"UPDATE {job} SET attempts = attempts + 1, leased_by = %s, "
            f"process_at = {self.lease_end} WHERE job_id = %s AND leased_by = %s"
        )
        self.holder_sql = f"SELECT job_id FROM {job} WHERE queue = %s AND unique_key = %s"
        self.peek_sql = f"SELECT attempts FROM {job} WHERE job_id = %s"
        self.lock_sql = self.peek_sql + " FOR UPDATE SKIP LOCKED"
        self.attempt_table = attempt_table(self.job_table)
        self.outcomes_table = outcomes_table(self.job_table)
        self.rate_table = rate_table(self.job_table)
        self.results_table = results_table(self.job_table)
        self.dependencies_table = dependencies_table(self.job_table)
        self.blocked_table = blocked_table(self.job_table)
        self.workflows_table = workflows_table(self.job_table)
        # status, finished_at, the error (a failure's own, else the job's last one), then when
        # the last attempt started and its worker (`archive_of` writes the start)
        self.archive_columns = (
            f"INSERT INTO {archive} ({self.columns}, priority, status, finished_at, last_error, "
            "started_at, worker) "
            "SELECT job_id, queue, job_type, payload, attempts + 1, enqueued_at, process_at, "
            "priority, %s, %s, COALESCE(%s, last_error), "
        )
        self.archive_select = self.archive_of(self.time_param)
        self.attempt_sql = (
            f"INSERT INTO {self.attempt_table} (job_id, attempt, started_at, finished_at, "
            "worker, error) VALUES (%s, %s, %s, %s, %s, %s)"
        )

    def archive_of(self, started: str) -> str:
        """The archive's INSERT … SELECT up to its FROM, with `started` for started_at."""
        return f"{self.archive_columns}{started}, %s "

    def claim_source(self) -> str:
        """What the claim reads: the job table (MySQL names its index)."""
        return self.job_table

    def claim_statement(self, condition: str = "", columns: str = "") -> str:
        """The claim, with an extra `condition` first in its WHERE clause, selecting
        `columns` (default: a `JobRow`)."""
        return (
            f"SELECT {columns or self.columns + ', last_error, priority, trace_context'} "
            f"FROM {self.claim_source()} "
            f"WHERE {condition}{self.claim_queue} AND {self.claim_from} AND process_at <= %s "
            f"AND (leased_by IS NULL OR process_at <= {self.db_now}) "
            f"ORDER BY {self.claim_order} LIMIT %s FOR UPDATE SKIP LOCKED"
        )

    def insert_into(self, extra: tuple[str, ...]) -> str:
        """The INSERT of one job with Proletarian's own columns and `extra` ones (a priority, a
        unique key, a trace context): a job without them writes only what Proletarian's tables
        have."""
        columns = ", ".join((self.columns, *extra))
        marks = ", ".join(["%s"] * (7 + len(extra)))
        return f"INSERT INTO {self.job_table} ({columns}) VALUES ({marks})"

    def claim_params(self, queue: str, start: Any, now: datetime, limit: int) -> tuple[Any, ...]:
        """The claim's parameters: from `start`, a position (None: the beginning)."""
        rank, process_at = FIRST_POSITION if start is None else start
        return (queue, rank, process_at, now, limit)

    @staticmethod
    def position(row: JobRow | LeasedRow) -> tuple[Any, ...]:
        """Where a claimed row sits in the claim index: (-priority, raw process_at)."""
        return -row[8], row[6]

    # Times -----------------------------------------------------------------

    def encode_time(self, value: datetime) -> Any:
        return value

    def decode_time(self, value: datetime) -> datetime:
        return value

    def seconds_since(self, column: str) -> str:
        """SQL for the seconds from a time parameter (`%s`) to `column`'s time: a double
        (`date_part`), twice as quick over the archive's last day as EXTRACT's numeric."""
        return f"date_part('epoch', {column} - %s::timestamptz)"

    def seconds_between(self, start: str, end: str) -> str:
        """SQL for the seconds from column `start`'s time to column `end`'s."""
        return f"date_part('epoch', {end} - {start})"

    def hours_since(self, column: str) -> str:
        """SQL for the whole hours from a time parameter (`%s`) to `column`'s later time."""
        return f"FLOOR({self.seconds_since(column)} / 3600)"

    def percentiles(self, source: str, values: Sequence[str], ranks: Sequence[float]) -> str:
        """A query of `source` (rows of slot, queue, job_type and the `values` columns): per
        slot, queue and job type, how many rows, then for each value its nearest-rank
        percentiles at `ranks` (the smallest value with at least that share of the rows at
        or under it) and its maximum. One sort per value (`percentile_disc`, computed once
        for all `ranks`)."""
        shares = f"ARRAY[{', '.join(map(str, ranks))}]::float8[]"
        columns = []
        for value in values:
            disc = f"percentile_disc({shares}) WITHIN GROUP (ORDER BY {value})"
            columns += [f"({disc})[{n}]" for n in range(1, len(ranks) + 1)]
            columns.append(f"MAX({value})")
        return (
            f"SELECT slot, queue, job_type, COUNT(*), {', '.join(columns)} "
            f"FROM ({source}) AS timed GROUP BY slot, queue, job_type"
        )

    # Statements --------------------------------------------------------------

    def cursor(self, conn: Any) -> Any:
        """A cursor returning tuples, whatever row factory or cursor class the app configured."""
        raise NotImplementedError

    @contextlib.contextmanager
    def executed(self, conn: Any, sql: str, params: Sequence[Any] = ()) -> Iterator[Any]:
        """A tuple cursor that has run `sql`, closed after the block."""
        with self.cursor(conn) as cursor:
            cursor.execute(sql, tuple(params))
            yield cursor

    def fetchone(self, conn: Any, sql: str, params: Sequence[Any] = ()) -> Any:
        with self.executed(conn, sql, params) as cursor:
            return cursor.fetchone()

    def fetchall(self, conn: Any, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self.executed(conn, sql, params) as cursor:
            return list(cursor.fetchall()) if cursor.description else []

    def execute(self, conn: Any, sql: str, params: Sequence[Any] = ()) -> None:
        with self.cursor(conn) as cursor:  # the hot path's statements: no generator around it
            cursor.execute(sql, tuple(params))

    def executemany(self, conn: Any, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run `sql` once per row of parameters (the drivers batch an INSERT's rows)."""
        if rows:
            with self.cursor(conn) as cursor:
                cursor.executemany(sql, [tuple(row) for row in rows])

    def execute_count(self, conn: Any, sql: str, params: Sequence[Any] = ()) -> int:
        """Run a statement; how many rows it changed."""
        with self.executed(conn, sql, params) as cursor:
            return int(cursor.rowcount)

    def requeue(self, conn: Any, where: str, params: Sequence[Any], now: datetime) -> int:
        """Move the archived jobs matching `where` back into the queue, due `now`, with
        fresh attempts; how many moved."""
        raise NotImplementedError

    def forget_hours(self, conn: Any, where: str, params: Sequence[Any]) -> None:
        """Before the archived jobs matching `where` leave the archive: delete the summed
        hours of the outcomes table (see `_outcomes`) that counted them, in the caller's
        transaction, for readers to count those hours from the archive again. Only the
        hours a reader may read are looked at; nothing on a schema without the table."""
        since = self.summed_since(conn)
        if since is None:
            return
        at = self.encode_time(since)
        rows = self.fetchall(
            conn,
            f"SELECT DISTINCT {self.hours_since('finished_at')} FROM {self.archived_job_table} "
            f"WHERE finished_at >= %s AND ({where})",
            (at, at, *params),
        )
        self.forget_summed(conn, since, [offset for (offset,) in rows])

    def summed_since(self, conn: Any) -> datetime | None:
        """The start of the oldest hour whose sums `forget_hours` drops; None on a schema
        without the outcomes table."""
        if not self.table_columns(conn, self.outcomes_table):
            return None
        now = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
        return now - _SUMMED_HOURS * _HOUR

    def forget_summed(self, conn: Any, since: datetime | None, offsets: Iterable[Any]) -> None:
        """Delete the summed hours `offsets` hours after `since` (`summed_since`), those
        before it (negative) left alone: what `forget_hours` does once it knows the hours."""
        if since is None:
            return
        hours = sorted(
            {self.encode_time(since + int(offset) * _HOUR) for offset in offsets if offset >= 0}
        )
        if hours:
            marks = ", ".join(["%s"] * len(hours))
            self.execute(conn, f"DELETE FROM {self.outcomes_table} WHERE hour IN ({marks})", hours)

    def begin(self, conn: Any) -> None:
        """Open a transaction explicitly where the driver would not (autocommit)."""
        raise NotImplementedError

    transactional_ddl = True
    """Whether schema changes roll back with their transaction (else each commits)."""

    def lacks_no_pad_collation(self, conn: Any) -> bool:
        """Whether the server predates the binary NO PAD collation the schema uses."""
        return False

    def session_time_zone(self, conn: Any) -> str | None:
        """The session's time zone where a schema step changes it, to put back after."""
        return None

    def put_back_time_zone(self, conn: Any, time_zone: str | None) -> None:
        if time_zone is not None:
            self.execute(conn, "SET time_zone = %s", (time_zone,))

    listens = False
    """Whether the database can wake idle workers (LISTEN/NOTIFY): they then sleep until told."""

    def set_autocommit(self, conn: Any) -> None:
        """Make every statement on `conn` commit by itself (a side connection's counts)."""
        raise NotImplementedError

    def announce(self, conn: Any, channel: str, payload: str) -> None:
        """Tell listening workers `payload` on `channel` once the caller commits; nothing
        where the database cannot (its workers poll instead)."""

    def announce_due(self, conn: Any, queue: str, priority: int) -> None:
        """Tell listening workers, once the caller commits, that a job of `queue` with
        `priority` fell due now (a released dependent); nothing where workers poll."""

    def session(self, conn: Any) -> Session:
        """`conn` as the runner uses it, with nothing set up on it (see `attached`)."""
        return Session(self, conn)

    def claim(
        self, conn: Any, queue: str, now: datetime, limit: int = 1, start: Any = None
    ) -> list[JobRow]:
        """Lock the first due jobs of `queue` (up to `limit`) in priority order, then by
        process_at, from `start` on (a `position`; None: from the beginning), skipping rows
        others hold."""
        raise NotImplementedError

    def claim_in_slot(
        self,
        conn: Any,
        slots: RunningSlots,
        queue: str,
        now: datetime,
        limit: int = 1,
        start: Any = None,
    ) -> list[JobRow]:
        """`claim` in a transaction that holds one of `slots`; [] when none is free."""
        raise NotImplementedError

    def take_running_slot(self, conn: Any, slots: RunningSlots) -> bool:
        """`Session.take_running_slot`: a transaction-level slot, where the database has
        them."""
        raise NotImplementedError

    def archive(
        self,
        conn: Any,
        job_ids: Sequence[Any],
        status: str,
        finished_at: datetime,
        error: str | None = None,
        *,
        started: Sequence[datetime | None] = (),
        worker: str | None = None,
    ) -> None:
        """Move jobs to the archive with `status`, counting the attempt just made; `error`
        is a failure's (None keeps the job's last error); `started`, when each job's attempt
        started (in the order of `job_ids`; none given: unknown), and the `worker` that ran
        them."""
        raise NotImplementedError

    def add_attempt(
        self,
        conn: Any,
        job_id: Any,
        attempt: int,
        started_at: datetime | None,
        finished_at: datetime,
        worker: str | None,
        error: str,
    ) -> None:
        """Add a failed attempt to the job's history (the attempt table)."""
        encode = self.encode_time
        started = None if started_at is None else encode(started_at)
        params = (job_id, attempt, started, encode(finished_at), worker, error)
        self.execute(conn, self.attempt_sql, params)

    def reschedule(
        self, conn: Any, job_id: Any, attempts: int, process_at: datetime, error: str
    ) -> None:
        """Count a failed attempt: due again at `process_at`, with its error kept."""
        params = (attempts, self.encode_time(process_at), error, job_id)
        self.execute(conn, self.reschedule_sql, params)

    def snooze(self, conn: Any, job_id: Any, process_at: datetime) -> None:
        """Make a job due again at `process_at`, its attempts and last error as they were
        (a handler's `Snooze`)."""
        self.execute(conn, self.snooze_sql, (self.encode_time(process_at), job_id))

    # Lease mode -------------------------------------------------------------

    def lease_seconds(self, lease_ms: int) -> Any:
        """The parameter of `lease_end` for a lease of `lease_ms`."""
        return lease_ms / 1000

    def lease_claim(
        self,
        conn: Any,
        queue: str,
        now: datetime,
        limit: int,
        start: Any,
        lease_ms: int,
        token: str,
    ) -> list[LeasedRow]:
        """Claim due jobs under the lease `token` for `lease_ms` and commit: the jobs' rows
        are not locked while they run. The first job starts at once (its attempt counted),
        and so does a job whose earlier run died (its dead attempt is recorded next); the
        rest are reserved until they start."""
        self.begin(conn)
        rows = self._lease(conn, LeaseClaim(queue, now, limit, start, lease_ms, token))
        self.commit(conn)
        return rows

    def lease_claim_by(
        self,
        conn: Any,
        claim: LeaseClaim,
        select: Callable[[Any], list[Any]] | None = None,
        take: Callable[[Any, Dialect], bool] | None = None,
    ) -> list[LeasedRow]:
        """`lease_claim`, of the rows `select` finds (a fair claim) and under a rate limit:
        the claim commits only if `take` finds its start a slot in the same transaction;
        else it is rolled back and nothing is claimed."""
        self.begin(conn)
        rows = self._lease(conn, claim, None if select is None else select(conn))
        if rows and (take is None or take(conn, self)):
            self.commit(conn)
            return rows
        self.rollback(conn)
        return []

    fair_order = "group_key, -priority, process_at"
    fair_index_has_all = False
    """Whether the fair index holds the jobs without a group key too (else they are claimed
    through the claim index)."""

    def fair_source(self) -> str:
        """The job table, as a fair claim reads it (through the fair index)."""
        return self.job_table

    group_bucket = "%s || group_key"
    """A job's bucket under a rate limit by group key: the prefix (a parameter), then its key."""

    def fair_claim(
        self,
        conn: Any,
        queue: str,
        after: str | None,
        now: datetime,
        lease: bool,
        slots: GroupSlots | None = None,
    ) -> tuple[Any, ...] | None:
        """Lock the first due job of the first group key past `after` (None: the first due
        job without a key), in the caller's transaction: its claim row (a lease claim's,
        with `lease`) followed by its group key; None if there is none. With `slots`, the
        groups without a free slot are passed over in the same scan, however many."""
        columns = self._fair_columns(lease)
        if after is None and not self.fair_index_has_all:
            sql = self.claim_statement("group_key = '' AND ", f"{columns}, group_key")
            params = self.claim_params(queue, None, now, 1)
        else:
            group = "group_key = ''" if after is None else "group_key <> '' AND group_key > %s"
            free, free_params = self._free_group(slots)
            sql = self._fair_scan(columns, group + free)
            params = (
                queue,
                *(() if after is None else (after,)),
                *free_params,
                self.encode_time(now),
            )
        rows = self.fetchall(conn, sql, params)
        return tuple(rows[0]) if rows else None

    def _fair_columns(self, lease: bool) -> str:
        """A fair claim's columns before the group key: a held or a lease claim's row."""
        more = "leased_by, trace_context" if lease else "trace_context"
        return f"{self.columns}, last_error, priority, {more}"

    def _fair_scan(self, columns: str, groups: str) -> str:
        """The first due job of the groups that `groups` admits, in the fair index's order,
        locked; its parameters: the queue, those of `groups`, then now."""
        return (
            f"SELECT {columns}, group_key FROM {self.fair_source()} WHERE queue = %s "
            f"AND {groups} AND process_at <= %s "
            f"AND (leased_by IS NULL OR process_at <= {self.db_now}) "
            f"ORDER BY {self.fair_order} LIMIT 1 FOR UPDATE SKIP LOCKED"
        )

    @functools.cached_property
    def fair_turn_sql(self) -> str:
        """A held-mode fair turn's first scan, the one a worker's session makes with its
        BEGIN or its last commit: the first due job past a group key (queue, after, now)."""
        return self._fair_scan(self._fair_columns(False), "group_key <> '' AND group_key > %s")

    def _free_group(self, slots: GroupSlots | None) -> tuple[str, tuple[Any, ...]]:
        """The fair claim's condition that a job's group has a free slot, or fewer than its
        limit written (a group not met yet, or pruned), and its parameters; nothing without
        `slots` (a digest for a bucket is left to the caller). A read of the group's slots
        by their key, a job passed over, no lock: the first free slot ends it; a group held
        back reads its `limit` slots."""
        if slots is None:
            return "", ()
        table, bucket = self.rate_table, self.group_bucket
        sql = (
            f" AND (CHAR_LENGTH(group_key) > %s OR EXISTS (SELECT 1 FROM {table} "
            f"WHERE bucket = {bucket} AND slot < %s AND used_at <= {self.lease_end}) OR "
            f"(SELECT COUNT(*) FROM {table} WHERE bucket = {bucket} AND slot < %s) < %s)"
        )
        params = (
            slots.longest,
            slots.prefix,
            slots.limit,
            self.lease_seconds(-slots.period_ms),
            slots.prefix,
            slots.limit,
            slots.limit,
        )
        return sql, params

    def _lease(
        self, conn: Any, claim: LeaseClaim, claimed: list[Any] | None = None
    ) -> list[LeasedRow]:
        """`lease_claim`'s statements, in the transaction open on `conn`: the claim, unless
        the rows are `claimed` already, then their leases."""
        if claimed is None:
            params = self.claim_params(claim.queue, claim.start, claim.now, claim.limit)
            claimed = self.fetchall(conn, self.lease_select_sql, params)
        sql = (
            f"UPDATE {self.job_table} SET attempts = attempts + %s, "
            f"process_at = {self.lease_end}, leased_by = %s WHERE job_id = %s"
        )
        lease_s = self.lease_seconds(claim.lease_ms)
        rows: list[LeasedRow] = []
        for n, row in enumerate(claimed):
            started = n == 0 or died_running(row[9])
            lease = claim.token if started else reserved(claim.token)
            self.execute(conn, sql, (int(started), lease_s, lease, row[0]))
            rows.append((*row[:10], started, row[10]))
        return rows

    def archive_leased_and_claim(
        self,
        conn: Any,
        job_id: Any,
        token: str,
        finished_at: datetime,
        due: datetime,
        runs: Runs,
        claim: LeaseClaim,
        probe: bool = False,
    ) -> tuple[bool, list[LeasedRow], bool]:
        """`archive_leased`, then `lease_claim` of the next jobs, in one transaction (one
        commit): (whether it was archived, the rows claimed, and with `probe` whether a job
        waits on it). A lost lease archives nothing and the claim goes on."""
        if not self.archive_under_lease(conn, job_id, token, finished_at, due, runs):
            return False, self.lease_claim(conn, *claim), False
        waited = probe and self.waited_on(conn, [job_id])
        rows = self._lease(conn, claim)
        self.commit(conn)
        return True, rows, waited

    def start_leased(self, conn: Any, job_id: Any, token: str, lease_ms: int) -> bool:
        """Start a job its claim reserved: count its attempt, and commit. False if the
        reservation was lost (it ran out and another worker took the job)."""
        self.begin(conn)
        params = (token, self.lease_seconds(lease_ms), job_id, reserved(token))
        started = self.execute_count(conn, self.start_leased_sql, params) == 1
        self.commit(conn)
        return started

    def renew(self, conn: Any, leases: Sequence[tuple[Any, str]], lease_ms: int) -> int:
        """Extend these (job id, lease) pairs by `lease_ms` from now and commit; how many
        were still held."""
        ids = [job_id for job_id, _ in leases]
        tokens = sorted({token for _, token in leases})
        sql = (
            f"UPDATE {self.job_table} SET process_at = {self.lease_end} WHERE job_id IN "
            f"({', '.join(['%s'] * len(ids))}) AND leased_by IN "
            f"({', '.join(['%s'] * len(tokens))})"
        )
        count = self.execute_count(conn, sql, (self.lease_seconds(lease_ms), *ids, *tokens))
        self.commit(conn)
        return count

    def settle(
        self, conn: Any, job_id: Any, token: str, due: datetime, attempts_back: int = 1
    ) -> bool:
        """Begin the transaction that writes a leased job's outcome: True if the job is
        still under `token` (now locked, its lease ended, due at `due` again, as it was
        claimed, and `attempts_back` attempts taken back), False (rolled back) if the lease
        was lost."""
        self.begin(conn)
        params = (attempts_back, self.encode_time(due), job_id, token)
        if self.execute_count(conn, self.settle_sql, params) == 1:
            return True
        self.rollback(conn)
        return False

    def archive_leased(
        self,
        conn: Any,
        job_id: Any,
        token: str,
        finished_at: datetime,
        due: datetime,
        runs: Runs = NO_RUNS,
        probe: bool = False,
    ) -> tuple[bool, bool]:
        """Archive a leased job as a success (due at `due`, as it was claimed, and run as
        `runs` says) and commit, if `token` still holds it: whether it was (nothing written
        if the lease was lost), and with `probe` whether a job waits on it."""
        if not self.archive_under_lease(conn, job_id, token, finished_at, due, runs):
            return False, False
        waited = probe and self.waited_on(conn, [job_id])
        self.commit(conn)
        return True, waited

    def archive_under_lease(
        self,
        conn: Any,
        job_id: Any,
        token: str,
        finished_at: datetime,
        due: datetime,
        runs: Runs,
    ) -> bool:
        """Begin a transaction and archive a leased job's success in it (not committed), if
        `token` still holds the job; False (rolled back, nothing written) if not."""
        if not self.settle(conn, job_id, token, due):
            return False
        self.archive(
            conn, [job_id], "success", finished_at, started=runs.started, worker=runs.worker
        )
        return True

    def give_back(self, conn: Any, rows: Sequence[LeasedRow], token: str) -> None:
        """Undo a lease claim of jobs that did not run (the queue was paused meanwhile, or
        their batch was given up on) and commit."""
        for row in rows:
            params = (token, row[9], row[6], row[0], token, reserved(token))
            self.execute(conn, self.give_back_sql, params)
        self.commit(conn)

    def next_process_at(self, conn: Any, queue: str) -> datetime | None:
        """When the queue's earliest job falls due (or its earliest lease runs out)."""
        sql = f"SELECT min(process_at) FROM {self.job_table} WHERE queue = %s"
        row = self.fetchone(conn, sql, (queue,))
        return None if row is None or row[0] is None else self.decode_time(row[0])

    # Crash loops (max_crashes) ------------------------------------------------

    def count_claim(self, conn: Any, table: str, job_id: Any) -> int:
        """Count one more claim of the job in `table`, on an autocommit connection: the
        claims so far, this one included."""
        raise NotImplementedError

    def count_attempts(self, conn: Any, job_id: Any, attempts: int) -> None:
        """Set the finished attempts of a job its worker holds (runs whose process died)."""
        sql = f"UPDATE {self.job_table} SET attempts = %s WHERE job_id = %s"
        self.execute(conn, sql, (attempts, job_id))

    # Results -----------------------------------------------------------------

    def store_result(
        self,
        conn: Any,
        job_id: Any,
        value: str,
        attempts: int,
        worker: str | None,
        started_at: datetime | None,
        finished_at: datetime,
    ) -> None:
        """Keep a successful job's return value (JSON) in the caller's transaction, the job's
        own: it commits with the job's archive, or not at all."""
        table, encode = self.results_table, self.encode_time
        self.execute(conn, f"DELETE FROM {table} WHERE job_id = %s", (job_id,))
        self.execute(
            conn,
            f"INSERT INTO {table} (job_id, status, return_value, attempts, worker_id, "
            "started_at, finished_at) VALUES (%s, 'success', %s, %s, %s, %s, %s)",
            (
                job_id,
                value,
                attempts,
                worker,
                None if started_at is None else encode(started_at),
                encode(finished_at),
            ),
        )

    # Rate limits (see _rates) ---------------------------------------------------

    insert_ignore = ("INSERT INTO", " ON CONFLICT DO NOTHING")
    """An INSERT that writes nothing where a row with its key exists: before and after."""

    def ensure_rate_slots(self, conn: Any, bucket: str, limit: int, period_ms: int) -> None:
        """The bucket's `limit` slots, free (last used at 1970), with this period, and none
        past the limit; in the caller's transaction."""
        table, (before, after) = self.rate_table, self.insert_ignore
        epoch = self.encode_time(datetime(1970, 1, 2, tzinfo=timezone.utc))
        values = ", ".join(["(%s, %s, %s, %s)"] * limit)
        params = [v for n in range(limit) for v in (bucket, n, epoch, period_ms)]
        self.execute(
            conn,
            f"{before} {table} (bucket, slot, used_at, period_ms) VALUES {values}{after}",
            params,
        )
        self.execute(
            conn,
            f"UPDATE {table} SET period_ms = %s WHERE bucket = %s AND period_ms <> %s",
            (period_ms, bucket, period_ms),
        )
        self.execute(conn, f"DELETE FROM {table} WHERE bucket = %s AND slot >= %s", (bucket, limit))

    def take_rate_slot(self, conn: Any, bucket: str, limit: int, period_ms: int) -> bool:
        """Take a slot of `bucket` last used a period ago or more, passing over those other
        transactions hold, and stamp it now (the database's clock): whether one was free.
        The first free slot in the key's order: no sort, and (at READ COMMITTED) no lock on
        the slots passed over."""
        table = self.rate_table
        free = self.fetchall(
            conn,
            f"SELECT slot FROM {table} WHERE bucket = %s AND slot < %s AND used_at <= "
            f"{self.lease_end} LIMIT 1 FOR UPDATE SKIP LOCKED",
            (bucket, limit, self.lease_seconds(-period_ms)),
        )
        if not free:
            return False
        sql = f"UPDATE {table} SET used_at = {self.db_now} WHERE bucket = %s AND slot = %s"
        self.execute(conn, sql, (bucket, free[0][0]))
        return True

    def next_rate_slot_s(self, conn: Any, bucket: str, limit: int, period_ms: int) -> float | None:
        """After `take_rate_slot` found none free: seconds until the bucket's oldest slot, as
        committed, is a period old; None if it is already (a claim or, in held mode, a
        running job holds it: when each frees its slot is not known yet). A plain read."""
        [(oldest, now)] = self.fetchall(
            conn,
            f"SELECT MIN(used_at), {self.db_now} FROM {self.rate_table} "
            "WHERE bucket = %s AND slot < %s",
            (bucket, limit),
        )
        if oldest is None:
            return None
        since = (self.decode_time(now) - self.decode_time(oldest)).total_seconds()
        left = period_ms / 1000 - since
        return left if left > 0 else None

    def waited_on(self, conn: Any, parents: Sequence[Any]) -> bool:
        """Whether a job waits on one of `parents` still (its end not written): only then is
        a parent's end more work than a plain job's. Where the session can, the archive's
        own round trip asks instead (`Session.probes_ends`)."""
        among, params = self.any_of("parent_id", parents)
        sql = self._waited_sql.format(among=among)
        return self.fetchone(conn, sql, params) is not None

    @functools.cached_property
    def _waited_sql(self) -> str:
        return (
            f"SELECT 1 FROM {self.dependencies_table} WHERE {{among}} "
            "AND parent_status IS NULL LIMIT 1"
        )

    def any_of(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        """The condition that `column` is one of `values` (not empty), and its parameters:
        one statement whatever their number."""
        return f"{column} IN ({', '.join(['%s'] * len(values))})", list(values)

    def id_text(self, column: str) -> str:
        """A job id column as its canonical text, in SQL (as `str(uuid)` writes it)."""
        return f"CAST({column} AS TEXT)"

    def rate_slots_short(self, conn: Any, bucket: str, limit: int) -> bool:
        """Whether the bucket has fewer than `limit` slots written (a group met for the first
        time, or pruned since). A plain read."""
        sql = f"SELECT COUNT(*) FROM {self.rate_table} WHERE bucket = %s AND slot < %s"
        [(count,)] = self.fetchall(conn, sql, (bucket, limit))
        return bool(count < limit)

    rate_idle = "used_at < statement_timestamp() - make_interval(secs => period_ms / 1000.0)"
    """A slot whose last start is more than its own period old (by the database's clock)."""

    def prune_rate_slots(self, conn: Any, most: int) -> int:
        """Delete the slots of up to `most` group keys whose every slot is more than its
        period old, in the caller's transaction: how many rows went. Each row is deleted
        only if it still is (a claim that stamps one meanwhile keeps it), so a key starts
        again on free slots only where its last start is a period old: the limit holds. A
        key met again gets its slots written again."""
        table = self.rate_table
        buckets = [
            bucket
            for (bucket,) in self.fetchall(
                conn,
                f"SELECT bucket FROM {table} WHERE bucket LIKE %s GROUP BY bucket "
                f"HAVING MIN(CASE WHEN {self.rate_idle} THEN 1 ELSE 0 END) = 1 LIMIT %s",
                ("%\x1f%", most),
            )
        ]
        if not buckets:
            return 0
        marks = ", ".join(["%s"] * len(buckets))
        sql = f"DELETE FROM {table} WHERE bucket IN ({marks}) AND {self.rate_idle}"
        return self.execute_count(conn, sql, buckets)

    def next_group_slot_s(self, conn: Any, slots: GroupSlots) -> float | None:
        """By group key, after a fair claim found no group with a free slot: seconds until
        the first slot of the queue's groups started within a period is a period old (None:
        none is). A plain read of the slots' key range."""
        pattern = slots.prefix.replace("|", "||").replace("%", "|%").replace("_", "|_") + "%"
        [(oldest, now)] = self.fetchall(
            conn,
            f"SELECT MIN(used_at), {self.db_now} FROM {self.rate_table} "
            f"WHERE bucket LIKE %s ESCAPE '|' AND slot < %s AND used_at > {self.lease_end}",
            (pattern, slots.limit, self.lease_seconds(-slots.period_ms)),
        )
        if oldest is None:
            return None
        since = (self.decode_time(now) - self.decode_time(oldest)).total_seconds()
        return max(0.0, slots.period_ms / 1000 - since)

    def forget_claims(self, conn: Any, table: str, job_ids: Sequence[Any]) -> None:
        """Drop the claim counts of jobs that left the queue, in their own transaction."""
        if job_ids:
            marks = ", ".join(["%s"] * len(job_ids))
            self.execute(conn, f"DELETE FROM {table} WHERE job_id IN ({marks})", job_ids)

    def check_rows(self, conn: Any, rows: Sequence[Sequence[Any]], key: str | None) -> None:
        """Refuse, before anything is sent, rows the server would not take (none here)."""

    def insert_one(self, conn: Any, row: Sequence[Any]) -> None:
        sql, params = self.insert_statement(row)
        self.execute(conn, sql, params)

    def insert_statement(
        self, row: Sequence[Any], key: str | None = None
    ) -> tuple[str, tuple[Any, ...]]:
        """The INSERT for one enqueued row `(id, queue, type, payload, enqueued_at, due,
        priority, trace_context[, group_key])`, with its unique `key` if it has one."""
        job_id, queue, job_type, payload, enqueued_at, process_at, priority, trace, *more = row
        extra: tuple[str, ...] = ()
        values: tuple[Any, ...] = ()
        if priority:
            extra, values = ("priority",), (priority,)
        if key is not None:
            extra, values = (*extra, "unique_key"), (*values, key)
        if trace is not None:
            extra, values = (*extra, "trace_context"), (*values, trace)
        if more and more[0] is not None:
            extra, values = (*extra, "group_key"), (*values, more[0])
        sql = self._inserts.get(extra)
        if sql is None:
            sql = self._inserts[extra] = self.insert_into(extra)
        encode = self.encode_time
        return sql, (
            job_id,
            queue,
            job_type,
            payload,
            0,
            encode(enqueued_at),
            encode(process_at),
            *values,
        )

    def insert_unique(self, conn: Any, row: Sequence[Any], key: str) -> Any:
        """Insert the row unless a job of its queue holds `key`, leaving the transaction
        usable either way; None when it was inserted, else the stored id of the holder."""
        for _ in range(UNIQUE_TRIES):
            if self.try_insert_unique(conn, row, key):
                return None
            holder = self.holder(conn, row[1], key)
            if holder is not None:
                return holder
        raise ConfigurationError(  # pragma: no cover - the holder ran and left, three times
            f"enqueue: the job holding unique key {key!r} kept leaving the queue while "
            "this one was enqueued; enqueue it again"
        )

    def try_insert_unique(self, conn: Any, row: Sequence[Any], key: str) -> bool:
        """Insert the row with `key`; False, writing nothing, when another job holds it."""
        raise NotImplementedError

    def holder(self, conn: Any, queue: str, key: str) -> Any:
        """The stored id of the job of `queue` holding `key`, or None."""
        row = self.fetchone(conn, self.holder_sql, (queue, key))
        return None if row is None else row[0]

    @contextlib.contextmanager
    def attached(
        self,
        conn: Any,
        exclusive: bool = False,
        pgbouncer: bool = False,
        keepalive_ms: int = 0,
    ) -> Iterator[Session]:
        """`conn` as a worker keeps it, tuned for fewer round trips; untuned on release.
        `exclusive`: no user code is handed the connection (default-mode handlers, no
        callbacks), so the worker may set it up in ways only its own statements expect.
        `pgbouncer`: the connection goes through a transaction pooler, so nothing may
        outlive a transaction on it (PostgreSQL). `keepalive_ms` (0: off): how long the server may
        wait on this client gone silent before it ends the connection, rolling back the
        job it holds (PostgreSQL's per-session TCP keepalives; a MySQL server's are its
        own global settings)."""
        yield self.session(conn)

    def insert_many(self, conn: Any, rows: Sequence[Sequence[Any]]) -> None:
        raise NotImplementedError

    def insert_rows(self, conn: Any, rows: Sequence[Sequence[Any]]) -> None:
        """Insert enqueued rows, as `insert_statement` takes them but each with values of its
        own in every column (a workflow's jobs), in a bounded number of statements."""
        raise NotImplementedError

    def insert_values(
        self,
        conn: Any,
        table: str,
        columns: Sequence[tuple[str, str]],
        rows: Sequence[Sequence[Any]],
    ) -> None:
        """Insert `rows` into `table`'s `columns` (each a name and its PostgreSQL type) in a
        bounded number of statements: here PyMySQL's executemany, which packs the rows into
        multi-row INSERTs."""
        names = ", ".join(name for name, _ in columns)
        marks = ", ".join(["%s"] * len(columns))
        self.executemany(conn, f"INSERT INTO {table} ({names}) VALUES ({marks})", rows)

    def commit(self, conn: Any) -> None:
        conn.commit()

    def rollback(self, conn: Any) -> None:
        conn.rollback()

    def savepoint(self, conn: Any) -> None:
        self.execute(conn, "SAVEPOINT proletarian_sp")

    def release_savepoint(self, conn: Any) -> None:
        """Keep a callback's writes; `TransactionLost` if the callback ended the transaction."""
        self._in_savepoint(conn, "RELEASE SAVEPOINT proletarian_sp")

    def rollback_to_savepoint(self, conn: Any) -> None:
        """Undo a callback's writes and leave the subtransaction, so the job row is then
        updated by the transaction that locked it (no MultiXact on PostgreSQL).

        `TransactionLost` if the transaction itself is gone (nothing left to undo to).
        """
        self._in_savepoint(
            conn, "ROLLBACK TO SAVEPOINT proletarian_sp", "RELEASE SAVEPOINT proletarian_sp"
        )

    def _in_savepoint(self, conn: Any, *statements: str) -> None:
        raise NotImplementedError

    def is_closed(self, conn: Any) -> bool:
        """Whether the connection was closed (by a handler, say)."""
        raise NotImplementedError

    def is_broken(self, conn: Any) -> bool:
        """Whether the connection was lost, not closed: the server ended it (a backend
        terminated, a restart) or the network did, and rolled its transaction back."""
        raise NotImplementedError

    def aborted(self, conn: Any) -> str | None:
        """Why the transaction now refuses statements (a callback swallowed a database
        error on PostgreSQL), or None while it is usable."""
        return None

    def lock_job(self, conn: Any, job_id: Any, attempts: int) -> bool | None:
        """Lock one job row in a new transaction, for recording an attempt outside its run.

        True: locked (the transaction stays open). False: another transaction holds it.
        None: nothing to record (the job is gone, or its attempts moved on).
        """
        self.begin(conn)
        row = self.fetchone(conn, self.lock_sql, (job_id,))
        if row is not None and row[0] == attempts:
            return True
        self.rollback(conn)
        if row is not None:
            return None
        row = self.fetchone(conn, self.peek_sql, (job_id,))
        self.rollback(conn)
        return False if row is not None and row[0] == attempts else None

    # Checks ----------------------------------------------------------------

    def server_version(self, conn: Any) -> tuple[str, tuple[int, ...]]:
        """The server's product name and version."""
        raise NotImplementedError

    def check_server(self, conn: Any, archive: bool = True) -> None:
        """Raise a clear error for a server without SKIP LOCKED or without the tables (the
        archive too unless `archive` is False: a scheduler only enqueues)."""
        try:
            product, version = self.server_version(conn)
            required = self.required_version(product)
            if version < required:
                raise UnsupportedDatabase(
                    f"{product} {'.'.join(map(str, version))} found; proletarian-di needs "
                    f"{product} {'.'.join(map(str, required))} or newer (SELECT … SKIP LOCKED)"
                )
            tables = [(self.job_table, "job_table")]
            if archive:
                tables.append((self.archived_job_table, "archived_job_table"))
            for table, option in tables:
                if not self.table_columns(conn, table):
                    raise self.missing_table(table, option)
        finally:
            self.rollback(conn)

    def missing_table(self, table: str, option: str) -> SchemaError:
        """The error for a queue table (given as `option`) that does not exist."""
        return SchemaError(
            f"table {table} ({option}) does not exist; install the schema with "
            f"`proletarian-di schema install` or sql/{self.name}.sql"
        )

    def behind_pooler(self, conn: Any) -> bool:
        """Whether `conn` goes through a transaction pooler (PostgreSQL: PgBouncer)."""
        return False

    def required_version(self, product: str) -> tuple[int, ...]:
        raise NotImplementedError

    def table_columns(self, conn: Any, table: str) -> list[str]:
        """The table's column names; empty when there is no such table."""
        raise NotImplementedError

    # Errors and teardown -------------------------------------------------

    def abort(self, conn: Any) -> None:
        """Drop the connection under a stuck job so the server rolls it back."""
        raise NotImplementedError

    def cancel_statement(
        self, conn: Any, side: Callable[[], contextlib.AbstractContextManager[Any]]
    ) -> None:
        """Cancel the statement `conn` runs now, if any, from another thread (on a
        connection `side` opens, where the database needs one); the transaction stays open."""
        raise NotImplementedError

    # Admin: operators' reads and moves -----------------------------------

    @contextlib.contextmanager
    def admin_read(self, conn: Any) -> Iterator[None]:
        """Scope of an admin read that may probe row locks (see `probe_held`)."""
        yield

    @contextlib.contextmanager
    def admin_write(self, conn: Any) -> Iterator[None]:
        """Scope of an admin write that may take several statements, in the caller's
        transaction (which the caller commits)."""
        yield

    oldest_in_scan = True
    """Whether the admin reads take each queue's oldest due job in their scan of the job
    table (`MIN(...)`); else from `oldest_due`."""
    rank = "-priority"
    """The claim index's priority key: lower first."""

    def oldest_due(self, conn: Any, queues: Iterable[str], now: datetime) -> dict[str, datetime]:
        """Each queue's oldest process_at at or before `now`, read from the claim index's
        head of each of its priorities: a statement per priority level (and one more) that
        dives once into the index per queue, however many queues there are."""
        oldest: dict[str, Any] = {}
        at, source = self.encode_time(now), self.claim_source()
        pending: dict[str, Any] = dict.fromkeys(queues)
        while pending:
            heads, params = [], []
            for queue, rank in pending.items():
                after = "" if rank is None else f" AND {self.rank} > %s"
                heads.append(
                    f"(SELECT queue, {self.rank}, process_at FROM {source} "
                    f"WHERE queue = %s{after} ORDER BY {self.rank}, process_at LIMIT 1)"
                )
                params += [queue] if rank is None else [queue, rank]
            pending = {}
            for queue, rank, process_at in self.fetchall(conn, " UNION ALL ".join(heads), params):
                pending[queue] = rank
                if process_at <= at and (queue not in oldest or process_at < oldest[queue]):
                    oldest[queue] = process_at
        return {queue: self.decode_time(value) for queue, value in oldest.items()}

    def held_rows(self, conn: Any) -> HeldRows:
        """Which job rows other transactions hold locked now (running jobs), told without
        taking locks: every row, to be probed, where the database cannot narrow them."""
        return HeldRows(_EVERY_ROW, [], exact=False)

    def probe_held(self, conn: Any, job_ids: Sequence[Any]) -> set[Any]:
        """Of these job rows (ids as stored), those another transaction holds locked now:
        the ones a locking `SELECT … SKIP LOCKED` passes over, so it never waits."""
        raise NotImplementedError

    def cancel_insert(self) -> str:
        """The archive INSERT of cancelled jobs, their attempts as they are; its `%s` is
        finished_at and its FROM follows."""
        return (
            f"INSERT INTO {self.archived_job_table} ({self.columns}, priority, status, "
            "finished_at, last_error) SELECT job_id, queue, job_type, payload, attempts, "
            "enqueued_at, process_at, priority, 'cancelled', %s, last_error "
        )

    def cancel_waiting(
        self, conn: Any, where: str, params: Sequence[Any], finished_at: datetime
    ) -> int:
        """Archive the waiting jobs matching `where` as cancelled, passing over the rows
        others hold (running jobs); how many were cancelled."""
        raise NotImplementedError

    def unless_exists(self, key: str) -> str:
        """The clause that makes an INSERT write nothing when a row with its `key` exists,
        without hiding any other error."""
        raise NotImplementedError

    def still_needed(self, conn: Any) -> str:
        """The condition true of an archived job that jobs still waiting need (the parent of
        one, or a job of an unfinished workflow), which purges keep; "" on a schema without
        dependencies."""
        if not self.table_columns(conn, self.blocked_table):
            return ""
        archive, job = self.archived_job_table, self.job_table
        deps, members = self.dependencies_table, self.workflows_table
        return (
            f"(EXISTS (SELECT 1 FROM {deps} d JOIN {job} j ON j.job_id = d.job_id "
            f"WHERE d.parent_id = {archive}.job_id) OR EXISTS (SELECT 1 FROM {members} m "
            f"JOIN {members} o ON o.workflow_id = m.workflow_id JOIN {job} j "
            f"ON j.job_id = o.job_id WHERE m.job_id = {archive}.job_id))"
        )

    def purge_archived(self, conn: Any, where: str, params: Sequence[Any]) -> int:
        """Delete the archived jobs matching `where`, their attempts, results and place in a
        workflow, but not those jobs still waiting need (`still_needed`); how many jobs."""
        archive = self.archived_job_table
        needed = self.still_needed(conn)
        tables = [self.attempt_table]
        if needed:
            where = f"({where}) AND NOT {needed}"
            tables += [self.dependencies_table, self.workflows_table]
        if self.table_columns(conn, self.results_table):
            tables.append(self.results_table)
        for table in tables:
            self.execute(
                conn,
                f"DELETE FROM {table} WHERE job_id IN (SELECT job_id FROM "
                f"(SELECT job_id FROM {archive} WHERE {where}) gone)",
                params,
            )
        return self.delete_archive_rows(conn, where, params)

    def delete_archive_rows(self, conn: Any, where: str, params: Sequence[Any]) -> int:
        """Delete the archived jobs matching `where` (and the summed hours that counted
        them, `forget_hours`); how many."""
        self.forget_hours(conn, where, params)
        return self.execute_count(
            conn, f"DELETE FROM {self.archived_job_table} WHERE {where}", params
        )


_EVERY_ROW = "1 = 1"
_HOUR = timedelta(hours=1)
_SUMMED_HOURS = 50
"""The hours back from the current one whose sums `forget_hours` drops: more than a reader
reads (the last day) and than workers keep (`_outcomes.KEEP_SUMMED`)."""


class HeldRows(NamedTuple):
    """An SQL condition on a job row (with its parameters) that is true for every row
    another transaction holds locked: exactly those when `exact`, else a superset whose
    rows `Dialect.probe_held` sorts out."""

    condition: str
    params: list[Any]
    exact: bool

    @property
    def narrowed(self) -> bool:
        """Whether the condition picks rows out (else every row is a candidate)."""
        return self.exact or self.condition != _EVERY_ROW


NO_HELD_ROWS = HeldRows("1 = 0", [], exact=True)
"""No other transaction holds a row lock: no job is running under one."""

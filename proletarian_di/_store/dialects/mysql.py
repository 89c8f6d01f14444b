"""MySQL and MariaDB through PyMySQL."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import re
import struct
import weakref
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timezone
from typing import Any, NamedTuple

from ...errors import PayloadError, UnsupportedDatabase
from ...job_ids import BinaryUUIDStrategy
from .base import (
    FIRST_POSITION,
    NO_HELD_ROWS,
    NO_RUNS,
    Dialect,
    HeldRows,
    JobRow,
    LeasedRow,
    RunningSlots,
    Runs,
    Session,
    TransactionLost,
    row_extras,
    shutdown_socket,
    unwrap_connection,
)

_DUPLICATE_KEY = 1062


FIRST_JOB_ID = bytes(16)
"""Before every job id (BINARY(16)) of a process_at: where a claim from a position without
one starts among the jobs tied there."""


class MySQLDialect(Dialect):
    """MySQL 8.0.1+ and MariaDB 10.6+ through PyMySQL.

    Worker transactions run at READ COMMITTED: every poll sees jobs committed
    since the last one, and no gap locks block enqueuers while a job runs.
    Times are stored as UTC in DATETIME(6), whatever the session time zone.
    """

    update_returns = False

    name = "mysql"
    default_id_strategy = BinaryUUIDStrategy()
    # `queue = %s` lets the optimizer pick `ref` access on the queue alone, which reads the
    # queue's index entries from the first, dead ones included, however the rest narrows
    # them; ranges on every column, in the index's order, start at the frontier and need no
    # filesort (which would lock every due row before LIMIT). MySQL does not make ranges of a
    # row comparison, so the start is spelled out; MariaDB has no index on an expression, so
    # the index holds the generated column priority_rank (-priority). The job id breaks
    # ties: jobs enqueued together share a process_at, and InnoDB keeps a run job's entry,
    # marked deleted, until its purge gets to it, so a claim from the process_at alone
    # walked every tied job run before it (a thousand page reads a job in a drain of a batch).
    # The index holds job_id after process_at (schema step `claim_ties`); ordering by it too
    # would sort on tables without that step, so the order leaves it to the index.
    claim_queue = "queue >= %s AND queue <= %s"
    claim_from = (
        "(priority_rank > %s OR (priority_rank = %s AND "
        "(process_at > %s OR (process_at = %s AND job_id >= %s))))"
    )
    claim_order = "queue, priority_rank, process_at"
    oldest_in_scan = False  # MIN(CASE ...) over a million index entries: a third more scan
    rank = "priority_rank"
    time_param = "%s"
    db_now = "UTC_TIMESTAMP(6)"
    lease_end = "UTC_TIMESTAMP(6) + INTERVAL %s MICROSECOND"
    insert_ignore = ("INSERT IGNORE INTO", "")
    group_bucket = "CONCAT(%s, group_key)"
    rate_idle = "used_at < UTC_TIMESTAMP(6) - INTERVAL period_ms * 1000 MICROSECOND"
    fair_order = "group_key, priority_rank, process_at, job_id"
    fair_index_has_all = True  # no partial index; and a scan of the claim index for the
    # jobs without a key would keep a lock on every grouped job it passes over

    def archive_under_lease(
        self,
        conn: Any,
        job_id: Any,
        token: str,
        finished_at: datetime,
        due: datetime,
        runs: Runs,
    ) -> bool:
        """Copy the job to the archive, then delete it only where `token` still holds it (a
        lost lease rolls the copy back). Unlike a settle first, which rewrites the row, this
        leaves the claim index alone until the delete: two statements and one index change
        where there were three and three. The copy reads the row unlocked (READ COMMITTED),
        so the delete, which locks it, is what proves the lease."""
        self.begin(conn)
        [(_, archived), _] = self._archive_and_delete([job_id], "success", finished_at, None, runs)
        self.execute(conn, self.archive_leased_sql, (self.encode_time(due), *archived, token))
        if self.execute_count(conn, self.delete_leased_sql, (job_id, token)) == 1:
            return True
        self.rollback(conn)
        return False

    def fair_source(self) -> str:
        """Through the fair index: a sort would lock every due row it reads (`claim_source`)."""
        return f"{self.job_table} FORCE INDEX ({self.job_table.rpartition('.')[2]}_queue_group_key)"

    def claim_source(self) -> str:
        """The job table, read through the claim index: a claim of several jobs from the
        start of a queue whose every job is due looks cheaper to the optimizer as a scan
        and a sort of the whole table, which would lock every due row."""
        index = f"{self.job_table.rpartition('.')[2]}_queue_priority_process_at"
        return f"{self.job_table} FORCE INDEX ({index})"

    def lease_seconds(self, lease_ms: int) -> Any:
        """MySQL adds the lease as whole microseconds."""
        return lease_ms * 1000

    def __init__(self, job_table: str, archived_job_table: str) -> None:
        super().__init__(job_table, archived_job_table)
        job = self.job_table
        self.archive_sql = self.archive_select + f"FROM {job} WHERE job_id = %s"
        self.delete_sql = f"DELETE FROM {job} WHERE job_id = %s"
        # A leased row counts its running attempt already, and its process_at is the lease's
        # end: the archive writes its attempts as they are and the time it was due.
        assert self.archive_select.count("attempts + 1, enqueued_at, process_at") == 1
        self.archive_leased_sql = (
            self.archive_select.replace(
                "attempts + 1, enqueued_at, process_at", "attempts, enqueued_at, %s"
            )
            + f"FROM {job} WHERE job_id = %s AND leased_by = %s"
        )
        self.delete_leased_sql = self.delete_sql + " AND leased_by = %s"
        self._archive_many: dict[int, str] = {}
        self._delete_many: dict[int, str] = {}
        self._first = (FIRST_POSITION[0], self.encode_time(FIRST_POSITION[1]))
        self.unique_index = f"{job.rpartition('.')[2]}_queue_unique_key"
        self.slot_claim_sql = self.claim_statement(f"{_SLOT_VARIABLE} IS NOT NULL AND ")
        self._packet_limits: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self._held_keys: weakref.WeakKeyDictionary[Any, tuple[Any, set[tuple[str, str]]]] = (
            weakref.WeakKeyDictionary()
        )

    def encode_time(self, value: datetime) -> Any:
        return value.astimezone(timezone.utc).replace(tzinfo=None)

    def decode_time(self, value: datetime) -> datetime:
        return value.replace(tzinfo=timezone.utc)

    def seconds_since(self, column: str) -> str:
        return f"TIMESTAMPDIFF(MICROSECOND, %s, {column}) / 1000000"

    def seconds_between(self, start: str, end: str) -> str:
        return f"TIMESTAMPDIFF(MICROSECOND, {start}, {end}) / 1000000"

    def hours_since(self, column: str) -> str:
        return f"TIMESTAMPDIFF(HOUR, %s, {column})"

    def percentiles(self, source: str, values: Sequence[str], ranks: Sequence[float]) -> str:
        """Without PERCENTILE_DISC as an aggregate: each row ranked per slot, queue and job
        type (ROW_NUMBER over each value, MySQL 8.0 and MariaDB 10.2+), then the rows whose
        rank is the percentile's, picked out while grouping."""
        partition = "PARTITION BY slot, queue, job_type"
        ranked = ", ".join(
            f"ROW_NUMBER() OVER ({partition} ORDER BY {value}) AS {value}_rank" for value in values
        )
        columns = []
        for value in values:
            columns += [
                f"MAX(CASE WHEN {value}_rank = CEIL({share} * n) THEN {value} END)"
                for share in ranks
            ]
            columns.append(f"MAX({value})")
        return (
            f"SELECT slot, queue, job_type, MAX(n), {', '.join(columns)} FROM ("
            f"SELECT timed.*, {ranked}, COUNT(*) OVER ({partition}) AS n "
            f"FROM ({source}) AS timed) AS ranked GROUP BY slot, queue, job_type"
        )

    def cursor(self, conn: Any) -> Any:
        return conn.cursor(_tuple_cursor())

    @contextlib.contextmanager
    def attached(
        self,
        conn: Any,
        exclusive: bool = False,
        pgbouncer: bool = False,
        keepalive_ms: int = 0,
    ) -> Iterator[Session]:
        """READ COMMITTED for the whole session while a worker holds the connection; on
        release, the session is put back as it was lent (handlers may have changed it).
        `exclusive` (no user code is handed the connection): multi-statements on, so that
        a job's archive, its COMMIT and the next claim go in one round trip
        (`Session.archive_commit_and_claim`); off again on release. `keepalive_ms` is
        not for a session to set here: the server's `tcp_keepalive_*` settings bound a
        silent client (docs/operations.md)."""
        saved = session_state(conn)
        self.execute(conn, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        session = MySQLSession(self, conn, read_committed=True)
        try:
            if exclusive:
                session.multi = _multi_statements(conn, True)
            yield session
        finally:
            if not self.is_closed(conn):
                if session.slot is not None:  # a running slot never goes back to the pool
                    session.drop_ahead()
                    session.release_slot()
                if session.multi:
                    _multi_statements(conn, False)
                restore_session(conn, saved)

    def _in_savepoint(self, conn: Any, *statements: str) -> None:
        try:
            for statement in statements:
                self.execute(conn, statement)
        except Exception as exc:
            if error_code(exc) == _NO_SUCH_SAVEPOINT:
                raise TransactionLost(
                    "the job's transaction was rolled back by the server (a deadlock or lock "
                    "wait timeout inside the callback) or committed or rolled back by it"
                ) from exc
            raise

    transactional_ddl = False

    def lacks_no_pad_collation(self, conn: Any) -> bool:
        product, version = self.server_version(conn)
        return product == "MySQL" and version < (8, 0, 17)

    def session_time_zone(self, conn: Any) -> str | None:
        return str(self.fetchone(conn, "SELECT @@SESSION.time_zone")[0])

    def set_autocommit(self, conn: Any) -> None:
        unwrap_connection(conn).autocommit(True)

    def is_closed(self, conn: Any) -> bool:
        return not unwrap_connection(conn).open

    def is_broken(self, conn: Any) -> bool:
        """PyMySQL marks only a `close()` as closed: a connection dropped on an error is
        not open, and not closed either."""
        raw = unwrap_connection(conn)
        return not raw.open and not getattr(raw, "_closed", True)

    def begin(self, conn: Any, read_committed: bool = False) -> None:
        """Start a transaction at READ COMMITTED (already the session's level on a worker's
        connection, so set only for the next transaction elsewhere)."""
        if not read_committed:
            self.execute(conn, "SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        if conn.get_autocommit():
            conn.begin()

    def session(self, conn: Any) -> MySQLSession:
        return MySQLSession(self, conn)

    def claim(
        self,
        conn: Any,
        queue: str,
        now: datetime,
        limit: int = 1,
        start: Any = None,
        read_committed: bool = False,
    ) -> list[JobRow]:
        self.begin(conn, read_committed)
        with self.cursor(conn) as cursor:
            cursor.execute(self.claim_sql, self.claim_params(queue, start, now, limit))
            return list(cursor.fetchall())

    def count_claim(self, conn: Any, table: str, job_id: Any) -> int:
        """One round trip: the count comes back as the statement's insert id (0 when the row
        was new)."""
        sql = (
            f"INSERT INTO {table} (job_id, claims) VALUES (%s, 1) "
            "ON DUPLICATE KEY UPDATE claims = LAST_INSERT_ID(claims + 1)"
        )
        with self.cursor(conn) as cursor:
            cursor.execute(sql, (job_id,))
            return int(cursor.lastrowid or 1)

    def take_slot(self, conn: Any, slots: RunningSlots, read_committed: bool) -> str | None:
        """Begin the claim's transaction and lock the first free slot with GET_LOCK, in one
        statement (CASE tries them in order and stops at the first it gets): its name, or
        None. A GET_LOCK lock belongs to the session, not the transaction: `release` gives it
        back (and a dropped connection, with the server)."""
        self.begin(conn, read_committed)
        names = [f"{slots.prefix}{n}" for n in range(1, slots.size + 1)]
        (taken,) = self.fetchone(conn, _take_slot_sql(slots.size), names)
        return None if taken is None else names[int(taken) - 1]

    def release(self, conn: Any, name: str) -> None:
        """Release a slot; a connection that cannot is closed, so that its lock goes too."""
        try:
            self.execute(conn, "DO RELEASE_LOCK(%s)", (name,))
        except Exception:
            with contextlib.suppress(Exception):
                unwrap_connection(conn).close()
            raise

    def claim_params(self, queue: str, start: Any, now: datetime, limit: int) -> tuple[Any, ...]:
        rank, process_at, *tied = self._first if start is None else start
        job_id = tied[0] if tied else FIRST_JOB_ID
        now_param = self.encode_time(now)
        return (queue, queue, rank, rank, process_at, process_at, job_id, now_param, limit)

    @staticmethod
    def position(row: JobRow | LeasedRow) -> tuple[Any, ...]:
        """Where a claimed row sits in the claim index: (-priority, raw process_at, job id)."""
        return -row[8], row[6], row[0]

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
        """Copy, then delete, the jobs by primary-key lookups only: a DELETE that scans
        X-locks every row it reads, so it waits for (and deadlocks on) other workers' jobs."""
        if not job_ids:
            return
        runs = Runs(started, worker)
        for sql, params in self._archive_and_delete(job_ids, status, finished_at, error, runs):
            self.execute(conn, sql, params)

    def archive_statements(
        self,
        cursor: Any,
        job_ids: Sequence[Any],
        status: str,
        finished_at: datetime,
        runs: Runs = NO_RUNS,
    ) -> list[str]:
        """`archive`'s two statements written out (`cursor.mogrify`), for a query of many."""
        return [
            cursor.mogrify(sql, params)
            for sql, params in self._archive_and_delete(job_ids, status, finished_at, None, runs)
        ]

    def _archive_and_delete(
        self,
        job_ids: Sequence[Any],
        status: str,
        finished_at: datetime,
        error: str | None,
        runs: Runs,
    ) -> list[tuple[str, tuple[Any, ...]]]:
        finished = self.encode_time(finished_at)
        starts = [None if at is None else self.encode_time(at) for at in runs.started]
        starts = starts or [None] * len(job_ids)
        if len(job_ids) == 1:
            job_id = job_ids[0]
            return [
                (self.archive_sql, (status, finished, error, starts[0], runs.worker, job_id)),
                (self.delete_sql, (job_id,)),
            ]
        ids = tuple(job_ids)
        pairs = [value for pair in zip(ids, starts, strict=True) for value in pair]
        return [
            (
                self._archive_many_sql(len(ids)),
                (status, finished, error, *pairs, runs.worker, ids),
            ),
            (self._delete_many_sql(len(ids)), ids),
        ]

    def _archive_many_sql(self, count: int) -> str:
        """The archive of `count` jobs, each with its own start (picked by its id)."""
        sql = self._archive_many.get(count)
        if sql is None:
            started = f"CASE job_id {' '.join(['WHEN %s THEN %s'] * count)} END"
            sql = self._archive_many[count] = (
                self.archive_of(started)
                + f"FROM {self.job_table} FORCE INDEX (PRIMARY) WHERE job_id IN %s"
            )
        return sql

    def _delete_many_sql(self, count: int) -> str:
        """A DELETE of `count` jobs that finds each by its primary key, whatever the statistics:
        with `IN (…)` a table that looks small next to the list is scanned instead."""
        sql = self._delete_many.get(count)
        if sql is None:
            ids = " UNION ALL ".join(["SELECT %s AS id"] * count)
            sql = (
                f"DELETE j FROM ({ids}) AS claimed STRAIGHT_JOIN {self.job_table} AS j "
                "FORCE INDEX (PRIMARY) ON j.job_id = claimed.id"
            )
            self._delete_many[count] = sql
        return sql

    def check_rows(self, conn: Any, rows: Sequence[Sequence[Any]], key: str | None) -> None:
        """A statement of max_allowed_packet bytes or more makes the server drop the
        connection (error 1153), the caller's transaction with it: refuse the row before
        anything is sent. Only a row that may come near the smallest limit a server takes
        costs a look at the connection's (once per connection) or an exact count."""
        shared = _FIXED_BOUND + 4 * len(key or "")
        for row in rows:
            _, queue, job_type, payload, *_ = row
            texts = (queue, job_type, *(text or "" for text in row[7:]))
            bound = shared + 4 * sum(map(len, texts))
            bound += (2 if payload.isascii() else 4) * len(payload)
            if bound < _MIN_PACKET or bound < self._packet_limit(conn):
                continue
            limit = self._packet_limit(conn)
            sql, params = self.insert_statement(row, key)
            raw = unwrap_connection(conn)
            with self.cursor(conn) as cursor:
                text = cursor.mogrify(sql, params)
            size = len(text.encode(raw.encoding, "surrogateescape")) + 1
            if size >= limit:
                raise PayloadError(
                    f"payload too large for this MySQL server: the INSERT of job type "
                    f"{row[2]!r} would be a {size}-byte packet, and max_allowed_packet is "
                    f"{limit} (a packet must be smaller); nothing was sent. Store the data "
                    "elsewhere and enqueue a reference to it, or raise max_allowed_packet"
                )

    def _packet_limit(self, conn: Any) -> int:
        """The session's max_allowed_packet, read once per connection (a session cannot
        change it)."""
        raw = unwrap_connection(conn)
        limit = self._packet_limits.get(raw)
        if limit is None:
            limit = self._packet_limits[raw] = int(
                self.fetchone(conn, "SELECT @@SESSION.max_allowed_packet")[0]
            )
        return limit

    def insert_many(self, conn: Any, rows: Sequence[Sequence[Any]]) -> None:
        """Multi-row INSERTs (PyMySQL's executemany batches them only when every value is
        a parameter); the times all rows share are converted once. Each statement stays
        under max_allowed_packet (`check_rows` saw that each row fits alone)."""
        if not rows:
            return
        enqueued_at, process_at = (self.encode_time(value) for value in rows[0][4:6])
        priority, trace, *more = rows[0][6:]
        given = ((priority,) if priority else ()) + (() if trace is None else (trace,))
        given += (more[0],) if more and more[0] is not None else ()
        params = [
            (row[0], row[1], row[2], row[3], 0, enqueued_at, process_at, *given) for row in rows
        ]
        self._insert_packed(conn, self.insert_statement(rows[0])[0], params)

    def insert_rows(self, conn: Any, rows: Sequence[Sequence[Any]]) -> None:
        """As `insert_many`, each row's times converted on its own."""
        if not rows:
            return
        priority, traced, grouped = row_extras(rows)
        extra = ("priority",) * priority + ("trace_context",) * traced + ("group_key",) * grouped
        encode = self.encode_time
        params = [
            (
                *(row[0], row[1], row[2], row[3], 0, encode(row[4]), encode(row[5])),
                *((row[6],) if priority else ()),
                *((row[7],) if traced else ()),
                *((row[8] if len(row) > 8 else None,) if grouped else ()),
            )
            for row in rows
        ]
        self._insert_packed(conn, self.insert_into(extra), params)

    def _insert_packed(self, conn: Any, sql: str, params: Sequence[Sequence[Any]]) -> None:
        """PyMySQL's executemany of one-row INSERT `sql`, each multi-row statement it makes
        under max_allowed_packet."""
        with self.cursor(conn) as cursor:
            if sum(map(_size_bound, params)) >= _MIN_PACKET:
                limit = self._packet_limit(conn) - 2
                cursor.max_stmt_length = min(cursor.max_stmt_length, limit)
            cursor.executemany(sql, params)

    def insert_unique(self, conn: Any, row: Sequence[Any], key: str) -> Any:
        """As every dialect does, remembering the keys that the connection's transaction
        holds until anything else runs on it: then they are forgotten, lest a commit went
        unseen (PyMySQL's `commit()` leaves its last result alone and clears the server's
        in-transaction flag; any statement replaces that result)."""
        raw = unwrap_connection(conn)
        marker, keys = self._held_keys.get(raw, (None, set()))
        if marker is None or marker is not getattr(raw, "_result", None):
            keys = set()
        if not raw.server_status & _IN_TRANSACTION:
            keys = set()
        self._held_keys[raw] = (None, keys)
        holder = super().insert_unique(conn, row, key)
        if raw.server_status & _IN_TRANSACTION:
            keys.add((row[1], key))
            self._held_keys[raw] = (getattr(raw, "_result", None), keys)
        return holder

    def try_insert_unique(self, conn: Any, row: Sequence[Any], key: str) -> bool:
        """Enqueuers of one key take turns for the INSERT, under a named lock: two waiting
        together on the index entry of a holder that a worker deletes are both granted a
        shared lock on it once it commits, and then deadlock inserting. A transaction that
        already holds the key does not wait for a turn (the one at its turn may be waiting
        for it); a turn not had within innodb_lock_wait_timeout is gone without."""
        if (row[1], key) in self._held_keys.get(unwrap_connection(conn), (None, set()))[1]:
            return self._insert_keyed(conn, row, key)
        name = self._key_lock(row[1], key)
        turn = self.fetchone(conn, _TAKE_KEY_LOCK, (name,))[0] == 1
        try:
            inserted = self._insert_keyed(conn, row, key)
        except BaseException:
            if turn:
                with contextlib.suppress(Exception):  # a dead session has let its lock go
                    self.execute(conn, _GIVE_KEY_LOCK, (name,))
            raise
        if turn:
            self.execute(conn, _GIVE_KEY_LOCK, (name,))
        return inserted

    def _key_lock(self, queue: str, key: str) -> str:
        """The named lock of `key` in `queue` (a name is at most 64 characters)."""
        text = "\0".join((self.job_table, queue, key)).encode()
        return "proletarian:" + hashlib.sha1(text, usedforsecurity=False).hexdigest()

    def _insert_keyed(self, conn: Any, row: Sequence[Any], key: str) -> bool:
        """A duplicate key fails the INSERT alone (MySQL keeps the transaction): only that
        error, on this index, is taken for "held"; anything else is raised."""
        try:
            self.execute(conn, *self.insert_statement(row, key))
        except Exception as exc:
            code, message = (*exc.args, None, None)[:2]
            if code != _DUPLICATE_KEY or self.unique_index not in str(message):
                raise
            return False
        return True

    def holder(self, conn: Any, queue: str, key: str) -> Any:
        """At REPEATABLE READ an older snapshot may not show the job that took the key: a
        locking read sees it (waiting for its worker if one is running it)."""
        found = super().holder(conn, queue, key)
        if found is None:
            row = self.fetchone(conn, self.holder_sql + " LOCK IN SHARE MODE", (queue, key))
            found = None if row is None else row[0]
        return found

    def server_version(self, conn: Any) -> tuple[str, tuple[int, ...]]:
        text = str(self.fetchone(conn, "SELECT VERSION()")[0])
        product = "MariaDB" if "mariadb" in text.lower() else "MySQL"
        match = re.match(r"(\d+)\.(\d+)\.(\d+)", text)
        if not match:
            raise UnsupportedDatabase(f"cannot read the server version from {text!r}")
        return product, tuple(int(part) for part in match.groups())

    def required_version(self, product: str) -> tuple[int, ...]:
        return (10, 6, 0) if product == "MariaDB" else (8, 0, 1)

    def table_columns(self, conn: Any, table: str) -> list[str]:
        schema, _, name = table.rpartition(".")
        rows = self.fetchall(
            conn,
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = COALESCE(%s, DATABASE()) AND table_name = %s "
            "ORDER BY ordinal_position",
            (schema or None, name),
        )
        return [str(row[0]).lower() for row in rows]

    def locate_tables(self, conn: Any) -> tuple[str | None, dict[str, str]]:
        """The connection's database, and both tables named with the database they are in:
        the default `proletarian.job` is in `proletarian` whatever database the connection
        names, an unqualified name in the connection's. Rolls back what it read."""
        try:
            database = self.fetchone(conn, "SELECT DATABASE()")[0]
        finally:
            self.rollback(conn)
        tables = {"job_table": self.job_table, "archived_job_table": self.archived_job_table}
        if database is not None:
            tables = {
                option: name if "." in name else f"{database}.{name}"
                for option, name in tables.items()
            }
        return database, tables

    def requeue(self, conn: Any, where: str, params: Sequence[Any], now: datetime) -> int:
        """Lock the matching archived jobs, then copy and delete them by id, in chunks.

        Outside a transaction, the next one runs at READ COMMITTED, so the locking read
        takes no gap locks that would hold up workers archiving their jobs.
        """
        raw = unwrap_connection(conn)
        if not raw.server_status & _IN_TRANSACTION:
            self.execute(conn, "SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        self.forget_hours(conn, where, params)
        archive, job = self.archived_job_table, self.job_table
        ids = [
            row[0]
            for row in self.fetchall(
                conn, f"SELECT job_id FROM {archive} WHERE {where} FOR UPDATE", params
            )
        ]
        for start in range(0, len(ids), _REQUEUE_CHUNK):
            chunk = ids[start : start + _REQUEUE_CHUNK]
            marks = ", ".join(["%s"] * len(chunk))
            self.execute(
                conn,
                f"INSERT INTO {job} ({self.columns}, last_error, priority) "
                "SELECT job_id, queue, job_type, payload, 0, enqueued_at, %s, last_error, "
                "priority "
                f"FROM {archive} WHERE job_id IN ({marks})",
                [self.encode_time(now), *chunk],
            )
            self.execute(conn, f"DELETE FROM {archive} WHERE job_id IN ({marks})", chunk)
            self.forget_claims(conn, self.claims_table, chunk)
        return len(ids)

    def abort(self, conn: Any) -> None:
        sock = getattr(unwrap_connection(conn), "_sock", None)
        if sock is not None:
            shutdown_socket(sock.fileno())

    def cancel_statement(
        self, conn: Any, side: Callable[[], contextlib.AbstractContextManager[Any]]
    ) -> None:
        """KILL QUERY from a side connection, only while the session runs one: a KILL that
        finds the session idle would end its next statement instead, on some servers."""
        thread_id = unwrap_connection(conn).thread_id()
        with side() as other:
            running = self.fetchone(
                other,
                "SELECT 1 FROM information_schema.PROCESSLIST WHERE ID = %s AND COMMAND = 'Query'",
                (thread_id,),
            )
            if running is not None:
                self.execute(other, f"KILL QUERY {int(thread_id)}")
            self.rollback(other)

    def in_transaction(self, conn: Any) -> bool:
        """Whether a transaction is open, asked of the server: `DO 0` returns its status
        flags, which PyMySQL does not read after a result set."""
        self.execute(conn, "DO 0")
        return bool(unwrap_connection(conn).server_status & _IN_TRANSACTION)

    @contextlib.contextmanager
    def admin_read(self, conn: Any) -> Iterator[None]:
        """Outside a transaction, the read runs in one of its own at READ COMMITTED, rolled
        back at the end. InnoDB keeps a probe's row locks until the transaction ends (ROLLBACK
        TO SAVEPOINT keeps them), so in the caller's transaction they last until it ends."""
        if self.in_transaction(conn):
            yield
            return
        self.execute(conn, _NEXT_READ_COMMITTED)
        try:
            yield
        except BaseException:
            with contextlib.suppress(Exception):
                self.rollback(conn)
            raise
        self.rollback(conn)

    @contextlib.contextmanager
    def admin_write(self, conn: Any) -> Iterator[None]:
        """Outside a transaction, the next one runs at READ COMMITTED: locking reads take no
        gap locks that would hold up enqueuers and workers. On an autocommit connection, where
        each statement commits, the statements run as one transaction, committed at the end."""
        if self.in_transaction(conn):
            yield
            return
        self.execute(conn, _NEXT_READ_COMMITTED)
        raw = unwrap_connection(conn)
        if not raw.get_autocommit():
            yield
            return
        raw.begin()
        try:
            yield
        except BaseException:
            with contextlib.suppress(Exception):
                raw.rollback()
            raise
        raw.commit()

    def held_rows(self, conn: Any) -> HeldRows:
        """MySQL 8 lists row locks in performance_schema.data_locks: read there when it can
        be; MariaDB has no such table, so there every row is probed."""
        locked = self._locked_job_ids(conn)
        if locked is None:
            return NO_HELD_ROWS if self._no_row_locks(conn) else super().held_rows(conn)
        if not locked:
            return NO_HELD_ROWS
        marks = ", ".join(["%s"] * len(locked))
        return HeldRows(f"job_id IN ({marks})", sorted(locked), exact=True)

    def _no_row_locks(self, conn: Any) -> bool:
        """Whether InnoDB says no other transaction holds a row lock (so no job runs under
        one, and nothing needs probing); False where it cannot tell (no PROCESS privilege)."""
        try:
            return self.fetchone(conn, _OTHERS_ROW_LOCKING)[0] == 0
        except Exception as exc:
            if error_code(exc) is None or is_transient(exc):
                raise
            return False

    def _locked_job_ids(self, conn: Any) -> set[bytes] | None:
        """The job ids other sessions hold X locks on, from data_locks; None where it cannot
        tell (MariaDB, no privilege, performance_schema off, a lock without its row data)."""
        if _server(conn)[0]:
            return None
        schema, _, name = self.job_table.rpartition(".")
        try:
            enabled = self.fetchone(conn, "SELECT @@performance_schema")[0]
            rows = self.fetchall(conn, _DATA_LOCKS, (schema or None, name)) if enabled else None
        except Exception as exc:
            if error_code(exc) is None or is_transient(exc):
                raise
            return None
        keys = [_lock_key(row[0]) for row in rows or ()]
        if rows is None or None in keys:
            return None
        return {key for key in keys if key is not None}

    def probe_held(self, conn: Any, job_ids: Sequence[Any]) -> set[Any]:
        """A shared-lock probe: other admins' probes pass each other, workers pass over the
        rows it locks (SKIP LOCKED) and never wait on them. Its locks last until the
        transaction ends (see `admin_read`)."""
        if not job_ids:
            return set()
        ids = [bytes(job_id) for job_id in job_ids]
        marks = ", ".join(["%s"] * len(ids))
        shared = "LOCK IN SHARE MODE" if _server(conn)[0] else "FOR SHARE"
        rows = self.fetchall(
            conn,
            f"SELECT job_id FROM {self.job_table} FORCE INDEX (PRIMARY) "
            f"WHERE job_id IN ({marks}) {shared} SKIP LOCKED",
            ids,
        )
        return set(ids) - {bytes(row[0]) for row in rows}

    def unless_exists(self, key: str) -> str:
        first = key.split(",")[0].strip()
        return f"ON DUPLICATE KEY UPDATE {first} = {first}"

    def id_text(self, column: str) -> str:
        parts = ((1, 4), (5, 2), (7, 2), (9, 2), (11, 6))
        hexes = ", ".join(f"HEX(SUBSTR({column}, {at}, {size}))" for at, size in parts)
        return f"LOWER(CONCAT_WS('-', {hexes}))"

    def cancel_waiting(
        self, conn: Any, where: str, params: Sequence[Any], finished_at: datetime
    ) -> int:
        """Lock the matching jobs, passing over held ones, then copy and delete them by
        primary key, in chunks (a DELETE that scans would wait on running jobs)."""
        job = self.job_table
        ids = [
            row[0]
            for row in self.fetchall(
                conn, f"SELECT job_id FROM {job} WHERE {where} FOR UPDATE SKIP LOCKED", params
            )
        ]
        finished = self.encode_time(finished_at)
        for start in range(0, len(ids), _REQUEUE_CHUNK):
            chunk = ids[start : start + _REQUEUE_CHUNK]
            marks = ", ".join(["%s"] * len(chunk))
            insert = self.cancel_insert() + f"FROM {job} FORCE INDEX (PRIMARY) "
            self.execute(conn, insert + f"WHERE job_id IN ({marks})", [finished, *chunk])
            self.execute(conn, self._delete_many_sql(len(chunk)), chunk)
            self.forget_claims(conn, self.claims_table, chunk)
        return len(ids)


class MySQLSession(Session):
    """A MySQL connection as the runner uses it; a worker's runs at READ COMMITTED."""

    dialect: MySQLDialect

    def __init__(self, dialect: MySQLDialect, conn: Any, read_committed: bool = False) -> None:
        super().__init__(dialect, conn)
        self.read_committed = read_committed
        self.slot: str | None = None
        self.multi = False
        """Multi-statements are on (`MySQLDialect.attached` with `exclusive`)."""

    def can_claim_ahead(self, job_ids: Sequence[Any], slots: RunningSlots | None) -> bool:
        """With multi-statements on."""
        return self.multi and bool(job_ids)

    def probes_ends(self, job_ids: Sequence[Any]) -> bool:
        """With multi-statements on: the read goes in the archive's query."""
        return self.multi and bool(job_ids)

    def _probe(self, cursor: Any, job_ids: Sequence[Any]) -> str:
        """The read of whether a job waits on one of `job_ids`, written out: one row."""
        among, params = self.dialect.any_of("parent_id", job_ids)
        read = self.dialect._waited_sql.format(among=among)
        return str(cursor.mogrify(f"SELECT EXISTS ({read})", params))

    def archive_and_commit(
        self,
        job_ids: Sequence[Any],
        finished_at: datetime,
        runs: Runs = NO_RUNS,
        probe: bool = False,
    ) -> bool:
        """With `probe` (and multi-statements on), the read, the archive and its COMMIT in
        one query."""
        if not (probe and self.probes_ends(job_ids)):
            return super().archive_and_commit(job_ids, finished_at, runs, probe)
        dialect = self.dialect
        with dialect.cursor(self.conn) as cursor:
            archive = dialect.archive_statements(cursor, job_ids, "success", finished_at, runs)
            cursor.execute("; ".join([self._probe(cursor, job_ids), *archive, "COMMIT"]))
            (waited,) = cursor.fetchone()
            while cursor.nextset():
                pass
        return bool(waited)

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
        """The archive's INSERT and DELETE (after the read of whether a job waits on them,
        with `probe`), COMMIT, START TRANSACTION and the next claim (a
        fair turn's first scan with `fair_after`) as one multi-statement query. With
        `slots`, the running slot the job ran in is kept for the next claim (a GET_LOCK
        lock outlives the COMMIT); without one, the first free slot is taken before the
        claim, which claims nothing without it. The server stops at the first statement
        that fails: an error up to the COMMIT is raised (nothing more ran); a later one is
        None."""
        dialect = self.dialect
        take = slots if self.slot is None else None
        with dialect.cursor(self.conn) as cursor:
            if fair_after is not None:
                params = (queue, fair_after, dialect.encode_time(finished_at))
                claim = cursor.mogrify(dialect.fair_turn_sql, params)
            else:
                claim = cursor.mogrify(
                    dialect.claim_sql if take is None else dialect.slot_claim_sql,
                    dialect.claim_params(queue, start, finished_at, limit),
                )
            statements = [
                *dialect.archive_statements(cursor, job_ids, "success", finished_at, runs),
                "COMMIT",
            ]
            if take is not None:
                statements.append(self._take_slot_statement(cursor, take))
            statements += ["START TRANSACTION", claim]
            if take is not None:
                statements.append(f"SELECT {_SLOT_VARIABLE}")
            read = [self._probe(cursor, job_ids)] if probe else []
            cursor.execute("; ".join([*read, *statements]))
            waited = False
            if probe:
                (waited,) = cursor.fetchone()
                cursor.nextset()
            for _ in range(_ARCHIVE_RESULTS - 1):
                cursor.nextset()
            try:
                for _ in range(len(statements) - _ARCHIVE_RESULTS - (take is not None)):
                    cursor.nextset()  # up to the claim
                rows = list(cursor.fetchall())
                if take is not None:
                    cursor.nextset()
                    (taken,) = cursor.fetchone()
                    self.slot = None if taken is None else f"{take.prefix}{int(taken)}"
            except Exception:
                if take is not None:
                    self._release_taken(take)
                elif self.slot is not None:
                    self._give_back(self.slot)
                return bool(waited), None
            return bool(waited), rows

    @staticmethod
    def _take_slot_statement(cursor: Any, slots: RunningSlots) -> str:
        """Take the first free running slot: its number (1-based) in `_SLOT_VARIABLE`,
        else NULL."""
        names = [f"{slots.prefix}{n}" for n in range(1, slots.size + 1)]
        return str(cursor.mogrify(f"SET {_SLOT_VARIABLE} = ({_take_slot_sql(slots.size)})", names))

    def _give_back(self, name: str) -> None:
        """After a claim ahead that failed past its COMMIT: give back the slot kept for it
        (`MySQLDialect.release` closes a connection that cannot)."""
        self.slot = None
        with contextlib.suppress(Exception):
            self.dialect.release(self.conn, name)

    def _release_taken(self, slots: RunningSlots) -> None:
        """After a claim ahead that failed past its COMMIT: give back the slot it may have
        taken (a connection that cannot is closed, which gives it back)."""
        try:
            (taken,) = self.dialect.fetchone(self.conn, f"SELECT {_SLOT_VARIABLE}")
            if taken is not None:
                self.dialect.release(self.conn, f"{slots.prefix}{int(taken)}")
        except Exception:
            with contextlib.suppress(Exception):
                unwrap_connection(self.conn).close()

    def drop_ahead(self) -> None:
        """Give the rows claimed ahead back unrun, and the running slot they were claimed in."""
        ahead = self.ahead is not None
        super().drop_ahead()
        if ahead:
            self.release_slot()

    def claim(self, queue: str, now: datetime, limit: int = 1, start: Any = None) -> list[JobRow]:
        return self.dialect.claim(self.conn, queue, now, limit, start, self.read_committed)

    def begin(self) -> None:
        """At READ COMMITTED, with no SET where it is already the session's level."""
        self.dialect.begin(self.conn, self.read_committed)

    def claim_in_slot(
        self, slots: RunningSlots, queue: str, now: datetime, limit: int = 1, start: Any = None
    ) -> list[JobRow]:
        dialect = self.dialect
        self.slot = dialect.take_slot(self.conn, slots, self.read_committed)
        if self.slot is None:
            return []
        return dialect.claim(self.conn, queue, now, limit, start, read_committed=True)

    def take_running_slot(self, slots: RunningSlots) -> bool:
        self.slot = self.dialect.take_slot(self.conn, slots, self.read_committed)
        return self.slot is not None

    def keep_slot(self, slots: RunningSlots) -> bool:
        """A GET_LOCK slot belongs to the session: it outlives the COMMIT by itself."""
        return self.slot is not None

    def release_slot(self) -> None:
        """Give back the running slot, unless it is the one rows claimed ahead run in."""
        if self.slot is not None and self.ahead is None:
            name, self.slot = self.slot, None
            self.dialect.release(self.conn, name)


@functools.cache
def _tuple_cursor() -> type:
    """PyMySQL's plain cursor class, whatever `cursorclass` the connection was given."""
    from pymysql.cursors import Cursor

    return Cursor


_SLOT_VARIABLE = "@proletarian_slot"
"""The session variable that names the running slot a claim ahead took (NULL: none)."""
_ARCHIVE_RESULTS = 3
"""The results of a multi-statement archive up to its COMMIT: INSERT, DELETE, COMMIT."""
_SET_OPTION = 27  # COM_SET_OPTION: MYSQL_OPTION_MULTI_STATEMENTS_ON (0) or _OFF (1)


def _multi_statements(conn: Any, on: bool) -> bool:
    """Turn multi-statements on or off on a PyMySQL connection (COM_SET_OPTION, one round
    trip); whether they are on. A connection without PyMySQL's command layer is left as
    it is."""
    raw = unwrap_connection(conn)
    send, read = getattr(raw, "_execute_command", None), getattr(raw, "_read_packet", None)
    if send is None or read is None:
        return False
    send(_SET_OPTION, struct.pack("<H", 0 if on else 1))
    read()
    return on


_IN_TRANSACTION = 1  # SERVER_STATUS_IN_TRANS in the server's status flags


@functools.cache
def _take_slot_sql(size: int) -> str:
    """The first of `size` named locks free now, taken: its number (1-based), or NULL."""
    tries = " ".join(f"WHEN GET_LOCK(%s, 0) THEN {n}" for n in range(1, size + 1))
    return f"SELECT CASE {tries} END"


_TAKE_KEY_LOCK = "SELECT GET_LOCK(%s, @@innodb_lock_wait_timeout)"
_GIVE_KEY_LOCK = "DO RELEASE_LOCK(%s)"
_NEXT_READ_COMMITTED = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED"
_OTHERS_ROW_LOCKING = (
    "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id <> "
    "CONNECTION_ID() AND (trx_tables_locked > 0 OR trx_rows_locked > 0)"
)
_DATA_LOCKS = (
    "SELECT LOCK_DATA FROM performance_schema.data_locks "
    "WHERE OBJECT_SCHEMA = COALESCE(%s, DATABASE()) AND OBJECT_NAME = %s "
    "AND INDEX_NAME = 'PRIMARY' AND LOCK_TYPE = 'RECORD' AND LOCK_STATUS = 'GRANTED' "
    "AND LOCK_MODE IN ('X', 'X,REC_NOT_GAP') "
    "AND (LOCK_DATA IS NULL OR LOCK_DATA <> 'supremum pseudo-record') "
    "AND NOT THREAD_ID <=> "
    "(SELECT THREAD_ID FROM performance_schema.threads WHERE PROCESSLIST_ID = CONNECTION_ID())"
)
_REQUEUE_CHUNK = 500
_NO_SUCH_SAVEPOINT = 1305
READ_ONLY_CODES = frozenset(
    {
        1290,  # --read-only (a primary demoted during a failover)
        1792,  # read-only transaction
        1836,  # read-only mode
    }
)
_TRANSIENT_CODES = (
    frozenset(
        {
            1040,  # too many connections
            1053,  # server shutdown in progress
            1077,  # normal shutdown
            1078,  # got a signal, aborting
            1079,  # shutdown complete
            1152,  # aborted connection
            1158,  # network read error
            1159,  # network read timeout
            1160,  # network write error
            1161,  # network write timeout
            1203,  # too many connections for the user
            1205,  # lock wait timeout
            1213,  # deadlock
            1317,  # query interrupted (KILL QUERY)
            1927,  # connection killed (MariaDB)
            3032,  # server in offline mode
            4031,  # idle connection closed by the server (MySQL 8.0.24+)
        }
    )
    | READ_ONLY_CODES
)
DISCONNECT_CODES = frozenset({1053, 1077, 1078, 1079, 1152, 1927, 3032, 4031})


_MIN_PACKET = 1024
"""The smallest max_allowed_packet a server takes: a smaller statement always fits."""


_FIXED_BOUND = 600
"""At least the bytes of an enqueue's INSERT besides its texts: the statement with every
column, the id, the times, the numbers and the quotes."""


def _size_bound(params: Sequence[Any]) -> int:
    """At least the bytes PyMySQL sends for `params`, escaped, without encoding them: an
    escaped ASCII character takes two, any other at most four; a byte two."""
    total = 0
    for value in params:
        if isinstance(value, str):
            total += (2 if value.isascii() else 4) * len(value) + 2
        elif isinstance(value, (bytes, bytearray)):
            total += 2 * len(value) + 10
        else:
            total += 40
    return total


def error_code(exc: BaseException) -> int | None:
    """The MySQL error number of a PyMySQL error, or None."""
    code = exc.args[0] if getattr(exc, "args", None) else None
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def is_read_only(exc: BaseException) -> bool:
    """The server refused to write: it is read-only, or the transaction is."""
    return type(exc).__module__.startswith("pymysql") and error_code(exc) in READ_ONLY_CODES


def is_transient(exc: BaseException) -> bool:
    """Connection-level trouble worth a reconnect: client errors (2000-2999: connection
    refused or lost) and the server errors listed above. PyMySQL reports unknown server
    errors (an unknown column, a denied privilege, a missing table) as OperationalError
    too; those are not transient."""
    module = type(exc).__module__
    if not module.startswith("pymysql"):
        return False
    if type(exc).__name__ == "InterfaceError":
        return True
    code = error_code(exc)
    return code is not None and (2000 <= code < 3000 or code in _TRANSIENT_CODES)


def _lock_key(data: Any) -> bytes | None:
    """A BINARY(16) key as data_locks shows it (`0x` and hex digits), or None."""
    text = data.decode("ascii", "replace") if isinstance(data, bytes) else str(data or "")
    if text[:2].lower() != "0x":
        return None
    try:
        key = bytes.fromhex(text[2:])
    except ValueError:
        return None
    return key if len(key) == 16 else None


def _server(conn: Any) -> tuple[bool, tuple[int, ...]]:
    """(is MariaDB, version) from the handshake, without a round trip."""
    info = str(unwrap_connection(conn).get_server_info())
    mariadb = "mariadb" in info.lower()
    match = re.search(r"(\d+)\.(\d+)\.(\d+)", info.removeprefix("5.5.5-"))
    return mariadb, tuple(int(n) for n in match.groups()) if match else (0, 0, 0)


def _session_variables(conn: Any) -> tuple[str, ...]:
    return _session_variables_of(*_server(conn))


def _session_variables_of(mariadb: bool, version: tuple[int, ...]) -> tuple[str, ...]:
    old_names = mariadb and version < (11, 1)
    return (
        "sql_mode",
        "time_zone",
        "tx_isolation" if old_names else "transaction_isolation",
        "tx_read_only" if old_names else "transaction_read_only",
        "character_set_client",
        "character_set_connection",
        "character_set_results",
        "collation_connection",
        "foreign_key_checks",
        "unique_checks",
        "sql_safe_updates",
        "innodb_lock_wait_timeout",
        "lock_wait_timeout",
        "wait_timeout",
        "max_statement_time" if mariadb else "max_execution_time",
    )


class SessionState(NamedTuple):
    """A session's settings as `session_state` read them (the default database, autocommit,
    then `_session_variables`), and their fingerprint: all of them in one value, which
    `restore_session` reads back to tell in one column whether any changed."""

    values: tuple[Any, ...]
    fingerprint: Any


@functools.cache
def _state_sql(server: tuple[bool, tuple[int, ...]]) -> tuple[str, str]:
    """The settings and their fingerprint as SELECT columns, and the fingerprint alone.
    A binary separator and NULL marker keep the fingerprint free of collation mixes."""
    names = _session_variables_of(*server)
    columns = ["DATABASE()", *(f"@@SESSION.{name}" for name in ("autocommit", *names))]
    fingerprint = f"CONCAT_WS(0x1f, {', '.join(f'IFNULL({c}, 0x00)' for c in columns)})"
    return f"{', '.join(columns)}, {fingerprint}", fingerprint


def session_state(conn: Any) -> SessionState:
    """The session settings a borrower may change: autocommit, the default database and
    the variables above, with their fingerprint, read in one round trip."""
    columns, _ = _state_sql(_server(conn))
    with conn.cursor(_tuple_cursor()) as cursor:
        cursor.execute(f"SELECT {columns}")
        row: tuple[Any, ...] = cursor.fetchone()
    return SessionState(row[:-1], row[-1])


def rolled_back(conn: Any) -> None:
    """Roll back; a connection that cannot be is closed, so its pool replaces it."""
    try:
        conn.rollback()
    except Exception:
        with contextlib.suppress(Exception):
            unwrap_connection(conn).close()


def restore_session(conn: Any, saved: SessionState) -> None:
    """Roll back and put the session back as `saved`; a connection that cannot be put
    back is closed, so its pool replaces it. A session whose fingerprint did not change
    costs one round trip more: reading 17 columns back took a third of a leased job's
    client CPU on MySQL (PyMySQL parses each column's description)."""
    try:
        conn.rollback()
        with conn.cursor(_tuple_cursor()) as cursor:
            cursor.execute(f"SELECT {_state_sql(_server(conn))[1]}")
            if cursor.fetchone()[0] == saved.fingerprint:
                return
        current = session_state(conn).values
        database, autocommit, *values = saved.values
        with conn.cursor(_tuple_cursor()) as cursor:
            for name, value, now in zip(_session_variables(conn), values, current[2:], strict=True):
                if value != now:
                    cursor.execute(f"SET SESSION {name} = %s", (value,))
        if current[1] != autocommit:
            conn.autocommit(bool(autocommit))
        if current[0] != database and database is not None:
            conn.select_db(database)
    except Exception:
        with contextlib.suppress(Exception):
            unwrap_connection(conn).close()

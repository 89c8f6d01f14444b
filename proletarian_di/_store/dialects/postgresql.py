"""PostgreSQL through psycopg 3: the queue's statements and the worker's two-round-trip
hot path."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import math
import re
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Sequence
from datetime import datetime, timezone
from typing import Any, NamedTuple

from ...errors import ConfigurationError
from ...job_ids import UUIDStrategy
from .base import (
    FIRST_POSITION,
    NO_HELD_ROWS,
    NO_RUNS,
    RESERVED,
    Dialect,
    HeldRows,
    JobRow,
    LeaseClaim,
    LeasedRow,
    RunningSlots,
    Runs,
    Session,
    TransactionLost,
    row_extras,
    shutdown_socket,
)

NOTIFY_CHANNEL = "proletarian_di"
_PLACEHOLDER = re.compile(r"%[sbt%]")
"""psycopg's placeholders (text, binary, either) and its escaped `%`."""


_FREE_SLOT = (
    "SELECT n FROM generate_series(1, %s) AS n WHERE pg_try_advisory_xact_lock(%s, n) LIMIT 1"
)
"""The first free running slot (`max_running`), locked for the transaction."""


class PostgresDialect(Dialect):
    """PostgreSQL 9.5+ through psycopg 3."""

    name = "postgresql"
    default_id_strategy = UUIDStrategy()

    def __init__(self, job_table: str, archived_job_table: str) -> None:
        super().__init__(job_table, archived_job_table)
        job = self.job_table
        # Many jobs: each one's start comes in an array beside their ids (the ids again).
        # Parameters: ids, status, finished_at, error, worker, ids, starts.
        self.archive_sql = (
            f"WITH done AS (DELETE FROM {job} WHERE job_id = ANY(%s) RETURNING *) "
            + self.archive_of("run.started_at")
            + "FROM done JOIN unnest(%s::uuid[], %s::timestamptz[]) AS run(run_id, started_at) "
            "ON run.run_id = done.job_id"
        )
        # One job: id, status, finished_at, error, started_at, worker.
        self.archive_one_sql = (
            f"WITH done AS (DELETE FROM {job} WHERE job_id = %s RETURNING *) "
            + self.archive_select
            + "FROM done"
        )
        self._quoted: dict[str, str] = {}
        self._numbered: dict[str, str] = {}
        self._limited: dict[tuple[str, int], str] = {}
        claim = "BEGIN; " + _fill(
            self.claim_sql, "{queue}", "{rank}", "{start}", "{now}", "{limit}"
        )
        one = ("{ids}", "'success'", "{finished}", "NULL", "{started}", "{worker}")
        many = ("{ids}", "'success'", "{finished}", "NULL", "{worker}", "{ids}", "{started}")
        self._inline = _HotPath(
            claim,
            claim,
            _fill(self.archive_one_sql, *one) + "; COMMIT",
            _fill(self.archive_sql, *many) + "; COMMIT",
            "BEGIN; " + _fill(self.fair_turn_sql, "{queue}", "{after}", "{now}"),
        )
        # A transaction-level advisory lock per running job: the first free slot, if any,
        # taken in the claim's own statement and released by its COMMIT or ROLLBACK.
        self.slot_claim_sql = f"WITH slot AS ({_FREE_SLOT}) " + self.claim_statement(
            "EXISTS (SELECT 1 FROM slot) AND "
        )
        tag = hashlib.blake2s(f"{job} {self.archived_job_table}".encode(), digest_size=4)
        self._statements = {
            # LIMIT 1 is written out: with `LIMIT $3` the server plans every execution anew.
            f"proletarian_claim_{tag.hexdigest()}": (
                "text, timestamptz, timestamptz, integer",
                _fill(self.claim_sql, "$1", "$4", "$3", "$2", "1"),
            ),
            f"proletarian_archive_{tag.hexdigest()}": (
                "uuid, timestamptz, timestamptz, text",
                _fill(self.archive_one_sql, "$1", "'success'", "$2", "NULL", "$3", "$4"),
            ),
            f"proletarian_many_{tag.hexdigest()}": (
                "uuid[], timestamptz, timestamptz[], text",
                _fill(self.archive_sql, "$1", "'success'", "$2", "NULL", "$4", "$1", "$3"),
            ),
            # max_running's claim, planned once too (a plan a claim costs ~100 µs of the
            # server's CPU)
            f"proletarian_slot_{tag.hexdigest()}": (
                "integer, integer, text, timestamptz, timestamptz, integer",
                _fill(self.slot_claim_sql, "$1", "$2", "$3", "$6", "$5", "$4", "1"),
            ),
        }
        claim_one, archive_one, archive_many, slot_one = self._statements
        self._prepared_slot = (
            f"BEGIN; EXECUTE {slot_one}({{size}}, {{key}}, {{queue}}, {{now}}, {{start}}, {{rank}})"
        )
        self._prepare_one = {
            name: f"PREPARE {name}({types}) AS {sql}"
            for name, (types, sql) in self._statements.items()
        }
        self._prepare_sql = "; ".join(self._prepare_one.values())
        # fair=True's turn scan: prepared by a session on its first fair claim, as the
        # schema before the group_keys step has no column for it (`PostgresSession._fair_text`)
        self._fair_name = f"proletarian_fair_{tag.hexdigest()}"
        self._prepare_one[self._fair_name] = (
            f"PREPARE {self._fair_name}(text, text, timestamptz) AS "
            + _fill(self.fair_turn_sql, "$1", "$2", "$3")
        )
        self._fair_execute = f"BEGIN; EXECUTE {self._fair_name}({{queue}}, {{after}}, {{now}})"
        # While jobs are blocked, a success's archive asks in its own round trip whether a
        # job waits on it: prepared by a session at its first such archive, as the schema
        # before the workflows step has no table for it (`PostgresSession._probe_text`)
        self._waited_name = f"proletarian_waited_{tag.hexdigest()}"
        # Each id looked up on its own, in the key's order: with `parent_id = ANY(…)`, or
        # statistics that show many jobs waiting on one parent, the plan scans the table.
        # Prepared for one id only: over an array the server plans every execution anew.
        self._waited_first = first = (
            f"(SELECT true FROM {self.dependencies_table} WHERE parent_id = {{id}} "
            "AND parent_status IS NULL ORDER BY parent_id, job_id LIMIT 1)"
        )
        self._prepare_one[self._waited_name] = (
            f"PREPARE {self._waited_name}(uuid) AS SELECT {first.format(id='$1')} IS NOT NULL"
        )
        self._waited_execute = f"EXECUTE {self._waited_name}({{id}})"
        self._waited_inline = (
            f"SELECT coalesce(bool_or({first.format(id='p.id')}), false) "
            "FROM unnest({ids}::uuid[]) AS p(id)"
        )
        self._deallocate_sql = "; ".join(f"DEALLOCATE {name}" for name in self._statements)
        self.replan = f"{self._deallocate_sql}; {self._prepare_sql}; "
        self._prepared = _HotPath(
            f"BEGIN; EXECUTE {claim_one}({{queue}}, {{now}}, {{start}}, {{rank}})",
            claim,
            f"EXECUTE {archive_one}({{ids}}, {{finished}}, {{started}}, {{worker}}); COMMIT",
            f"EXECUTE {archive_many}({{ids}}, {{finished}}, {{started}}, {{worker}}); COMMIT",
            self._inline.fair,  # until the session prepares it (`_fair_execute`)
        )
        # Lease mode's claim: one statement, which an autocommit connection commits at once.
        # The first job starts (its attempt counted), and so does one whose earlier run
        # died; the rest are reserved (see `base.RESERVED`).
        self.lease_claim_sql = "WITH " + self._lease_claim("")
        # A leased job's success: the lease checked, the row moved, in one statement (the
        # row already counts the attempt, and its process_at is the lease's end: the archive
        # gets the time the job was due, as it was claimed, instead).
        assert self.archive_select.count("attempts + 1, enqueued_at, process_at") == 1
        archived = (
            self.archive_select.replace(
                "attempts + 1, enqueued_at, process_at", "attempts, enqueued_at, %s::timestamptz"
            )
            + "FROM done"
        )
        done = f"done AS (DELETE FROM {job} WHERE job_id = %s AND leased_by = %s RETURNING *)"
        self.archive_leased_sql = f"WITH {done} {archived}"
        # ... and the next claim in the same statement, so one commit: one row per job
        # leased, each with how many jobs were archived (1, or 0 if the lease was lost);
        # one row of NULLs after the count if none was due. The claim passes over the job
        # archived, which the statement's snapshot still shows.
        # While jobs are blocked, the same statements read whether a job waits on the one
        # archived: one more column, its id the last parameter (`probe`).
        waited = self._waited_first.format(id="%s") + " IS NOT NULL"
        self.archive_leased_and_claim_sql, self.archive_leased_probed_claim_sql = (
            f"WITH {done}, archived AS ({archived} RETURNING 1), "
            + self._lease_claim("job_id <> %s AND ", ", leased AS (")
            + f") SELECT (SELECT count(*) FROM archived), {probe}leased.* FROM (VALUES (1)) "
            "AS one LEFT JOIN leased ON true"
            for probe in ("", f"{waited}, ")
        )
        self.archive_leased_probed_sql = (
            f"WITH {done}, archived AS ({archived} RETURNING 1) "
            f"SELECT (SELECT count(*) FROM archived), {waited}"
        )
        self.insert_many_sql = {
            (priority, traced, grouped): (
                f"WITH job AS (INSERT INTO {job} ({self.columns}{', priority' * priority}"
                f"{', trace_context' * traced}{', group_key' * grouped}) SELECT u.job_id, %s, "
                f"u.job_type, u.payload, 0, %s, %s{', %s' * priority}{', %s' * traced}"
                f"{', %s' * grouped} "
                "FROM unnest(%b::uuid[], %b::text[], %b::text[]) AS u(job_id, job_type, payload))"
                + _NOTIFY
            )
            for priority in (False, True)
            for traced in (False, True)
            for grouped in (False, True)
        }

    def _lease_claim(self, condition: str, update_as: str = " ") -> str:
        """Lease mode's claim as the common table expressions `claimed` and `ranked`, then the
        UPDATE that leases the rows (after `update_as`: a space, or the opening of a
        common table expression): the first
        job starts (its attempt counted), and so does one whose earlier run died; the rest
        are reserved (see `base.RESERVED`). `condition` goes first in the claim's WHERE."""
        claimed = self.claim_statement(condition, "job_id, priority, process_at, leased_by")
        return (
            f"claimed AS ({claimed}), ranked AS (SELECT job_id, process_at, leased_by, "
            "row_number() OVER (ORDER BY -priority, process_at) = 1 OR (leased_by IS NOT NULL "
            f"AND leased_by NOT LIKE '{RESERVED}%%') AS started FROM claimed){update_as}"
            f"UPDATE {self.job_table} AS j SET attempts = j.attempts + ranked.started::int, "
            f"process_at = {self.lease_end}, leased_by = CASE WHEN ranked.started THEN %s "
            f"ELSE '{RESERVED}' || %s END "
            "FROM ranked WHERE j.job_id = ranked.job_id RETURNING j.job_id, j.queue, "
            "j.job_type, j.payload, j.attempts - ranked.started::int, j.enqueued_at, "
            "ranked.process_at, j.last_error, j.priority, ranked.leased_by, ranked.started, "
            "j.trace_context"
        )

    def insert_into(self, extra: tuple[str, ...]) -> str:
        """The INSERT and a NOTIFY that wakes idle workers once the caller commits; with a
        unique key, ON CONFLICT DO NOTHING: a duplicate writes nothing and raises nothing,
        so the caller's transaction goes on, and only an inserted row wakes the workers."""
        sql = super().insert_into(extra)
        if "unique_key" not in extra:
            return f"WITH job AS ({sql}){_NOTIFY}"
        return (
            f"WITH job AS ({sql} ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL "
            f"DO NOTHING RETURNING job_id){_NOTIFY} FROM job"
        )

    def numbered(self, sql: str) -> str:
        """`sql` with `$1`, `$2`, … for its `%s` placeholders (and `%` for `%%`): the form
        asyncpg takes, from the same statements psycopg runs."""
        text = self._numbered.get(sql)
        if text is None:
            count = itertools.count(1)
            text = _PLACEHOLDER.sub(
                lambda mark: "%" if mark.group() == "%%" else f"${next(count)}", sql
            )
            self._numbered[sql] = text
        return text

    def cursor(self, conn: Any) -> Any:
        from psycopg.rows import tuple_row

        return conn.cursor(row_factory=tuple_row)

    def execute(self, conn: Any, sql: str, params: Sequence[Any] = ()) -> None:
        conn.execute(sql, params)

    def fetchall(self, conn: Any, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """As every dialect does, telling a statement that returns rows by its result's
        columns: a cursor's `description` makes an object per column on every call."""
        with self.executed(conn, sql, params) as cursor:
            result = cursor.pgresult
            return list(cursor.fetchall()) if result is not None and result.nfields else []

    def begin(self, conn: Any) -> None:
        if conn.autocommit:
            conn.execute("BEGIN")

    listens = True

    def set_autocommit(self, conn: Any) -> None:
        conn.autocommit = True

    def announce(self, conn: Any, channel: str, payload: str) -> None:
        self.execute(conn, "SELECT pg_notify(%s, %s)", (channel, payload))

    def announce_due(self, conn: Any, queue: str, priority: int) -> None:
        now = datetime.now(timezone.utc)
        self.announce(conn, NOTIFY_CHANNEL, wake_payload(queue, now, now, priority))

    def _in_savepoint(self, conn: Any, *statements: str) -> None:
        if conn.info.transaction_status == _IDLE:
            raise TransactionLost("the job's transaction was committed or rolled back")
        for statement in statements:
            conn.execute(statement)

    def is_closed(self, conn: Any) -> bool:
        return bool(conn.closed)

    def is_broken(self, conn: Any) -> bool:
        return bool(getattr(conn, "broken", False))

    def aborted(self, conn: Any) -> str | None:
        status = conn.info.transaction_status
        if status == _IDLE:
            raise TransactionLost("the job's transaction was committed or rolled back")
        if status != _IN_ERROR:
            return None
        message = conn.pgconn.error_message.decode(conn.info.encoding, "replace").strip()
        first = message.splitlines()[0] if message else "a statement failed"
        return first.removeprefix("ERROR:").strip()

    @contextlib.contextmanager
    def attached(
        self,
        conn: Any,
        exclusive: bool = False,
        pgbouncer: bool = False,
        keepalive_ms: int = 0,
    ) -> Iterator[Session]:
        """Make `conn` a worker connection: one round trip per job, prepared statements.

        The connection is switched to autocommit, so that the claim sends BEGIN with
        its SELECT in one simple query and the archive sends its COMMIT along, and the
        next claim after it (simple queries, not a pipeline: the server's
        idle_in_transaction_session_timeout keeps working while a job runs). The
        statements are prepared with SQL PREPARE once per checkout and deallocated on
        release. psycopg's own automatic preparing is
        off meanwhile: it answers any ROLLBACK (a handler's savepoint too) with
        DEALLOCATE ALL, which would take ours along.

        Through PgBouncer (`pgbouncer`) a session's state may be another client's by the
        next transaction: the statements are written out in full (the same one round trip
        per job), and no session setting is read or put back.

        `keepalive_ms` sets the server's TCP keepalives for this session (`keepalives`), so
        that a worker host that vanishes mid-job has its transaction rolled back within
        that bound instead of the system's two hours; put back with the other settings.
        """
        autocommit, threshold = conn.autocommit, conn.prepare_threshold
        conn.autocommit = True
        if pgbouncer:
            conn.prepare_threshold = None
            try:
                yield PostgresSession(self, conn, prepared=self._inline)
            finally:
                with contextlib.suppress(Exception):
                    if not conn.closed:
                        conn.rollback()
                        conn.prepare_threshold = threshold
                        conn.autocommit = autocommit
            return
        settings: dict[str, str] | None = None
        session: PostgresSession | None = None
        try:
            settings = self._settings(conn)
            conn.prepare_threshold = None
            # DEALLOCATE ALL: psycopg forgets its statements too
            conn.execute("DEALLOCATE ALL" + keepalives(keepalive_ms, conn.info.server_version))
            session = PostgresSession(self, conn, prepared=self._prepare(conn))
            yield session
        finally:
            self._release(conn, settings, () if session is None else session.lazy)
            with contextlib.suppress(Exception):
                if not conn.closed:
                    conn.prepare_threshold = threshold
                    conn.autocommit = autocommit

    def behind_pooler(self, conn: Any) -> bool:
        """Whether `conn` goes through a pooler such as PgBouncer: the backend pid of its
        handshake (a pooler's own cancel key) is not that of the server process it runs on."""
        try:
            row = self.fetchone(conn, "SELECT pg_backend_pid()")
        finally:
            if not conn.autocommit:
                conn.rollback()
        return row is not None and int(row[0]) != conn.info.backend_pid

    def _release(
        self, conn: Any, settings: dict[str, str] | None, lazy: Collection[str] = ()
    ) -> None:
        """Roll back, drop the statements (those a session prepared on first use, `lazy`,
        too) and undo the session settings handlers changed; a connection that cannot be put
        back as it was lent is closed (the pool drops it)."""
        if conn.closed:
            return
        try:
            conn.rollback()
            conn.execute("; ".join([self._deallocate_sql, *(f"DEALLOCATE {n}" for n in lazy)]))
            if settings is not None:
                self._restore(conn, settings)
        except Exception:
            with contextlib.suppress(Exception):
                conn.close()

    def _settings(self, conn: Any) -> dict[str, str]:
        """The session's own settings (SET by the app or a handler), and its role."""
        cursor = self.cursor(conn)
        try:
            return dict(cursor.execute(_SESSION_SETTINGS).fetchall())
        finally:
            cursor.close()

    def _restore(self, conn: Any, saved: dict[str, str]) -> None:
        current = self._settings(conn)
        for name in sorted(set(saved) | set(current)):
            if name not in saved:
                conn.execute(_RESET_SETTING, (name,))
            elif current.get(name) != saved[name]:
                conn.execute("SELECT set_config(%s, %s, false)", (name, saved[name]))

    def _prepare(self, conn: Any, lazy: Collection[str] = ()) -> _HotPath:
        """Prepare the worker's statements that the session lacks (a handler may have
        dropped one of them, or all), and those it prepared on first use (`lazy`)."""
        held = {name for (name,) in conn.execute(_PREPARED_NAMES).fetchall()}
        wanted = [*self._statements, *lazy]
        missing = [name for name in wanted if name not in held]
        if missing:
            conn.execute("; ".join(self._prepare_one[name] for name in missing))
        return self._prepared

    def take_running_slot(self, conn: Any, slots: RunningSlots) -> bool:
        """The first free slot's transaction-level advisory lock, as the claim in a slot
        takes it (`slot_claim_sql`), released by the COMMIT or ROLLBACK."""
        self.begin(conn)
        return bool(self.fetchall(conn, _FREE_SLOT, (slots.size, slots.key)))

    def take_rate_slot(self, conn: Any, bucket: str, limit: int, period_ms: int) -> bool:
        """One statement: the free slot is locked and stamped in the same UPDATE. The slot
        is a scalar subquery, evaluated once (joined, a plan may scan it for each row)."""
        table = self.rate_table
        rows = self.fetchall(
            conn,
            f"UPDATE {table} SET used_at = statement_timestamp() WHERE bucket = %s AND slot = "
            f"(SELECT slot FROM {table} WHERE bucket = %s AND slot < %s AND used_at <= "
            f"{self.lease_end} LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING slot",
            (bucket, bucket, limit, self.lease_seconds(-period_ms)),
        )
        return bool(rows)

    def session(self, conn: Any) -> PostgresSession:
        return PostgresSession(self, conn)

    def claim(
        self, conn: Any, queue: str, now: datetime, limit: int = 1, start: Any = None
    ) -> list[JobRow]:
        """The claim with parameters, in the connection's own transaction (no hot path)."""
        params = self.claim_params(queue, start, now, limit)
        with self.executed(conn, self.claim_sql, params) as cursor:
            rows: list[JobRow] = cursor.fetchall()
            return rows

    def claim_in_slot(
        self,
        conn: Any,
        slots: RunningSlots,
        queue: str,
        now: datetime,
        limit: int = 1,
        start: Any = None,
    ) -> list[JobRow]:
        self.begin(conn)
        params = (slots.size, slots.key, *self.claim_params(queue, start, now, limit))
        with self.executed(conn, self.slot_claim_sql, params) as cursor:
            rows: list[JobRow] = cursor.fetchall()
            return rows

    def waited_on(self, conn: Any, parents: Sequence[Any]) -> bool:
        """A simple query with the ids inlined, where they are UUIDs (a cursor's parameters
        cost the client about as much as the read), each looked up by the key
        (`_waited_inline`)."""
        if not all(type(i) is uuid.UUID for i in parents):
            return super().waited_on(conn, parents)
        return bool(_run(conn, self._waited_inline.format(ids=_uuid_array(parents)))[0][0])

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
        params = (*self.claim_params(queue, start, now, limit)[:-1], lease_ms / 1000, token, token)
        with _single_statement(conn):
            sql = self._with_limit(self.lease_claim_sql, limit)
            rows: list[LeasedRow] = self.fetchall(conn, sql, params)
        return _in_claim_order(rows)

    def _with_limit(self, sql: str, limit: int) -> str:
        """`sql` with its claim's `LIMIT %s` written out: with the limit a parameter, the
        server plans every execution of the prepared statement anew (about 100 µs of its
        CPU per claim)."""
        key = (sql, limit)
        text = self._limited.get(key)
        if text is None:
            text = self._limited[key] = sql.replace("LIMIT %s", f"LIMIT {int(limit)}", 1)
        return text

    @staticmethod
    def _leased_archive(
        job_id: Any, token: str, finished_at: datetime, due: datetime, runs: Runs
    ) -> tuple[Any, ...]:
        """The parameters of a leased success's archive (`archive_leased_sql`)."""
        started = runs.started[0] if runs.started else None
        return (job_id, token, due, "success", finished_at, None, started, runs.worker)

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
        params = self._leased_archive(job_id, token, finished_at, due, runs)
        with _single_statement(conn):
            if not probe:
                return self.execute_count(conn, self.archive_leased_sql, params) == 1, False
            [(moved, waited)] = self.fetchall(
                conn, self.archive_leased_probed_sql, (*params, job_id)
            )
        return moved == 1, bool(waited)

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
        """One statement, committed at once: one round trip and one commit per job."""
        params = (
            *self._leased_archive(job_id, token, finished_at, due, runs),
            job_id,
            *self.claim_params(claim.queue, claim.start, claim.now, claim.limit)[:-1],
            *(self.lease_seconds(claim.lease_ms), claim.token, claim.token),
            *([job_id] if probe else []),
        )
        sql = self.archive_leased_probed_claim_sql if probe else self.archive_leased_and_claim_sql
        with _single_statement(conn):
            rows = self.fetchall(conn, self._with_limit(sql, claim.limit), params)
        skip = 1 + probe
        leased = _in_claim_order([row[skip:] for row in rows if row[skip] is not None])
        return rows[0][0] == 1, leased, probe and bool(rows[0][1])

    def renew(self, conn: Any, leases: Sequence[tuple[Any, str]], lease_ms: int) -> int:
        sql = (
            f"UPDATE {self.job_table} SET process_at = {self.lease_end} "
            "WHERE job_id = ANY(%s) AND leased_by = ANY(%s)"
        )
        ids = [job_id for job_id, _ in leases]
        tokens = sorted({token for _, token in leases})
        with _single_statement(conn):
            return self.execute_count(conn, sql, (lease_ms / 1000, ids, tokens))

    def count_claim(self, conn: Any, table: str, job_id: Any) -> int:
        sql = (
            f"INSERT INTO {table} AS c (job_id, claims) VALUES (%s, 1) ON CONFLICT (job_id) "
            "DO UPDATE SET claims = c.claims + 1 RETURNING claims"
        )
        return int(self.fetchone(conn, sql, (job_id,))[0])

    def quoted(self, conn: Any, queue: str) -> str:
        """`queue` as an SQL literal, quoted by psycopg once per queue."""
        literal = self._quoted.get(queue)
        if literal is None:
            import psycopg.sql

            literal = self._quoted[queue] = psycopg.sql.Literal(queue).as_string(conn)
        return literal

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
        starts = list(started) or [None] * len(job_ids)
        if len(job_ids) == 1:
            params: tuple[Any, ...] = (job_ids[0], status, finished_at, error, starts[0], worker)
            conn.execute(self.archive_one_sql, params)
        else:
            ids = list(job_ids)
            params = (ids, status, finished_at, error, worker, ids, starts)
            conn.execute(self.archive_sql, params)

    def insert_many(self, conn: Any, rows: Sequence[Sequence[Any]]) -> None:
        if not rows:
            return
        _, queue, _, _, enqueued_at, process_at, priority, trace, *more = rows[0]
        group = more[0] if more else None
        ids = [r[0] for r in rows]
        types = [r[2] for r in rows]
        payloads = [r[3] for r in rows]
        given = ((priority,) if priority else ()) + (() if trace is None else (trace,))
        given += () if group is None else (group,)
        conn.execute(
            self.insert_many_sql[bool(priority), trace is not None, group is not None],
            (
                queue,
                enqueued_at,
                process_at,
                *given,
                ids,
                types,
                payloads,
                wake_payload(queue, enqueued_at, process_at, priority),
            ),
        )

    def insert_rows(self, conn: Any, rows: Sequence[Sequence[Any]]) -> None:
        """One INSERT from arrays of every column, and a NOTIFY of each distinct payload."""
        if not rows:
            return
        extras = row_extras(rows)
        columns: list[list[Any]] = [[row[i] for row in rows] for i in range(6)]
        for present, index in zip(extras, (6, 7, 8), strict=True):
            if present:
                columns.append([row[index] if len(row) > index else None for row in rows])
        wakes = dict.fromkeys(wake_payload(r[1], r[4], r[5], r[6]) for r in rows)
        conn.execute(self._insert_rows_sql(*extras), (*columns, list(wakes)))

    def _insert_rows_sql(self, priority: bool, traced: bool, grouped: bool) -> str:
        named = (("priority", "int"), ("trace_context", "text"), ("group_key", "text"))
        given = (priority, traced, grouped)
        extra = [pair for pair, present in zip(named, given, strict=True) if present]
        key = ("unnest", *(name for name, _ in extra))
        sql = self._inserts.get(key)
        if sql is None:
            kinds = ("uuid", "text", "text", "text", "timestamptz", "timestamptz")
            arrays = ", ".join(f"%b::{kind}[]" for kind in (*kinds, *(k for _, k in extra)))
            names = "".join(f", {name}" for name, _ in extra)
            sql = self._inserts[key] = (
                f"WITH job AS (INSERT INTO {self.job_table} ({self.columns}{names}) "
                "SELECT u.job_id, u.queue, u.job_type, u.payload, 0, u.enqueued_at, "
                f"u.process_at{names.replace(', ', ', u.')} FROM unnest({arrays}) AS "
                f"u(job_id, queue, job_type, payload, enqueued_at, process_at{names})) "
                f"SELECT pg_notify('{NOTIFY_CHANNEL}', w) FROM unnest(%b::text[]) AS w"
            )
        return sql

    def insert_values(
        self,
        conn: Any,
        table: str,
        columns: Sequence[tuple[str, str]],
        rows: Sequence[Sequence[Any]],
    ) -> None:
        """One INSERT from an array of each column."""
        if rows:
            conn.execute(*self.values_statement(table, columns, rows))

    def values_statement(
        self, table: str, columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[Any]]
    ) -> tuple[str, list[Any]]:
        """`insert_values`' statement and its parameters (for `enqueue_async` too)."""
        names = ", ".join(name for name, _ in columns)
        arrays = ", ".join(f"%b::{kind}[]" for _, kind in columns)
        values = [[row[i] for row in rows] for i in range(len(columns))]
        return f"INSERT INTO {table} ({names}) SELECT * FROM unnest({arrays})", values

    def insert_statement(
        self, row: Sequence[Any], key: str | None = None
    ) -> tuple[str, tuple[Any, ...]]:
        """The INSERT, and the NOTIFY's channel payload (see `wake_payload`)."""
        sql, params = super().insert_statement(row, key)
        return sql, (*params, wake_payload(row[1], row[4], row[5], row[6]))

    def try_insert_unique(self, conn: Any, row: Sequence[Any], key: str) -> bool:
        return self.fetchone(conn, *self.insert_statement(row, key)) is not None

    def server_version(self, conn: Any) -> tuple[str, tuple[int, ...]]:
        num = int(conn.info.server_version)
        major = num // 10000
        if major >= 10:
            return "PostgreSQL", (major, num % 10000)
        return "PostgreSQL", (major, (num // 100) % 100, num % 100)

    def required_version(self, product: str) -> tuple[int, ...]:
        return (9, 5)

    def table_columns(self, conn: Any, table: str) -> list[str]:
        rows = self.fetchall(
            conn,
            "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) "
            "AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            (table,),
        )
        return [row[0] for row in rows]

    def requeue(self, conn: Any, where: str, params: Sequence[Any], now: datetime) -> int:
        also = (
            f"forgotten AS (DELETE FROM {self.claims_table} WHERE job_id IN "
            "(SELECT job_id FROM moved))",
            f"requeued AS (INSERT INTO {self.job_table} ({self.columns}, last_error, priority) "
            "SELECT job_id, queue, job_type, payload, 0, enqueued_at, %s, last_error, priority "
            "FROM moved)",
        )
        return self._leaving(conn, where, [*params, now], also)

    def delete_archive_rows(self, conn: Any, where: str, params: Sequence[Any]) -> int:
        return self._leaving(conn, where, params)

    def _leaving(
        self, conn: Any, where: str, params: Sequence[Any], also: Sequence[str] = ()
    ) -> int:
        """Delete the archived jobs matching `where` in one statement, with `also` (more
        CTEs on the rows deleted, `moved`; their parameters after the condition's), and
        forget the summed hours they finished in; how many left.

        The hours come from the rows the statement deletes, not from a read of the archive
        before it (`forget_hours`): given a list of ids, as every batch of a bulk action is,
        that read went down the `finished_at` index testing each recent failure against the
        list, ten times the rest of the batch's work."""
        since = self.summed_since(conn)
        ctes = ", ".join(
            (f"moved AS (DELETE FROM {self.archived_job_table} WHERE {where} RETURNING *)", *also)
        )
        rows = self.fetchall(
            conn,
            f"WITH {ctes} SELECT {self.hours_since('finished_at')}, COUNT(*) FROM moved GROUP BY 1",
            [*params, self.encode_time(since or datetime.now(timezone.utc))],
        )
        self.forget_summed(conn, since, [offset for offset, _ in rows])
        return sum(int(count) for _, count in rows)

    def abort(self, conn: Any) -> None:
        shutdown_socket(conn.pgconn.socket)

    def cancel_statement(
        self, conn: Any, side: Callable[[], contextlib.AbstractContextManager[Any]]
    ) -> None:
        conn.cancel_safe(timeout=5.0)  # a no-op while no statement runs

    def held_rows(self, conn: Any) -> HeldRows:
        """Rows whose xmax is a running transaction that row-locks the job table (a worker's
        claim takes ROW SHARE on it): a lock-free read of who holds each row, which the probe
        then confirms. With no such transaction, the job table is not read at all."""
        lockers = [row[0] for row in self.fetchall(conn, _ROW_LOCKERS, (self.job_table,))]
        if not lockers:
            return NO_HELD_ROWS
        return HeldRows("xmax = ANY(%s::text[]::xid[])", [lockers], exact=False)

    def probe_held(self, conn: Any, job_ids: Sequence[Any]) -> set[Any]:
        """The probe runs in a savepoint rolled back at once, which releases its row locks
        and leaves the caller's transaction as it was (on an autocommit connection, outside
        a transaction, its locks end with the statement). Where the probe is refused (a
        read-only transaction, a standby), the lock-free answer of `held_rows` stands."""
        if not job_ids:
            return set()
        sql = f"SELECT job_id FROM {self.job_table} WHERE job_id = ANY(%s) FOR UPDATE SKIP LOCKED"
        params = (list(job_ids),)
        try:
            if conn.autocommit and conn.info.transaction_status == _IDLE:
                free = self.fetchall(conn, sql, params)
            else:
                conn.execute("SAVEPOINT proletarian_probe")
                try:
                    free = self.fetchall(conn, sql, params)
                finally:
                    conn.execute("ROLLBACK TO SAVEPOINT proletarian_probe")
                    conn.execute("RELEASE SAVEPOINT proletarian_probe")
        except Exception as exc:
            state = getattr(exc, "sqlstate", None)
            if not state or state.startswith("08"):
                raise
            return set(job_ids)
        return set(job_ids) - {row[0] for row in free}

    def unless_exists(self, key: str) -> str:
        return f"ON CONFLICT ({key}) DO NOTHING"

    def any_of(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        return f"{column} = ANY(%s)", [list(values)]

    def cancel_waiting(
        self, conn: Any, where: str, params: Sequence[Any], finished_at: datetime
    ) -> int:
        job = self.job_table
        sql = (
            f"WITH gone AS (DELETE FROM {job} WHERE job_id IN (SELECT job_id FROM {job} "
            f"WHERE {where} FOR UPDATE SKIP LOCKED) RETURNING *), "
            f"forgotten AS (DELETE FROM {self.claims_table} WHERE job_id IN "
            "(SELECT job_id FROM gone)) " + self.cancel_insert() + "FROM gone"
        )
        return self.execute_count(conn, sql, [*params, finished_at])


_NOTIFY = f" SELECT pg_notify('{NOTIFY_CHANNEL}', %s)"
WAKE_AT = "@"
"""Between the queue and the time in the payload of a job that falls due later."""
WAKE_PRIORITY = "#"
"""Before the priority, last in the payload of a job whose priority is not 0."""
_WAKE_TAIL = re.compile(r"(?:@(\d+(?:\.\d+)?))?(?:#(-?\d+))?", re.ASCII)


class Wake(NamedTuple):
    """What a notification says of its job: when it falls due (an epoch; None: now), and its
    priority."""

    due: float | None
    priority: int


def wake_payload(queue: str, enqueued_at: datetime, process_at: datetime, priority: int) -> str:
    """What `enqueue` notifies: the queue of a job due now, `queue@epoch` for a job due later
    (idle workers sleep until then), and `#priority` after either unless it is 0 (a woken
    worker claims from that priority on, which may lie behind its frontier). The jobs of one
    transaction that say the same are notified once."""
    payload = queue
    if process_at > enqueued_at:
        payload += f"{WAKE_AT}{math.ceil(process_at.timestamp() * 1000) / 1000:.3f}"
    if priority:
        payload += f"{WAKE_PRIORITY}{priority}"
    return payload


def read_wake_payload(payload: str, queue: str) -> Wake | None:
    """What a notification says of a job of `queue` (see `wake_payload`); None if it is
    about another queue."""
    if not payload.startswith(queue):
        return None
    tail = _WAKE_TAIL.fullmatch(payload, len(queue))
    if tail is None:
        return None
    due, priority = tail.groups()
    return Wake(None if due is None else float(due), int(priority or 0))


_KEEP_SLOT = (
    "SELECT n, pg_advisory_lock(%s, n) FROM (SELECT objid::bigint::int AS n FROM pg_locks "
    "WHERE locktype = 'advisory' AND objsubid = 2 AND pid = pg_backend_pid() "
    "AND classid = %s::bigint::oid AND granted LIMIT 1) AS held"
)
"""Lock the running slot the transaction holds at session level too; its number."""
_NO_SUCH_STATEMENT = "26000"
_REPLAN_EVERY_S = 10.0
_IDLE, _IN_ERROR = 0, 3  # libpq's PQTRANS_IDLE and PQTRANS_INERROR
_SESSION_SETTINGS = (
    "SELECT name, setting FROM pg_settings "
    "WHERE source = 'session' AND name NOT LIKE 'transaction%' "
    "UNION ALL SELECT 'role', current_setting('role')"
)
_RESET_SETTING = "SELECT set_config(name, reset_val, false) FROM pg_settings WHERE name = %s"
_ROW_LOCKERS = (
    "SELECT transactionid::text FROM pg_locks WHERE locktype = 'transactionid' AND pid IN "
    "(SELECT pid FROM pg_locks WHERE locktype = 'relation' AND relation = to_regclass(%s) "
    "AND mode = 'RowShareLock' AND pid <> pg_backend_pid())"
)


class PostgresSession(Session):
    """A PostgreSQL connection as the runner uses it: two round trips per job.

    On a worker's connection the statements are prepared (`prepared`); on any other
    connection in autocommit they are written out with their values; otherwise the
    dialect's parameterized statements run in the connection's own transaction.
    """

    dialect: PostgresDialect

    def __init__(
        self, dialect: PostgresDialect, conn: Any, prepared: _HotPath | None = None
    ) -> None:
        super().__init__(dialect, conn)
        self.prepared = prepared
        self.planned_at = time.monotonic()
        self.kept: tuple[int, int] | None = None
        """The running slot kept past its transaction by a session-level lock."""
        self.lazy: set[str] = set()
        """The statements prepared on this connection at their first use (the fair turn's
        scan, the probe of whether jobs wait on those archived)."""

    def keep_slot(self, slots: RunningSlots) -> bool:
        """Take the transaction's slot lock again at session level (granted at once: this
        session holds it), so that it outlives the COMMIT."""
        row = self.dialect.fetchone(self.conn, _KEEP_SLOT, (slots.key, slots.key % 2**32))
        if row is None:
            return False
        self.kept = (slots.key, int(row[0]))
        return True

    def release_slot(self) -> None:
        if self.kept is not None:
            (key, n), self.kept = self.kept, None
            self.dialect.fetchone(self.conn, "SELECT pg_advisory_unlock(%s, %s)", (key, n))

    def _templates(self) -> _HotPath | None:
        if self.prepared is None and self.conn.autocommit:
            return self.dialect._inline
        return self.prepared

    def claim(self, queue: str, now: datetime, limit: int = 1, start: Any = None) -> list[JobRow]:
        if self._templates() is None:
            return self.dialect.claim(self.conn, queue, now, limit, start)
        return self._run_hot(lambda hot: self._claim_text(hot, queue, now, limit, start))

    def fair_claim(self, queue: str, after: str, now: datetime) -> list[Any]:
        """BEGIN and the scan in one simple query, values inlined, as `claim` does."""
        if self._templates() is None:
            return super().fair_claim(queue, after, now)
        return self._run_hot(lambda hot: self._fair_text(hot, queue, after, now))

    def _run_hot(self, text_of: Callable[[_HotPath], str]) -> list[JobRow]:
        """Run the hot path's statement that `text_of` writes from the session's templates."""
        hot, conn = self._templates(), self.conn
        assert hot is not None
        text = text_of(hot)
        try:
            return _run(conn, text)
        except Exception as exc:
            if self.prepared is None or getattr(exc, "sqlstate", None) != _NO_SUCH_STATEMENT:
                raise
        # The statements are gone (DEALLOCATE ALL, DISCARD ALL, a pooler in transaction
        # mode): prepare them again; if that does not hold either, do without.
        conn.rollback()
        self.prepared = self.dialect._prepare(conn, self.lazy)
        text = text_of(self.prepared)
        try:
            return _run(conn, text)
        except Exception as exc:
            if getattr(exc, "sqlstate", None) != _NO_SUCH_STATEMENT:
                raise
        conn.rollback()
        self.prepared = self.dialect._inline
        return _run(conn, text_of(self.prepared))

    def _fair_text(self, hot: _HotPath, queue: str, after: str, now: datetime) -> str:
        """The fair turn's scan: on a session with its statements prepared, the prepared
        one, prepared in the same query the first time (planning it at each claim cost the
        server about a fifth of a fair job)."""
        values = {
            "queue": self.dialect.quoted(self.conn, queue),
            "after": _literal(self.conn, after),
            "now": _timestamp(now),
        }
        if hot is not self.dialect._prepared:
            return hot.fair.format(**values)
        return self._prepared_once(
            self.dialect._fair_name, self.dialect._fair_execute.format(**values)
        )

    def _prepared_once(self, name: str, text: str) -> str:
        """`text`, which executes the prepared statement `name`, after its PREPARE the first
        time on this session (a PREPARE outlives a rollback)."""
        if name in self.lazy:
            return text
        self.lazy.add(name)
        return f"{self.dialect._prepare_one[name]}; {text}"

    def probes_ends(self, job_ids: Sequence[Any]) -> bool:
        """Where the archive's templates apply, over libpq's connection."""
        return (
            self._templates() is not None
            and _wire().direct()
            and all(type(i) is uuid.UUID for i in job_ids)
        )

    def _probe_text(self, hot: _HotPath, job_ids: Sequence[Any]) -> tuple[str, int]:
        """The read of whether a job waits on one of `job_ids` (prepared for one job, on a
        session with its statements prepared), and how many statements it is."""
        if hot is not self.dialect._prepared or len(job_ids) > 1:
            return self.dialect._waited_inline.format(ids=_uuid_array(job_ids)), 1
        text = self.dialect._waited_execute.format(id=f"'{job_ids[0]}'")
        text = self._prepared_once(self.dialect._waited_name, text)
        return text, text.count(";") + 1

    def _claim_text(self, hot: _HotPath, queue: str, now: datetime, limit: int, start: Any) -> str:
        template = hot.claim_one if limit == 1 else hot.claim_many
        rank, process_at = FIRST_POSITION if start is None else start
        text = template.format(
            queue=self.dialect.quoted(self.conn, queue),
            rank=int(rank),
            start=_timestamp(process_at),
            now=_timestamp(now),
            limit=int(limit),
        )
        if start is None and template is self.dialect._prepared.claim_one:
            text = self._replanned(text)
        return text

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
        """On a worker's own connection with its statements prepared: the archive (after
        the read of whether a job waits on them, with `probe`), its COMMIT, then BEGIN and
        the next claim (in a running slot with `slots`: the COMMIT gave the last one back;
        a fair turn's first scan with `fair_after`), as one simple query."""
        hot = self.prepared
        assert hot is not None  # can_claim_ahead
        archive = self._archive_text(hot, job_ids, finished_at, runs)
        if fair_after is not None:
            claim = self._fair_text(hot, queue, fair_after, finished_at)
        elif slots is None:
            claim = self._claim_text(hot, queue, finished_at, limit, start)
        else:
            claim = self._slot_claim_text(slots, queue, finished_at, limit, start)
        return self._probed(hot, job_ids, probe, f"{archive}; {claim}")

    def _probed(
        self, hot: _HotPath, job_ids: Sequence[Any], probe: bool, text: str
    ) -> tuple[bool, list[JobRow] | None]:
        """Run `text` (an archive and its COMMIT first), after the read of whether a job
        waits on `job_ids` with `probe`: that answer, and the last statement's rows."""
        if not probe:
            return False, _wire().run_then(self.conn, text, _ARCHIVE_STATEMENTS)
        read, count = self._probe_text(hot, job_ids)
        waited, rows = _wire().run_probed(
            self.conn, f"{read}; {text}", count + _ARCHIVE_STATEMENTS, count - 1
        )
        return bool(waited), rows

    def can_claim_ahead(self, job_ids: Sequence[Any], slots: RunningSlots | None) -> bool:
        """With the statements prepared, libpq's connection at hand, and job ids of the
        type the inlined archive writes."""
        return (
            self.prepared is not None
            and _wire().direct()
            and all(type(i) is uuid.UUID for i in job_ids)
        )

    def claim_in_slot(
        self, slots: RunningSlots, queue: str, now: datetime, limit: int = 1, start: Any = None
    ) -> list[JobRow]:
        """In autocommit (a worker's connection), BEGIN and the claim with its slot go in
        one simple query, values inlined, as the hot path's claim does."""
        conn, dialect = self.conn, self.dialect
        if not conn.autocommit:
            return dialect.claim_in_slot(conn, slots, queue, now, limit, start)
        return _run(conn, self._slot_claim_text(slots, queue, now, limit, start))

    def _slot_claim_text(
        self, slots: RunningSlots, queue: str, now: datetime, limit: int, start: Any
    ) -> str:
        rank, process_at = FIRST_POSITION if start is None else start
        quoted = self.dialect.quoted(self.conn, queue)
        if self.prepared is self.dialect._prepared and limit == 1:
            return self.dialect._prepared_slot.format(
                size=int(slots.size),
                key=int(slots.key),
                queue=quoted,
                now=_timestamp(now),
                start=_timestamp(process_at),
                rank=int(rank),
            )
        values = (slots.size, slots.key, quoted, int(rank))
        times = (_timestamp(process_at), _timestamp(now), str(int(limit)))
        return "BEGIN; " + _fill(self.dialect.slot_claim_sql, *map(str, values), *times)

    def _replanned(self, text: str) -> str:
        """`text`, preceded every `_REPLAN_EVERY_S` by preparing the statements anew, in the
        same round trip. The server keeps a prepared statement's plan until autovacuum or
        ANALYZE invalidates it, and plans made while the table was nearly empty (a sequential
        scan, a sort) would scan every row, dead ones too, on every claim and archive where
        autovacuum is off or lags."""
        now = time.monotonic()
        if now - self.planned_at < _REPLAN_EVERY_S:
            return text
        self.planned_at = now
        return self.dialect.replan + text

    def archive_and_commit(
        self,
        job_ids: Sequence[Any],
        finished_at: datetime,
        runs: Runs = NO_RUNS,
        probe: bool = False,
    ) -> bool:
        """Archive and COMMIT in one simple query, one round trip, where templates apply."""
        hot = self._templates()
        if hot is None or not all(type(job_id) is uuid.UUID for job_id in job_ids):
            return super().archive_and_commit(job_ids, finished_at, runs, probe)
        archive = self._archive_text(hot, job_ids, finished_at, runs)
        if not probe:
            _run(self.conn, archive)
            return False
        return self._probed(hot, job_ids, probe, archive)[0]

    def _archive_text(
        self, hot: _HotPath, job_ids: Sequence[Any], finished_at: datetime, runs: Runs
    ) -> str:
        starts = [_timestamp_or_null(at) for at in runs.started] or ["NULL"] * len(job_ids)
        if len(job_ids) == 1:
            template, ids, started = hot.archive_one, f"'{job_ids[0]}'", starts[0]
        else:
            template, ids = hot.archive_many, _uuid_array(job_ids)
            started = f"'{{{','.join(text.strip(chr(39)) for text in starts)}}}'"
        worker = "NULL" if runs.worker is None else self.dialect.quoted(self.conn, runs.worker)
        return template.format(
            ids=ids, finished=_timestamp(finished_at), started=started, worker=worker
        )


class _HotPath(NamedTuple):
    """The worker's per-job statements as simple-query templates, values inlined.

    Fields: {queue}, {rank} and {start} (the position claims start from), {now} and
    {limit} for the claims, {after} (a group key) for a fair turn's first scan; {ids},
    {finished}, {started} (a time, or an array of them for many jobs) and {worker} for the
    archives (which COMMIT too: `_ARCHIVE_STATEMENTS` statements).
    """

    claim_one: str
    claim_many: str
    archive_one: str
    archive_many: str
    fair: str


@contextlib.contextmanager
def _single_statement(conn: Any, commit: bool = True) -> Iterator[None]:
    """Run one statement as a transaction of its own: in autocommit on an idle connection,
    which saves the COMMIT's round trip; else committed after it (with `commit`)."""
    if conn.autocommit or conn.info.transaction_status != _IDLE:
        yield
        if commit and not conn.autocommit:
            conn.commit()
        return
    conn.autocommit = True
    try:
        yield
    finally:
        conn.autocommit = False


def _in_claim_order(rows: list[Any]) -> list[LeasedRow]:
    """A lease claim's rows in the claim's order (the job started first, then the reserved
    ones): an UPDATE returns its rows in whatever order its plan joined them."""
    return sorted(rows, key=Dialect.position)


def _fill(sql: str, *values: str) -> str:
    """`sql` with its `%s` placeholders replaced, in order, by `values`."""
    parts = sql.split("%s")
    return "".join(part + value for part, value in zip(parts[:-1], values, strict=True)) + parts[-1]


_PREPARED_NAMES = "SELECT name FROM pg_prepared_statements"
_ARCHIVE_STATEMENTS = 2
"""An archive template's statements: the archive and its COMMIT."""


@functools.cache
def _wire() -> Any:
    """`_libpq`, imported on first use: psycopg is imported only where PostgreSQL is used."""
    from . import libpq as _libpq

    return _libpq


def _run(conn: Any, text: str) -> list[JobRow]:
    rows: list[JobRow] = _wire().run(conn, text)
    return rows


def keepalives(timeout_ms: int, server_version: int) -> str:
    """The SETs that make the server end a connection whose client has been silent for
    about `timeout_ms` (a third of it idle, then three probes), "" for 0 (off). Keepalives
    cover a client that is idle while its job runs; `tcp_user_timeout` (PostgreSQL 12+)
    covers data the client never acknowledged, which keepalives wait behind."""
    if not timeout_ms:
        return ""
    idle = timeout_ms // 3000
    interval = max(1, (timeout_ms // 1000 - idle) // 3)
    sets = [f"tcp_keepalives_idle = {idle}", f"tcp_keepalives_interval = {interval}"]
    sets.append("tcp_keepalives_count = 3")
    if server_version >= 120000:
        sets.append(f"tcp_user_timeout = {int(timeout_ms)}")
    return "".join(f"; SET {setting}" for setting in sets)


def _uuid_array(job_ids: Sequence[uuid.UUID]) -> str:
    """An array literal of job ids (their text holds no quote or brace)."""
    return f"'{{{','.join(map(str, job_ids))}}}'"


def _literal(conn: Any, text: str) -> str:
    """`text` as an SQL literal: quoted as is where it is plain ASCII (the usual group key),
    else by psycopg."""
    if _PLAIN_TEXT.fullmatch(text):
        return f"'{text}'"
    import psycopg.sql

    return str(psycopg.sql.Literal(text).as_string(conn))


_PLAIN_TEXT = re.compile(r"[A-Za-z0-9 _.:@/+=,-]*")


def _timestamp_or_null(value: Any) -> str:
    return "NULL" if value is None else _timestamp(value)


def _timestamp(value: Any) -> str:
    """A timestamp literal; ISO text holds no quote, so it is safe to inline."""
    if not isinstance(value, datetime):
        raise ConfigurationError(f"clock must return a datetime, got {value!r}")
    return f"'{value.isoformat()}'"

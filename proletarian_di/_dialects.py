"""The queue's SQL, one class per database, and the driver details around it.

Everything that differs between PostgreSQL (psycopg 3) and MySQL/MariaDB
(PyMySQL) lives here: statements, transaction handling, time and id encoding,
version checks, and which errors are worth retrying.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from typing import Any

from .errors import ConfigurationError, SchemaError, UnsupportedDatabase
from .job_ids import BinaryUUIDStrategy, JobIdStrategy, UUIDStrategy

_ISOLATION_LEVELS = ("READ UNCOMMITTED", "READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$")

NOTIFY_CHANNEL = "proletarian_di"

JobRow = tuple[Any, str, str, str, int, datetime, datetime]


def check_table_name(name: Any, option: str = "job_table") -> str:
    """Return `name` if it is a plain `table` or `schema.table` identifier."""
    if not isinstance(name, str) or not _IDENTIFIER.match(name):
        raise ConfigurationError(
            f"{option} must be a plain identifier such as 'proletarian.job', got {name!r}"
        )
    return name


def unwrap_connection(conn: Any) -> Any:
    """The driver connection under pool wrappers such as DBUtils' (`._con`)."""
    for _ in range(4):
        module = type(conn).__module__
        if module.startswith(("psycopg", "pymysql")):
            return conn
        inner = getattr(conn, "_con", None)
        if inner is None:
            break
        conn = inner
    return conn


def dialect_name(conn: Any) -> str:
    """'postgresql' or 'mysql', from the class of the (unwrapped) connection."""
    module = type(unwrap_connection(conn)).__module__
    if module.startswith("psycopg"):
        return "postgresql"
    if module.startswith("pymysql"):
        return "mysql"
    raise UnsupportedDatabase(
        f"unsupported connection type {type(conn).__module__}.{type(conn).__qualname__}: "
        "use a psycopg 3 connection (PostgreSQL) or a PyMySQL connection (MySQL/MariaDB)"
    )


class Dialect:
    """Statements and driver calls for one database; built once per table pair."""

    name = ""
    minimum = ""
    default_id_strategy: JobIdStrategy

    def __init__(self, job_table: str, archived_job_table: str) -> None:
        self.job_table = check_table_name(job_table, "job_table")
        self.archived_job_table = check_table_name(archived_job_table, "archived_job_table")
        job, archive = self.job_table, self.archived_job_table
        self.columns = "job_id, queue, job_type, payload, attempts, enqueued_at, process_at"
        self.insert_sql = f"INSERT INTO {job} ({self.columns}) VALUES (%s, %s, %s, %s, %s, %s, %s)"
        self.claim_sql = (
            f"SELECT {self.columns} FROM {job} WHERE queue = %s AND process_at <= %s "
            "ORDER BY process_at LIMIT %s FOR UPDATE SKIP LOCKED"
        )
        self.reschedule_sql = f"UPDATE {job} SET attempts = %s, process_at = %s WHERE job_id = %s"
        self.archive_select = (
            f"INSERT INTO {archive} ({self.columns}, status, finished_at) "
            "SELECT job_id, queue, job_type, payload, attempts + 1, enqueued_at, process_at, "
            "%s, %s "
        )

    # Times -----------------------------------------------------------------

    def encode_time(self, value: datetime) -> Any:
        return value

    def decode_time(self, value: datetime) -> datetime:
        return value

    # Statements --------------------------------------------------------------

    def fetchone(self, conn: Any, sql: str, params: Sequence[Any] = ()) -> Any:
        raise NotImplementedError

    def execute(self, conn: Any, sql: str, params: Sequence[Any] = ()) -> None:
        raise NotImplementedError

    def claim(self, conn: Any, queue: str, now: datetime, limit: int = 1) -> list[JobRow]:
        """Lock the oldest due jobs of `queue` (up to `limit`), skipping rows others hold."""
        raise NotImplementedError

    def archive(
        self, conn: Any, job_ids: Sequence[Any], status: str, finished_at: datetime
    ) -> None:
        """Move jobs to the archive with `status`, counting the attempt just made."""
        raise NotImplementedError

    def archive_and_commit(self, conn: Any, job_ids: Sequence[Any], finished_at: datetime) -> None:
        """Archive successful jobs and commit."""
        self.archive(conn, job_ids, "success", finished_at)
        self.commit(conn)

    def reschedule(self, conn: Any, job_id: Any, attempts: int, process_at: datetime) -> None:
        self.execute(conn, self.reschedule_sql, (attempts, self.encode_time(process_at), job_id))

    def insert_one(self, conn: Any, row: Sequence[Any]) -> None:
        sql, params = self.insert_statement(row)
        self.execute(conn, sql, params)

    def insert_statement(self, row: Sequence[Any]) -> tuple[str, tuple[Any, ...]]:
        """The INSERT for one enqueued row `(id, queue, type, payload, enqueued_at, due)`."""
        job_id, queue, job_type, payload, enqueued_at, process_at = row
        return self.insert_sql, (
            job_id,
            queue,
            job_type,
            payload,
            0,
            self.encode_time(enqueued_at),
            self.encode_time(process_at),
        )

    @contextlib.contextmanager
    def attached(self, conn: Any) -> Iterator[None]:
        """Tune a connection for a worker that keeps it (fewer round trips), then undo."""
        yield

    def insert_many(self, conn: Any, rows: Sequence[Sequence[Any]]) -> None:
        raise NotImplementedError

    def commit(self, conn: Any) -> None:
        conn.commit()

    def rollback(self, conn: Any) -> None:
        conn.rollback()

    def savepoint(self, conn: Any) -> None:
        self.execute(conn, "SAVEPOINT proletarian_sp")

    def release_savepoint(self, conn: Any) -> None:
        self.execute(conn, "RELEASE SAVEPOINT proletarian_sp")

    def rollback_to_savepoint(self, conn: Any) -> None:
        """Undo the handler's writes and leave the subtransaction, so the job row is
        then updated by the transaction that locked it (no MultiXact on PostgreSQL)."""
        self.execute(conn, "ROLLBACK TO SAVEPOINT proletarian_sp")
        self.execute(conn, "RELEASE SAVEPOINT proletarian_sp")

    # Checks ----------------------------------------------------------------

    def server_version(self, conn: Any) -> tuple[str, tuple[int, ...]]:
        """The server's product name and version."""
        raise NotImplementedError

    def check_server(self, conn: Any) -> None:
        """Raise a clear error for a server without SKIP LOCKED or without the tables."""
        try:
            product, version = self.server_version(conn)
            required = self.required_version(product)
            if version < required:
                raise UnsupportedDatabase(
                    f"{product} {'.'.join(map(str, version))} found; proletarian-di needs "
                    f"{product} {'.'.join(map(str, required))} or newer (SELECT … SKIP LOCKED)"
                )
            for table, option in (
                (self.job_table, "job_table"),
                (self.archived_job_table, "archived_job_table"),
            ):
                if not self.table_exists(conn, table):
                    raise SchemaError(
                        f"table {table} ({option}) does not exist; install the schema with "
                        f"`proletarian-di schema install` or sql/{self.name}.sql"
                    )
        finally:
            self.rollback(conn)

    def required_version(self, product: str) -> tuple[int, ...]:
        raise NotImplementedError

    def table_exists(self, conn: Any, table: str) -> bool:
        raise NotImplementedError

    # Errors and teardown -------------------------------------------------

    def abort(self, conn: Any) -> None:
        """Drop the connection under a stuck job so the server rolls it back."""
        raise NotImplementedError


class PostgresDialect(Dialect):
    """PostgreSQL 9.5+ through psycopg 3."""

    name = "postgresql"
    default_id_strategy = UUIDStrategy()

    def __init__(self, job_table: str, archived_job_table: str) -> None:
        super().__init__(job_table, archived_job_table)
        job = self.job_table
        self.archive_sql = (
            f"WITH done AS (DELETE FROM {job} WHERE job_id = ANY(%s) RETURNING *) "
            + self.archive_select
            + "FROM done"
        )
        self.archive_one_sql = self.archive_sql.replace("= ANY(%s)", "= %s")
        self.begin_claim_sql = "BEGIN; " + self.claim_sql
        notify = f" SELECT pg_notify('{NOTIFY_CHANNEL}', %s)"
        self.insert_sql = f"WITH job AS ({self.insert_sql})" + notify
        self.insert_many_sql = (
            f"WITH job AS (INSERT INTO {job} ({self.columns}) "
            "SELECT u.job_id, %s, u.job_type, u.payload, 0, %s, %s "
            "FROM unnest(%s::uuid[], %s::text[], %s::text[]) AS u(job_id, job_type, payload))"
            + notify
        )

    def fetchone(self, conn: Any, sql: str, params: Sequence[Any] = ()) -> Any:
        return conn.execute(sql, params).fetchone()

    def execute(self, conn: Any, sql: str, params: Sequence[Any] = ()) -> None:
        conn.execute(sql, params)

    @contextlib.contextmanager
    def attached(self, conn: Any) -> Iterator[None]:
        """Autocommit while a worker holds the connection, so the claim can send BEGIN
        with its SELECT in one round trip (a plain simple query, not a pipeline: the
        server's idle_in_transaction_session_timeout keeps working during the job)."""
        if conn.autocommit:
            yield
            return
        conn.autocommit = True
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                if not conn.closed:
                    conn.rollback()
                    conn.autocommit = False

    def claim(self, conn: Any, queue: str, now: datetime, limit: int = 1) -> list[JobRow]:
        if not conn.autocommit:
            rows: list[JobRow] = conn.execute(self.claim_sql, (queue, now, limit)).fetchall()
            return rows
        import psycopg

        cursor = psycopg.ClientCursor(conn)
        cursor.execute(self.begin_claim_sql, (queue, now, limit))
        cursor.nextset()
        return cursor.fetchall()

    def archive(
        self, conn: Any, job_ids: Sequence[Any], status: str, finished_at: datetime
    ) -> None:
        if len(job_ids) == 1:
            conn.execute(self.archive_one_sql, (job_ids[0], status, finished_at))
        else:
            conn.execute(self.archive_sql, (list(job_ids), status, finished_at))

    def archive_and_commit(self, conn: Any, job_ids: Sequence[Any], finished_at: datetime) -> None:
        """Archive and COMMIT in one pipelined round trip, as prepared statements."""
        with conn.pipeline():
            self.archive(conn, job_ids, "success", finished_at)
            conn.commit()

    def insert_many(self, conn: Any, rows: Sequence[Sequence[Any]]) -> None:
        if not rows:
            return
        _, queue, _, _, enqueued_at, process_at = rows[0]
        ids = [r[0] for r in rows]
        types = [r[2] for r in rows]
        payloads = [r[3] for r in rows]
        conn.execute(
            self.insert_many_sql, (queue, enqueued_at, process_at, ids, types, payloads, queue)
        )

    def insert_statement(self, row: Sequence[Any]) -> tuple[str, tuple[Any, ...]]:
        """The INSERT, and a NOTIFY that wakes idle workers once the caller commits."""
        sql, params = super().insert_statement(row)
        return sql, (*params, row[1])

    def server_version(self, conn: Any) -> tuple[str, tuple[int, ...]]:
        num = int(conn.info.server_version)
        major = num // 10000
        if major >= 10:
            return "PostgreSQL", (major, num % 10000)
        return "PostgreSQL", (major, (num // 100) % 100, num % 100)

    def required_version(self, product: str) -> tuple[int, ...]:
        return (9, 5)

    def table_exists(self, conn: Any, table: str) -> bool:
        return self.fetchone(conn, "SELECT to_regclass(%s)", (table,))[0] is not None

    def abort(self, conn: Any) -> None:
        conn.pgconn.finish()


class MySQLDialect(Dialect):
    """MySQL 8.0.1+ and MariaDB 10.6+ through PyMySQL.

    Worker transactions run at READ COMMITTED: every poll sees jobs committed
    since the last one, and no gap locks block enqueuers while a job runs.
    Times are stored as UTC in DATETIME(6), whatever the session time zone.
    """

    name = "mysql"
    default_id_strategy = BinaryUUIDStrategy()

    def __init__(self, job_table: str, archived_job_table: str) -> None:
        super().__init__(job_table, archived_job_table)
        job = self.job_table
        self._read_committed: set[int] = set()
        self.archive_sql = self.archive_select + f"FROM {job} WHERE job_id IN %s"
        self.delete_sql = f"DELETE FROM {job} WHERE job_id IN %s"

    def encode_time(self, value: datetime) -> Any:
        return value.astimezone(timezone.utc).replace(tzinfo=None)

    def decode_time(self, value: datetime) -> datetime:
        return value.replace(tzinfo=timezone.utc)

    def fetchone(self, conn: Any, sql: str, params: Sequence[Any] = ()) -> Any:
        with conn.cursor() as cursor:
            cursor.execute(sql, tuple(params))
            return cursor.fetchone()

    def execute(self, conn: Any, sql: str, params: Sequence[Any] = ()) -> None:
        with conn.cursor() as cursor:
            cursor.execute(sql, tuple(params))

    @contextlib.contextmanager
    def attached(self, conn: Any) -> Iterator[None]:
        """READ COMMITTED for the whole session while a worker holds the connection."""
        previous = self.fetchone(conn, f"SELECT @@SESSION.{self._isolation_variable(conn)}")[0]
        self.execute(conn, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        self._read_committed.add(id(conn))
        try:
            yield
        finally:
            self._read_committed.discard(id(conn))
            with contextlib.suppress(Exception):
                conn.rollback()
                level = str(previous).replace("-", " ")
                if level in _ISOLATION_LEVELS:
                    self.execute(conn, f"SET SESSION TRANSACTION ISOLATION LEVEL {level}")

    def _isolation_variable(self, conn: Any) -> str:
        product, version = self.server_version(conn)
        if product == "MariaDB" and version < (11, 1):
            return "tx_isolation"
        return "transaction_isolation"

    def begin(self, conn: Any) -> None:
        if id(conn) not in self._read_committed:
            self.execute(conn, "SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        if conn.get_autocommit():
            conn.begin()

    def claim(self, conn: Any, queue: str, now: datetime, limit: int = 1) -> list[JobRow]:
        self.begin(conn)
        with conn.cursor() as cursor:
            cursor.execute(self.claim_sql, (queue, self.encode_time(now), limit))
            return list(cursor.fetchall())

    def archive(
        self, conn: Any, job_ids: Sequence[Any], status: str, finished_at: datetime
    ) -> None:
        ids = tuple(job_ids)
        self.execute(conn, self.archive_sql, (status, self.encode_time(finished_at), ids))
        self.execute(conn, self.delete_sql, (ids,))

    def insert_many(self, conn: Any, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            with conn.cursor() as cursor:
                cursor.executemany(self.insert_sql, [self.insert_statement(r)[1] for r in rows])

    def server_version(self, conn: Any) -> tuple[str, tuple[int, ...]]:
        text = str(self.fetchone(conn, "SELECT VERSION()")[0])
        product = "MariaDB" if "mariadb" in text.lower() else "MySQL"
        match = re.match(r"(\d+)\.(\d+)\.(\d+)", text)
        if not match:
            raise UnsupportedDatabase(f"cannot read the server version from {text!r}")
        return product, tuple(int(part) for part in match.groups())

    def required_version(self, product: str) -> tuple[int, ...]:
        return (10, 6, 0) if product == "MariaDB" else (8, 0, 1)

    def table_exists(self, conn: Any, table: str) -> bool:
        schema, _, name = table.rpartition(".")
        row = self.fetchone(
            conn,
            "SELECT COUNT(*) FROM information_schema.tables "
            "WHERE table_schema = COALESCE(%s, DATABASE()) AND table_name = %s",
            (schema or None, name),
        )
        return bool(row[0])

    def abort(self, conn: Any) -> None:
        raw = unwrap_connection(conn)
        force_close = getattr(raw, "_force_close", None)
        if force_close is not None:
            force_close()
        else:
            raw.close()


def is_transient(exc: BaseException) -> bool:
    """Connection-level trouble (lost connection, restart, pool timeout, lock timeout,
    deadlock): reconnect, back off and keep going."""
    try:
        import psycopg

        if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
            return True
    except ImportError:
        pass
    try:
        import pymysql

        if isinstance(exc, (pymysql.err.OperationalError, pymysql.err.InterfaceError)):
            return True
    except ImportError:
        pass
    return False


_DIALECTS: dict[str, type[Dialect]] = {"postgresql": PostgresDialect, "mysql": MySQLDialect}
_CACHE: dict[tuple[str, str, str], Dialect] = {}


def dialect_for(conn: Any, job_table: str, archived_job_table: str) -> Dialect:
    """The dialect of `conn`, with its statements prepared for these tables."""
    key = (dialect_name(conn), job_table, archived_job_table)
    dialect = _CACHE.get(key)
    if dialect is None:
        dialect = _CACHE[key] = _DIALECTS[key[0]](job_table, archived_job_table)
    return dialect

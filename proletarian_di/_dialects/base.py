"""What every database's dialect has: the statements they share and the driver-agnostic
helpers (table names, connection unwrapping, timestamps)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from ..errors import ConfigurationError, SchemaError, UnsupportedDatabase
from ..job_ids import JobIdStrategy

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$")

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

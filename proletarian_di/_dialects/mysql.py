"""MySQL and MariaDB through PyMySQL."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from typing import Any

from ..errors import UnsupportedDatabase
from ..job_ids import BinaryUUIDStrategy
from .base import Dialect, JobRow, unwrap_connection

_ISOLATION_LEVELS = ("READ UNCOMMITTED", "READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE")


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
        """Multi-row INSERTs (PyMySQL's executemany batches them only when every value is
        a parameter); the times all rows share are converted once."""
        if not rows:
            return
        enqueued_at, process_at = (self.encode_time(value) for value in rows[0][4:6])
        params = [(row[0], row[1], row[2], row[3], 0, enqueued_at, process_at) for row in rows]
        with conn.cursor() as cursor:
            cursor.executemany(self.insert_sql, params)

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

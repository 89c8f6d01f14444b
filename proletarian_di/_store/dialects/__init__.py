"""The queue's SQL, one module per database, and the driver details around it.

Everything that differs between PostgreSQL (psycopg 3) and MySQL/MariaDB
(PyMySQL) lives here: statements, transaction handling, time and id encoding,
version checks, and which errors are worth retrying.
"""

from __future__ import annotations

from typing import Any

from ..tables import Tables
from . import mysql
from .base import (
    Dialect,
    GroupSlots,
    JobRow,
    LeaseClaim,
    LeasedRow,
    Runs,
    Session,
    TransactionLost,
    connection_kind,
    dialect_name,
    unwrap_connection,
)
from .mysql import MySQLDialect
from .postgresql import NOTIFY_CHANNEL, PostgresDialect, Wake, read_wake_payload

__all__ = [
    "NOTIFY_CHANNEL",
    "Dialect",
    "GroupSlots",
    "JobRow",
    "LeaseClaim",
    "LeasedRow",
    "MySQLDialect",
    "PostgresDialect",
    "Runs",
    "Session",
    "TransactionLost",
    "Wake",
    "connection_kind",
    "dialect_for",
    "dialect_name",
    "dialect_named",
    "dialect_of",
    "is_read_only",
    "is_transient",
    "read_wake_payload",
    "unwrap_connection",
]


def is_transient(exc: BaseException) -> bool:
    """Connection-level trouble (lost or refused connection, restart, pool timeout, lock
    timeout, deadlock, read-only failover): reconnect, back off and keep going."""
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    module = type(exc).__module__
    if module.startswith("pymysql"):
        return mysql.is_transient(exc)
    if module.startswith("dbutils"):
        return True
    try:
        import psycopg

        if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
            return True
    except ImportError:
        pass
    return False


_POSTGRES_READ_ONLY = "25006"  # read_only_sql_transaction


def is_read_only(exc: BaseException) -> bool:
    """A server's refusal to write because it is read-only (a standby or replica, a primary
    demoted by a failover) or the transaction is."""
    return getattr(exc, "sqlstate", None) == _POSTGRES_READ_ONLY or mysql.is_read_only(exc)


_DIALECTS: dict[str, type[Dialect]] = {"postgresql": PostgresDialect, "mysql": MySQLDialect}
_CACHE: dict[tuple[str, str, str], Dialect] = {}


def dialect_for(conn: Any, job_table: str, archived_job_table: str) -> Dialect:
    """The dialect of `conn`, with its statements prepared for these tables."""
    return dialect_named(dialect_name(conn), job_table, archived_job_table)


def dialect_of(conn: Any, tables: Tables) -> Dialect:
    """The dialect of `conn`, with its statements prepared for `tables`."""
    return dialect_named(dialect_name(conn), tables.job_table, tables.archived_job_table)


def dialect_named(name: str, job_table: str, archived_job_table: str) -> Dialect:
    """The dialect called `name`, with its statements prepared for these tables."""
    key = (name, job_table, archived_job_table)
    dialect = _CACHE.get(key)
    if dialect is None:
        dialect = _CACHE[key] = _DIALECTS[key[0]](job_table, archived_job_table)
    return dialect

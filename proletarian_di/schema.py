"""The queue's tables for each database, as SQL that is safe to run twice.

`sql/postgresql.sql` and `sql/mysql.sql` are these statements rendered for
the default table names.
"""

from __future__ import annotations

from typing import Any

from ._dialects import check_table_name, dialect_for, dialect_name
from ._options import DEFAULT_ARCHIVED_JOB_TABLE, DEFAULT_JOB_TABLE
from .errors import ConfigurationError

_POSTGRESQL = """\
CREATE SCHEMA IF NOT EXISTS {schema};

CREATE TABLE IF NOT EXISTS {job_table} (
    job_id      UUID PRIMARY KEY,     -- generated and returned by enqueue()
    queue       TEXT NOT NULL,        -- queue name
    job_type    TEXT NOT NULL,        -- job type
    payload     TEXT NOT NULL,        -- serialized job data (JSON by default)
    attempts    INTEGER NOT NULL,     -- finished attempts: 0 at enqueue, +1 per retry
    enqueued_at TIMESTAMPTZ NOT NULL, -- when the job was enqueued (never changes)
    process_at  TIMESTAMPTZ NOT NULL  -- when the job should run (moves on every retry)
);

CREATE TABLE IF NOT EXISTS {archived_job_table} (
    job_id      UUID PRIMARY KEY,     -- copied from the job row
    queue       TEXT NOT NULL,
    job_type    TEXT NOT NULL,
    payload     TEXT NOT NULL,
    attempts    INTEGER NOT NULL,     -- the number of the last attempt
    enqueued_at TIMESTAMPTZ NOT NULL,
    process_at  TIMESTAMPTZ NOT NULL, -- data for the last run only
    status      TEXT NOT NULL,        -- success / failure
    finished_at TIMESTAMPTZ NOT NULL  -- when the job finished (success or failure)
);

CREATE INDEX IF NOT EXISTS {index} ON {job_table} (queue, process_at);
"""

_MYSQL = """\
CREATE DATABASE IF NOT EXISTS {schema};

CREATE TABLE IF NOT EXISTS {job_table} (
    job_id      BINARY(16) PRIMARY KEY, -- generated and returned by enqueue()
    queue       VARCHAR(255) NOT NULL,  -- queue name
    job_type    VARCHAR(255) NOT NULL,  -- job type
    payload     LONGTEXT NOT NULL,      -- serialized job data (JSON by default)
    attempts    INTEGER NOT NULL,       -- finished attempts: 0 at enqueue, +1 per retry
    enqueued_at DATETIME(6) NOT NULL,   -- UTC; when the job was enqueued (never changes)
    process_at  DATETIME(6) NOT NULL,   -- UTC; when the job should run (moves on every retry)
    INDEX {index} (queue, process_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 {collation};

CREATE TABLE IF NOT EXISTS {archived_job_table} (
    job_id      BINARY(16) PRIMARY KEY, -- copied from the job row
    queue       VARCHAR(255) NOT NULL,
    job_type    VARCHAR(255) NOT NULL,
    payload     LONGTEXT NOT NULL,
    attempts    INTEGER NOT NULL,       -- the number of the last attempt
    enqueued_at DATETIME(6) NOT NULL,
    process_at  DATETIME(6) NOT NULL,   -- data for the last run only
    status      VARCHAR(16) NOT NULL,   -- success / failure
    finished_at DATETIME(6) NOT NULL    -- UTC; when the job finished (success or failure)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 {collation};
"""

_TEMPLATES = {"postgresql": _POSTGRESQL, "mysql": _MYSQL}

# Binary and NO PAD, so 'email' and 'email ' are two queues, as on PostgreSQL: MariaDB runs
# the /*M! comment, MySQL 8.0.17+ the /*!80017 one (each ignores the other's).
NO_PAD_COLLATION = "/*M!100202 COLLATE=utf8mb4_nopad_bin */ /*!80017 COLLATE=utf8mb4_0900_bin */"
# MySQL 8.0.1-8.0.16 has no NO PAD binary collation for utf8mb4.
OLD_MYSQL_COLLATION = "COLLATE=utf8mb4_bin"


def schema_sql(
    dialect: str,
    job_table: str = DEFAULT_JOB_TABLE,
    archived_job_table: str = DEFAULT_ARCHIVED_JOB_TABLE,
) -> str:
    """The DDL for `dialect` ('postgresql' or 'mysql') and these table names."""
    if dialect not in _TEMPLATES:
        raise ConfigurationError(f"dialect must be 'postgresql' or 'mysql', got {dialect!r}")
    check_table_name(job_table, "job_table")
    check_table_name(archived_job_table, "archived_job_table")
    schema, _, name = job_table.rpartition(".")
    archive_schema = archived_job_table.rpartition(".")[0]
    if schema != archive_schema:
        raise ConfigurationError("job_table and archived_job_table must be in the same schema")
    sql = _TEMPLATES[dialect].format(
        schema=schema or "public",
        job_table=job_table,
        archived_job_table=archived_job_table,
        index=f"{name}_queue_process_at",
        collation=NO_PAD_COLLATION,
    )
    if not schema:
        sql = sql.split("\n", 2)[2]
    return sql


def statements(sql: str) -> list[str]:
    """Split DDL into single statements (drivers run one statement per call)."""
    lines = [line.split("--", 1)[0].rstrip() for line in sql.splitlines()]
    return [part.strip() for part in "\n".join(lines).split(";") if part.strip()]


def install_schema(
    conn: Any,
    job_table: str = DEFAULT_JOB_TABLE,
    archived_job_table: str = DEFAULT_ARCHIVED_JOB_TABLE,
) -> None:
    """Create the schema, both tables and the index on `conn`, then commit."""
    dialect = dialect_name(conn)
    sql = schema_sql(dialect, job_table, archived_job_table)
    if dialect == "mysql":
        product, version = dialect_for(conn, job_table, archived_job_table).server_version(conn)
        if product == "MySQL" and version < (8, 0, 17):
            sql = sql.replace(NO_PAD_COLLATION, OLD_MYSQL_COLLATION)
    cursor = conn.cursor()
    try:
        for statement in statements(sql):
            cursor.execute(statement)
    finally:
        cursor.close()
    conn.commit()


_NOTES = {
    "mysql": (
        "-- The /*M! and /*!80017 comments pick a binary NO PAD collation (MariaDB and\n"
        "-- MySQL 8.0.17+ respectively); on MySQL 8.0.1-8.0.16 replace both with\n"
        f"-- {OLD_MYSQL_COLLATION} (install_schema does).\n"
    )
}
_HEADERS = {
    "postgresql": "PostgreSQL 9.5+",
    "mysql": "MySQL 8.0.1+ and MariaDB 10.6+",
}


def schema_file(dialect: str) -> str:
    """The contents of `sql/<dialect>.sql`: the DDL for the default table names."""
    note = _NOTES.get(dialect, "")
    return (
        f"-- proletarian-di schema for {_HEADERS[dialect]} (safe to run twice).\n"
        "-- Rendered from proletarian_di/schema.py; `proletarian-di schema print` renders\n"
        f"-- it for other table names.\n{note}\n" + schema_sql(dialect)
    )

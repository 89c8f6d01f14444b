"""The queue's tables: the full current schema, and the numbered migrations that lead to it
from Proletarian's own tables.

`sql/postgresql.sql` and `sql/mysql.sql` hold the full schema (a fresh install, safe to run
twice); `sql/migrations/<database>/NNNN_<name>.sql` hold the steps. Both are rendered here for
the default table names, and for any others on request. `install_schema` creates what is
missing and upgrades what is old; `upgrade_schema` applies the missing steps and records the
version in a small table beside the queue tables (`job_schema_version`); a worker
refuses to start on an older schema and names the command that upgrades it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from .._store.dialects import Dialect, dialect_for, dialect_name
from .._store.tables import (
    DEFAULT_ARCHIVED_JOB_TABLE,
    DEFAULT_JOB_TABLE,
    UPGRADE_HINT,
    Tables,
    attempt_table,
    blocked_table,
    check_table_name,
    claims_table,
    dependencies_table,
    finished_index,
    outcomes_table,
    paused_table,
    periodic_table,
    rate_table,
    results_table,
    unique_index,
    version_table,
    workers_table,
    workflows_table,
)
from ..errors import SchemaError
from . import _ddl
from ._migrations import (
    LATEST,
    MIGRATIONS,
    NO_PAD_COLLATION,
    OLD_MYSQL_COLLATION,
    Migration,
    migration,
    migration_file,
    render,
    schema_file,
    schema_sql,
    statements,
)

__all__ = [
    "DEFAULT_ARCHIVED_JOB_TABLE",
    "DEFAULT_JOB_TABLE",
    "LATEST",
    "MIGRATIONS",
    "NO_PAD_COLLATION",
    "OLD_MYSQL_COLLATION",
    "PAUSED_TABLE_SUFFIX",
    "PERIODIC_TABLE_SUFFIX",
    "UPGRADE_HINT",
    "VERSION_TABLE_SUFFIX",
    "WORKERS_NEED",
    "WORKERS_TABLE_SUFFIX",
    "Migration",
    "Tables",
    "attempt_table",
    "blocked_table",
    "check_schema",
    "check_table_name",
    "claims_table",
    "dependencies_table",
    "finished_index",
    "install_schema",
    "migration",
    "migration_file",
    "outcomes_table",
    "paused_table",
    "pending_migrations",
    "periodic_table",
    "rate_table",
    "results_table",
    "schema_file",
    "schema_sql",
    "schema_version",
    "statements",
    "unique_index",
    "upgrade_schema",
    "version_table",
    "workers_table",
    "workflows_table",
]

# The suffixes of earlier releases' names, kept importable.
VERSION_TABLE_SUFFIX, PERIODIC_TABLE_SUFFIX, PAUSED_TABLE_SUFFIX, WORKERS_TABLE_SUFFIX = (
    name("") for name in (version_table, periodic_table, paused_table, workers_table)
)

WORKERS_NEED = "attempts"
"""The schema step workers, `process_next_job` and the admin queries need: their claim runs in
the order of the priorities step's index, they read the paused queues, they clear a
job's lease, they read the job's trace context, and they record each attempt (its start and
worker in the archive, a failed one in the attempt table). `enqueue` needs only Proletarian's
tables, unless asked for a newer step's feature (a priority, a unique key, a trace context
to keep)."""


def _recorded_version(dialect: Dialect, conn: Any, job_table: str) -> int | None:
    table = version_table(job_table)
    if not dialect.table_columns(conn, table):
        return None
    row = dialect.fetchone(conn, f"SELECT version FROM {table} WHERE job_table = %s", (job_table,))
    return int(row[0]) if row else None


def _applied_version(dialect: Dialect, conn: Any, job_table: str, archived_job_table: str) -> int:
    """How many steps, from the first, the catalog shows applied in full (0: not even
    Proletarian's two tables), read in one query."""
    steps = MIGRATIONS[dialect.name]
    conditions = (" AND ".join(m.applied) for m in steps)
    sql = "SELECT " + ",\n".join(f"CASE WHEN {c} THEN 1 ELSE 0 END" for c in conditions)
    row = dialect.fetchone(
        conn, render(sql, dialect.name, job_table, archived_job_table, NO_PAD_COLLATION)
    )
    applied = [bool(flag) for flag in row]
    return applied.index(False) if False in applied else len(steps)


def _step(dialect: str, name: str) -> int:
    return next(m.version for m in MIGRATIONS[dialect] if m.name == name)


def schema_version(
    conn: Any,
    job_table: str = DEFAULT_JOB_TABLE,
    archived_job_table: str = DEFAULT_ARCHIVED_JOB_TABLE,
    *,
    verify: bool = False,
) -> int:
    """The schema version of these tables: the one recorded by the last upgrade, else the
    steps, from the first, whose changes are all in the catalog (a step applied in part does
    not count). `verify`: never more than the catalog shows, even when recorded (an older
    upgrade may have recorded a step it left half-done); this needs a role that sees every
    queue table, as MySQL's information_schema shows a user only the tables it may use.

    0 when there is no job table (whatever a version table says). Runs in the caller's
    transaction and changes nothing.
    """
    dialect = dialect_for(conn, job_table, archived_job_table)
    if not dialect.table_columns(conn, job_table):
        return 0
    recorded = _recorded_version(dialect, conn, job_table)
    if recorded is not None and not verify:
        return recorded
    applied = _applied_version(dialect, conn, job_table, archived_job_table)
    return applied if recorded is None else min(recorded, applied)


def pending_migrations(
    conn: Any,
    job_table: str = DEFAULT_JOB_TABLE,
    archived_job_table: str = DEFAULT_ARCHIVED_JOB_TABLE,
) -> list[Migration]:
    """The steps these tables still need (all of them when there are none)."""
    current = schema_version(conn, job_table, archived_job_table)
    return [m for m in MIGRATIONS[dialect_name(conn)] if m.version > current]


def check_schema(
    conn: Any,
    job_table: str = DEFAULT_JOB_TABLE,
    archived_job_table: str = DEFAULT_ARCHIVED_JOB_TABLE,
    *,
    archive: bool = True,
    needs: str = WORKERS_NEED,
) -> None:
    """Raise a clear error if workers cannot run here: the server is too old, a table is
    missing, or the schema is older than step `needs` (naming the upgrade command).

    Workers need every step up to `WORKERS_NEED`; a scheduler needs the periodic table and,
    as it only enqueues, not the archive (`archive=False`). Rolls back what it read."""
    dialect = dialect_for(conn, job_table, archived_job_table)
    dialect.check_server(conn, archive)
    try:
        version = schema_version(conn, job_table, archived_job_table)
    finally:
        dialect.rollback(conn)
    needed = _step(dialect.name, needs)
    if version < needed:
        missing = ", ".join(
            f"{m.version} ({m.name.replace('_', ' ')})"
            for m in MIGRATIONS[dialect.name]
            if version < m.version <= needed
        )
        raise SchemaError(
            f"the schema of {job_table} is at version {version}; this proletarian-di needs "
            f"version {needed} (missing steps: {missing}): {UPGRADE_HINT}"
        )


# Installing and upgrading --------------------------------------------------------------------


def _collation(dialect: Dialect, conn: Any) -> str:
    return OLD_MYSQL_COLLATION if dialect.lacks_no_pad_collation(conn) else NO_PAD_COLLATION


def _run(conn: Any, sql: str) -> None:
    with conn.cursor() as cursor:
        for statement in statements(sql):
            cursor.execute(statement)


def _record(dialect: Dialect, conn: Any, job_table: str, version: int) -> None:
    table = version_table(job_table)
    _run(conn, _ddl.VERSION_TABLE[dialect.name].format(version_table=table))
    dialect.execute(
        conn, _ddl.RECORD_VERSION[dialect.name].format(version_table=table), (job_table, version)
    )


def upgrade_schema(
    conn: Any,
    job_table: str = DEFAULT_JOB_TABLE,
    archived_job_table: str = DEFAULT_ARCHIVED_JOB_TABLE,
    *,
    dry_run: bool = False,
    report: Callable[[Migration], object] | None = None,
) -> list[Migration]:
    """Apply the migrations these tables still need and record the version; the steps applied
    (or, with `dry_run`, those that would be). No tables yet: the full schema, in one go.

    On PostgreSQL everything runs in one transaction. On MySQL every DDL statement commits,
    so each step is applied and recorded on its own, and `report` hears of each as it lands.
    Every step makes only the changes the catalog shows missing, so an upgrade interrupted
    anywhere (or failed: the error raised is the step's own) is finished by running it again,
    and a step recorded but not applied in full is applied again (`schema_version(verify=True)`).
    """
    dialect = dialect_for(conn, job_table, archived_job_table)
    current = schema_version(conn, job_table, archived_job_table, verify=True)
    steps = [m for m in MIGRATIONS[dialect.name] if m.version > current]
    if dry_run or not steps:
        dialect.rollback(conn)
        return steps
    collation = _collation(dialect, conn)
    if not dialect.table_columns(conn, job_table):
        full = render(
            _ddl.FULL[dialect.name], dialect.name, job_table, archived_job_table, collation
        )
        batches = [(full, steps[-1].version, steps)]
    else:
        batches = [(m.sql(job_table, archived_job_table, collation), m.version, [m]) for m in steps]
    time_zone = dialect.session_time_zone(conn)
    try:
        for sql, version, applied in batches:
            _run(conn, sql)
            _record(dialect, conn, job_table, version)
            if not dialect.transactional_ddl:
                conn.commit()
            for migration in applied:
                if report is not None:
                    report(migration)
        conn.commit()
    except BaseException:
        with contextlib.suppress(Exception):  # the step's error, not a dead connection's
            dialect.rollback(conn)
        with contextlib.suppress(Exception):
            dialect.put_back_time_zone(conn, time_zone)
        raise
    dialect.put_back_time_zone(conn, time_zone)
    return steps


def install_schema(
    conn: Any,
    job_table: str = DEFAULT_JOB_TABLE,
    archived_job_table: str = DEFAULT_ARCHIVED_JOB_TABLE,
) -> None:
    """Create the schema, both tables and the index on `conn`, or bring older tables up to
    date, then commit. Safe to run any number of times."""
    upgrade_schema(conn, job_table, archived_job_table)

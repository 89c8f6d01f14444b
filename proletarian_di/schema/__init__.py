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
import dataclasses
import re
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
from ..errors import ConfigurationError, SchemaError
from . import _ddl

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
# Binary and NO PAD, so 'email' and 'email ' are two queues, as on PostgreSQL: MariaDB runs
# the /*M! comment, MySQL 8.0.17+ the /*!80017 one (each ignores the other's).
NO_PAD_COLLATION = "/*M!100202 COLLATE utf8mb4_nopad_bin */ /*!80017 COLLATE utf8mb4_0900_bin */"
# MySQL 8.0.1-8.0.16 has no NO PAD binary collation for utf8mb4.
OLD_MYSQL_COLLATION = "COLLATE utf8mb4_bin"

WORKERS_NEED = "attempts"
"""The schema step workers, `process_next_job` and the admin queries need: their claim runs in
the order of the priorities step's index, they read the paused queues, they clear a
job's lease, they read the job's trace context, and they record each attempt (its start and
worker in the archive, a failed one in the attempt table). `enqueue` needs only Proletarian's
tables, unless asked for a newer step's feature (a priority, a unique key, a trace context
to keep)."""


@dataclasses.dataclass(frozen=True)
class Migration:
    """One numbered step of a database's schema; `sql()` renders it for given tables."""

    dialect: str
    version: int
    name: str
    template: str
    applied: tuple[str, ...] = ()
    """Conditions (SQL) that hold once the step is applied, and stay true after later ones."""

    @property
    def filename(self) -> str:
        return f"{self.version:04d}_{self.name}.sql"

    def sql(
        self,
        job_table: str = DEFAULT_JOB_TABLE,
        archived_job_table: str = DEFAULT_ARCHIVED_JOB_TABLE,
        collation: str = NO_PAD_COLLATION,
    ) -> str:
        return _render(self.template, self.dialect, job_table, archived_job_table, collation)


MIGRATIONS: dict[str, tuple[Migration, ...]] = {
    dialect: tuple(
        Migration(dialect, number, name, template, applied)
        for number, (name, template, applied) in enumerate(steps, start=1)
    )
    for dialect, steps in _ddl.STEPS.items()
}
LATEST = {dialect: steps[-1].version for dialect, steps in MIGRATIONS.items()}
"""The schema version this proletarian-di needs, per database."""


def migration(dialect: str, version: int) -> Migration:
    """Step `version` of `dialect`'s schema (1 is Proletarian's own tables)."""
    _check_dialect(dialect)
    steps = MIGRATIONS[dialect]
    if not 1 <= version <= len(steps):
        raise ConfigurationError(
            f"{dialect} has schema versions 1 to {len(steps)}, not {version!r}"
        )
    return steps[version - 1]


def _check_dialect(dialect: str) -> None:
    if dialect not in _ddl.FULL:
        raise ConfigurationError(f"dialect must be 'postgresql' or 'mysql', got {dialect!r}")


def _render(
    template: str, dialect: str, job_table: str, archived_job_table: str, collation: str
) -> str:
    _check_dialect(dialect)
    named = Tables(job_table, archived_job_table)
    schema, _, name = job_table.rpartition(".")
    if schema != archived_job_table.rpartition(".")[0]:
        raise ConfigurationError("job_table and archived_job_table must be in the same schema")
    tables = {
        "job_table": job_table,
        "archived_job_table": archived_job_table,
        **named.companions(),
    }
    sql = template.format(
        schema=schema or "public",
        db=f"'{schema}'" if schema else "DATABASE()",
        index=f"{name}_queue_process_at",
        claim_index=f"{name}_queue_priority_process_at",
        unique_index=unique_index(job_table),
        finished_index=finished_index(archived_job_table),
        enqueued_index=f"{name}_enqueued_at",
        fair_index=f"{name}_queue_group_key",
        archived_enqueued_index=f"{archived_job_table.rpartition('.')[2]}_enqueued_at",
        attempt_index=f"{name}_attempt_job_id",
        dependencies_index=f"{name}_dependencies_job_id_status",
        workflows_index=f"{name}_workflows_workflow_id",
        collation=collation,
        **tables,
        **{f"{key}_name": table.rpartition(".")[2] for key, table in tables.items()},
    )
    if not schema:
        lines = sql.splitlines(keepends=True)
        kept = (line for line in lines if not line.startswith(("CREATE SCHEMA", "CREATE DATABASE")))
        sql = "".join(kept)
        sql = sql.replace("DROP INDEX IF EXISTS public.", "DROP INDEX IF EXISTS ").lstrip("\n")
    return sql


def schema_sql(
    dialect: str,
    job_table: str = DEFAULT_JOB_TABLE,
    archived_job_table: str = DEFAULT_ARCHIVED_JOB_TABLE,
) -> str:
    """The full current DDL for `dialect` ('postgresql' or 'mysql') and these table names."""
    _check_dialect(dialect)
    return _render(_ddl.FULL[dialect], dialect, job_table, archived_job_table, NO_PAD_COLLATION)


_TOKENS = re.compile(r"--[^\n]*|'(?:[^']|'')*'|(\$\w*\$).*?\1|;", re.DOTALL)


def statements(sql: str) -> list[str]:
    """Split DDL into single statements (drivers run one statement per call), without their
    `--` comments; a `;` inside a string or a PostgreSQL `$$` body does not split."""
    parts, current, at = [], [], 0
    for token in _TOKENS.finditer(sql):
        current.append(sql[at : token.start()])
        at = token.end()
        if token.group() == ";":
            parts.append("".join(current))
            current = []
        elif not token.group().startswith("--"):
            current.append(token.group())
    parts.append("".join(current) + sql[at:])
    lines = ("\n".join(line.rstrip() for line in part.splitlines()) for part in parts)
    return [part.strip() for part in lines if part.strip()]


# The version of a database's schema --------------------------------------------------------


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
        conn, _render(sql, dialect.name, job_table, archived_job_table, NO_PAD_COLLATION)
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
        full = _render(
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


# The files in sql/ ---------------------------------------------------------------------------

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
    """The contents of `sql/<dialect>.sql`: the full DDL for the default table names."""
    note = _NOTES.get(dialect, "")
    return (
        f"-- proletarian-di schema (version {LATEST[dialect]}) for {_HEADERS[dialect]} "
        "(safe to run twice).\n"
        "-- Rendered from proletarian_di/schema.py; `proletarian-di schema print` renders\n"
        f"-- it for other table names.\n{note}\n" + schema_sql(dialect)
    )


def migration_file(migration: Migration) -> str:
    """The contents of `sql/migrations/<dialect>/<NNNN_name>.sql` for the default tables."""
    return (
        f"-- proletarian-di schema, step {migration.version} "
        f"({migration.name.replace('_', ' ')}) for {_HEADERS[migration.dialect]}.\n"
        "-- Run the steps in order; `proletarian-di schema upgrade` does it for you and\n"
        "-- records the version. A step makes only the changes it finds missing, so one\n"
        "-- interrupted half-way is finished by running it again.\n\n" + migration.sql()
    )

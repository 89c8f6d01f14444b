"""The schema's numbered steps and the full DDL, rendered for given table names, and the
files in sql/ they make."""

from __future__ import annotations

import dataclasses
import re

from .._store.tables import (
    DEFAULT_ARCHIVED_JOB_TABLE,
    DEFAULT_JOB_TABLE,
    Tables,
    finished_index,
    unique_index,
)
from ..errors import ConfigurationError
from . import _ddl

# Binary and NO PAD, so 'email' and 'email ' are two queues, as on PostgreSQL: MariaDB runs
# the /*M! comment, MySQL 8.0.17+ the /*!80017 one (each ignores the other's).
NO_PAD_COLLATION = "/*M!100202 COLLATE utf8mb4_nopad_bin */ /*!80017 COLLATE utf8mb4_0900_bin */"
# MySQL 8.0.1-8.0.16 has no NO PAD binary collation for utf8mb4.
OLD_MYSQL_COLLATION = "COLLATE utf8mb4_bin"


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
        return render(self.template, self.dialect, job_table, archived_job_table, collation)


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
    check_dialect(dialect)
    steps = MIGRATIONS[dialect]
    if not 1 <= version <= len(steps):
        raise ConfigurationError(
            f"{dialect} has schema versions 1 to {len(steps)}, not {version!r}"
        )
    return steps[version - 1]


def check_dialect(dialect: str) -> None:
    if dialect not in _ddl.FULL:
        raise ConfigurationError(f"dialect must be 'postgresql' or 'mysql', got {dialect!r}")


def render(
    template: str, dialect: str, job_table: str, archived_job_table: str, collation: str
) -> str:
    check_dialect(dialect)
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
    check_dialect(dialect)
    return render(_ddl.FULL[dialect], dialect, job_table, archived_job_table, NO_PAD_COLLATION)


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
        "-- Rendered from proletarian_di/schema/; `proletarian-di schema print` renders\n"
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

"""Schema migrations from Proletarian's own tables, with jobs in them, on both databases."""

from __future__ import annotations

import contextlib
import uuid
from datetime import timezone
from pathlib import Path
from typing import Any

import pytest

from proletarian_di import SchemaError, create_queue_worker, process_next_job
from proletarian_di.schema import (
    LATEST,
    MIGRATIONS,
    WORKERS_NEED,
    migration_file,
    schema_version,
    statements,
    upgrade_schema,
)

from backends import enqueue_committed

ROOT = Path(__file__).resolve().parent.parent
OLD, FRESH = "proletarian_old", "proletarian_fresh"


def tables(schema: str) -> dict[str, str]:
    return {"job_table": f"{schema}.job", "archived_job_table": f"{schema}.archived_job"}


def drop(backend: Any, schema: str) -> None:
    if backend.name == "mysql":
        backend.execute(f"DROP DATABASE IF EXISTS {schema}")
    else:
        backend.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


@pytest.fixture
def scratch(backend: Any) -> Any:
    """Two empty schemas: one for old tables to upgrade, one for a fresh install."""
    for schema in (OLD, FRESH):
        drop(backend, schema)
    yield backend
    for schema in (OLD, FRESH):
        drop(backend, schema)


def run_sql(backend: Any, sql: str, time_zone: str | None = None) -> None:
    with contextlib.closing(backend.connect()) as conn:
        cursor = conn.cursor()
        if time_zone:
            cursor.execute("SET time_zone = %s", (time_zone,))
        for statement in statements(sql):
            cursor.execute(statement)
        conn.commit()


def create_at(backend: Any, version: int, schema: str = OLD) -> None:
    """The tables as the first `version` steps leave them (step 1: Proletarian's own)."""
    for migration in MIGRATIONS[backend.name][:version]:
        run_sql(backend, migration.sql(**tables(schema)))


def put_proletarian_job(backend: Any, n: int) -> None:
    """A job as a Proletarian (Clojure) worker in UTC+2 would have written it."""
    job_id = uuid.uuid4()
    key = job_id.bytes if backend.name == "mysql" else job_id
    with contextlib.closing(backend.connect()) as conn:
        cursor = conn.cursor()
        if backend.name == "mysql":
            cursor.execute("SET time_zone = '+02:00'")
        cursor.execute(
            f"INSERT INTO {OLD}.job (job_id, queue, job_type, payload, attempts, enqueued_at, "
            "process_at) VALUES (%s, 'default', 'old_job', %s, 0, "
            "'2020-01-01 14:00:00+02:00', '2020-01-01 14:00:00+02:00')"
            if backend.name == "postgresql"
            else f"INSERT INTO {OLD}.job VALUES (%s, 'default', 'old_job', %s, 0, "
            "'2020-01-01 14:00:00', '2020-01-01 14:00:00')",
            (key, f'{{"n": {n}}}'),
        )
        conn.commit()


def catalog(backend: Any, schema: str) -> list[tuple[Any, ...]]:
    """Columns (type, nullability, collation) and secondary indexes of the two tables."""
    if backend.name == "mysql":
        columns = backend.query(
            "SELECT table_name, column_name, column_type, is_nullable, collation_name "
            "FROM information_schema.columns WHERE table_schema = %s "
            "AND table_name IN ('job', 'archived_job') ORDER BY table_name, column_name",
            (schema,),
        )
        indexes = backend.query(
            "SELECT table_name, index_name, column_name, sub_part FROM "
            "information_schema.statistics WHERE table_schema = %s "
            "AND table_name IN ('job', 'archived_job') "
            "ORDER BY table_name, index_name, seq_in_index",
            (schema,),
        )
        return columns + indexes
    columns = backend.query(
        "SELECT table_name, column_name, data_type, is_nullable FROM information_schema.columns "
        "WHERE table_schema = %s AND table_name IN ('job', 'archived_job') "
        "ORDER BY table_name, column_name",
        (schema,),
    )
    indexes = backend.query(
        "SELECT tablename, indexname, replace(indexdef, %s, 'X.') FROM pg_indexes "
        "WHERE schemaname = %s AND tablename IN ('job', 'archived_job') ORDER BY indexname",
        (f"{schema}.", schema),
    )
    return columns + indexes


def version_of(backend: Any, schema: str) -> int:
    with contextlib.closing(backend.connect()) as conn:
        return schema_version(conn, **tables(schema))


def upgrade(backend: Any, schema: str = OLD, **options: Any) -> list[Any]:
    with contextlib.closing(backend.connect()) as conn:
        if backend.name == "mysql":
            with conn.cursor() as cursor:
                cursor.execute("SET time_zone = '+05:00'")  # the steps must not depend on it
        return upgrade_schema(conn, **tables(schema), **options)


def test_proletarians_tables_with_jobs_upgrade_to_a_fresh_install_and_lose_nothing(scratch):
    backend = scratch
    create_at(backend, 1)
    for n in range(3):
        put_proletarian_job(backend, n)
    assert version_of(backend, OLD) == 1

    applied = upgrade(backend)
    upgrade(backend, FRESH)

    assert [m.version for m in applied] == list(range(2, LATEST[backend.name] + 1))
    assert version_of(backend, OLD) == LATEST[backend.name]
    assert catalog(backend, OLD) == catalog(backend, FRESH)
    (when,) = {row[0] for row in backend.query(f"SELECT process_at FROM {OLD}.job")}
    assert (when.astimezone(timezone.utc) if when.tzinfo else when).hour == 12, "in UTC"
    source = backend.pool(2)
    seen: list[Any] = []
    try:
        while process_next_job(source, lambda t, p: seen.append(p["n"]), **tables(OLD)):
            pass
    finally:
        source.close()
    assert sorted(seen) == [0, 1, 2]
    assert backend.query(f"SELECT status, attempts FROM {OLD}.archived_job") == [("success", 1)] * 3


def test_each_step_keeps_the_jobs_and_records_its_version(scratch):
    backend = scratch
    create_at(backend, 1)
    put_proletarian_job(backend, 7)
    for migration in MIGRATIONS[backend.name][1:]:
        run_sql(backend, migration.sql(**tables(OLD)))
        assert version_of(backend, OLD) == migration.version
        assert backend.query(f"SELECT COUNT(*) FROM {OLD}.job")[0][0] == 1


def test_the_sql_files_are_the_rendered_steps_and_give_a_fresh_install(scratch):
    backend = scratch
    folder = ROOT / "sql" / "migrations" / backend.name
    files = sorted(folder.glob("*.sql"))
    assert [f.name for f in files] == [m.filename for m in MIGRATIONS[backend.name]]
    for path, migration in zip(files, MIGRATIONS[backend.name], strict=True):
        assert path.read_text() == migration_file(migration)
        run_sql(
            backend,
            path.read_text()
            .replace("proletarian.", f"{OLD}.")
            .replace("DATABASE IF NOT EXISTS proletarian", f"DATABASE IF NOT EXISTS {OLD}")
            .replace("SCHEMA IF NOT EXISTS proletarian", f"SCHEMA IF NOT EXISTS {OLD}"),
        )
    upgrade(backend, FRESH)
    assert catalog(backend, OLD) == catalog(backend, FRESH)
    assert version_of(backend, OLD) == LATEST[backend.name], "detected from the columns"


def test_upgrade_dry_run_changes_nothing_and_a_second_upgrade_is_a_no_op(scratch):
    backend = scratch
    create_at(backend, 1)
    pending = upgrade(backend, dry_run=True)
    assert [m.version for m in pending] == list(range(2, LATEST[backend.name] + 1))
    assert version_of(backend, OLD) == 1
    assert upgrade(backend)
    assert upgrade(backend) == []
    assert version_of(backend, OLD) == LATEST[backend.name]


def workers_need(dialect: str) -> int:
    return next(m.version for m in MIGRATIONS[dialect] if m.name == WORKERS_NEED)


def test_a_worker_on_an_older_schema_names_the_command_that_upgrades_it(scratch):
    backend = scratch
    old = workers_need(backend.name) - 1
    create_at(backend, old)
    source = backend.pool(2)
    try:
        worker = create_queue_worker(source, lambda t, p: None, **tables(OLD))
        with pytest.raises(SchemaError) as error:
            worker.start()
        with pytest.raises(SchemaError):
            process_next_job(source, lambda t, p: None, **tables(OLD))
    finally:
        source.close()
    message = str(error.value)
    assert "\n" not in message
    assert f"{OLD}.job is at version {old}" in message
    assert "proletarian-di schema upgrade" in message
    assert worker.state == "new"


def test_enqueue_needs_no_step_it_does_not_use_and_workers_need_every_step(scratch):
    backend = scratch
    create_at(backend, LATEST[backend.name] - 1)
    source = backend.pool(2)
    try:
        enqueue_committed(backend, ("t", 1), job_table=f"{OLD}.job")
        with pytest.raises(SchemaError, match=r"missing steps: \d+ \(observability\)"):
            process_next_job(source, lambda t, p: None, **tables(OLD))
        upgrade(backend)
        ran = []
        assert process_next_job(source, lambda t, p: ran.append(p), **tables(OLD)) is True
    finally:
        source.close()
    assert ran == [1]


def cli(*args: str) -> Any:
    from typer.testing import CliRunner

    from proletarian_di.cli import app

    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def test_the_cli_checks_upgrades_and_reports_versions(scratch):
    backend = scratch
    create_at(backend, 1)
    put_proletarian_job(backend, 1)
    names = ["--job-table", f"{OLD}.job", "--archived-job-table", f"{OLD}.archived_job"]
    url = ["-d", backend.url]
    latest = LATEST[backend.name]

    check = cli("schema", "check", *url, *names)
    assert check.exit_code == 6, check.output
    assert f"at schema version 1; this proletarian-di needs {latest}" in check.stderr
    assert "run `proletarian-di schema upgrade`" in check.stderr

    dry = cli("schema", "upgrade", "--dry-run", *url, *names)
    assert dry.exit_code == 0, dry.output
    assert f"{OLD}.job is at schema version 1; would apply steps 2 (" in dry.stdout
    assert version_of(backend, OLD) == 1

    upgraded = cli("schema", "upgrade", *url, *names)
    assert upgraded.exit_code == 0, upgraded.output
    assert upgraded.stdout.count("applied") == latest - 1
    assert f"is at schema version {latest} (was 1)" in upgraded.stdout

    again = cli("schema", "upgrade", *url, *names)
    assert f"is at schema version {latest}: nothing to do" in again.stdout
    ready = cli("schema", "check", *url, *names)
    assert ready.exit_code == 0, ready.output
    assert f"are ready (schema version {latest} of {latest})" in ready.stdout
    assert backend.query(f"SELECT COUNT(*) FROM {OLD}.job")[0][0] == 1

"""The schema: shipped SQL files, idempotent installs, custom names."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from proletarian_di.schema import (
    LATEST,
    schema_file,
    schema_sql,
    schema_version,
    statements,
    upgrade_schema,
)

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("dialect", ["postgresql", "mysql"])
def test_sql_files_are_the_rendered_schema(dialect):
    assert (ROOT / "sql" / f"{dialect}.sql").read_text() == schema_file(dialect)


def test_install_is_safe_to_run_twice_and_keeps_jobs(backend):
    from backends import enqueue_committed

    enqueue_committed(backend, ("kept", None))
    backend.install()
    backend.install()
    assert backend.jobs() == [("kept", 0, "default")]


def test_the_claim_index_orders_by_priority_then_process_at(backend):
    if backend.name == "mysql":
        rows = backend.query(
            "SELECT column_name FROM information_schema.statistics WHERE table_schema = "
            "'proletarian' AND table_name = 'job' AND index_name = "
            "'job_queue_priority_process_at' ORDER BY seq_in_index"
        )
        assert [r[0].lower() for r in rows] == [
            "queue",
            "priority_rank",
            "process_at",
            "job_id",
            "attempts",
            "leased_by",
        ], "the job id orders tied jobs; attempts and leased_by are what the overview counts by"
    else:
        rows = backend.query(
            "SELECT pg_get_indexdef(c.oid) FROM pg_class c WHERE c.relname = "
            "'job_queue_priority_process_at' AND c.relnamespace = 'proletarian'::regnamespace"
        )
        assert rows[0][0].endswith("(queue, ((- priority)), process_at)")


def test_custom_names_render_everywhere():
    sql = schema_sql("postgresql", "jobs.queue_item", "jobs.queue_item_done")
    assert "CREATE SCHEMA IF NOT EXISTS jobs" in sql
    assert "INDEX IF NOT EXISTS queue_item_queue_priority_process_at ON jobs.queue_item" in sql
    assert "proletarian" not in sql


@pytest.mark.parametrize(
    "args", [("oracle",), ("postgresql", "a.job", "b.archive"), ("mysql", "x;y", "a")]
)
def test_bad_schema_requests_are_rejected(args):
    with pytest.raises(ValueError):
        schema_sql(*args)


def test_statements_keep_dollar_quoted_bodies_and_strings_whole():
    """What the guarded steps need: a `$$` body is kept as it is, comments and all."""
    sql = (
        "DO $$ BEGIN\n    ALTER TABLE t ADD COLUMN c TEXT; -- a; comment\nEND $$;\n"
        "SET @ddl = IF(x, 'DO 0', 'ALTER TABLE t ADD c INT; no split');  -- trailing\n"
        "SELECT 'it''s -- not a comment'"
    )
    assert statements(sql) == [
        "DO $$ BEGIN\n    ALTER TABLE t ADD COLUMN c TEXT; -- a; comment\nEND $$",
        "SET @ddl = IF(x, 'DO 0', 'ALTER TABLE t ADD c INT; no split')",
        "SELECT 'it''s -- not a comment'",
    ]


def test_unqualified_tables_are_installed_and_recognised_in_the_connections_schema(backend):
    """The steps' catalog checks find tables named without a schema where the connection
    puts them (PostgreSQL's search path, MySQL's current database)."""
    names = {"job_table": "plain_job", "archived_job_table": "plain_job_done"}
    tables = ["plain_job", "plain_job_done", "plain_job_periodic", "plain_job_paused"]
    tables += ["plain_job_claims", "plain_job_schema_version"]
    try:
        with contextlib.closing(backend.connect()) as conn:
            assert upgrade_schema(conn, **names)
            assert schema_version(conn, **names, verify=True) == LATEST[backend.name]
            assert upgrade_schema(conn, **names) == []
    finally:
        for table in tables:
            backend.execute(f"DROP TABLE IF EXISTS {table}")

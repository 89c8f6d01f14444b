"""The schema: shipped SQL files, idempotent installs, custom names."""

from __future__ import annotations

from pathlib import Path

import pytest

from proletarian_di.schema import schema_file, schema_sql

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


def test_the_queue_index_exists(backend):
    if backend.name == "mysql":
        rows = backend.query(
            "SELECT column_name FROM information_schema.statistics WHERE table_schema = "
            "'proletarian' AND table_name = 'job' AND index_name = 'job_queue_process_at' "
            "ORDER BY seq_in_index"
        )
    else:
        rows = backend.query(
            "SELECT a.attname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
            "WHERE c.relname = 'job_queue_process_at' "
            "AND c.relnamespace = 'proletarian'::regnamespace "
            "ORDER BY array_position(i.indkey, a.attnum)"
        )
    assert [r[0].lower() for r in rows] == ["queue", "process_at"]


def test_custom_names_render_everywhere():
    sql = schema_sql("postgresql", "jobs.queue_item", "jobs.queue_item_done")
    assert "CREATE SCHEMA IF NOT EXISTS jobs" in sql
    assert "CREATE INDEX IF NOT EXISTS queue_item_queue_process_at ON jobs.queue_item" in sql
    assert "proletarian" not in sql


@pytest.mark.parametrize(
    "args", [("oracle",), ("postgresql", "a.job", "b.archive"), ("mysql", "x;y", "a")]
)
def test_bad_schema_requests_are_rejected(args):
    with pytest.raises(ValueError):
        schema_sql(*args)

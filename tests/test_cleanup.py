"""`QueueDatabase` drops the schemas (MySQL: databases) it created, and only those: what the
test session's fixtures do at its end, so that no run leaves databases on a shared server."""

from __future__ import annotations

from proletarian_di.testing import QueueDatabase

SCRATCH = "proletarian_cleanup"


def test_a_database_drops_the_schemas_it_created_and_keeps_the_rest(backend):
    fresh = QueueDatabase.from_url(backend.url)
    fresh.drop_schema(SCRATCH)
    fresh.drop_schema(f"{SCRATCH}_cli")
    try:
        fresh.install()  # the default tables' schema is the session's: found, not created
        assert fresh.created_schemas == []
        mine = fresh.with_tables(f"{SCRATCH}.job", f"{SCRATCH}.archived_job")
        mine.install()
        mine.install()
        fresh.will_create(f"{SCRATCH}_cli")
        fresh.execute(
            f"CREATE DATABASE {SCRATCH}_cli"
            if fresh.name == "mysql"
            else f"CREATE SCHEMA {SCRATCH}_cli"
        )
        fresh.will_create(f"{SCRATCH}_cli")
        assert fresh.created_schemas == [SCRATCH, f"{SCRATCH}_cli"], "shared with its views"
        assert {SCRATCH, f"{SCRATCH}_cli", "proletarian"} <= fresh.schemas()

        assert fresh.drop_created_schemas() == [f"{SCRATCH}_cli", SCRATCH]
        assert not fresh.schema_exists(SCRATCH)
        assert not fresh.schema_exists(f"{SCRATCH}_cli")
        assert fresh.schema_exists("proletarian")
        assert fresh.created_schemas == []
        assert backend.query(f"SELECT COUNT(*) FROM {backend.job_table}") == [(0,)]
    finally:
        fresh.drop_schema(SCRATCH)
        fresh.drop_schema(f"{SCRATCH}_cli")


def test_schemas_that_appear_in_a_block_are_noted_as_created(backend):
    fresh = QueueDatabase.from_url(backend.url)
    fresh.drop_schema(SCRATCH)
    try:
        with fresh.creating_schemas():
            fresh.with_tables(f"{SCRATCH}.job", f"{SCRATCH}.archived_job").install()
            fresh.created_schemas.clear()  # as if something else had created it
        assert fresh.created_schemas == [SCRATCH]
        assert fresh.drop_created_schemas() == [SCRATCH]
        assert not fresh.schema_exists(SCRATCH)
    finally:
        fresh.drop_schema(SCRATCH)

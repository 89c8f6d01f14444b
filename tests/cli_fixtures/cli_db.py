"""The CLI tests' own queue tables, so they never touch (or see) other tests' jobs."""

from __future__ import annotations

from typing import Any

from proletarian_di import enqueue
from proletarian_di.schema import (
    blocked_table,
    dependencies_table,
    outcomes_table,
    paused_table,
    periodic_table,
    workers_table,
    workflows_table,
)

JOB = "cli_test.cli_job"
ARCHIVE = "cli_test.cli_archived_job"
TABLES = {"job_table": JOB, "archived_job_table": ARCHIVE}
ENV = {"PROLETARIAN_JOB_TABLE": JOB, "PROLETARIAN_ARCHIVED_JOB_TABLE": ARCHIVE}


class CliDB:
    """A backend with the CLI tables installed and emptied, schedules, pauses, summed-up
    hours and the rows of workers killed by earlier tests too."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.url = backend.url
        self.name = backend.name
        backend.install(JOB, ARCHIVE)
        backend.execute(f"DELETE FROM {JOB}")
        backend.execute(f"DELETE FROM {ARCHIVE}")
        backend.execute(f"DELETE FROM {periodic_table(JOB)}")
        backend.execute(f"DELETE FROM {paused_table(JOB)}")
        backend.execute(f"DELETE FROM {workers_table(JOB)}")
        for table in (dependencies_table, blocked_table, workflows_table, outcomes_table):
            backend.execute(f"DELETE FROM {table(JOB)}")

    def env(self) -> dict[str, str]:
        return {**self.backend.env(), **ENV}

    def enqueue(self, *jobs: tuple[str, Any], **options: Any) -> list[Any]:
        """Enqueue and commit `jobs` as (job_type, payload); their ids, in order."""
        conn = self.backend.connect()
        ids = [
            enqueue(conn, job_type, payload, job_table=JOB, **options) for job_type, payload in jobs
        ]
        conn.commit()
        conn.close()
        return ids

    def jobs(self) -> list[tuple[Any, ...]]:
        """Waiting jobs as (job_type, attempts, queue), sorted."""
        return sorted(self.backend.query(f"SELECT job_type, attempts, queue FROM {JOB}"))

    def archived(self) -> list[tuple[Any, ...]]:
        """Archived jobs as (job_type, status, attempts), sorted."""
        return sorted(self.backend.query(f"SELECT job_type, status, attempts FROM {ARCHIVE}"))

    def payloads(self, table: str) -> list[Any]:
        import json

        return [json.loads(p) for (p,) in self.backend.query(f"SELECT payload FROM {table}")]

"""The queue's table names, in one place: the defaults, the check every name passes, and
each table and index named after the job table (`<job table>_workers`, ...).

Every layer reads its names here, so a companion table is renamed in one line.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from ..errors import ConfigurationError

DEFAULT_JOB_TABLE = "proletarian.job"
DEFAULT_ARCHIVED_JOB_TABLE = "proletarian.archived_job"
UPGRADE_HINT = "run `proletarian-di schema upgrade` (or the SQL in sql/migrations/)"

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?")


def check_table_name(name: Any, option: str = "job_table") -> str:
    """Return `name` if it is a plain `table` or `schema.table` identifier."""
    if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name):
        raise ConfigurationError(
            f"{option} must be a plain identifier such as 'proletarian.job', got {name!r}"
        )
    return name


def version_table(job_table: str) -> str:
    """Where the version of these tables is recorded: `<job table>_schema_version`."""
    return f"{job_table}_schema_version"


def periodic_table(job_table: str) -> str:
    """Where the periodic schedules of these tables live: `<job table>_periodic`."""
    return f"{job_table}_periodic"


def paused_table(job_table: str) -> str:
    """Where the paused queues of these tables are listed: `<job table>_paused`."""
    return f"{job_table}_paused"


def claims_table(job_table: str) -> str:
    """Where a job's claims are counted for `max_crashes`: `<job table>_claims`."""
    return f"{job_table}_claims"


def attempt_table(job_table: str) -> str:
    """Where a job's failed attempts are kept: `<job table>_attempt`."""
    return f"{job_table}_attempt"


def workers_table(job_table: str) -> str:
    """Where the running workers of these tables register: `<job table>_workers`."""
    return f"{job_table}_workers"


def outcomes_table(job_table: str) -> str:
    """Where the archive's outcomes are summed up per clock hour and queue:
    `<job table>_hourly_outcomes`."""
    return f"{job_table}_hourly_outcomes"


def rate_table(job_table: str) -> str:
    """Where rate-limited queues count their starts (`rate_limit`): `<job table>_rate_slots`."""
    return f"{job_table}_rate_slots"


def results_table(job_table: str) -> str:
    """Where handlers' return values are kept with their archived jobs: `<job table>_results`."""
    return f"{job_table}_results"


def dependencies_table(job_table: str) -> str:
    """Which jobs wait on which (`depends_on`): `<job table>_dependencies`."""
    return f"{job_table}_dependencies"


def blocked_table(job_table: str) -> str:
    """The jobs still waiting on others: `<job table>_blocked`."""
    return f"{job_table}_blocked"


def workflows_table(job_table: str) -> str:
    """Which workflow each of its jobs belongs to: `<job table>_workflows`."""
    return f"{job_table}_workflows"


COMPANIONS = {
    "version_table": version_table,
    "periodic_table": periodic_table,
    "paused_table": paused_table,
    "claims_table": claims_table,
    "attempt_table": attempt_table,
    "workers_table": workers_table,
    "outcomes_table": outcomes_table,
    "rate_table": rate_table,
    "results_table": results_table,
    "dependencies_table": dependencies_table,
    "blocked_table": blocked_table,
    "workflows_table": workflows_table,
}
"""Every table named after the job table, by the name the DDL's templates give it."""


def unique_index(job_table: str) -> str:
    """The index that keeps one job per queue and key: `<job table name>_queue_unique_key`."""
    return f"{job_table.rpartition('.')[2]}_queue_unique_key"


def finished_index(archived_job_table: str) -> str:
    """The archive's index by time (the dashboard's overview): `<archive name>_finished_at`."""
    return f"{archived_job_table.rpartition('.')[2]}_finished_at"


@dataclasses.dataclass(frozen=True)
class Tables:
    """A queue's pair of tables (validated `schema.table` names), which name the rest."""

    job_table: str = DEFAULT_JOB_TABLE
    archived_job_table: str = DEFAULT_ARCHIVED_JOB_TABLE

    def __post_init__(self) -> None:
        check_table_name(self.job_table, "job_table")
        check_table_name(self.archived_job_table, "archived_job_table")

    def companions(self) -> dict[str, str]:
        """Every table named after the job table, keyed as in `COMPANIONS`."""
        return {key: name(self.job_table) for key, name in COMPANIONS.items()}


DEFAULT_TABLES = Tables()

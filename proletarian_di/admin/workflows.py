"""Workflows (`Workflow.enqueue`) and results: `get_workflow`, its jobs and their states,
and `get_result`, the value a job's handler returned."""

from __future__ import annotations

import dataclasses
import json
import uuid
from typing import Any

from .._common.types import Connection
from .._store import dependencies as _dependencies
from .._store.dialects import dialect_of
from .._store.statuses import SUCCESS, status_in
from .._store.tables import DEFAULT_TABLES, Tables
from ..serializers import Serializer, SerializerName, check_serializer
from ._checks import _job_id
from .jobs import JobInfo, _collect, _detailed, _Query


@dataclasses.dataclass(frozen=True)
class WorkflowInfo:
    """A workflow (`Workflow.enqueue`): its name and jobs, each with its `parents` and
    `children`, in the order they were added; `finished` once every job has ended."""

    workflow_id: uuid.UUID
    name: str
    jobs: tuple[JobInfo, ...]

    @property
    def finished(self) -> bool:
        return all(job.finished_at is not None for job in self.jobs)

    @property
    def states(self) -> dict[str, int]:
        """How many of its jobs are in each state."""
        counts: dict[str, int] = {}
        for job in self.jobs:
            counts[job.state] = counts.get(job.state, 0) + 1
        return counts


def get_workflow(
    conn: Connection,
    workflow_id: uuid.UUID | str,
    *,
    tables: Tables = DEFAULT_TABLES,
    serializer: Serializer | SerializerName | None = None,
) -> WorkflowInfo | None:
    """The workflow with this id, its jobs and their states; None if there is none (or its
    jobs were purged). A few statements, however many jobs it has."""
    dialect = dialect_of(conn, tables)
    codec = check_serializer(serializer)
    key = dialect.default_id_strategy.encode(_job_id(workflow_id))
    with dialect.admin_read(conn):
        if not _dependencies.has_tables(conn, dialect):
            return None
        row = dialect.fetchone(
            conn,
            f"SELECT COUNT(*), MIN(name) FROM {dialect.workflows_table} WHERE workflow_id = %s",
            (key,),
        )
        if not row[0]:
            return None
        members = f"SELECT job_id FROM {dialect.workflows_table} WHERE workflow_id = %s"
        query = _Query(condition=(f"job_id IN ({members})", (key,)))
        found = _collect(conn, dialect, tables, query, int(row[0]), None, codec).jobs
        jobs = _detailed(conn, dialect, tables, found, (members, [key]))
    if not jobs:
        return None
    ordered = sorted(jobs, key=lambda job: (job.enqueued_at, job.job_id))
    return WorkflowInfo(_job_id(workflow_id), row[1], tuple(ordered))


def get_result(
    conn: Connection, job_id: uuid.UUID | str, *, tables: Tables = DEFAULT_TABLES
) -> Any:
    """The value the job's handler returned, kept with the job when it succeeded (decoded
    from JSON); None if it returned None, has not succeeded (yet), returned a value that is
    not JSON, or there is no such job. A retry that succeeds again replaces it; purging the
    archived job deletes it."""
    dialect = dialect_of(conn, tables)
    with dialect.admin_read(conn):
        if not dialect.table_columns(conn, dialect.results_table):
            return None
        key = dialect.default_id_strategy.encode(_job_id(job_id))
        row = dialect.fetchone(
            conn,
            f"SELECT r.return_value FROM {dialect.results_table} r JOIN "
            f"{tables.archived_job_table} a ON a.job_id = r.job_id "
            f"WHERE r.job_id = %s AND {status_in('a.status', SUCCESS)}",
            (key,),
        )
    return None if row is None or row[0] is None else json.loads(row[0])

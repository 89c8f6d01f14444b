"""Workflows: a graph of jobs enqueued together, each running once the jobs it comes after
have ended (see `_dependencies` for how they wait and are released).

    wf = Workflow("nightly-report")
    a = wf.add("extract", {"day": "2026-12-04"})
    b = wf.add("extract", {"day": "2026-12-03"})
    wf.add("report", None, after=[a, b])                 # once both have succeeded
    wf.add("notify", None, after=[a, b], when="complete")  # once both have ended, whatever
    workflow_id = wf.enqueue(conn)                       # in the caller's transaction
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ._common.checks import check_id_strategy, check_name
from ._common.types import Connection, EnqueueOptions
from ._store.connections import driver_connection
from ._store.dependencies import check_wait_for, require_tables
from ._store.dialects import dialect_for
from ._store.enqueue import _enqueue_one
from ._store.tables import DEFAULT_ARCHIVED_JOB_TABLE, DEFAULT_JOB_TABLE, check_table_name
from .errors import ConfigurationError

if TYPE_CHECKING:
    from typing_extensions import Unpack


@dataclasses.dataclass(eq=False)
class WorkflowJob:
    """A job added to a `Workflow`: pass it in another's `after=`. Its `job_id` is set by
    `Workflow.enqueue` (the last one, if the workflow is enqueued again)."""

    workflow: Workflow
    job_type: str
    payload: Any
    after: tuple[WorkflowJob, ...]
    when: str
    options: dict[str, Any]
    job_id: uuid.UUID | None = None

    def __repr__(self) -> str:
        return f"<WorkflowJob {self.job_type} of {self.workflow.name!r} {self.job_id or ''}>"


class Workflow:
    """Jobs that wait for one another, enqueued together (`enqueue`): a job added with
    `after=` runs once all of those have succeeded (`when="success"`, the default; if one
    fails for good or is cancelled, it is cancelled too, and so on down the graph), or once
    they have all ended, whatever their outcome (`when="complete"`: a batch's callback)."""

    def __init__(self, name: str) -> None:
        self.name = check_name(name, "workflow name")
        self.jobs: list[WorkflowJob] = []

    def __repr__(self) -> str:
        return f"<Workflow {self.name!r}: {len(self.jobs)} jobs>"

    def add(
        self,
        job_type: str,
        payload: Any = None,
        *,
        after: Iterable[WorkflowJob] = (),
        when: str = "success",
        **options: Unpack[EnqueueOptions],
    ) -> WorkflowJob:
        """Add a job, to run after the jobs `after` names (handles this workflow's `add`
        returned); `options` are `enqueue`'s. Returns its handle."""
        check_name(job_type, "job_type")
        parents = tuple(after)
        for parent in parents:
            if not isinstance(parent, WorkflowJob) or parent.workflow is not self:
                raise ConfigurationError(
                    f"after= takes jobs this workflow's add() returned, got {parent!r}"
                )
        check_wait_for(when)
        if when != "success" and not parents:
            raise ConfigurationError(f"when={when!r} is for a job added with after=")
        if "depends_on" in options:
            raise ConfigurationError("a workflow's jobs name what they wait on with after=")
        table = options.get("job_table", DEFAULT_JOB_TABLE)
        if self.jobs and table != self.jobs[0].options.get("job_table", DEFAULT_JOB_TABLE):
            raise ConfigurationError("every job of a workflow must be in the same job_table")
        job = WorkflowJob(self, job_type, payload, parents, when, dict(options))
        self.jobs.append(job)
        return job

    def enqueue(self, conn: Connection) -> uuid.UUID:
        """Enqueue every job on `conn`, in the caller's transaction (roll it back, and none
        exists); never commits. Returns the workflow's id (`admin.get_workflow`)."""
        if not self.jobs:
            raise ConfigurationError(f"workflow {self.name!r} has no jobs: add() some first")
        conn = driver_connection(conn)
        table = check_table_name(self.jobs[0].options.get("job_table", DEFAULT_JOB_TABLE))
        archive = self.jobs[0].options.get("archived_job_table", DEFAULT_ARCHIVED_JOB_TABLE)
        dialect = dialect_for(conn, table, check_table_name(archive, "archived_job_table"))
        require_tables(conn, dialect, "a workflow")
        workflow_id = uuid.uuid4()
        members = []
        for job in self.jobs:
            options = dict(job.options)
            if job.after:
                options["depends_on"] = [parent.job_id for parent in job.after]
            job.job_id = _enqueue_one(conn, job.job_type, job.payload, options, job.when)
            strategy = check_id_strategy(options.get("job_id_strategy"))
            raw = (strategy or dialect.default_id_strategy).encode(job.job_id)
            members.append((raw, dialect.default_id_strategy.encode(workflow_id), self.name))
        dialect.executemany(
            conn,
            f"INSERT INTO {dialect.workflows_table} (job_id, workflow_id, name) "
            "VALUES (%s, %s, %s)",
            members,
        )
        return workflow_id

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
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ._common.checks import check_name
from ._common.types import Connection, EnqueueOptions
from ._store import dependencies as _dependencies
from ._store.connections import driver_connection
from ._store.dependencies import check_wait_for, require_tables
from ._store.dialects import Dialect, dialect_for
from ._store.enqueue import _enqueue_one, _no_wake, _Prepared
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
        exists); never commits. Returns the workflow's id (`admin.get_workflow`).

        The jobs, their edges and their workflow's rows are written in a bounded number of
        statements, however many jobs there are (one per set of options the jobs share,
        plus one per job with a `unique_key`)."""
        if not self.jobs:
            raise ConfigurationError(f"workflow {self.name!r} has no jobs: add() some first")
        conn = driver_connection(conn)
        table = check_table_name(self.jobs[0].options.get("job_table", DEFAULT_JOB_TABLE))
        archive = self.jobs[0].options.get("archived_job_table", DEFAULT_ARCHIVED_JOB_TABLE)
        dialect = dialect_for(conn, table, check_table_name(archive, "archived_job_table"))
        require_tables(conn, dialect, "a workflow")
        workflow_id = uuid.uuid4()
        _Written(conn, dialect, self.jobs).write(self.name, workflow_id)
        return workflow_id


class _Written:
    """A workflow's jobs checked and encoded, every one of them before anything is written:
    grouped by the options they share (one `_Prepared` each), in the order they were added."""

    def __init__(self, conn: Any, dialect: Dialect, jobs: list[WorkflowJob]) -> None:
        self.conn, self.dialect, self.jobs = conn, dialect, jobs
        groups: dict[tuple[Any, ...], list[WorkflowJob]] = {}
        for job in jobs:
            groups.setdefault(_shared(job), []).append(job)
        self.prepared: list[_Prepared] = []
        self.rows: dict[WorkflowJob, tuple[Any, ...]] = {}
        self.strategies: dict[WorkflowJob, Any] = {}
        for group in groups.values():
            items = [(job.job_type, job.payload) for job in group]
            prepared = _Prepared(conn, items, group[0].options, blocked=bool(group[0].after))
            self.prepared.append(prepared)
            for job, row, job_id in zip(group, prepared.rows, prepared.ids, strict=True):
                job.job_id = job_id
                self.strategies[job] = prepared.strategy
                if prepared.unique_key is None:
                    self.rows[job] = tuple(row)

    def write(self, name: str, workflow_id: uuid.UUID) -> None:
        """The jobs (the keyed ones one by one, first: they wait on nothing), then the edges
        and blocked rows (`_dependencies.block`), then the workflow's rows."""
        conn, dialect = self.conn, self.dialect
        rows = self._in_order()
        dialect.check_rows(conn, rows, None)
        try:
            for job in self.jobs:
                if job not in self.rows:  # its key's holder, if a job of its queue holds it
                    job.job_id = _enqueue_one(conn, job.job_type, job.payload, job.options)
            dialect.insert_rows(conn, rows)
            edges = [
                (self.strategies[job].encode(parent.job_id), self.rows[job][0], job.when)
                for job in self.jobs
                for parent in job.after
            ]
            if edges:
                _dependencies.block(conn, dialect, edges, self.prepared[0].now, _no_wake)
        except Exception as exc:
            error = next(filter(None, (p.schema_error(exc) for p in self.prepared)), None)
            if error is None:
                raise
            raise error from exc
        key = dialect.default_id_strategy.encode(workflow_id)
        members = [(self.strategies[job].encode(job.job_id), key, name) for job in self.jobs]
        columns = (("job_id", "uuid"), ("workflow_id", "uuid"), ("name", "text"))
        dialect.insert_values(conn, dialect.workflows_table, columns, members)

    def _in_order(self) -> list[tuple[Any, ...]]:
        """The rows in the order their jobs were added, each enqueued at least a microsecond
        after the one before (a due row falls due then too), so that the workflow reads back
        in that order (`admin.get_workflow`)."""
        ordered: list[tuple[Any, ...]] = []
        last = None
        for job in self.jobs:
            row = self.rows.get(job)
            if row is None:
                continue
            at = row[4] if last is None or row[4] > last else last + _MICROSECOND
            ordered.append((*row[:4], at, at if row[5] == row[4] else row[5], *row[6:]))
            self.rows[job] = ordered[-1]
            last = at
        return ordered


_MICROSECOND = timedelta(microseconds=1)


def _shared(job: WorkflowJob) -> tuple[Any, ...]:
    """What a job shares with the others of its group: whether it waits, and its options."""
    return (bool(job.after), *((name, _hashed(v)) for name, v in sorted(job.options.items())))


def _hashed(value: Any) -> Any:
    """`value` as a group's key holds it: itself, or its identity when it is unhashable."""
    try:
        hash(value)
    except TypeError:
        return id(value)
    return value

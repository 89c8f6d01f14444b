"""Workflows (`Workflow.enqueue`) and results: `list_workflows`, the newest workflows with
how many of their jobs are in each state; `get_workflow`, its jobs and their states, by
level; and `get_result`, the value a job's handler returned."""

from __future__ import annotations

import dataclasses
import json
import uuid
from datetime import datetime
from typing import Any

from .._common.types import Connection
from .._store import dependencies as _dependencies
from .._store.dialects import dialect_of
from .._store.statuses import SUCCESS, status_in
from .._store.tables import DEFAULT_TABLES, Tables
from ..serializers import Serializer, SerializerName, check_serializer
from ._checks import _check_positive, _job_id
from .jobs import JobInfo, _collect, _detailed, _Query


@dataclasses.dataclass(frozen=True)
class WorkflowInfo:
    """A workflow (`Workflow.enqueue`): its name and jobs, each with its `parents` and
    `children`, in the order they were added; `finished` once every job has ended."""

    workflow_id: uuid.UUID
    name: str
    jobs: tuple[JobInfo, ...]
    size: int | None = None
    """How many jobs it has, when `get_workflow(max_jobs=...)` read none of them (more than
    that); None when `jobs` are all of them."""

    @property
    def finished(self) -> bool:
        return all(job.finished_at is not None for job in self.jobs)

    @property
    def states(self) -> dict[str, int]:
        """How many of its jobs are in each state."""
        return _states(self.jobs)

    def levels(self) -> tuple[tuple[JobInfo, ...], ...]:
        """Its jobs by level: first those that wait on no job of the workflow, then those
        whose parents are all on the levels before (a job's level is one more than its
        deepest parent's), each level in the order the jobs were added."""
        ids = {job.job_id for job in self.jobs}
        depth: dict[uuid.UUID, int] = {}
        by_id = {job.job_id: job for job in self.jobs}

        def level(job: JobInfo, seen: frozenset[uuid.UUID] = frozenset()) -> int:
            if job.job_id not in depth:
                parents = [p for p in job.parents if p in ids and p not in seen]
                below = seen | {job.job_id}
                depth[job.job_id] = 1 + max((level(by_id[p], below) for p in parents), default=-1)
            return depth[job.job_id]

        for job in self.jobs:
            level(job)
        rows: list[list[JobInfo]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
        for job in self.jobs:
            rows[depth[job.job_id]].append(job)
        return tuple(tuple(row) for row in rows)


def _states(jobs: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for job in jobs:
        counts[job.state] = counts.get(job.state, 0) + 1
    return counts


@dataclasses.dataclass(frozen=True)
class WorkflowSummary:
    """A workflow of `list_workflows`: its name, when its first job was enqueued, how many
    jobs it has and how many of them are in each state (`complete`: all of them were read;
    else `states` counts the first `read` only)."""

    workflow_id: uuid.UUID
    name: str
    created: datetime | None
    jobs: int
    states: dict[str, int]
    read: int

    @property
    def complete(self) -> bool:
        return self.read == self.jobs


@dataclasses.dataclass(frozen=True)
class WorkflowPage:
    """One page of `list_workflows`, newest first; `next_before`, the cursor of the next
    page (None after the last). A page may be empty and have a next one, when the rows it
    read all belonged to the workflows of earlier pages (enqueued at the same time)."""

    workflows: tuple[WorkflowSummary, ...]
    next_before: str | None


MAX_WORKFLOW_JOBS = 2000
"""The most rows `list_workflows` reads of the workflows' index, and of their jobs."""


def list_workflows(
    conn: Connection,
    *,
    limit: int = 20,
    before: str | None = None,
    max_jobs: int = MAX_WORKFLOW_JOBS,
    tables: Tables = DEFAULT_TABLES,
) -> WorkflowPage:
    """The newest workflows, at most `limit`, each with how many of its jobs are in each
    state; `before` (a page's `next_before`) goes on after that page. A workflow is as new
    as its newest job (job ids are time-ordered). Bounded: it reads at most `max_jobs`
    rows of the workflows' table to find them, and of their jobs to tell their states,
    however many there are; a workflow with more jobs than that is counted in full, its
    states over the first `max_jobs` (`WorkflowSummary.complete` is False). None on a
    schema without workflows."""
    _check_positive(limit, "limit")
    _check_positive(max_jobs, "max_jobs")
    dialect = dialect_of(conn, tables)
    ids = dialect.default_id_strategy
    table = dialect.workflows_table
    start, after_workflow = _cursor(before)
    with dialect.admin_read(conn):
        if not _dependencies.has_tables(conn, dialect):
            return WorkflowPage((), None)
        # Below the last page's newest job, past that page's last workflow's own rows.
        where, params = "", []
        if start is not None and after_workflow is not None:
            where = "WHERE job_id < %s AND workflow_id <> %s"
            params = [ids.encode(start), ids.encode(after_workflow)]
        scanned = dialect.fetchall(
            conn,
            f"SELECT workflow_id, job_id FROM {table} {where} ORDER BY job_id DESC LIMIT %s",
            [*params, max_jobs],
        )
        seen = list(dict.fromkeys(row[0] for row in scanned))[: limit + 1]
        if not seen:
            return WorkflowPage((), None)
        marks = ", ".join(["%s"] * len(seen))
        # Each one's newest job, size and name, down its index: one that is newer than
        # `before` was on an earlier page. (PostgreSQL has no MAX of a uuid; its text
        # sorts as it does.)
        newest = "MAX(CAST(job_id AS TEXT))" if dialect.name == "postgresql" else "MAX(job_id)"
        sizes = {
            row[0]: (_uuid(ids, row[1]), *row[2:])
            for row in dialect.fetchall(
                conn,
                f"SELECT workflow_id, {newest}, COUNT(*), MIN(name) FROM {table} "
                f"WHERE workflow_id IN ({marks}) GROUP BY workflow_id",
                seen,
            )
        }
        order = [w for w in seen if start is None or sizes[w][0] < start]
        shown: list[Any] = []
        budget = max_jobs
        for key in order[:limit]:
            if shown and int(sizes[key][1]) > budget:
                break
            shown.append(key)
            budget -= int(sizes[key][1])
        more = len(shown) < len(order) or len(scanned) == max_jobs
        if not shown:  # all of earlier pages: go on below what was read
            last_read = scanned[-1]
            cursor = f"{ids.decode(last_read[1])}/{after_workflow}"
            return WorkflowPage((), cursor if more else None)
        members = dialect.fetchall(
            conn,
            f"SELECT job_id, workflow_id FROM {table} WHERE workflow_id IN "
            f"({', '.join(['%s'] * len(shown))}) ORDER BY job_id LIMIT %s",
            [*shown, max_jobs],
        )
        of = {ids.decode(job): key for job, key in members}
        query = _Query(
            condition=(
                f"job_id IN ({', '.join(['%s'] * len(members))})",
                tuple(job for job, _ in members),
            )
        )
        codec = check_serializer(None)
        found = _collect(conn, dialect, tables, query, len(members), None, codec).jobs
    jobs: dict[Any, list[JobInfo]] = {key: [] for key in shown}
    for job in found:
        jobs[of[job.job_id]].append(job)
    summaries = tuple(
        WorkflowSummary(
            ids.decode(key),
            sizes[key][2],
            min((job.enqueued_at for job in jobs[key]), default=None),
            int(sizes[key][1]),
            _states(jobs[key]),
            len(jobs[key]),
        )
        for key in shown
    )
    last = f"{sizes[shown[-1]][0]}/{ids.decode(shown[-1])}" if more else None
    return WorkflowPage(summaries, last)


def _cursor(before: str | None) -> tuple[uuid.UUID | None, uuid.UUID | None]:
    """A `next_before`: the newest job id of the last workflow shown, and that workflow's id."""
    if before is None:
        return None, None
    job, _, workflow = before.partition("/")
    return _job_id(job), _job_id(workflow or job)


def _uuid(ids: Any, value: Any) -> uuid.UUID:
    return uuid.UUID(value) if isinstance(value, str) else ids.decode(value)


def get_workflow(
    conn: Connection,
    workflow_id: uuid.UUID | str,
    *,
    tables: Tables = DEFAULT_TABLES,
    serializer: Serializer | SerializerName | None = None,
    max_jobs: int | None = None,
) -> WorkflowInfo | None:
    """The workflow with this id, its jobs and their states; None if there is none (or its
    jobs were purged). A few statements, however many jobs it has. With `max_jobs`, a
    workflow of more jobs than that is read no further than its size: its `jobs` are empty
    and `size` says how many it has."""
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
        if max_jobs is not None and int(row[0]) > max_jobs:
            return WorkflowInfo(_job_id(workflow_id), row[1], (), int(row[0]))
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

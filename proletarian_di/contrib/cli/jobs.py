"""`proletarian-di jobs`: list, find, show, explain, retry and cancel jobs, through
`proletarian_di.admin`."""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Annotated, Any

import typer

from ... import admin
from ..._store.tables import DEFAULT_ARCHIVED_JOB_TABLE, DEFAULT_JOB_TABLE
from ...admin import JobInfo
from ...serializers import check_serializer, jsonable
from ._app import (
    ArchivedJobTable,
    CLIError,
    DatabaseURL,
    ExitCode,
    FailedSince,
    FailedUntil,
    JobTable,
    JobTypeFilter,
    JobTypeStyleOption,
    QueueFilter,
    SerializerOption,
    _admin,
    _ago,
    _escape,
    _guarded,
    as_stored,
    command_group,
    console,
    err,
    failed_window,
    listed,
    refuse_mixed_tables,
    unshown,
)

jobs_app = command_group(
    "jobs", "List, find, show, explain, retry and cancel jobs, waiting or archived.", "Operate"
)

JobIds = Annotated[
    list[str] | None,
    typer.Argument(help="Job ids (UUIDs).", show_default=False, metavar="JOB_ID"),
]
AsJSON = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]

_STATE_STYLES = {
    "running": "bold cyan",
    "retrying": "yellow",
    "failed": "red",
    "succeeded": "green",
    "cancelled": "dim",
}


def _when(moment: datetime | None) -> str:
    """How long ago (or, for a future time, 'in …')."""
    if moment is None:
        return "-"
    delta = datetime.now(timezone.utc) - moment
    return f"in {_ago(-delta)}" if delta.total_seconds() < 0 else f"{_ago(delta)} ago"


def _due(job: JobInfo) -> str:
    """When a job is (or was) due: a time, or what a job that waits on others waits for."""
    if job.state == "blocked":
        return job.waits_for or "after the jobs it depends on"
    if job.never_due:
        return "never: it was cancelled while it waited on other jobs"
    return f"{job.process_at.isoformat()} ({_when(job.process_at)})"


def job_lines(jobs: list[JobInfo]) -> list[str]:
    """Jobs two lines each, to fit 80 columns: id, state, attempt and age, then queue and
    job type below, whole (a long one wraps, never cut)."""
    lines = [f"[bold]{'Job id':<36}  {'State':<9}  Try  Enqueued[/]"]
    for job in jobs:
        style = _STATE_STYLES.get(job.state)
        state = f"[{style}]{job.state:<9}[/]" if style else _escape(f"{job.state:<9}")
        lines.append(f"{job.job_id}  {state}  {job.attempts:>3}  {_when(job.enqueued_at)}")
        lines.append(f"  [dim]{_escape(job.queue)} · {_escape(job.job_type)}[/]")
    if not jobs:
        lines.append("no jobs")
    return lines


def _job_ids(values: list[str] | None) -> list[uuid.UUID]:
    """The ids given, as UUIDs; a usage error names one that is not."""
    ids = []
    for value in values or []:
        try:
            ids.append(uuid.UUID(value))
        except ValueError:
            raise CLIError(f"not a job id (a UUID): {value!r}", ExitCode.USAGE) from None
    return ids


@jobs_app.command("list")
@_guarded
def list_jobs(
    ctx: typer.Context,
    queue: QueueFilter = None,
    job_type: JobTypeFilter = None,
    state: Annotated[
        str | None,
        unshown("--state", "-s", help=f"Only jobs in this state: {', '.join(admin.STATES)}."),
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", "-n", help="At most this many jobs.", min=1, max=1000)
    ] = 20,
    before: Annotated[
        str | None,
        unshown("--before", help="The next page: the cursor the previous page printed."),
    ] = None,
    as_json: AsJSON = False,
    database_url: DatabaseURL = None,
    job_table: JobTable = DEFAULT_JOB_TABLE,
    archived_job_table: ArchivedJobTable = DEFAULT_ARCHIVED_JOB_TABLE,
    serializer: SerializerOption = "json",
    job_type_style: JobTypeStyleOption = "plain",
) -> None:
    """Jobs, waiting and archived, newest first.

    'running' jobs are the ones a worker holds now.
    """
    refuse_mixed_tables(ctx, job_table, archived_job_table)
    with _admin(database_url, job_table, archived_job_table) as operator:
        jobs = operator.read(
            admin.list_jobs,
            queue=queue,
            job_type=as_stored(job_type, job_type_style),
            state=state,
            limit=limit,
            before=before,
            serializer=serializer,
        )
        where = str(operator.location)
    if listed(where, jobs, as_json):
        return
    for line in job_lines(jobs):
        console.print(line)
    if len(jobs) == limit:
        console.print(f"next page: --before {_escape(jobs[-1].cursor)}")


@jobs_app.command("find")
@_guarded
def find_jobs(
    ctx: typer.Context,
    text: Annotated[
        str,
        typer.Argument(
            help="A job id, or its first or last hex digits (dashes optional); or text in a "
            "job type or payload.",
            show_default=False,
        ),
    ],
    by: Annotated[
        str,
        typer.Option("--by", help=f"Where to look: {', '.join(admin.SEARCH_FIELDS)}."),
    ] = "any",
    limit: Annotated[
        int, typer.Option("--limit", "-n", help="At most this many jobs.", min=1, max=1000)
    ] = 20,
    as_json: AsJSON = False,
    database_url: DatabaseURL = None,
    job_table: JobTable = DEFAULT_JOB_TABLE,
    archived_job_table: ArchivedJobTable = DEFAULT_ARCHIVED_JOB_TABLE,
    serializer: SerializerOption = "json",
) -> None:
    """Jobs found by id (whole, its start or its end), job type or payload, newest first.

    An id's end and text are searched in the newest rows of each table only; the output
    says when there were more.
    """
    refuse_mixed_tables(ctx, job_table, archived_job_table)
    with _admin(database_url, job_table, archived_job_table) as operator:
        found = operator.read(admin.find_jobs, text, by=by, limit=limit, serializer=serializer)
        where = str(operator.location)
    notes = []
    if found.cut_short:
        notes.append(f"cut short: searched the newest {found.searched:,} jobs of each table")
    if found.more:
        notes.append(f"more jobs match: the first {limit} are shown")
    if as_json:
        err.print(_escape(where))
        for note in notes:
            err.print(note)
        typer.echo(json.dumps([job.as_dict() for job in found.jobs], indent=2, default=str))
        return
    console.print(_escape(where))
    for line in job_lines(found.jobs):
        console.print(line)
    for note in notes:
        console.print(note)


def _one_job(
    ctx: typer.Context,
    read: Callable[..., Any],
    job_id: str,
    database_url: str | None,
    job_table: str,
    archived_job_table: str,
) -> tuple[Any, str]:
    """`read(conn, id)` of one job (`admin.get_job`, `admin.explain_job`) and where it was
    read; exit 1 naming the tables when there is no such job, 2 for a malformed id."""
    refuse_mixed_tables(ctx, job_table, archived_job_table)
    (wanted,) = _job_ids([job_id])
    with _admin(database_url, job_table, archived_job_table) as operator:
        found = operator.read(read, wanted)
        where = str(operator.location)
    if found is None:
        raise CLIError(f"no job {wanted} in {where}", ExitCode.ERROR)
    return found, where


@jobs_app.command("show")
@_guarded
def show_job(
    ctx: typer.Context,
    job_id: Annotated[str, typer.Argument(help="The job's id (a UUID).", show_default=False)],
    as_json: AsJSON = False,
    database_url: DatabaseURL = None,
    job_table: JobTable = DEFAULT_JOB_TABLE,
    archived_job_table: ArchivedJobTable = DEFAULT_ARCHIVED_JOB_TABLE,
    serializer: SerializerOption = "json",
) -> None:
    """One job: its payload, attempts, times, state, every attempt (start, duration, worker,
    outcome), and its last error in full."""
    read = functools.partial(admin.get_job, serializer=check_serializer(serializer))
    job, where = _one_job(ctx, read, job_id, database_url, job_table, archived_job_table)
    if as_json:
        typer.echo(json.dumps(job.as_dict(), indent=2, default=str))
        return
    lines = [
        ("job id", str(job.job_id)),
        ("queue", job.queue),
        ("job type", job.job_type),
        ("state", job.state),
        ("attempts", str(job.attempts)),
        ("enqueued", f"{job.enqueued_at.isoformat()} ({_when(job.enqueued_at)})"),
        ("due", _due(job)),
    ]
    if job.workflow_id is not None:
        lines.append(("workflow", str(job.workflow_id)))
    if job.parents:
        lines.append(("waits on", ", ".join(f"{i} ({state})" for i, state in job.parent_states)))
    if job.children:
        lines.append(("waited on", ", ".join(map(str, job.children))))
    if job.group_key is not None:
        lines.append(("group key", job.group_key))
    if job.progress is not None:
        lines.append(("progress", _progress_text(job.progress)))
    if job.finished_at is not None:
        lines.append(("finished", f"{job.finished_at.isoformat()} ({_when(job.finished_at)})"))
    console.print(_escape(where))
    for label, value in lines:
        console.print(f"[bold]{label:>9}[/] {_escape(value)}")
    payload = json.dumps(jsonable(job.payload), indent=2, ensure_ascii=False)
    console.print(f"[bold]{'payload':>9}[/] {_escape(payload, lines=True)}")
    if job.history:
        console.print(f"[bold]{'history':>9}[/]")
        for attempt in job.history:
            console.print(f"{'':>9} {_escape(_attempt_line(attempt))}")
    if job.error:
        console.print("[bold]    error[/]")
        console.print(_escape(job.error, lines=True), soft_wrap=True, highlight=False)


def _progress_text(progress: Any) -> str:
    """A running job's progress: a fraction as a percentage, an object as compact JSON."""
    if isinstance(progress, (int, float)):
        return f"{progress:.0%}"
    return json.dumps(progress, separators=(", ", ": "), ensure_ascii=False)


@jobs_app.command("explain")
@_guarded
def explain_job(
    ctx: typer.Context,
    job_id: Annotated[str, typer.Argument(help="The job's id (a UUID).", show_default=False)],
    as_json: AsJSON = False,
    database_url: DatabaseURL = None,
    job_table: JobTable = DEFAULT_JOB_TABLE,
    archived_job_table: ArchivedJobTable = DEFAULT_ARCHIVED_JOB_TABLE,
) -> None:
    """Why a job is not running now: its state, then a line for each thing that holds it
    back (its queue paused, scheduled or retrying until a time, max_running full, no live
    worker for its queue)."""
    found, where = _one_job(
        ctx, admin.explain_job, job_id, database_url, job_table, archived_job_table
    )
    if as_json:
        typer.echo(json.dumps(found.as_dict(), indent=2, default=str))
        return
    console.print(_escape(where))
    style = _STATE_STYLES.get(found.state)
    state = f"[{style}]{found.state}[/]" if style else _escape(found.state)
    console.print(f"[bold]{found.job_id}[/] {state} [dim]in queue {_escape(found.queue)}[/]")
    for reason in found.reasons:
        console.print(f"  - {_escape(reason)}", soft_wrap=True)
    if found.note:
        console.print(f"  {_escape(found.note)}", soft_wrap=True)


def _attempt_line(attempt: admin.Attempt) -> str:
    """One attempt on a line: number, start, duration, worker, outcome (an error's first line)."""
    started = "start unknown" if attempt.started_at is None else attempt.started_at.isoformat()
    duration = attempt.duration
    ran = "?" if duration is None else f"{duration.total_seconds():.3f}s"
    outcome = "succeeded" if attempt.error is None else attempt.error.splitlines()[0]
    return f"#{attempt.number}  {started}  {ran}  {attempt.worker or '-'}  {outcome}"


def _filters_or_ids(ids: list[uuid.UUID], **filters: Any) -> None:
    if not ids and not any(value is not None for value in filters.values()):
        raise CLIError(
            "give job ids, or a filter ("
            + ", ".join(f"--{n.replace('_', '-')}" for n in filters)
            + ")",
            ExitCode.USAGE,
        )


@jobs_app.command("retry")
@_guarded
def retry_jobs(
    ctx: typer.Context,
    job_ids: JobIds = None,
    queue: QueueFilter = None,
    job_type: JobTypeFilter = None,
    since: FailedSince = None,
    until: FailedUntil = None,
    database_url: DatabaseURL = None,
    job_table: JobTable = DEFAULT_JOB_TABLE,
    archived_job_table: ArchivedJobTable = DEFAULT_ARCHIVED_JOB_TABLE,
    job_type_style: JobTypeStyleOption = "plain",
) -> None:
    """Move failed jobs, by id or by filter, back into the queue.

    They are due now, with the same id and payload and their attempts reset. Only
    failed jobs move; the others are left as they are.
    """
    refuse_mixed_tables(ctx, job_table, archived_job_table)
    ids = _job_ids(job_ids)
    _filters_or_ids(ids, queue=queue, job_type=job_type, since=since, until=until)
    start, end = failed_window(since, until)
    with _admin(database_url, job_table, archived_job_table) as operator:
        count = operator.write(
            admin.retry_jobs,
            ids or None,
            queue=queue,
            job_type=as_stored(job_type, job_type_style),
            since=start,
            until=end,
        )
        where = operator.location
    console.print(
        _escape(
            f"moved {count} failed job{'s' if count != 1 else ''} from {where.archived_job_table} "
            f"back into {where.job_table} on {where.url}"
        )
    )


@jobs_app.command("cancel")
@_guarded
def cancel_jobs(
    ctx: typer.Context,
    job_ids: JobIds = None,
    queue: QueueFilter = None,
    job_type: JobTypeFilter = None,
    database_url: DatabaseURL = None,
    job_table: JobTable = DEFAULT_JOB_TABLE,
    archived_job_table: ArchivedJobTable = DEFAULT_ARCHIVED_JOB_TABLE,
    job_type_style: JobTypeStyleOption = "plain",
) -> None:
    """Cancel waiting jobs, by id or by filter.

    Queued, scheduled and retrying jobs move to the archive as 'cancelled'. A job a
    worker is running now is never cancelled.
    """
    refuse_mixed_tables(ctx, job_table, archived_job_table)
    ids = _job_ids(job_ids)
    _filters_or_ids(ids, queue=queue, job_type=job_type)
    with _admin(database_url, job_table, archived_job_table) as operator:
        stored = as_stored(job_type, job_type_style)
        count = operator.write(admin.cancel_jobs, ids or None, queue=queue, job_type=stored)
        where = operator.location
    console.print(
        _escape(
            f"cancelled {count} waiting job{'s' if count != 1 else ''} in {where.job_table} on "
            f"{where.url} (jobs running now are never cancelled)"
        )
    )

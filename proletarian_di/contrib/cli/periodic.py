"""`proletarian-di periodic`: the periodic schedules the schedulers recorded."""

from __future__ import annotations

from typing import Annotated

import typer

from ... import admin
from ..._store.tables import DEFAULT_ARCHIVED_JOB_TABLE, DEFAULT_JOB_TABLE
from ._app import (
    ArchivedJobTable,
    DatabaseURL,
    JobTable,
    _admin,
    _escape,
    _guarded,
    command_group,
    console,
    listed,
    refuse_mixed_tables,
)
from .jobs import _when

periodic_app = command_group(
    "periodic", "The periodic jobs' schedules, with their last and next runs.", "Operate"
)


@periodic_app.command("list")
@_guarded
def list_schedules(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    database_url: DatabaseURL = None,
    job_table: JobTable = DEFAULT_JOB_TABLE,
    archived_job_table: ArchivedJobTable = DEFAULT_ARCHIVED_JOB_TABLE,
) -> None:
    """Every recorded schedule, with its last and next runs.

    A scheduler records its schedules when it starts: cron, time zone, job type and queue.
    """
    refuse_mixed_tables(ctx, job_table, archived_job_table)
    with _admin(database_url, job_table, archived_job_table) as operator:
        schedules = operator.read(admin.list_schedules)
        where = str(operator.location)
    if listed(
        where,
        schedules,
        as_json,
        "no periodic jobs recorded (a scheduler records them when it starts)",
    ):
        return
    for s in schedules:
        upcoming = s.next_run.isoformat() if s.next_run else "never"
        console.print(f"[bold]{_escape(s.name)}[/]  {_escape(s.cron)} ({_escape(s.timezone)})")
        console.print(f"  [dim]{_escape(s.queue)} · {_escape(s.job_type)}[/]")
        last = s.last_run
        console.print(f"  last {last.isoformat()} ({_when(last)})" if last else "  last never")
        console.print(f"  next {upcoming}" + (f" ({_when(s.next_run)})" if s.next_run else ""))

"""`proletarian-di periodic`: the periodic schedules the schedulers recorded, and an
operator's controls over them (disable, enable, run now)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import typer

from ... import admin
from ..._store.tables import DEFAULT_ARCHIVED_JOB_TABLE, DEFAULT_JOB_TABLE
from ._app import (
    ArchivedJobTable,
    CLIError,
    DatabaseURL,
    ExitCode,
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
    "periodic",
    "The periodic jobs' schedules, with their last and next runs; disable, enable, run now.",
    "Operate",
)

ScheduleName = Annotated[str, typer.Argument(help="The schedule's name.", show_default=False)]

SHOWN_RUNS = 5
"""How many of each schedule's recent runs `periodic list` shows."""


@periodic_app.command("list")
@_guarded
def list_schedules(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    database_url: DatabaseURL = None,
    job_table: JobTable = DEFAULT_JOB_TABLE,
    archived_job_table: ArchivedJobTable = DEFAULT_ARCHIVED_JOB_TABLE,
) -> None:
    """Every recorded schedule, with its last and next runs, whether it is disabled or a
    run was requested, and the jobs it enqueued lately (with --json, all those recorded).

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
        if s.paused_at is not None:
            console.print(
                f"  [yellow]disabled since {s.paused_at.isoformat()}[/] ({_when(s.paused_at)})"
            )
        if s.run_requested_at is not None:
            console.print(f"  run requested {s.run_requested_at.isoformat()}")
        for run in s.runs[:SHOWN_RUNS]:
            kind = "requested" if run.requested else "tick"
            console.print(f"  [dim]ran {run.tick.isoformat()} ({kind}) job {run.job_id}[/]")


def _control(command: str, change: Callable[..., bool], said: tuple[str, str], doc: str) -> None:
    """Register `periodic <command> NAME`: `change` on the schedule, committed, and what it
    changed said (`said`: when it changed something, and when it did not)."""

    def control(
        ctx: typer.Context,
        name: ScheduleName,
        database_url: DatabaseURL = None,
        job_table: JobTable = DEFAULT_JOB_TABLE,
        archived_job_table: ArchivedJobTable = DEFAULT_ARCHIVED_JOB_TABLE,
    ) -> None:
        refuse_mixed_tables(ctx, job_table, archived_job_table)
        with _admin(database_url, job_table, archived_job_table) as operator:
            try:
                changed = operator.write(change, name)
            except LookupError as exc:
                raise CLIError(str(exc), ExitCode.USAGE) from None
        console.print(f"schedule {_escape(name)} {said[0] if changed else said[1]}")

    control.__doc__ = doc
    control.__name__ = control.__qualname__ = command
    periodic_app.command(command)(_guarded(control))


_control(
    "disable",
    admin.disable_schedule,
    ("disabled", "was already disabled"),
    """Disable a schedule: no scheduler, in any process, enqueues its ticks until it is
    enabled again (kept in the database).""",
)
_control(
    "enable",
    admin.enable_schedule,
    ("enabled", "was already enabled"),
    """Enable a disabled schedule: its next tick is enqueued; those missed while it was
    disabled are not caught up.""",
)
_control(
    "run",
    admin.request_run,
    ("run requested", "had a run requested already, not yet enqueued"),
    """Ask for a run of a schedule now: one scheduler running it enqueues its job once,
    within its polling interval (a disabled schedule's too).""",
)

"""`proletarian-di archive prune`: the archive's retention, per outcome, in batches."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated

import typer

from ... import admin
from ..._store.tables import DEFAULT_ARCHIVED_JOB_TABLE, DEFAULT_JOB_TABLE
from ._app import (
    DURATION_FORMS,
    ArchivedJobTable,
    CLIError,
    DatabaseURL,
    DryRun,
    ExitCode,
    JobTable,
    _admin,
    _escape,
    _guarded,
    command_group,
    console,
    parse_duration,
    refuse_mixed_tables,
    unshown,
)

archive_app = command_group("archive", "Keep the archive's size in check.", "Operate")


def _keep(state: str) -> object:
    return unshown(
        f"--keep-{state}",
        help=f"Keep {state} jobs this long after they finished, delete older ones: "
        f"{DURATION_FORMS}. Without it, {state} jobs are all kept.",
    )


@archive_app.command("prune")
@_guarded
def prune(
    ctx: typer.Context,
    keep_succeeded: Annotated[str | None, _keep("succeeded")] = None,
    keep_failed: Annotated[str | None, _keep("failed")] = None,
    keep_cancelled: Annotated[str | None, _keep("cancelled")] = None,
    batch_size: Annotated[
        int,
        typer.Option(
            "--batch-size",
            min=1,
            help="Jobs deleted per transaction: each commits before the next, so that none "
            "holds the locks of more.",
        ),
    ] = admin.PRUNE_BATCH_SIZE,
    dry_run: DryRun = False,
    database_url: DatabaseURL = None,
    job_table: JobTable = DEFAULT_JOB_TABLE,
    archived_job_table: ArchivedJobTable = DEFAULT_ARCHIVED_JOB_TABLE,
) -> None:
    """Delete archived jobs past their outcome's retention, oldest first, a batch per
    transaction (e.g. --keep-succeeded 1d --keep-failed 30d)."""
    refuse_mixed_tables(ctx, job_table, archived_job_table)
    given = {
        "succeeded": keep_succeeded,
        "failed": keep_failed,
        "cancelled": keep_cancelled,
    }
    if all(text is None for text in given.values()):
        raise CLIError(
            "give a retention: --keep-succeeded, --keep-failed and/or --keep-cancelled "
            "(an outcome without one is kept)",
            ExitCode.USAGE,
        )
    keep = {
        state: None if text is None else parse_duration(text, f"--keep-{state}")
        for state, text in given.items()
    }
    now = datetime.now(timezone.utc)
    totals = dict.fromkeys(given, 0)
    with _admin(database_url, job_table, archived_job_table) as operator:
        conn = operator.conn
        try:
            retentions = {f"keep_{state}": kept for state, kept in keep.items()}
            steps = admin.prune_archive(
                conn,
                batch_size=batch_size,
                dry_run=dry_run,
                now=now,
                tables=operator.tables,
                **retentions,
            )
            for step in steps:
                conn.commit()
                totals[step.state] += step.jobs
        finally:
            conn.rollback()
        where = operator.location
    verb = "would delete" if dry_run else "deleted"
    for state, kept in keep.items():
        if kept is None:
            console.print(f"kept every {state} job (no --keep-{state})")
            continue
        count, before = totals[state], now - kept
        console.print(
            _escape(
                f"{verb} {count:,} {state} job{'s' if count != 1 else ''} that finished "
                f"before {before:%Y-%m-%d %H:%M:%S} UTC from {where.archived_job_table} "
                f"on {where.url}"
            )
        )

"""`proletarian-di workers`: the worker processes connected now, and what each thread runs."""

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
    _ago,
    _escape,
    _guarded,
    app,
    console,
    listed,
    refuse_mixed_tables,
)
from .jobs import _when


@app.command(rich_help_panel="Operate")
@_guarded
def workers(
    ctx: typer.Context,
    queue: Annotated[
        str | None, typer.Option("--queue", "-q", help="Only the workers of this queue.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = False,
    database_url: DatabaseURL = None,
    job_table: JobTable = DEFAULT_JOB_TABLE,
    archived_job_table: ArchivedJobTable = DEFAULT_ARCHIVED_JOB_TABLE,
) -> None:
    """The running workers: host, pid, queue, threads, and the job each busy thread runs.

    A worker whose heartbeat stopped (its process was killed) shows as stale until pruned.
    """
    refuse_mixed_tables(ctx, job_table, archived_job_table)
    with _admin(database_url, job_table, archived_job_table) as operator:
        found = operator.read(admin.list_workers, queue=queue)
        where = str(operator.location)
    if listed(where, found, as_json, "no worker is connected"):
        return
    for w in found:
        state = "[red]stale[/]" if w.state == "stale" else _escape(w.state)
        console.print(
            f"[bold]{_escape(w.queue_worker_id)}[/]  {_escape(w.host)} pid {w.pid}  {state}  "
            f"{w.busy}/{w.worker_threads} busy"
        )
        console.print(
            f"  [dim]{_escape(', '.join(w.queues))} · started {_when(w.started_at)} · "
            f"seen {_ago(w.seen_ago)} ago[/]"
        )
        for t in w.threads:
            attempt = "?" if t.attempt is None else t.attempt
            job = f"  {t.job_id} {_escape(t.job_type or '')} try {attempt}" if t.job_id else ""
            console.print(f"  {_escape(t.name)}  {_escape(t.activity)} {_ago(t.duration)}{job}")

"""`proletarian-di doctor`: the queue's own health, each reading against its threshold with a
sentence that says what to do (`admin.diagnose`)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from ... import admin
from ..._store.tables import DEFAULT_ARCHIVED_JOB_TABLE, DEFAULT_JOB_TABLE
from ._app import (
    ArchivedJobTable,
    DatabaseURL,
    ExitCode,
    JobTable,
    _admin,
    _escape,
    _guarded,
    app,
    console,
    err,
    refuse_mixed_tables,
)

_DEFAULTS = admin.Thresholds()
_COLOURS = {"ok": "green", "warn": "bold red", "unknown": "yellow"}


def _threshold(name: str, help: str) -> typer.models.OptionInfo:
    return typer.Option(name, min=1, help=help)


@app.command(rich_help_panel="Operate")
@_guarded
def doctor(
    ctx: typer.Context,
    dead_rows: Annotated[
        int, _threshold("--dead-rows", "Dead rows in the job table past which it warns.")
    ] = _DEFAULTS.dead_rows,
    horizon: Annotated[
        float,
        _threshold("--horizon", "Seconds a transaction may stay open (hold the horizon)."),
    ] = _DEFAULTS.horizon_s,
    vacuum_lag: Annotated[
        float,
        _threshold("--vacuum-lag", "Seconds autovacuum may stay behind (PostgreSQL)."),
    ] = _DEFAULTS.vacuum_lag_s,
    purge_lag: Annotated[
        int, _threshold("--purge-lag", "InnoDB history list length past which it warns.")
    ] = _DEFAULTS.purge_lag,
    claim_latency: Annotated[
        float, _threshold("--claim-latency", "Seconds the oldest due job may have waited.")
    ] = _DEFAULTS.claim_latency_s,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = False,
    database_url: DatabaseURL = None,
    job_table: JobTable = DEFAULT_JOB_TABLE,
    archived_job_table: ArchivedJobTable = DEFAULT_ARCHIVED_JOB_TABLE,
) -> None:
    """The queue's health: dead rows and vacuum, the oldest transaction holding the horizon
    (PostgreSQL), InnoDB's purge lag and long transactions (MySQL), and the claim latency.

    Exits 8 when a reading is past its threshold, 0 otherwise.
    """
    refuse_mixed_tables(ctx, job_table, archived_job_table)
    thresholds = admin.Thresholds(dead_rows, horizon, vacuum_lag, purge_lag, claim_latency)
    with _admin(database_url, job_table, archived_job_table) as operator:
        findings = operator.read(admin.diagnose, thresholds=thresholds)
        where = str(operator.location)
    if as_json:
        err.print(_escape(where))
        typer.echo(json.dumps([f.as_dict() for f in findings], indent=2, default=str))
    else:
        console.print(_escape(where))
        for f in findings:
            mark = f"[{_COLOURS[f.status]}]{f.status:>7}[/]"
            console.print(f"{mark}  {f.check}: {_escape(f.message)}")
    if admin.degraded(findings):
        raise typer.Exit(ExitCode.DEGRADED)

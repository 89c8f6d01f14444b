"""`proletarian-di dashboard`: serve the web dashboard on a database URL, on this machine only
unless told otherwise, read-only unless actions are enabled behind a password."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from ... import admin
from ..._common.checks import check_job_type_style
from ..._store.tables import DEFAULT_ARCHIVED_JOB_TABLE, DEFAULT_JOB_TABLE
from ..._store.urls import connect
from ...serializers import check_serializer
from ._app import (
    ArchivedJobTable,
    CLIError,
    DatabaseURL,
    ExitCode,
    JobTable,
    JobTypeStyleOption,
    SerializerOption,
    _admin,
    _escape,
    _guarded,
    _log_level,
    app,
    console,
    err,
    refuse_mixed_tables,
)

PASSWORD_ENVVAR = "PROLETARIAN_DASHBOARD_PASSWORD"
LOOPBACK = ("127.0.0.1", "::1", "localhost")


@app.command(rich_help_panel="Operate")
@_guarded
def dashboard(
    ctx: typer.Context,
    database_url: DatabaseURL = None,
    host: Annotated[
        str,
        typer.Option(
            "--host",
            help="The address to listen on; 127.0.0.1 is reachable from this machine only.",
        ),
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", "-p", min=1, max=65535, help="The port to listen on.")
    ] = 8080,
    enable_actions: Annotated[
        bool,
        typer.Option(
            "--enable-actions",
            help=f"Let the signed-in user retry, cancel, pause, resume (needs {PASSWORD_ENVVAR}).",
        ),
    ] = False,
    user: Annotated[
        str, typer.Option("--user", help=f"The HTTP basic auth user, with {PASSWORD_ENVVAR}.")
    ] = "admin",
    refresh: Annotated[
        float,
        typer.Option("--refresh", min=0, help="Seconds between the pages' updates (0: none)."),
    ] = 5.0,
    job_table: JobTable = DEFAULT_JOB_TABLE,
    archived_job_table: ArchivedJobTable = DEFAULT_ARCHIVED_JOB_TABLE,
    serializer: SerializerOption = "json",
    job_type_style: JobTypeStyleOption = "plain",
) -> None:
    """Serve the web dashboard: queues, jobs, failures, schedules.

    Read-only unless --enable-actions. When PROLETARIAN_DASHBOARD_PASSWORD is set, every
    page asks for --user and that password (HTTP basic auth: put TLS in front of it when it
    leaves this machine).
    """
    refuse_mixed_tables(ctx, job_table, archived_job_table)
    password = os.environ.get(PASSWORD_ENVVAR) or None
    if enable_actions and password is None:
        raise CLIError(
            f"--enable-actions needs a password: set {PASSWORD_ENVVAR} (actions need an "
            "authenticated user); without it the dashboard is read-only",
            ExitCode.USAGE,
        )
    try:
        import uvicorn

        from ..dashboard import basic_auth
        from ..dashboard import dashboard as make_dashboard
    except ImportError as exc:
        raise CLIError(
            f"the dashboard needs the dashboard extra ({exc.name} is missing): "
            "pip install 'proletarian-di[dashboard]'",
            ExitCode.USAGE,
        ) from None
    with _admin(database_url, job_table, archived_job_table) as operator:
        where = str(operator.location)
    url = database_url or ""
    site = make_dashboard(
        lambda: connect(url),
        actions=enable_actions,
        auth=basic_auth(user, password) if password else None,
        tables=admin.Tables(job_table, archived_job_table),
        refresh_s=refresh,
        serializer=check_serializer(serializer),
        job_type_style=check_job_type_style(job_type_style),
    )
    shown_host = f"[{host}]" if ":" in host else host
    mode = "actions enabled" if enable_actions else "read-only"
    sign_in = f", basic auth as {user}" if password else ", no password"
    console.print(_escape(f"dashboard of {where}: http://{shown_host}:{port}/ ({mode}{sign_in})"))
    if host not in LOOPBACK and password is None:
        err.print(
            _escape(
                f"warning: listening on {host} without a password: anyone who reaches it sees "
                f"the jobs and their payloads; set {PASSWORD_ENVVAR}"
            )
        )
    with _log_level("info"):
        uvicorn.run(site, host=host, port=port, log_level="info")

"""`schema`, `enqueue`, `stats`, `retry-failed` and `purge-archive`."""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Group, RenderableType
from rich.live import Live
from rich.measure import Measurement
from rich.table import Table

from ... import admin
from ..._common.checks import check_job_type_style
from ..._common.types import DialectName
from ..._store.dialects import dialect_for
from ..._store.enqueue import enqueue as enqueue_job
from ..._store.tables import DEFAULT_ARCHIVED_JOB_TABLE, DEFAULT_JOB_TABLE
from ..._store.urls import url_dialect
from ...admin import QueueStats
from ...errors import SchemaError
from ...jobs import DEFAULT_QUEUE
from ...schema import (
    LATEST,
    Migration,
    install_schema,
    pending_migrations,
    schema_sql,
    schema_version,
    upgrade_schema,
)
from ...serializers import check_serializer
from ._app import (
    DURATION_FORMS,
    ArchivedJobTable,
    CLIError,
    DatabaseURL,
    DryRun,
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
    _connection,
    _escape,
    _guarded,
    app,
    as_stored,
    console,
    err,
    failed_window,
    locate,
    parse_duration,
    refuse_mixed_tables,
    schema_app,
    unshown,
)
from .jobs import job_lines

DialectOption = Annotated[
    DialectName | None,
    unshown("--dialect", help="Database to print for. Default: the one --database-url names."),
]
StatusFilter = Annotated[
    str | None, unshown("--status", help="Only 'success' or 'failure' jobs (default: both).")
]

# schema ---------------------------------------------------------------------------------------


@schema_app.command("print")
@_guarded
def schema_print(
    dialect: DialectOption = None,
    database_url: DatabaseURL = None,
    job_table: JobTable = DEFAULT_JOB_TABLE,
    archived_job_table: ArchivedJobTable = DEFAULT_ARCHIVED_JOB_TABLE,
) -> None:
    """Print the schema SQL (safe to run twice), e.g. for a migration tool."""
    if dialect is None:
        if not database_url:
            raise CLIError("pass --dialect postgresql|mysql or --database-url", ExitCode.USAGE)
        name = url_dialect(database_url)
    else:
        name = dialect
    typer.echo(schema_sql(name, job_table, archived_job_table), nl=False)


def _also(text: str, note: str, separator: str = ", ") -> str:
    """`text`, then `note` (on MySQL, the database the tables are in) if there is one."""
    return f"{text}{separator}{note}" if note else text


def _install(database_url: str | None, job_table: str, archived_job_table: str) -> None:
    """Create the schema, both tables and the index, or bring older tables up to date
    (safe to run twice)."""
    with _connection(database_url) as conn:
        where = locate(conn, database_url or "", job_table, archived_job_table)
        install_schema(conn, job_table, archived_job_table)
        version = schema_version(conn, job_table, archived_job_table)
    console.print(
        "[green]✓[/] "
        + _escape(
            f"installed {where.job_table} and {where.archived_job_table} "
            f"(schema version {version}) on {_also(where.url, where.databases())}"
        )
    )


def _steps(steps: list[Migration]) -> str:
    return ", ".join(f"{m.version} ({m.name.replace('_', ' ')})" for m in steps)


def _check(database_url: str | None, job_table: str, archived_job_table: str) -> None:
    """Check the server, that both tables exist with every column, and their schema version
    against the one this proletarian-di needs (exit 6 if anything is missing)."""
    with _connection(database_url) as conn:
        dialect = dialect_for(conn, job_table, archived_job_table)
        location = locate(conn, database_url or "", job_table, archived_job_table)
        try:
            dialect.check_server(conn)
            product, server = dialect.server_version(conn)
            version = schema_version(conn, job_table, archived_job_table)
            pending = pending_migrations(conn, job_table, archived_job_table)
            tables = admin.Tables(job_table, archived_job_table)
            missing = {} if pending else admin.missing_columns(conn, tables=tables)
        except SchemaError as exc:
            note = _also("", location.databases(), " ")
            raise CLIError(f"schema missing{note}: {exc}", ExitCode.SCHEMA) from None
        finally:
            conn.rollback()
    needed = LATEST[dialect.name]
    both = f"{location.job_table} and {location.archived_job_table}"
    server_name = f"{product} {'.'.join(map(str, server))}"
    where = f"{server_name} on {location.url}: {_also(both, location.databases(), ' ')}"
    if pending:
        raise CLIError(
            f"{where} are at schema version {version}; this proletarian-di needs {needed} "
            f"(missing steps: {_steps(pending)}): run `proletarian-di schema upgrade`",
            ExitCode.SCHEMA,
        )
    if missing:
        problems = "; ".join(f"{t} lacks {', '.join(cols)}" for t, cols in missing.items())
        raise CLIError(f"schema does not match: {problems}", ExitCode.SCHEMA)
    console.print(f"[green]✓[/] {_escape(where)} are ready (schema version {version} of {needed})")


@schema_app.command("upgrade")
@_guarded
def schema_upgrade(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List the steps to apply, apply nothing.")
    ] = False,
    database_url: DatabaseURL = None,
    job_table: JobTable = DEFAULT_JOB_TABLE,
    archived_job_table: ArchivedJobTable = DEFAULT_ARCHIVED_JOB_TABLE,
) -> None:
    """Bring the tables to the current schema version, step by step (creating them if there
    are none), and record the version."""

    def landed(step: Migration) -> None:
        console.print(f"[green]✓[/] step {_steps([step])} applied")

    with _connection(database_url) as conn:
        where = locate(conn, database_url or "", job_table, archived_job_table)
        console.print(_escape(_also(str(where), where.databases())))
        before = schema_version(conn, job_table, archived_job_table)
        steps = upgrade_schema(
            conn, job_table, archived_job_table, dry_run=dry_run, report=None if dry_run else landed
        )
    job = _escape(where.job_table)
    if not steps:
        console.print(f"{job} is at schema version {before}: nothing to do")
    elif dry_run:
        console.print(f"{job} is at schema version {before}; would apply steps {_steps(steps)}")
    else:
        console.print(f"{job} is at schema version {steps[-1].version} (was {before})")


def _on_tables(name: str, run: Callable[[str | None, str, str], None]) -> None:
    """Register `schema NAME`: a command of the database URL and the two table names."""

    @schema_app.command(name, help=run.__doc__)
    @_guarded
    def command(
        database_url: DatabaseURL = None,
        job_table: JobTable = DEFAULT_JOB_TABLE,
        archived_job_table: ArchivedJobTable = DEFAULT_ARCHIVED_JOB_TABLE,
    ) -> None:
        run(database_url, job_table, archived_job_table)


_on_tables("install", _install)
_on_tables("check", _check)


# enqueue --------------------------------------------------------------------------------------


@app.command(rich_help_panel="Operate")
@_guarded
def enqueue(
    job_type: Annotated[
        str, typer.Argument(help="The job type.", metavar="JOB_TYPE", show_default=False)
    ],
    payload: Annotated[
        str,
        typer.Argument(help="The payload as JSON.", metavar="PAYLOAD_JSON"),
    ] = "null",
    queue: Annotated[
        str, typer.Option("--queue", "-q", envvar="PROLETARIAN_QUEUE", help="The queue.")
    ] = DEFAULT_QUEUE,
    delay: Annotated[
        str | None,
        unshown("--in", help=f"Run it this long from now: {DURATION_FORMS}."),
    ] = None,
    priority: Annotated[
        int,
        typer.Option(
            "--priority",
            help="Among the queue's due jobs, a higher priority runs first (negative: later).",
        ),
    ] = 0,
    unique_key: Annotated[
        str | None,
        unshown(
            "--unique-key",
            help="Enqueue nothing if a job of the queue with this key waits, is retried or "
            "runs: print that job's id instead.",
        ),
    ] = None,
    database_url: DatabaseURL = None,
    job_table: JobTable = DEFAULT_JOB_TABLE,
    serializer: SerializerOption = "json",
    job_type_style: JobTypeStyleOption = "plain",
) -> None:
    """Enqueue one job and print its id (with --unique-key, the id of the job holding the
    key, if one does).

    With --serializer transit and --job-type-style keyword it writes the row Proletarian's
    enqueue! writes, for a Clojure worker: the JSON payload's object keys become keywords.
    """
    try:
        data = json.loads(payload)
    except ValueError as exc:
        raise CLIError(f"PAYLOAD_JSON is not valid JSON: {exc}", ExitCode.USAGE) from None
    process_in = parse_duration(delay, "--in") if delay is not None else None
    with _connection(database_url) as conn:
        strategy = _KnownId(dialect_for(conn, job_table, DEFAULT_ARCHIVED_JOB_TABLE))
        job_id = enqueue_job(
            conn,
            job_type,
            data,
            queue=queue,
            process_in=process_in,
            priority=priority,
            unique_key=unique_key,
            job_table=job_table,
            job_id_strategy=strategy,
            serializer=check_serializer(serializer),
            job_type_style=check_job_type_style(job_type_style),
        )
        conn.commit()
        where = locate(conn, database_url or "", job_table, DEFAULT_ARCHIVED_JOB_TABLE)
    if job_id != strategy.job_id:
        err.print(
            _escape(
                f"enqueued nothing: job {job_id} on queue {queue!r} in {where.job_table} on "
                f"{where.url} holds unique key {unique_key!r}"
            )
        )
        typer.echo(str(job_id))
        return
    when = f"in {_ago(process_in)}" if process_in else "now"
    extras = f", priority {priority}" if priority else ""
    if unique_key is not None:
        extras += f", unique key {unique_key!r}"
    err.print(
        _escape(
            f"enqueued {job_type} on queue {queue!r} in {where.job_table} on {where.url}, "
            f"due {when}{extras}"
        )
    )
    typer.echo(str(job_id))


class _KnownId:
    """The database's id strategy, with the new job's id made beforehand: an `enqueue` with a
    unique key that returns another id found a job holding the key, and wrote nothing."""

    def __init__(self, dialect: Any) -> None:
        self.inner = dialect.default_id_strategy
        self.job_id = self.inner.generate()

    def generate(self) -> uuid.UUID:
        return self.job_id

    def encode(self, job_id: uuid.UUID) -> Any:
        return self.inner.encode(job_id)

    def decode(self, value: Any) -> uuid.UUID:
        return self.inner.decode(value)


# stats ----------------------------------------------------------------------------------------


_STATS_COLUMNS = (
    ("Due", None),
    ("Running", "cyan"),
    ("Later", None),
    ("Blocked", None),
    ("Oldest", None),
    ("OK 1h", "green"),
    ("Fail 1h", "red"),
    ("OK 24h", "green"),
    ("Fail 24h", "red"),
)
_STATS_CAPTION = "Due counts the running jobs too; Oldest is the oldest due job's wait."
_QUEUE_MIN_WIDTH = 8
_QUEUE_WHOLE_WIDTH = 24
"""Headers fold onto two lines before a queue name up to this long does."""
_UNBOUNDED = 10_000
"""A width no table of figures reaches: to measure one as it is, unsqueezed."""


def _stats_figures(row: QueueStats) -> list[str]:
    """A queue's figures, in the order of `_STATS_COLUMNS`."""
    return [
        str(row.due),
        str(row.running),
        str(row.scheduled),
        str(row.blocked),
        _ago(row.oldest_due),
        str(row.succeeded_last_hour),
        str(row.failed_last_hour),
        str(row.succeeded_last_day),
        str(row.failed_last_day),
    ]


def _queue_label(row: QueueStats) -> str:
    return _escape(row.queue) + (" [yellow](paused)[/]" if row.paused else "")


def _stats_table(
    rows: list[QueueStats], where: str, sums: admin.HourlySums, width: int
) -> RenderableType:
    """Per queue, in `width` columns: a table whose figure columns are as wide as their
    widest figure (their headers folded onto two lines if that makes it fit) and whose queue
    names fold; where even that does not fit, each queue's figures one a line. A figure is
    never cut."""
    figures = [_stats_figures(row) for row in rows]
    widest = [max([0] + [len(f[i]) for f in figures]) for i in range(len(_STATS_COLUMNS))]

    def table(fold: bool, queue_width: int | None) -> Table:
        built = Table(
            title=_escape(where),
            title_justify="left",
            caption=(_STATS_CAPTION if rows else "no jobs yet") + "\n" + _sums_line(sums),
            box=box.SIMPLE_HEAD,
            pad_edge=False,
        )
        built.add_column("Queue", overflow="fold", min_width=_QUEUE_MIN_WIDTH, width=queue_width)
        for (name, style), most in zip(_STATS_COLUMNS, widest, strict=True):
            header = name.replace(" ", "\n") if fold else name
            fits = max(most, *(len(line) for line in header.splitlines()))
            built.add_column(header, justify="right", style=style, no_wrap=True, width=fits)
        for row, values in zip(rows, figures, strict=True):
            built.add_row(_queue_label(row), *values)
        return built

    unbounded = console.options.update_width(_UNBOUNDED)
    label = max([_QUEUE_MIN_WIDTH] + [len(f"{row.queue} (paused)") for row in rows])
    whole = min(label, _QUEUE_WHOLE_WIDTH)
    for fold, queue_width in ((False, whole), (True, whole), (True, _QUEUE_MIN_WIDTH)):
        if Measurement.get(console, unbounded, table(fold, queue_width)).maximum <= width:
            return table(fold, None)
    lines = [_escape(where)]
    for row, values in zip(rows, figures, strict=True):
        lines.append(f"[bold]{_queue_label(row)}[/]")
        named = zip(_STATS_COLUMNS, values, strict=True)
        lines += [f"  {name:<8} {value}" for (name, _), value in named]
    lines.append(f"[dim]{_STATS_CAPTION if rows else 'no jobs yet'}[/]")
    lines.append(f"[dim]{_sums_line(sums)}[/]")
    return Group(*lines)


def _sums_line(sums: admin.HourlySums) -> str:
    """Where the 24 h columns come from, and when the workers' sums were last checked."""
    if not sums.hours:
        return "24h: counted from the archive (no hour summed up by workers)."
    hours = f"{sums.hours} hour{'s' if sums.hours != 1 else ''}"
    if sums.checked_at is None:
        return f"24h: {hours} from workers' sums, not all checked against the archive yet."
    return (
        f"24h: {hours} from workers' sums, all checked against the archive since "
        f"{sums.checked_at:%Y-%m-%d %H:%M:%S} UTC."
    )


def _recounted(done: admin.RecountedHours, archive: str) -> str:
    """What `stats --recount` did, in a line."""
    changed = ", ".join(f"{hour:%Y-%m-%d %H:00}" for hour in done.changed)
    count = len(done.checked)
    return (
        f"recounted {count} summed hour{'s' if count != 1 else ''} of {archive}: "
        f"{len(done.changed)} changed" + (f" ({changed} UTC)" if changed else "")
    )


@app.command(rich_help_panel="Operate")
@_guarded
def stats(
    ctx: typer.Context,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Refresh until Ctrl-C.")] = False,
    interval: Annotated[
        str,
        typer.Option(
            "--interval",
            help=f"How long between refreshes with --watch (at least 0.1s): {DURATION_FORMS}.",
        ),
    ] = "2s",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    recount: Annotated[
        bool,
        typer.Option(
            "--recount",
            help="First count the hours workers summed up again from the archive, and replace "
            "the sums that no longer match it (after a backfill, a restore or a DELETE by hand).",
        ),
    ] = False,
    database_url: DatabaseURL = None,
    job_table: JobTable = DEFAULT_JOB_TABLE,
    archived_job_table: ArchivedJobTable = DEFAULT_ARCHIVED_JOB_TABLE,
) -> None:
    """Per queue: jobs due, running, scheduled and blocked, the oldest due job's wait, and
    outcomes.

    Outcomes come from the archive: succeeded and failed in the last hour and the last day
    (the current clock hour and the 23 before it).
    """
    refuse_mixed_tables(ctx, job_table, archived_job_table)
    pause = parse_duration(interval, "--interval", minimum=timedelta(milliseconds=100))
    with _admin(database_url, job_table, archived_job_table) as operator:
        location = operator.location
        where = str(location)
        if recount:
            done = operator.write(admin.recount_hours)
            (err if as_json else console).print(
                _escape(_recounted(done, f"{location.archived_job_table} on {location.url}"))
            )

        def table() -> RenderableType:
            rows = operator.read(admin.queue_stats)
            return _stats_table(rows, where, operator.read(admin.hourly_sums), console.width)

        if as_json:
            err.print(_escape(where))
            err.print(_sums_line(operator.read(admin.hourly_sums)))
            rows = operator.read(admin.queue_stats)
            typer.echo(json.dumps([row.as_dict() for row in rows], indent=2))
            return
        if not watch:
            console.print(table())
            return
        with Live(table(), console=console) as live, contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(pause.total_seconds())
                live.update(table())


_DRY_RUN_SHOWN = 50
"""How many of the jobs `retry-failed --dry-run` would move it lists."""


# retry-failed / purge-archive -----------------------------------------------------------------


@app.command("retry-failed", rich_help_panel="Operate")
@_guarded
def retry_failed(
    ctx: typer.Context,
    queue: QueueFilter = None,
    job_type: JobTypeFilter = None,
    since: FailedSince = None,
    until: FailedUntil = None,
    dry_run: DryRun = False,
    database_url: DatabaseURL = None,
    job_table: JobTable = DEFAULT_JOB_TABLE,
    archived_job_table: ArchivedJobTable = DEFAULT_ARCHIVED_JOB_TABLE,
    job_type_style: JobTypeStyleOption = "plain",
) -> None:
    """Move failed archived jobs back into the queue, due now, with their attempts reset."""
    refuse_mixed_tables(ctx, job_table, archived_job_table)
    start, end = failed_window(since, until)
    job_type = as_stored(job_type, job_type_style)
    with _admin(database_url, job_table, archived_job_table) as operator:
        count = operator.write(
            admin.retry_failed,
            queue=queue,
            job_type=job_type,
            since=start,
            until=end,
            dry_run=dry_run,
        )
        where = operator.location
        shown = (
            operator.read(
                admin.list_jobs,
                state="failed",
                queue=queue,
                job_type=job_type,
                finished_since=start,
                finished_until=end,
                limit=_DRY_RUN_SHOWN,
            )
            if dry_run and count
            else []
        )
    verb = "would move" if dry_run else "moved"
    console.print(
        _escape(
            f"{verb} {count} failed job{'s' if count != 1 else ''} from "
            f"{where.archived_job_table} back into {where.job_table} on {where.url}"
            + (":" if shown else "")
        )
    )
    for line in job_lines(shown) if shown else ():
        console.print(line)
    if count > len(shown) > 0:
        console.print(f"… and {count - len(shown)} more (proletarian-di jobs list --state failed)")


@app.command("purge-archive", rich_help_panel="Operate")
@_guarded
def purge_archive(
    ctx: typer.Context,
    older_than: Annotated[
        str,
        unshown(
            "--older-than",
            help=f"Delete archived jobs that finished longer ago than this: {DURATION_FORMS}.",
        ),
    ],
    status: StatusFilter = None,
    queue: QueueFilter = None,
    dry_run: DryRun = False,
    database_url: DatabaseURL = None,
    job_table: JobTable = DEFAULT_JOB_TABLE,
    archived_job_table: ArchivedJobTable = DEFAULT_ARCHIVED_JOB_TABLE,
) -> None:
    """Delete old rows from the archive."""
    refuse_mixed_tables(ctx, job_table, archived_job_table)
    age = parse_duration(older_than, "--older-than")
    if status not in (None, "success", "failure"):
        raise CLIError(f"--status must be 'success' or 'failure', got {status!r}", ExitCode.USAGE)
    with _admin(database_url, job_table, archived_job_table) as operator:
        kept = operator.read(admin.still_needed, older_than=age, status=status, queue=queue)
        count = operator.write(
            admin.purge_archive, older_than=age, status=status, queue=queue, dry_run=dry_run
        )
        where = operator.location
    verb = "would delete" if dry_run else "deleted"
    console.print(
        _escape(
            f"{verb} {count} archived job{'s' if count != 1 else ''} from "
            f"{where.archived_job_table} on {where.url}"
        )
    )
    if kept:
        console.print(
            f"kept {kept} archived job{'s' if kept != 1 else ''} that jobs still waiting need "
            "(parents of blocked jobs, jobs of unfinished workflows)"
        )

"""The `proletarian-di` command: run workers, manage the schema, inspect and repair queues.

Exit codes: 0 success, 1 unexpected error, 2 usage error, 3 module not
importable, 4 target not runnable, 5 database unreachable or unsupported,
6 schema missing, 128+N when a second signal N ends a worker at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import importlib
import importlib.util
import inspect
import json
import logging
import os
import re
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import FrameType, ModuleType
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from . import __version__
from ._admin import Admin, DatabaseURLError, QueueStats, connect, is_unreachable, url_dialect
from ._logging import describe
from ._options import DEFAULT_ARCHIVED_JOB_TABLE, DEFAULT_JOB_TABLE
from .enqueue import enqueue as enqueue_job
from .errors import ConfigurationError, PayloadError, SchemaError, UnsupportedDatabase
from .jobs import DEFAULT_QUEUE
from .mysql import mask
from .schema import install_schema, schema_sql
from .worker import QueueWorker

console = Console(highlight=False)
err = Console(stderr=True, highlight=False, soft_wrap=True)


class ExitCode(enum.IntEnum):
    """The command's exit status; each user error has its own."""

    OK = 0
    ERROR = 1
    USAGE = 2
    IMPORT = 3
    TARGET = 4
    DATABASE = 5
    SCHEMA = 6


class CLIError(Exception):
    """A user error: one line on stderr, then exit with `code`."""

    def __init__(self, message: str, code: ExitCode) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


EXIT_CODES_HELP = (
    "Exit codes: 0 ok, 1 unexpected error, 2 usage, 3 module not importable, "
    "4 target not runnable, 5 database unreachable or unsupported, 6 schema missing."
)

app = typer.Typer(
    name="proletarian-di",
    help=(
        "A durable job queue on the database you already run (PostgreSQL or MySQL/MariaDB).\n\n"
        "Run [bold]proletarian-di demo[/] to see it work in a few seconds, with no server to "
        "set up."
    ),
    epilog=EXIT_CODES_HELP,
    no_args_is_help=True,
    rich_markup_mode="rich",
    context_settings={"help_option_names": ["-h", "--help"]},
    add_completion=False,
    pretty_exceptions_enable=False,
)
schema_app = typer.Typer(
    help="Install, print or check the queue tables (job and archived_job).",
    no_args_is_help=True,
    rich_markup_mode="rich",
)
app.add_typer(schema_app, name="schema", rich_help_panel="Run")

# Options shared by several commands --------------------------------------------------------

DatabaseURL = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        "-d",
        envvar="PROLETARIAN_DATABASE_URL",
        help="postgresql://user:password@host:port/db or mysql://user:password@host:port/db",
        show_default=False,
    ),
]
JobTable = Annotated[
    str,
    typer.Option("--job-table", envvar="PROLETARIAN_JOB_TABLE", help="The queue table."),
]
ArchivedJobTable = Annotated[
    str,
    typer.Option(
        "--archived-job-table",
        envvar="PROLETARIAN_ARCHIVED_JOB_TABLE",
        help="The archive table.",
    ),
]

F = TypeVar("F", bound=Callable[..., Any])


def _error(message: str) -> None:
    err.print(f"[bold red]error:[/] {_escape(_one_line(message))}")


def _escape(text: str) -> str:
    return escape(text)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _database_error(exc: BaseException) -> bool:
    if is_unreachable(exc):
        return True
    context = exc.__cause__ or exc.__context__
    return isinstance(exc, ConfigurationError) and context is not None and is_unreachable(context)


def _classify(exc: BaseException, config_code: ExitCode = ExitCode.USAGE) -> CLIError | None:
    """The user error an exception stands for, or None for a bug worth a traceback."""
    if isinstance(exc, CLIError):
        return exc
    message = _one_line(describe(exc))
    if isinstance(exc, DatabaseURLError):
        return CLIError(str(exc), ExitCode.USAGE)
    if isinstance(exc, SchemaError):
        return CLIError(f"schema missing: {exc}", ExitCode.SCHEMA)
    if isinstance(exc, UnsupportedDatabase):
        return CLIError(f"unsupported database: {exc}", ExitCode.DATABASE)
    if _database_error(exc):
        if isinstance(exc, ConfigurationError):
            return CLIError(f"database unreachable: {exc}", ExitCode.DATABASE)
        return CLIError(f"database unreachable: {message}", ExitCode.DATABASE)
    if isinstance(exc, (ConfigurationError, PayloadError)):
        return CLIError(str(exc), config_code)
    return None


def _guarded(fn: F) -> F:
    """Turn user errors into one line and their exit code; let typer's own exits through."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort, typer.BadParameter):
            raise
        except KeyboardInterrupt:
            err.print("interrupted")
            raise typer.Exit(130) from None
        except Exception as exc:
            error = _classify(exc)
            if error is None:
                err.print(_escape(traceback.format_exc().rstrip()))
                _error(f"unexpected {_one_line(describe(exc))}")
                raise typer.Exit(ExitCode.ERROR) from None
            _error(error.message)
            raise typer.Exit(error.code) from None

    return wrapper  # type: ignore[return-value]


def _require_url(url: str | None) -> str:
    if not url:
        raise CLIError(
            "no database URL: pass --database-url or set PROLETARIAN_DATABASE_URL",
            ExitCode.USAGE,
        )
    url_dialect(url)
    return url


@contextlib.contextmanager
def _connection(url: str | None) -> Iterator[Any]:
    """A connection for `url`; failing to connect is a one-line 'database unreachable'."""
    url = _require_url(url)
    try:
        conn = connect(url)
    except Exception as exc:
        if is_unreachable(exc):
            raise CLIError(
                f"database unreachable at {mask(url)}: {_one_line(describe(exc))}",
                ExitCode.DATABASE,
            ) from None
        raise
    try:
        yield conn
    finally:
        with contextlib.suppress(Exception):
            conn.close()


@contextlib.contextmanager
def _admin(url: str | None, job_table: str, archived_job_table: str) -> Iterator[Admin]:
    with _connection(url) as conn:
        admin = Admin(conn, job_table, archived_job_table)
        admin.check()
        yield admin


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str, option: str = "--older-than") -> timedelta:
    """'90', '90s', '15m', '2h', '7d', '1w', '250ms' as a timedelta."""
    match = _DURATION.match(text)
    if not match:
        raise CLIError(
            f"{option}: {text!r} is not a duration such as 30s, 15m, 2h, 7d", ExitCode.USAGE
        )
    value, unit = match.groups()
    return timedelta(seconds=float(value) * _UNITS[unit or "s"])


def parse_moment(text: str, now: datetime, option: str) -> datetime:
    """A duration ago ('2h') or an ISO 8601 time (naive means UTC)."""
    if _DURATION.match(text):
        return now - parse_duration(text, option)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise CLIError(
            f"{option}: {text!r} is neither a duration (2h, 7d) nor an ISO time (2024-05-01T12:00)",
            ExitCode.USAGE,
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _ago(delta: timedelta | None) -> str:
    if delta is None:
        return "-"
    seconds = delta.total_seconds()
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{seconds / 60:.1f}m"
    if seconds < 86400:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def _version(value: bool) -> None:
    if value:
        console.print(f"proletarian-di {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Show the version."),
    ] = False,
) -> None:
    """A durable job queue on the database you already run (PostgreSQL or MySQL/MariaDB)."""


# worker ---------------------------------------------------------------------------------------


@dataclasses.dataclass
class Target:
    """A loaded `module:attr` worker target: a container or a QueueWorker."""

    spec: str
    container: Any = None
    worker: QueueWorker | None = None


def _import_module(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
            raise CLIError(
                f"cannot import module {name!r}: no module named {exc.name!r} "
                f"(searched {sys.path[0]} and the installed packages; use --path to add a folder)",
                ExitCode.IMPORT,
            ) from None
        raise CLIError(
            f"cannot import module {name!r}: {_one_line(describe(exc))}{_where(exc)}",
            ExitCode.IMPORT,
        ) from None
    except Exception as exc:
        raise CLIError(
            f"cannot import module {name!r}: {_one_line(describe(exc))}{_where(exc)}",
            ExitCode.IMPORT,
        ) from None


def _where(exc: BaseException) -> str:
    if isinstance(exc, SyntaxError) and exc.filename:
        return f" ({exc.filename}:{exc.lineno})"
    frames = traceback.extract_tb(exc.__traceback__)
    for frame in reversed(frames):
        if "importlib" not in frame.filename:
            return f" ({frame.filename}:{frame.lineno})"
    return ""


def _is_container_class(obj: Any) -> bool:
    from dependency_injector import containers

    return isinstance(obj, type) and issubclass(obj, containers.DeclarativeContainer)


def _is_container(obj: Any) -> bool:
    from dependency_injector import containers

    return isinstance(obj, containers.Container)


def _as_target(spec: str, obj: Any, called: bool = False) -> Target:
    if isinstance(obj, QueueWorker):
        return Target(spec, worker=obj)
    if _is_container(obj):
        return Target(spec, container=obj)
    if _is_container_class(obj):
        return Target(spec, container=obj())
    if callable(obj) and not called and not isinstance(obj, type):
        try:
            required = [
                p
                for p in inspect.signature(obj).parameters.values()
                if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
            ]
        except (TypeError, ValueError):
            required = []
        if required:
            raise CLIError(
                f"{spec} is a function with required arguments "
                f"({', '.join(p.name for p in required)}); a target function takes none",
                ExitCode.TARGET,
            )
        return _as_target(spec, obj(), called=True)
    what = f"{spec}() returned" if called else f"{spec} is"
    raise CLIError(
        f"{what} {type(obj).__name__} {_short_repr(obj)}, not a runnable target: expected a "
        "dependency-injector container (class or instance), a QueueWorker, "
        "or a function of no arguments returning one",
        ExitCode.TARGET,
    )


def _short_repr(obj: Any) -> str:
    text = _one_line(repr(obj))
    return text if len(text) <= 60 else text[:57] + "..."


def load_target(spec: str) -> Target:
    """Import `module:attr` and turn it into a runnable target (user errors as `CLIError`)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise CLIError(
            f"target {spec!r} must be module:attribute, e.g. myapp.containers:Container",
            ExitCode.USAGE,
        )
    module = _import_module(module_name)
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise CLIError(
                f"module {module_name!r} has no attribute {attr!r}", ExitCode.TARGET
            ) from None
    try:
        return _as_target(spec, obj)
    except CLIError:
        raise
    except Exception as exc:
        error = _classify(exc, ExitCode.TARGET)
        if error is not None:
            raise error from None
        raise CLIError(
            f"{spec} raised {_one_line(describe(exc))}{_where(exc)}", ExitCode.TARGET
        ) from None


class _Signals:
    """First SIGTERM/SIGINT asks for a graceful stop; a second one exits at once."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.received: list[int] = []
        self.previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        # Runs between any two bytecodes of the main thread, possibly inside rich or
        # logging: set a flag, or write with os.write and leave; nothing reentrant.
        self.received.append(signum)
        if len(self.received) == 1:
            self.stop.set()
            return
        message = (
            f"second {signal.Signals(signum).name}: exiting now; jobs still running are "
            "rolled back by the database and will run again\n"
        )
        with contextlib.suppress(OSError):
            os.write(2, message.encode())
        os._exit(128 + signum)

    @property
    def first(self) -> str:
        return signal.Signals(self.received[0]).name if self.received else "signal"

    def __enter__(self) -> _Signals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self.previous.items():
            signal.signal(sig, previous)


def _stop_all(workers: Sequence[QueueWorker]) -> bool:
    """Stop every worker at the same time (so all stop polling now); True if none abandoned."""
    results: dict[str, bool] = {}

    def stop(worker: QueueWorker) -> None:
        results[worker.queue_worker_id] = worker.stop()

    threads = [
        threading.Thread(target=stop, args=(w,), name=f"stop-{w.queue_worker_id}") for w in workers
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return all(results.values())


def _start(target: Target) -> list[QueueWorker]:
    from .di import container_workers, init_resources, shutdown_resources

    if target.worker is not None:
        if not target.worker.running:
            target.worker.start()
        return [target.worker]
    init_resources(target.container)
    workers = container_workers(target.container)
    if not workers:
        with contextlib.suppress(Exception):
            shutdown_resources(target.container)
        raise CLIError(
            f"{target.spec} started no QueueWorker: declare one with "
            "providers.Resource(proletarian_di.di.queue_worker, pool, handler, queue=...)",
            ExitCode.TARGET,
        )
    return workers


@contextlib.contextmanager
def _log_level(level: str) -> Iterator[None]:
    """Log worker events at `level` to stderr (unless logging is set up), for the block."""
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        format="%(asctime)s %(levelname)-7s %(threadName)s %(message)s",
        stream=sys.stderr,
    )
    logger = logging.getLogger("proletarian_di")
    previous = logger.level
    logger.setLevel(getattr(logging, level.upper()))
    try:
        yield
    finally:
        logger.setLevel(previous)


class LogLevel(str, enum.Enum):
    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


@app.command(epilog=EXIT_CODES_HELP, rich_help_panel="Run")
@_guarded
def worker(
    target: Annotated[
        str,
        typer.Argument(
            help="module:attribute — a dependency-injector container (class or instance), "
            "a QueueWorker, or a function of no arguments returning one.",
            show_default=False,
        ),
    ],
    path: Annotated[
        list[Path] | None,
        typer.Option(
            "--path",
            "-P",
            envvar="PROLETARIAN_PATH",
            help="Folder to import the target from (repeatable). Default: the current directory.",
            show_default=False,
        ),
    ] = None,
    log_level: Annotated[
        LogLevel,
        typer.Option("--log-level", envvar="PROLETARIAN_LOG_LEVEL", help="Worker log level."),
    ] = LogLevel.info,
) -> None:
    """Run the workers of TARGET until SIGTERM or SIGINT.

    A container is started with init_resources() and stopped with
    shutdown_resources(). The first signal drains in-flight jobs (up to each
    worker's await timeout) and exits 0; a second one exits at once, and the
    jobs still running are rolled back by the database and run again later.
    """
    for folder in reversed(path or [Path.cwd()]):
        sys.path.insert(0, str(folder.resolve()))
    with _log_level(log_level.value), _Signals() as signals:
        loaded = load_target(target)
        try:
            workers = _start(loaded)
        except CLIError:
            raise
        except Exception as exc:
            error = _classify(exc, ExitCode.TARGET)
            if error is None:
                raise
            raise error from None
        described = ", ".join(
            f"{w.queue_worker_id} (queue {w.options.queue!r}, {w.options.worker_threads} "
            f"thread{'s' if w.options.worker_threads != 1 else ''})"
            for w in workers
        )
        err.print(f"proletarian-di worker {target}: running {described}")
        err.print("stop with Ctrl-C or SIGTERM (a second signal exits at once)")
        died = False
        try:
            while not signals.stop.wait(0.2):
                if not any(w.running for w in workers):
                    died = True
                    break
            if not died:
                err.print(
                    f"{signals.first} received: draining in-flight jobs, then shutting down "
                    "(send it again to exit at once)"
                )
        finally:
            clean = _stop_all(workers)
            if loaded.container is not None:
                from .di import shutdown_resources

                shutdown_resources(loaded.container)
        totals: dict[str, int] = {}
        for w in workers:
            for outcome, count in w.summary().items():
                totals[outcome] = totals.get(outcome, 0) + count
        summary = ", ".join(f"{count} {outcome}" for outcome, count in totals.items())
        if died:
            _error(f"every worker stopped on its own (see the log above); {summary}")
            raise typer.Exit(ExitCode.ERROR)
        note = "" if clean else " (jobs past the await timeout were rolled back; they run again)"
        err.print(f"stopped cleanly: {summary}{note}")


# schema ---------------------------------------------------------------------------------------


class Dialect(str, enum.Enum):
    postgresql = "postgresql"
    mysql = "mysql"


@schema_app.command("print")
@_guarded
def schema_print(
    dialect: Annotated[
        Dialect | None,
        typer.Option(
            "--dialect",
            help="Database to print for. Default: the one --database-url names.",
            show_default=False,
        ),
    ] = None,
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
        name = dialect.value
    typer.echo(schema_sql(name, job_table, archived_job_table), nl=False)


@schema_app.command("install")
@_guarded
def schema_install(
    database_url: DatabaseURL = None,
    job_table: JobTable = DEFAULT_JOB_TABLE,
    archived_job_table: ArchivedJobTable = DEFAULT_ARCHIVED_JOB_TABLE,
) -> None:
    """Create the schema, both tables and the index (safe to run twice)."""
    with _connection(database_url) as conn:
        install_schema(conn, job_table, archived_job_table)
    console.print(
        f"[green]✓[/] installed {job_table} and {archived_job_table} "
        f"on {_escape(mask(database_url or ''))}"
    )


@schema_app.command("check")
@_guarded
def schema_check(
    database_url: DatabaseURL = None,
    job_table: JobTable = DEFAULT_JOB_TABLE,
    archived_job_table: ArchivedJobTable = DEFAULT_ARCHIVED_JOB_TABLE,
) -> None:
    """Check the server version and that both tables exist with every column (exit 6 if not)."""
    with _admin(database_url, job_table, archived_job_table) as admin:
        product, version = admin.dialect.server_version(admin.conn)
        admin.conn.rollback()
        missing = admin.missing_columns()
    if missing:
        problems = "; ".join(f"{t} lacks {', '.join(cols)}" for t, cols in missing.items())
        raise CLIError(f"schema does not match: {problems}", ExitCode.SCHEMA)
    console.print(
        f"[green]✓[/] {product} {'.'.join(map(str, version))}: "
        f"{job_table} and {archived_job_table} are ready"
    )


# enqueue --------------------------------------------------------------------------------------


@app.command(rich_help_panel="Operate")
@_guarded
def enqueue(
    job_type: Annotated[str, typer.Argument(help="The job type.", show_default=False)],
    payload: Annotated[
        str,
        typer.Argument(help="The payload as JSON.", metavar="[PAYLOAD_JSON]"),
    ] = "null",
    queue: Annotated[
        str, typer.Option("--queue", "-q", envvar="PROLETARIAN_QUEUE", help="The queue.")
    ] = DEFAULT_QUEUE,
    delay: Annotated[
        float | None,
        typer.Option("--in", help="Run it this many seconds from now.", min=0, show_default=False),
    ] = None,
    database_url: DatabaseURL = None,
    job_table: JobTable = DEFAULT_JOB_TABLE,
) -> None:
    """Enqueue one job and print its id."""
    try:
        data = json.loads(payload)
    except ValueError as exc:
        raise CLIError(f"PAYLOAD_JSON is not valid JSON: {exc}", ExitCode.USAGE) from None
    process_in = timedelta(seconds=delay) if delay is not None else None
    with _connection(database_url) as conn:
        job_id = enqueue_job(
            conn, job_type, data, queue=queue, process_in=process_in, job_table=job_table
        )
        conn.commit()
    when = f"in {delay:g}s" if delay else "now"
    err.print(f"enqueued {job_type} on queue {queue!r}, due {when}")
    typer.echo(str(job_id))


# stats ----------------------------------------------------------------------------------------


def _stats_table(rows: list[QueueStats], where: str) -> Table:
    table = Table(title=f"proletarian-di queues on {_escape(where)}", title_justify="left")
    table.add_column("Queue")
    table.add_column("Due now", justify="right")
    table.add_column("Scheduled", justify="right")
    table.add_column("Oldest due", justify="right")
    table.add_column("Succeeded 1h", justify="right", style="green")
    table.add_column("Failed 1h", justify="right", style="red")
    table.add_column("Succeeded", justify="right", style="green")
    table.add_column("Failed", justify="right", style="red")
    for row in rows:
        table.add_row(
            _escape(row.queue),
            str(row.due),
            str(row.scheduled),
            _ago(row.oldest_due),
            str(row.succeeded_last_hour),
            str(row.failed_last_hour),
            str(row.succeeded),
            str(row.failed),
        )
    if not rows:
        table.caption = "no jobs yet"
    return table


@app.command(rich_help_panel="Operate")
@_guarded
def stats(
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Refresh until Ctrl-C.")] = False,
    interval: Annotated[
        float, typer.Option("--interval", help="Seconds between refreshes with --watch.", min=0.1)
    ] = 2.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    database_url: DatabaseURL = None,
    job_table: JobTable = DEFAULT_JOB_TABLE,
    archived_job_table: ArchivedJobTable = DEFAULT_ARCHIVED_JOB_TABLE,
) -> None:
    """Per queue: jobs due now, scheduled later, the oldest due job's wait, and outcomes.

    Outcomes come from the archive: succeeded and failed in the last hour and in all.
    """
    with _admin(database_url, job_table, archived_job_table) as admin:
        where = mask(database_url or "")
        if as_json:
            typer.echo(json.dumps([row.as_dict() for row in admin.stats()], indent=2))
            return
        if not watch:
            console.print(_stats_table(admin.stats(), where))
            return
        first = _stats_table(admin.stats(), where)
        with Live(first, console=console) as live, contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(interval)
                live.update(_stats_table(admin.stats(), where))


# retry-failed / purge-archive -----------------------------------------------------------------


@app.command("retry-failed", rich_help_panel="Operate")
@_guarded
def retry_failed(
    queue: Annotated[
        str | None, typer.Option("--queue", "-q", help="Only this queue.", show_default=False)
    ] = None,
    job_type: Annotated[
        str | None,
        typer.Option("--job-type", "-t", help="Only this job type.", show_default=False),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            help="Only jobs that failed since then: a duration ago (2h, 7d) or an ISO time.",
            show_default=False,
        ),
    ] = None,
    until: Annotated[
        str | None,
        typer.Option(
            "--until",
            help="Only jobs that failed before then: a duration ago or an ISO time.",
            show_default=False,
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Count the jobs, move nothing.")
    ] = False,
    database_url: DatabaseURL = None,
    job_table: JobTable = DEFAULT_JOB_TABLE,
    archived_job_table: ArchivedJobTable = DEFAULT_ARCHIVED_JOB_TABLE,
) -> None:
    """Move failed archived jobs back into the queue, due now, with their attempts reset."""
    now = datetime.now(timezone.utc)
    start = parse_moment(since, now, "--since") if since else None
    end = parse_moment(until, now, "--until") if until else None
    with _admin(database_url, job_table, archived_job_table) as admin:
        count = admin.retry_failed(queue, job_type, start, end, dry_run=dry_run, now=now)
    verb = "would move" if dry_run else "moved"
    console.print(f"{verb} {count} failed job{'s' if count != 1 else ''} back into the queue")


@app.command("purge-archive", rich_help_panel="Operate")
@_guarded
def purge_archive(
    older_than: Annotated[
        str,
        typer.Option(
            "--older-than",
            help="Delete archived jobs that finished longer ago than this (30d, 12h, ...).",
            show_default=False,
        ),
    ],
    status: Annotated[
        str | None,
        typer.Option(
            "--status", help="Only 'success' or 'failure' jobs (default: both).", show_default=False
        ),
    ] = None,
    queue: Annotated[
        str | None, typer.Option("--queue", "-q", help="Only this queue.", show_default=False)
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Count the jobs, delete nothing.")
    ] = False,
    database_url: DatabaseURL = None,
    job_table: JobTable = DEFAULT_JOB_TABLE,
    archived_job_table: ArchivedJobTable = DEFAULT_ARCHIVED_JOB_TABLE,
) -> None:
    """Delete old rows from the archive."""
    age = parse_duration(older_than)
    if status not in (None, "success", "failure"):
        raise CLIError(f"--status must be 'success' or 'failure', got {status!r}", ExitCode.USAGE)
    with _admin(database_url, job_table, archived_job_table) as admin:
        count = admin.purge_archive(age, status=status, queue=queue, dry_run=dry_run)
    verb = "would delete" if dry_run else "deleted"
    console.print(f"{verb} {count} archived job{'s' if count != 1 else ''}")


# demo -----------------------------------------------------------------------------------------


def _load_demo_module() -> ModuleType:
    """`containers.demo` from the current directory, else from beside this package's source."""
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    with contextlib.suppress(ModuleNotFoundError):
        module = importlib.import_module("containers.demo")
        if hasattr(module, "DemoContainer"):
            return module
    source = Path(__file__).resolve().parent.parent / "containers" / "demo.py"
    if not source.exists():
        raise CLIError(
            "the demo container containers/demo.py was not found: run `proletarian-di demo` "
            "from the proletarian-di repository root",
            ExitCode.IMPORT,
        )
    spec = importlib.util.spec_from_file_location("proletarian_di_demo_container", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def _demo_database(url: str | None) -> Iterator[str]:
    if url:
        if url_dialect(url) != "postgresql":
            raise CLIError(
                "the demo runs on PostgreSQL: pass a postgresql:// URL or none "
                "(then it starts a built-in server)",
                ExitCode.USAGE,
            )
        console.print(f"Using PostgreSQL at {_escape(mask(url))}")
        yield url
        return
    from .embedded import EmbeddedPostgresUnavailable, embedded_postgres

    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        try:
            with console.status("Starting a throwaway PostgreSQL server (embedded-postgres)…"):
                embedded_url = stack.enter_context(embedded_postgres())
        except EmbeddedPostgresUnavailable as exc:
            raise CLIError(str(exc), ExitCode.DATABASE) from None
        console.print(
            f"[green]✓[/] started a throwaway PostgreSQL server in "
            f"{time.monotonic() - started:.1f}s (deleted on exit)"
        )
        yield embedded_url
        console.print("Stopping the PostgreSQL server and deleting its data…")


@app.command(rich_help_panel="Getting started")
@_guarded
def demo(
    jobs: Annotated[
        int, typer.Option("--jobs", "-n", help="How many accounts sign up (one job each).", min=1)
    ] = 1_000,
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url",
            "-d",
            envvar="PROLETARIAN_DEMO_DATABASE_URL",
            help="Use this PostgreSQL instead of a throwaway built-in server "
            "(creates the schemas proletarian and demo).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Watch the queue work, on a throwaway PostgreSQL: start here.

    Sign-ups enqueue jobs in their own transactions; workers on two queues
    run them; some fail and retry, a few fail for good. Runs the reference
    container in containers/demo.py on a throwaway PostgreSQL server (package
    embedded-postgres), so it needs no database server.
    """
    module = _load_demo_module()
    console.rule("[bold]proletarian-di demo")
    quiet = _log_level("critical")
    with quiet, _demo_database(database_url) as url, _connection(url) as conn:
        install_schema(conn)
        module.create_tables(conn)
        admin = Admin(conn)
        _run_demo(module, url, conn, admin, jobs)


def _run_demo(module: ModuleType, url: str, conn: Any, admin: Admin, count: int) -> None:
    from .di import container_workers, init_resources, shutdown_resources

    per_queue: dict[str, int] = module.jobs_per_queue(count)
    queues = tuple(per_queue)
    started = time.monotonic()
    batch = 100
    for first in range(0, count, batch):
        module.sign_up(conn, range(first, min(first + batch, count)))
    console.print(
        f"[green]✓[/] {count} accounts signed up in {time.monotonic() - started:.2f}s: each "
        "account row and its job committed in one transaction "
        f"({', '.join(f'{n} on {q!r}' for q, n in per_queue.items())})"
    )

    container = module.DemoContainer()
    container.config.database_url.from_value(url)
    init_resources(container)
    started = time.monotonic()
    try:
        workers = {w.options.queue: w for w in container_workers(container)}
        progress = Progress(
            TextColumn("{task.description:<9}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn(
                "[yellow]{task.fields[retried]} retried[/] [red]{task.fields[failed]} failed"
            ),
            TimeElapsedColumn(),
            console=console,
        )
        tasks = {q: progress.add_task(q, total=per_queue[q], retried=0, failed=0) for q in queues}
        with progress:
            while True:
                for q in queues:
                    done = workers[q].summary()
                    progress.update(
                        tasks[q],
                        completed=done["succeeded"] + done["failed"],
                        retried=done["retried"],
                        failed=done["failed"],
                    )
                if admin.waiting(queues) == 0:
                    break
                time.sleep(0.05)
            for q in queues:
                done = workers[q].summary()
                progress.update(
                    tasks[q],
                    completed=done["succeeded"] + done["failed"],
                    retried=done["retried"],
                    failed=done["failed"],
                )
        elapsed = time.monotonic() - started
    finally:
        shutdown_resources(container)
    _demo_summary(workers, elapsed, admin)


def _demo_summary(workers: dict[str, QueueWorker], elapsed: float, admin: Admin) -> None:
    table = Table(title="Summary", title_justify="left")
    for name in ("Queue", "Succeeded", "Failed", "Retried", "Jobs/s"):
        table.add_column(name, justify="left" if name == "Queue" else "right")
    totals = {"succeeded": 0, "failed": 0, "retried": 0}
    for queue, w in workers.items():
        done = w.summary()
        for key in totals:
            totals[key] += done[key]
        finished = done["succeeded"] + done["failed"]
        table.add_row(
            queue,
            f"[green]{done['succeeded']}",
            f"[red]{done['failed']}",
            f"[yellow]{done['retried']}",
            f"{finished / elapsed:,.0f}",
        )
    finished = totals["succeeded"] + totals["failed"]
    table.add_section()
    table.add_row(
        "[bold]all",
        f"[bold green]{totals['succeeded']}",
        f"[bold red]{totals['failed']}",
        f"[bold yellow]{totals['retried']}",
        f"[bold]{finished / elapsed:,.0f}",
    )
    failures = Table(title="Failure archive (latest)", title_justify="left")
    for name in ("Job id", "Queue", "Job type", "Attempts"):
        failures.add_column(name)
    for job_id, queue, job_type, attempts, _finished in admin.recent_failures(5):
        failures.add_row(str(job_id), queue, job_type, str(attempts))
    console.print(Group(table, failures))
    console.print(
        f"{finished} jobs in {elapsed:.2f}s. Every job ran in its own transaction: claimed with "
        "SELECT … FOR UPDATE SKIP LOCKED, run, then archived as success or failure."
    )
    console.print(
        "The system is containers/demo.py; run your own with "
        "[bold]proletarian-di worker yourapp.containers:Container[/]."
    )


def main() -> None:
    """Console-script entry point."""
    app(prog_name="proletarian-di")


if __name__ == "__main__":
    main()

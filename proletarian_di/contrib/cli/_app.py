"""The typer app, its shared options, and how user errors become one line and an exit code."""

from __future__ import annotations

import contextlib
import enum
import functools
import logging
import re
import sys
import traceback
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from ... import __version__, admin
from ..._logging import describe
from ..._secrets import mask, passwords, scrub
from ..._urls import connect, is_unreachable, url_dialect
from ...errors import (
    ConfigurationError,
    DatabaseURLError,
    PayloadError,
    ProletarianError,
    SchemaError,
    UnsupportedDatabase,
)

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
    ABANDONED = 7


class CLIError(ProletarianError):
    """A user error: one line on stderr, then exit with `code`."""

    def __init__(self, message: str, code: ExitCode) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


EXIT_CODES_HELP = (
    "Exit codes: 0 ok, 1 unexpected error, 2 usage, 3 module not importable, "
    "4 target not runnable, 5 database unreachable or unsupported, 6 schema missing, "
    "7 worker stopped but abandoned jobs (they run again)."
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


def unshown(*names: str, help: str, **options: Any) -> Any:
    """A typer option whose default is not shown: it has none, or none worth showing."""
    return typer.Option(*names, help=help, show_default=False, **options)


DryRun = Annotated[
    bool, typer.Option("--dry-run", help="Count the jobs it would change, change nothing.")
]
QueueFilter = Annotated[
    str | None, typer.Option("--queue", "-q", help="Only this queue.", show_default=False)
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
T = TypeVar("T")


def _error(message: str) -> None:
    err.print(f"[bold red]error:[/] {_escape(_one_line(message))}")


def _escape(text: str) -> str:
    return escape(text)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _database_error(exc: BaseException) -> bool:
    """Whether the error (or what a ConfigurationError hides) means the database is unreachable."""
    if is_unreachable(exc):
        return True
    context = exc.__cause__ or exc.__context__
    return isinstance(exc, ConfigurationError) and context is not None and is_unreachable(context)


def _classify(exc: BaseException, config_code: ExitCode = ExitCode.USAGE) -> CLIError | None:
    """The user error an exception stands for, or None for a bug worth a traceback.

    A driver's own message is scrubbed of any URL or `password=` value it may quote.
    """
    if isinstance(exc, CLIError):
        return exc
    message = _one_line(scrub(describe(exc)))
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
    """The database URL, checked: missing, unsupported or malformed is a usage error (exit 2)."""
    if not url:
        raise CLIError(
            "no database URL: pass --database-url or set PROLETARIAN_DATABASE_URL",
            ExitCode.USAGE,
        )
    url_dialect(url)
    return url


@contextlib.contextmanager
def _connection(url: str | None) -> Iterator[Any]:
    """A connection for `url`; failing to connect is one line (exit 5), the password scrubbed."""
    url = _require_url(url)
    try:
        conn = connect(url)
    except DatabaseURLError:
        raise
    except Exception as exc:
        detail = _one_line(scrub(describe(exc), *passwords(url)))
        if is_unreachable(exc):
            raise CLIError(
                f"database unreachable at {mask(url)}: {detail}", ExitCode.DATABASE
            ) from None
        raise CLIError(f"cannot connect to {mask(url)}: {detail}", ExitCode.DATABASE) from None
    try:
        yield conn
    finally:
        with contextlib.suppress(Exception):
            conn.close()


class Operator:
    """One CLI connection and the queue tables it works on: each call of an `admin` function
    is its own transaction, committed for writes and rolled back for reads."""

    def __init__(self, conn: Any, job_table: str, archived_job_table: str) -> None:
        self.conn = conn
        self.tables = admin.Tables(job_table, archived_job_table)

    def read(self, query: Callable[..., T], *args: Any, **options: Any) -> T:
        try:
            return query(self.conn, *args, tables=self.tables, **options)
        finally:
            self.conn.rollback()

    def write(self, change: Callable[..., T], *args: Any, **options: Any) -> T:
        try:
            result = change(self.conn, *args, tables=self.tables, **options)
            self.conn.commit()
            return result
        finally:
            self.conn.rollback()


@contextlib.contextmanager
def _admin(url: str | None, job_table: str, archived_job_table: str) -> Iterator[Operator]:
    """A checked connection to the queue tables (exit 5 or 6 when they are not usable)."""
    with _connection(url) as conn:
        operator = Operator(conn, job_table, archived_job_table)
        operator.read(admin.check)
        yield operator


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

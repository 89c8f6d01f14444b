"""The typer app, its shared options, and how user errors become one line and an exit code."""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import json
import logging
import math
import os
import re
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta, timezone
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from ... import __version__, admin
from ..._common.checks import check_job_type_style, job_type_as_stored
from ..._common.logging import describe, escape_controls
from ..._store.dialects import MySQLDialect, dialect_for, is_read_only
from ..._store.secrets import HINT, RedactingStream, Redactor, mask, passwords, scrub
from ..._store.tables import DEFAULT_ARCHIVED_JOB_TABLE, DEFAULT_JOB_TABLE
from ..._store.urls import connect, conninfo_refusal, is_unreachable, url_dialect
from ...errors import (
    ConfigurationError,
    DatabaseURLError,
    PayloadError,
    ProletarianError,
    SchemaError,
    UnsupportedDatabase,
)
from ...serializers import check_serializer

console = Console(highlight=False, emoji=False)
err = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)
redactor = Redactor()
"""The secrets of the running command's environment and options, hidden in all it prints."""


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
    DEGRADED = 8


class CLIError(ProletarianError):
    """A user error: one line on stderr, then exit with `code`."""

    def __init__(self, message: str, code: ExitCode) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


EXIT_CODES_HELP = (
    "Exit codes: 0 ok, 1 unexpected error, 2 usage, 3 module not importable, "
    "4 target not runnable, 5 database unreachable or unsupported, 6 schema missing, "
    "7 worker stopped but abandoned jobs (they run again), 8 a health reading past its "
    "threshold (doctor)."
)


def _bare_flags(params: list[Any]) -> list[Any]:
    """The parameters, with no `<bool>` shown after a flag in the help: a flag takes no value."""
    for param in params:
        if isinstance(param, TyperOption) and param.is_flag:
            param.metavar = ""
    return params


def _usage_name(argument: TyperArgument) -> str:
    """An argument as a usage line shows it: `JOB_TYPE`, or `[PAYLOAD_JSON]` when optional."""
    name = argument.metavar or (argument.name or "").upper()
    if not argument.required:
        name = f"[{name}]"
    return name + ("..." if argument.nargs != 1 else "")


class Command(TyperCommand):
    """A command whose help reads as usual: `enqueue [OPTIONS] JOB_TYPE [PAYLOAD_JSON]`,
    and nothing after a flag."""

    def get_params(self, ctx: Any) -> list[Any]:
        """The parameters, flags without a type shown."""
        return _bare_flags(super().get_params(ctx))

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        """`[OPTIONS]`, then each argument in capitals, bracketed when optional."""
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if isinstance(param, TyperArgument):
                pieces.append(_usage_name(param))
            else:
                pieces.extend(param.get_usage_pieces(ctx))
        return pieces


class Group(TyperGroup):
    """A command group whose flags (`--version`, `--help`) show nothing after them."""

    def get_params(self, ctx: Any) -> list[Any]:
        """The parameters, flags without a type shown."""
        return _bare_flags(super().get_params(ctx))

    def main(self, *args: Any, **kwargs: Any) -> Any:
        """Run the command with its output redacted (see `redacted_output`)."""
        argv = kwargs.get("args", args[0] if args else None)
        with redacted_output(sys.argv[1:] if argv is None else list(argv)):
            return super().main(*args, **kwargs)


def _learn_argument(arg: str) -> None:
    """Learn the passwords of a URL or conninfo given on the command line."""
    if arg.startswith("-") and "=" in arg:
        arg = arg.partition("=")[2]
    if "://" in arg or "=" in arg:
        redactor.add_url(arg)


@contextlib.contextmanager
def redacted_output(argv: list[str]) -> Iterator[None]:
    """While the command runs, every line on stdout and stderr (rich's, click's, the log's,
    a traceback's) is written without the secrets of the environment's `*_URL`, `*_DSN`,
    `*PASSWORD*`, `*SECRET*` variables and of the URLs given as arguments, nor their fragments.
    """
    global redactor
    if isinstance(sys.stdout, RedactingStream) or isinstance(sys.stderr, RedactingStream):
        yield
        return
    previous = redactor
    redactor = Redactor.from_environ()
    for arg in argv:
        _learn_argument(str(arg))
    stdout, stderr = sys.stdout, sys.stderr
    sys.stdout = RedactingStream(stdout, _redact)
    sys.stderr = RedactingStream(stderr, _redact)
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        sys.stdout, sys.stderr = stdout, stderr
        redactor = previous


def _redact(text: str) -> str:
    return redactor(text)


class App(typer.Typer):
    """A typer app whose commands are `Command`s, unless one asks for another class."""

    def command(self, *args: Any, **kwargs: Any) -> Any:
        """`typer.Typer.command`, with `Command` as the default class."""
        kwargs.setdefault("cls", Command)
        return super().command(*args, **kwargs)


app = App(
    name="proletarian-di",
    cls=Group,
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


def command_group(name: str, help: str, panel: str) -> App:
    """A group of subcommands, `proletarian-di NAME ...`, listed under `panel` in the help."""
    group = App(cls=Group, help=help, no_args_is_help=True, rich_markup_mode="rich")
    app.add_typer(group, name=name, rich_help_panel=panel)
    return group


schema_app = command_group(
    "schema", "Install, print, check or upgrade the queue tables (job and archived_job).", "Run"
)

# Options shared by several commands --------------------------------------------------------

URL_FALLBACK_ENVVAR = "DATABASE_URL"


def _url_or_fallback(value: str | None) -> str | None:
    """The URL given (--database-url, else PROLETARIAN_DATABASE_URL), else DATABASE_URL: the
    name the docs' samples and most platforms use."""
    url = value or os.environ.get(URL_FALLBACK_ENVVAR) or None
    redactor.add_url(url)
    return url


DatabaseURL = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        "-d",
        envvar="PROLETARIAN_DATABASE_URL",
        callback=_url_or_fallback,
        help="postgresql://user:password@host:port/db or mysql://user:password@host:port/db. "
        f"Also read from {URL_FALLBACK_ENVVAR}; PROLETARIAN_DATABASE_URL wins when both are set.",
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
JobTypeFilter = Annotated[str | None, unshown("--job-type", "-t", help="Only this job type.")]
FailedSince = Annotated[
    str | None,
    unshown(
        "--since",
        help="Only jobs that failed since then: a duration ago (2h, 7d) or an ISO 8601 "
        "time (2024-05-01T12:00, naive means UTC).",
    ),
]
FailedUntil = Annotated[
    str | None,
    unshown(
        "--until", help="Only jobs that failed before then: a duration ago or an ISO 8601 time."
    ),
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


def _storage_option(flag: str, parse: Callable[[str], Any], help: str) -> Any:
    """An option of `create_queue_worker`'s (`--serializer` is `serializer`), also read from
    `PROLETARIAN_<NAME>`, and checked by the library's own parser: a bad value is a usage
    error (exit 2) saying why."""

    def check(value: str | None) -> str | None:
        if value is not None:
            try:
                parse(value)
            except ConfigurationError as exc:
                raise typer.BadParameter(str(exc)) from None
        return value

    envvar = "PROLETARIAN_" + flag[2:].replace("-", "_").upper()
    return typer.Option(flag, envvar=envvar, callback=check, help=help)


SERIALIZER_OPTION = _storage_option(
    "--serializer",
    check_serializer,
    "How payloads are stored: json, or transit (Proletarian's Transit JSON, for tables "
    "shared with Clojure).",
)
JOB_TYPE_STYLE_OPTION = _storage_option(
    "--job-type-style",
    check_job_type_style,
    "How job types are stored: plain, or keyword (a Clojure keyword's text: "
    "app.jobs/send-email is stored as :app.jobs/send-email).",
)
SerializerOption = Annotated[str, SERIALIZER_OPTION]
"""`create_queue_worker`'s `serializer`, by name ("json", "transit")."""
JobTypeStyleOption = Annotated[str, JOB_TYPE_STYLE_OPTION]
"""`create_queue_worker`'s `job_type_style` ("plain", "keyword")."""


def as_stored(job_type: str | None, job_type_style: str) -> str | None:
    """A `--job-type` filter as the rows hold it (with --job-type-style keyword, a keyword's
    text: the colon added)."""
    return None if job_type is None else job_type_as_stored(job_type, job_type_style)


F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


def _error(message: str) -> None:
    err.print(f"[bold red]error:[/] {_escape(_one_line(message))}")


def _escape(text: str, lines: bool = False) -> str:
    """Data (a job type, a queue, an error) as rich markup that prints it as it is: secrets
    hidden, control characters written out (newlines and tabs kept when `lines`), `[` not
    read as markup, so that no value can move the cursor, retitle or clear the terminal."""
    return escape(escape_controls(redactor(text), keep="\n\t" if lines else ""))


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
    refusal = conninfo_refusal(exc)
    if refusal is not None:
        return CLIError(f"malformed PostgreSQL URL or conninfo: {refusal}; {HINT}", ExitCode.USAGE)
    if isinstance(exc, SchemaError):
        return CLIError(f"schema missing: {exc}", ExitCode.SCHEMA)
    if isinstance(exc, UnsupportedDatabase):
        return CLIError(f"unsupported database: {exc}", ExitCode.DATABASE)
    if is_read_only(exc):
        return CLIError(
            f"database is read-only (a standby or replica?): {message}; with several hosts "
            "in a postgresql:// URL, add target_session_attrs=read-write",
            ExitCode.DATABASE,
        )
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
                err.print(_escape(_scrubbed_traceback(exc), lines=True))
                _error(f"unexpected {_one_line(scrub(describe(exc)))}")
                raise typer.Exit(ExitCode.ERROR) from None
            _error(error.message)
            raise typer.Exit(error.code) from None

    return wrapper  # type: ignore[return-value]


def _scrubbed_traceback(exc: BaseException) -> str:
    """The traceback being handled, with any URL or `password=` its messages quote masked."""
    text = traceback.format_exc().rstrip()
    current: BaseException | None = exc
    seen: set[int] = set()
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        with contextlib.suppress(Exception):
            message = str(current)
            if message:
                text = text.replace(message, scrub(message))
        current = current.__cause__ or current.__context__
    return text


def _require_url(url: str | None) -> str:
    """The database URL, checked: missing, unsupported or malformed is a usage error (exit 2)."""
    if not url:
        raise CLIError(
            "no database URL: pass --database-url or set PROLETARIAN_DATABASE_URL "
            f"(or {URL_FALLBACK_ENVVAR})",
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


@dataclasses.dataclass(frozen=True)
class Location:
    """The tables a command works on, named with the schema or database they are in, the
    connection's own schema or database (where an unqualified name goes), and the URL masked."""

    job_table: str
    archived_job_table: str
    home: str | None
    url: str
    mysql: bool

    def __str__(self) -> str:
        """`proletarian.job / proletarian.archived_job on mysql://root@db/app`."""
        return f"{self.job_table} / {self.archived_job_table} on {self.url}"

    def databases(self) -> str:
        """On MySQL, the database the tables are in and the one the URL names (the default
        tables are in `proletarian` whatever the URL names); on PostgreSQL, nothing."""
        if not self.mysql:
            return ""
        found = sorted({t.rpartition(".")[0] for t in (self.job_table, self.archived_job_table)})
        label = f"database{'s' if len(found) > 1 else ''} {' and '.join(found)}"
        if found == [self.home]:
            return f"in {label} (the URL's)"
        return f"in {label} (the URL names {self.home or 'no database'})"


def locate(conn: Any, url: str, job_table: str, archived_job_table: str) -> Location:
    """Name the tables with the schema (PostgreSQL: the current one) or the database (MySQL:
    the connection's) that an unqualified name resolves to. Rolls back what it read."""
    dialect = dialect_for(conn, job_table, archived_job_table)
    if isinstance(dialect, MySQLDialect):
        home, tables = dialect.locate_tables(conn)
    else:
        try:
            home = dialect.fetchone(conn, "SELECT current_schema()")[0]
        finally:
            conn.rollback()
        tables = {
            option: name if "." in name or home is None else f"{home}.{name}"
            for option, name in (
                ("job_table", job_table),
                ("archived_job_table", archived_job_table),
            )
        }
    return Location(
        tables["job_table"],
        tables["archived_job_table"],
        home,
        mask(url),
        isinstance(dialect, MySQLDialect),
    )


class Operator:
    """One CLI connection and the queue tables it works on: each call of an `admin` function
    is its own transaction, committed for writes and rolled back for reads."""

    def __init__(self, conn: Any, job_table: str, archived_job_table: str, url: str = "") -> None:
        self.conn = conn
        self.url = url
        self.tables = admin.Tables(job_table, archived_job_table)

    @functools.cached_property
    def location(self) -> Location:
        """The tables, qualified, and the URL masked, for the command to print."""
        return locate(self.conn, self.url, self.tables.job_table, self.tables.archived_job_table)

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
        operator = Operator(conn, job_table, archived_job_table, url or "")
        operator.read(admin.check)
        yield operator


def _given(ctx: typer.Context, name: str) -> bool:
    """Whether the parameter `name` was given, on the command line or in the environment."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


_DEFAULT_TABLES = {"job_table": DEFAULT_JOB_TABLE, "archived_job_table": DEFAULT_ARCHIVED_JOB_TABLE}


def refuse_mixed_tables(ctx: typer.Context, job_table: str, archived_job_table: str) -> None:
    """Refuse a custom table paired with the other's default (exit 2): that default belongs
    to another queue's tables, whose figures would be mixed in."""
    names = {"job_table": job_table, "archived_job_table": archived_job_table}
    for given, other in (("job_table", "archived_job_table"), ("archived_job_table", "job_table")):
        if _given(ctx, given) and not _given(ctx, other) and names[given] != _DEFAULT_TABLES[given]:
            raise CLIError(
                f"--{given.replace('_', '-')} {names[given]} needs --{other.replace('_', '-')} "
                f"too (or PROLETARIAN_{other.upper()}): its default {_DEFAULT_TABLES[other]} "
                "belongs to the default tables, another queue",
                ExitCode.USAGE,
            )


# Durations and points in time: every option that takes one parses it here -----------------

_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_DURATION = re.compile(
    rf"\s*(?P<sign>[-+]?)\s*(?P<number>{_NUMBER})\s*(?P<unit>ms|s|m|h|d|w)?\s*", re.ASCII
)
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
MAX_DURATION = timedelta(days=36_500)
DURATION_FORMS = "90 (seconds), 250ms, 90s, 15m, 2h, 3d or 1w"


def parse_duration(
    text: str, option: str = "--older-than", minimum: timedelta = timedelta(0)
) -> timedelta:
    """`text` as a duration, seconds or with a unit (ms, s, m, h, d, w), from `minimum` to
    100 years: anything else is one line and exit 2, never an OverflowError."""
    match = _DURATION.fullmatch(text)
    if not match:
        raise CLIError(
            f"{option}: {text!r} is not a duration such as {DURATION_FORMS}", ExitCode.USAGE
        )
    seconds = float(match["number"]) * _UNITS[match["unit"] or "s"]
    if match["sign"] == "-" and seconds:
        raise CLIError(f"{option}: {text!r} is out of range: it is negative", ExitCode.USAGE)
    if not math.isfinite(seconds) or seconds > MAX_DURATION.total_seconds():
        raise CLIError(
            f"{option}: {text!r} is out of range: at most {MAX_DURATION.days}d (100 years)",
            ExitCode.USAGE,
        )
    duration = timedelta(seconds=seconds)
    if duration < minimum:
        raise CLIError(
            f"{option}: {text!r} is out of range: at least {_ago(minimum)}", ExitCode.USAGE
        )
    return duration


def failed_window(since: str | None, until: str | None) -> tuple[datetime | None, datetime | None]:
    """The `--since`/`--until` options as UTC times (None where not given)."""
    now = datetime.now(timezone.utc)
    start = parse_moment(since, now, "--since") if since else None
    end = parse_moment(until, now, "--until") if until else None
    return start, end


def parse_moment(text: str, now: datetime, option: str) -> datetime:
    """A point in time: a duration ago (as `parse_duration` reads it) or an ISO 8601 time
    (naive means UTC), in UTC."""
    if _DURATION.fullmatch(text):
        return now - parse_duration(text, option)
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise CLIError(
            f"{option}: {text!r} is neither a duration such as {DURATION_FORMS} nor an ISO "
            "time such as 2024-05-01T12:00",
            ExitCode.USAGE,
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    try:
        return moment.astimezone(timezone.utc)
    except OverflowError:
        raise CLIError(f"{option}: {text!r} is out of range", ExitCode.USAGE) from None


def listed(where: str, items: Sequence[Any], as_json: bool, empty: str = "") -> bool:
    """A listing's start: with --json, `where` on stderr and the items' `as_dict()` as a JSON
    list on stdout (then True: that is all); else `where`, and `empty` if there are none."""
    if as_json:
        err.print(_escape(where))
        typer.echo(json.dumps([item.as_dict() for item in items], indent=2, default=str))
        return True
    console.print(_escape(where))
    if not items and empty:
        console.print(empty)
    return False


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


LOG_FORMAT = "%(asctime)s %(levelname)-7s %(threadName)s %(message)s"


class TerminalFormatter(logging.Formatter):
    """Log lines for a terminal: control characters in a message or a traceback (a job's
    error quoting its data) are written out, never obeyed; only newlines and tabs stay."""

    def format(self, record: logging.LogRecord) -> str:
        return escape_controls(super().format(record), keep="\n\t")


@contextlib.contextmanager
def _log_level(level: str) -> Iterator[None]:
    """Log worker events at `level` to stderr (unless logging is set up), for the block."""
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(TerminalFormatter(LOG_FORMAT))
        root.addHandler(handler)
        root.setLevel(getattr(logging, level.upper()))
    logger = logging.getLogger("proletarian_di")
    previous = logger.level
    logger.setLevel(getattr(logging, level.upper()))
    try:
        yield
    finally:
        logger.setLevel(previous)

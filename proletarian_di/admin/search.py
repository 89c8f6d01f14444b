"""Finding jobs: by a piece of their id, job type or payload (`find_jobs`), and failures
grouped by their error's headline (`failure_groups`); each reads a bounded number of rows
where no index narrows them down (`SEARCH_ROWS`)."""

from __future__ import annotations

import dataclasses
import re
import uuid
from datetime import datetime, timezone
from typing import Any

from .._common.types import Connection
from .._store.dialects import Dialect, dialect_of
from .._store.tables import DEFAULT_TABLES, Tables
from ..errors import ConfigurationError
from ..serializers import Serializer, SerializerName, check_serializer
from ._checks import _check_positive, _utc
from ._sql import _failures, _Where
from .headline import _headline_sql, error_cause
from .jobs import JobInfo, _check_limit, _infos, _Query, _select

SEARCH_ROWS = 10_000
"""The most rows of each table that one `find_jobs` or `failure_groups` call reads where no
index narrows them down (an id's end, a job type or payload substring; the failures grouped
by error): the newest ones."""

SEARCH_FIELDS = ("any", "id", "job_type", "payload")
"""What `find_jobs` looks in: "any" is the id (when the text is hex), job type and payload."""

_SEARCH_CHARS = 200
_ID_TEXT = re.compile(r"[0-9a-f-]+")
_ID_HEX = {
    "postgresql": "replace(CAST(job_id AS text), '-', '')",
    "mysql": "LOWER(HEX(job_id))",
}
"""A job id as 32 lower-case hex digits, in SQL."""


@dataclasses.dataclass(frozen=True)
class ErrorGroup:
    """The failures whose error starts with the same line (`Type: message`, see
    `error_headline`; None: failures with no error recorded): how many, the newest's time."""

    error: str | None
    count: int
    newest: datetime


@dataclasses.dataclass(frozen=True)
class ErrorGroups:
    """What `failure_groups` found: its groups, most failures first; `examined`, the failures
    it read; `partial` when it stopped at its bound, leaving older failures out."""

    groups: list[ErrorGroup]
    examined: int
    partial: bool


def failure_groups(
    conn: Connection,
    *,
    queue: str | None = None,
    job_type: str | None = None,
    max_examined: int = SEARCH_ROWS,
    tables: Tables = DEFAULT_TABLES,
) -> ErrorGroups:
    """Failed jobs grouped by their error's first line: each group's count and newest
    failure, most failures first. It reads the newest `max_examined` failures (of this queue
    and job type) through the archive's `finished_at` index, and says when there were more;
    `retry_jobs(error=...)` and the others count and act on a whole group."""
    _check_positive(max_examined, "max_examined")
    dialect = dialect_of(conn, tables)
    where = _failures(dialect, None, queue, job_type, None, None)
    sql = (
        "SELECT headline, COUNT(*), MAX(finished_at) FROM ("
        f"SELECT {_headline_sql(dialect)} AS headline, finished_at "
        f"FROM {tables.archived_job_table} WHERE {where.sql} "
        "ORDER BY finished_at DESC LIMIT %s) AS recent GROUP BY headline"
    )
    rows = dialect.fetchall(conn, sql, ["\n", *where.params, max_examined])
    groups = [
        ErrorGroup(error, int(count), _utc(dialect.decode_time(newest)))
        for error, count, newest in rows
    ]
    groups.sort(key=lambda group: (-group.count, -group.newest.timestamp(), group.error or ""))
    examined = sum(group.count for group in groups)
    return ErrorGroups(groups, examined, examined >= max_examined)


@dataclasses.dataclass(frozen=True)
class FailureCause:
    """The failures whose errors differ only in their messages' variable parts: the `cause`
    (`error_cause` of their first lines; None: no error recorded), how many, the newest's
    time, and each exact first line under it (`errors`), most failures first."""

    cause: str | None
    count: int
    newest: datetime
    errors: list[ErrorGroup]

    @property
    def headlines(self) -> tuple[str, ...]:
        """Its exact first lines, for the `error` filter of the reads and actions."""
        return tuple(group.error for group in self.errors if group.error is not None)


@dataclasses.dataclass(frozen=True)
class FailureCauses:
    """What `failure_causes` found: its causes, most failures first; `examined` and
    `partial` as `failure_groups` says them."""

    causes: list[FailureCause]
    examined: int
    partial: bool


def failure_causes(
    conn: Connection,
    *,
    queue: str | None = None,
    job_type: str | None = None,
    max_examined: int = SEARCH_ROWS,
    tables: Tables = DEFAULT_TABLES,
) -> FailureCauses:
    """The groups of `failure_groups` gathered by cause: each error's first line with its
    message's variable parts (numbers, ids, UUIDs, URLs, e-mail addresses, quoted values)
    taken out (`error_cause`), with its exact first lines under it. The same read as
    `failure_groups`; `retry_jobs(error=cause.headlines)` and the others act on a cause."""
    found = failure_groups(
        conn, queue=queue, job_type=job_type, max_examined=max_examined, tables=tables
    )
    gathered: dict[str | None, list[ErrorGroup]] = {}
    for group in found.groups:
        gathered.setdefault(error_cause(group.error), []).append(group)
    causes = [
        FailureCause(
            cause,
            sum(group.count for group in groups),
            max(group.newest for group in groups),
            groups,
        )
        for cause, groups in gathered.items()
    ]
    causes.sort(key=lambda c: (-c.count, -c.newest.timestamp(), c.cause or ""))
    return FailureCauses(causes, found.examined, found.partial)


@dataclasses.dataclass(frozen=True)
class JobSearch:
    """What `find_jobs` found: its jobs, newest first; `more` when more matched than the
    `limit` it returns; `cut_short` when the part of the search no index serves read only the
    newest `searched` rows of a table, and older ones were not searched."""

    jobs: list[JobInfo]
    more: bool
    cut_short: bool
    searched: int


def id_fragment(text: str) -> str | None:
    """A job id, or its start or end, as lower-case hex digits without dashes: None when
    `text` is not hex digits (dashes allowed between them), or has more than 32."""
    text = text.strip().lower()
    digits = text.replace("-", "")
    if not _ID_TEXT.fullmatch(text) or not 1 <= len(digits) <= 32:
        return None
    return digits


def find_jobs(
    conn: Connection,
    text: str,
    *,
    by: str = "any",
    limit: int = 50,
    max_examined: int = SEARCH_ROWS,
    payload_chars: int | None = None,
    tables: Tables = DEFAULT_TABLES,
    serializer: Serializer | SerializerName | None = None,
) -> JobSearch:
    """Jobs, waiting and archived, found by `text`: at most `limit`, newest first.

    `by` (see `SEARCH_FIELDS`): "id" finds a whole id, or the jobs whose id starts or ends
    with these hex digits (dashes ignored; anything else is refused); "job_type" and
    "payload", the jobs whose job type or payload contains `text` (case-sensitive); "any",
    all three (the id only when `text` is hex). A whole id and an id's start are found
    through the primary key, however large the tables; the rest reads at most the newest
    `max_examined` rows of each table, and the result says when it stopped there.
    """
    if by not in SEARCH_FIELDS:
        raise ConfigurationError(f"by must be one of {', '.join(SEARCH_FIELDS)}, got {by!r}")
    if not isinstance(text, str) or not text.strip() or len(text) > _SEARCH_CHARS:
        raise ConfigurationError(
            f"a search needs 1 to {_SEARCH_CHARS} characters of text, got {text!r}"
        )
    if "\x00" in text:
        raise ConfigurationError(f"a search cannot contain a NUL character, got {text!r}")
    digits = id_fragment(text) if by in ("any", "id") else None
    if by == "id" and digits is None:
        raise ConfigurationError(
            f"{text!r} is not a job id nor the start or end of one: give 1 to 32 hex digits "
            "(0-9, a-f), with or without dashes"
        )
    count = _check_limit(limit)
    _check_positive(max_examined, "max_examined")
    if payload_chars is not None:
        _check_positive(payload_chars, "payload_chars")
    codec = check_serializer(serializer)
    dialect = dialect_of(conn, tables)
    key = dialect.default_id_strategy.encode
    indexed: list[tuple[str, list[Any]]] = []
    scanned: list[tuple[str, list[Any]]] = []
    if digits is not None and len(digits) == 32:
        indexed.append(("job_id = %s", [key(uuid.UUID(digits))]))
    elif digits is not None:
        low, high = (uuid.UUID(digits.ljust(32, pad)) for pad in "0f")
        indexed.append(("job_id >= %s AND job_id <= %s", [key(low), key(high)]))
        scanned.append((f"{_ID_HEX[dialect.name]} LIKE %s", ["%" + digits]))
    if by in ("any", "job_type"):
        scanned.append(("job_type LIKE %s ESCAPE '!'", [_contains(text)]))
    if by in ("any", "payload"):
        for form in _payload_forms(codec, text):
            scanned.append(("payload LIKE %s ESCAPE '!'", [_contains(form)]))
    now = datetime.now(timezone.utc)
    cut_short = False
    queries = []
    with dialect.admin_read(conn):
        for table in (tables.job_table, tables.archived_job_table):
            found, cut = _candidates(conn, dialect, table, indexed, scanned, count, max_examined)
            cut_short = cut_short or cut
            marks = ", ".join(["%s"] * len(found)) or "NULL"
            queries.append(_Query(condition=(f"job_id IN ({marks})", tuple(found))))
        held = dialect.held_rows(conn)
        sql, params = _select(
            dialect, tables, queries[0], held, None, now, count + 1, payload_chars, queries[1]
        )
        rows = dialect.fetchall(conn, sql, params)
        infos = _infos(conn, dialect, rows, held, now, codec, payload_chars)
    return JobSearch(infos[:count], len(infos) > count, cut_short, max_examined)


def _contains(text: str) -> str:
    """A LIKE pattern for text that contains `text`, its wildcards and `!` themselves."""
    return "%" + re.sub(r"[!%_]", r"!\g<0>", text) + "%"


def _payload_forms(codec: Serializer, text: str) -> list[str]:
    """The ways `text`, as typed, stands in a stored payload: as the serializer writes it
    in a string (a quote, a backslash, a line break escaped: `say \\"hi\\"`); and as typed
    too when it holds a quote and no backslash, which may be the JSON's own (`"amount":1000`).
    With a backslash it is never read as typed: `a\\nb` would find a line break. A
    serializer that writes no JSON array of strings is searched as typed."""
    try:
        written = codec.encode([" " + text])
    except Exception:
        written = ""
    if not (written.startswith('[" ') and written.endswith('"]')):
        return [text]
    escaped = written[3:-2]
    forms = [escaped]
    if escaped != text and '"' in text and "\\" not in text:
        forms.append(text)
    return forms


def _candidates(
    conn: Connection,
    dialect: Dialect,
    table: str,
    indexed: list[tuple[str, list[Any]]],
    scanned: list[tuple[str, list[Any]]],
    limit: int,
    max_examined: int,
) -> tuple[list[Any], bool]:
    """The ids (as stored) of up to `limit` + 1 rows of `table` per condition, newest first:
    the `indexed` ones through the primary key, the `scanned` ones among the newest
    `max_examined` rows; and whether there were older rows left unsearched."""
    found: dict[Any, None] = {}
    for condition, params in indexed:
        sql = f"SELECT job_id FROM {table} WHERE {condition} ORDER BY job_id DESC LIMIT %s"
        found.update(
            dict.fromkeys(row[0] for row in dialect.fetchall(conn, sql, [*params, limit + 1]))
        )
    if not scanned:
        return list(found), False
    beyond = dialect.fetchall(
        conn,
        f"SELECT job_id FROM {table} ORDER BY job_id DESC LIMIT 1 OFFSET %s",
        [max_examined],
    )
    where = _Where(f"({' OR '.join(condition for condition, _ in scanned)})")
    where.params = [param for _, params in scanned for param in params]
    if beyond:
        where.add("job_id > %s", beyond[0][0])
    sql = f"SELECT job_id FROM {table} WHERE {where.sql} ORDER BY job_id DESC LIMIT %s"
    found.update(
        dict.fromkeys(row[0] for row in dialect.fetchall(conn, sql, [*where.params, limit + 1]))
    )
    return list(found), bool(beyond)

"""The checks every layer's options share: names, queues, priorities, clocks, durations,
and the job type spellings Clojure reads back (`job_type_style`). Each returns the value it
accepts and raises `ConfigurationError` naming the option it refuses."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any, Literal, TypeVar

from ..errors import ConfigurationError
from ..job_ids import JobIdStrategy
from ..retry import MAX_DELAY_MS
from .types import Clock, LogFn

T = TypeVar("T")


def utc_now() -> datetime:
    """The default clock: the current time, timezone-aware, in UTC."""
    return datetime.now(timezone.utc)


MAX_NAME_LENGTH = 255


def check_name(value: Any, option: str) -> str:
    """A queue or job type: a non-empty string of at most 255 characters without NUL, which
    both databases store exactly (MySQL's VARCHAR(255) would cut a longer one short)."""
    if not isinstance(value, str) or not value:
        raise ConfigurationError(f"{option} must be a non-empty string, got {value!r}")
    if "\x00" in value:
        raise ConfigurationError(f"{option} must not contain NUL characters, got {value!r}")
    check_utf8(value, option)
    if len(value) > MAX_NAME_LENGTH:
        raise ConfigurationError(
            f"{option} must be at most {MAX_NAME_LENGTH} characters, got {len(value)}: "
            f"{value[:40]!r}…"
        )
    return value


def check_utf8(text: str, option: str) -> None:
    """Refuse a string the drivers cannot send: a lone surrogate (say from a file name
    decoded with `surrogateescape`) has no UTF-8 encoding."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ConfigurationError(
            f"{option} must be valid Unicode text, got {text[:40]!r} with a lone surrogate "
            f"at position {exc.start}"
        ) from None


def check_queue(queue: Any) -> str:
    return check_name(queue, "queue")


JobTypeStyle = Literal["plain", "keyword"]
"""How job types are stored: "plain" as given, "keyword" as Clojure keywords'
text (`"app.jobs/send-email"` is the row's `":app.jobs/send-email"`), so that
Proletarian (Clojure) reads and writes the same rows."""

JOB_TYPE_STYLES = ("plain", "keyword")

_JAVA_WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2008\u2009\u200a\u2028\u2029\u205f\u3000"
)
"""Java's `Character.isWhitespace`: Unicode's space, line and paragraph separators but the
no-break ones (U+00A0, U+2007, U+202F), and nine ASCII controls. Clojure's reader ends a
token at any of them."""

_NOT_IN_A_KEYWORD = re.compile("[" + re.escape(_JAVA_WHITESPACE + ',"\\;^()[]{}@`~') + "]")
"""What Clojure's EDN reader does not read inside a keyword: what ends a token (Java's
whitespace, commas and the terminating macro characters `"\\;^()[]{}`), which leaves the
rest of the text unread, and what it refuses outright (`@`, backquote, `~`)."""

_EDN_SYMBOL = re.compile(r"[:]?(?P<ns>[^0-9/][^\n\r\u0085\u2028\u2029]*/)?(?P<name>/|[^0-9/][^/]*)")
"""`clojure.lang.EdnReader`'s `symbolPat`, `[:]?([\\D&&[^/]].*/)?(/|[\\D&&[^/]][^/]*)`, in
Python's terms: Java's `\\D` is anything but ASCII digits, and its `.` no line terminator."""


def _edn_reads_keyword(text: str) -> bool:
    """Whether `edn/read-string` reads `text` (`:` and a name) back as the keyword whose
    `(str k)` it is: one token (`_NOT_IN_A_KEYWORD`) that `EdnReader.matchSymbol` accepts."""
    if _NOT_IN_A_KEYWORD.search(text):
        return False
    match = _EDN_SYMBOL.fullmatch(text)
    if match is None:
        return False
    ns, name = match["ns"], match["name"]
    return not (
        (ns is not None and ns.endswith(":/"))
        or name.endswith(":")
        or text.find("::", 1) != -1
        or text.startswith("::")
    )


def check_job_type_style(style: Any) -> JobTypeStyle:
    """`job_type_style`: "plain" (the default) or "keyword"."""
    if not isinstance(style, str) or style not in JOB_TYPE_STYLES:
        raise ConfigurationError(f"job_type_style must be 'plain' or 'keyword', got {style!r}")
    return style  # type: ignore[return-value]


def keyword_job_type(job_type: str) -> str:
    """The row's text for a job type written with job_type_style="keyword": the keyword
    `:ns/name` that Clojure's `(str k)` gives, refused unless `edn/read-string` reads it
    back as that keyword, as Proletarian's worker does while it polls (a job type it cannot
    read stops that worker): no leading colon (that would be `::`, an auto-resolved keyword
    that EDN refuses), nothing that ends a token or that EDN refuses, no digit right after
    the last `/`, no misplaced `:` or `/`."""
    if job_type.startswith(":"):
        raise ConfigurationError(
            f"job_type {job_type!r} starts with ':'; with job_type_style='keyword' give it "
            f"without the colon ({job_type.lstrip(':')!r} is stored as "
            f"':{job_type.lstrip(':')}')"
        )
    check_name(job_type, "job_type")
    if not _edn_reads_keyword(":" + job_type):
        bad = _NOT_IN_A_KEYWORD.search(job_type)
        if bad is not None:
            found = f"the character {bad.group()!r}"
        elif re.search("/[0-9][^/]*$", job_type):
            found = "a digit right after its last '/'"
        else:
            found = "a misplaced ':' or '/'"
        raise ConfigurationError(
            f"job_type {job_type!r} is not the text of a Clojure keyword (it has {found}): "
            "with job_type_style='keyword' Proletarian's EDN reader reads it back as another "
            "keyword or not at all, and a Clojure worker that polls it stops; use names "
            "like 'app.jobs/send-email'"
        )
    return check_name(":" + job_type, "job_type")


def job_type_as_stored(job_type: str, style: str) -> str:
    """The text rows hold for a job type named in `style` (to look for it): with "keyword",
    the keyword's, colon added unless it is there already; else as given."""
    keyword = check_job_type_style(style) == "keyword" and not job_type.startswith(":")
    return ":" + job_type if keyword else job_type


def job_type_from_keyword(stored: str) -> str:
    """The job type a keyword-style worker hands its handler: the row's text without the
    keyword's leading colon; text without one (a job enqueued in the plain style, or a
    Clojure `enqueue!` given a string) is handed as stored."""
    return stored[1:] if stored[:1] == ":" else stored


PRIORITY_LIMIT = 2**31 - 1
"""The highest priority, and the negated lowest (the claim index stores -priority)."""


def check_priority(priority: Any) -> int:
    """A job's priority: an int from -PRIORITY_LIMIT to PRIORITY_LIMIT; higher runs first."""
    if type(priority) is not int:
        raise ConfigurationError(f"priority must be an int, got {priority!r}")
    if not -PRIORITY_LIMIT <= priority <= PRIORITY_LIMIT:
        raise ConfigurationError(
            f"priority must be between {-PRIORITY_LIMIT} and {PRIORITY_LIMIT}, got {priority}"
        )
    return priority


def check_clock(clock: Any) -> Clock:
    if clock is None:
        return utc_now
    if not callable(clock):
        raise ConfigurationError(f"clock must be a callable returning a datetime, got {clock!r}")
    return clock


def check_id_strategy(strategy: Any) -> JobIdStrategy | None:
    if strategy is not None and not isinstance(strategy, JobIdStrategy):
        raise ConfigurationError(
            f"job_id_strategy must have generate(), encode() and decode(), got {strategy!r}"
        )
    return strategy


def callable_or_none(value: Any, name: str) -> Any:
    if value is not None and not callable(value):
        raise ConfigurationError(f"{name} must be callable or None, got {value!r}")
    return value


MAX_DURATION_MS = MAX_DELAY_MS
"""The longest duration an option takes (about a century): a lease's end, `now + lease_ms`,
then fits MySQL's DATETIME (up to 9999-12-31) and a `datetime`, and a wait of it fits
`threading.TIMEOUT_MAX` (about 292 years on Linux)."""


def int_at_least(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigurationError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


def check_ms(value: Any, name: str, minimum: int) -> int:
    """A duration option in milliseconds, from `minimum` to `MAX_DURATION_MS`."""
    int_at_least(value, name, minimum)
    if value > MAX_DURATION_MS:
        raise ConfigurationError(
            f"{name} must be at most {MAX_DURATION_MS} ms (about 100 years), got {value}"
        )
    return value


def check_log(log: Any) -> LogFn:
    if not callable(log):
        raise ConfigurationError(f"log must be a callable (event, data), got {log!r}")
    return log


def validated(settings: type[T], kind: str, options: Mapping[str, Any]) -> T:
    """`settings(**options)`, None meaning the default, naming any option that does not exist
    (`kind`: "worker", "scheduler")."""
    fields = {f.name for f in dataclasses.fields(settings)}  # type: ignore[arg-type]
    unknown = sorted(set(options) - fields)
    if unknown:
        raise ConfigurationError(
            f"unknown {kind} option(s) {', '.join(unknown)}; "
            f"valid options: {', '.join(sorted(fields))}"
        )
    return settings(**{name: value for name, value in options.items() if value is not None})

"""An error's headline: its first line (`Type: message`), cut to `HEADLINE_CHARS`
characters. It names a failure's group (`search.failure_groups`), and the `error` filters
of the reads and the actions match it, in Python and in SQL. Its cause (`error_cause`) is
the headline with the message's variable parts taken out (`search.failure_causes`)."""

from __future__ import annotations

import re
from typing import Any

from .._store.dialects import Dialect
from ..errors import ConfigurationError

HEADLINE_CHARS = 200
"""The most characters of an error's first line that name its group (see `error_headline`)."""

_HEADLINE = {
    "postgresql": "LEFT(split_part(last_error, %s, 1), {n})",
    "mysql": "LEFT(SUBSTRING_INDEX(last_error, %s, 1), {n})",
}
"""An error's headline in SQL; its `%s` is a line feed (a parameter: no escapes to agree on)."""


def error_headline(error: str | None) -> str | None:
    """An error's first line (`Type: message`, as a failed attempt stores it), cut to
    `HEADLINE_CHARS` characters: what names its group in `failure_groups`, and what the
    `error` filters match."""
    return None if error is None else error.split("\n", 1)[0][:HEADLINE_CHARS]


def _headline_sql(dialect: Dialect) -> str:
    return _HEADLINE[dialect.name].format(n=HEADLINE_CHARS)


MAX_ERRORS = 1000
"""The most first lines one `error` filter may name (a cause's, `failure_causes`)."""


def _check_error(error: Any) -> str | tuple[str, ...] | None:
    """An `error` filter: a first line as `error_headline` gives it, or a list of 1 to
    `MAX_ERRORS` of them, any of which matches (None: any error)."""
    if error is None:
        return None
    if isinstance(error, (list, tuple)):
        if not 1 <= len(error) <= MAX_ERRORS:
            raise ConfigurationError(
                f"error must name 1 to {MAX_ERRORS} first lines, got {len(error)}"
            )
        return tuple(dict.fromkeys(_one_error(each) for each in error))
    return _one_error(error)


def _one_error(error: Any) -> str:
    if not isinstance(error, str) or not error or "\n" in error or len(error) > HEADLINE_CHARS:
        raise ConfigurationError(
            f"error must be an error's first line (one line of 1 to {HEADLINE_CHARS} "
            f"characters, as error_headline gives it), got {error!r}"
        )
    return error


_VARIABLE = (
    (re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+"), "<url>"),
    (re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+"), "<email>"),
    (re.compile(r"(?<!\w)'[^']*'(?!\w)"), "'…'"),
    (re.compile(r'"[^"]*"'), '"…"'),
    (re.compile(r"“[^”]*”"), "“…”"),
    (re.compile(r"`[^`]*`"), "`…`"),
    (
        re.compile(
            r"\b[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}\b"
        ),
        "<uuid>",
    ),
    (re.compile(r"\b(?=[0-9a-fA-F]*[0-9])(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}\b"), "<hex>"),
    (re.compile(r"\d+(?:\.\d+)?"), "<n>"),
)
"""The variable parts of an error's message, each with what stands for it in its cause, in
the order they are taken out: URLs and e-mail addresses (which hold numbers), quoted
values, UUIDs, long hex ids, then numbers."""


def error_cause(headline: str | None) -> str | None:
    """An error's first line with the variable parts of its message (URLs, e-mail
    addresses, quoted values, UUIDs, hex ids, numbers) taken out, its type kept:
    `ConnectionError: refused <email>: <n>`. The failures of one cause differ only there."""
    if headline is None:
        return None
    kind, colon, message = headline.partition(": ")
    if not colon or not kind.replace(".", "").replace("_", "").isalnum():
        kind, colon, message = "", "", headline
    for pattern, stand_in in _VARIABLE:
        message = pattern.sub(stand_in, message)
    return f"{kind}{colon}{message}"

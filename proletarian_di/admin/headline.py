"""An error's headline: its first line (`Type: message`), cut to `HEADLINE_CHARS`
characters. It names a failure's group (`search.failure_groups`), and the `error` filters
of the reads and the actions match it, in Python and in SQL."""

from __future__ import annotations

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


def _check_error(error: Any) -> str | None:
    """An `error` filter: a first line as `error_headline` gives it (None: any error)."""
    if error is None:
        return None
    if not isinstance(error, str) or not error or "\n" in error or len(error) > HEADLINE_CHARS:
        raise ConfigurationError(
            f"error must be an error's first line (one line of 1 to {HEADLINE_CHARS} "
            f"characters, as error_headline gives it), got {error!r}"
        )
    return error

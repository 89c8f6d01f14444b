"""The checks of the arguments the admin calls share (counts, job ids, times) and the time
helpers: each check raises `ConfigurationError` with what was expected."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Any

from ..errors import ConfigurationError


def _utc(value: datetime) -> datetime:
    """The same moment in UTC (psycopg returns the session's time zone)."""
    return value.astimezone(timezone.utc)


def _moment(value: Any, name: str) -> datetime | None:
    """A time filter as an aware UTC datetime; a naive one means UTC, as in the CLI."""
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise ConfigurationError(f"{name} must be a datetime, got {value!r}")
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else _utc(value)


def _check_positive(value: Any, name: str) -> int:
    """A whole number >= 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{name} must be a whole number >= 1, got {value!r}")
    return value


def _job_id(value: Any) -> uuid.UUID:
    """A job id from a `uuid.UUID` or its string."""
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, str):
        try:
            return uuid.UUID(value)
        except ValueError:
            pass
    raise ConfigurationError(f"job id {value!r} is not a UUID (a uuid.UUID or its string)")


def _job_ids(job_ids: Any) -> list[uuid.UUID] | None:
    """Job ids without repeats (None: no ids given)."""
    if job_ids is None:
        return None
    if isinstance(job_ids, (str, bytes, uuid.UUID)):
        raise ConfigurationError(f"job_ids must be a list of job ids, got {job_ids!r}")
    return list(dict.fromkeys(map(_job_id, job_ids)))

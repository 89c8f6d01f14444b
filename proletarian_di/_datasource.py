"""Turn a user's data source into a `connection()` context manager."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from .errors import ConfigurationError

ConnectionFactory = Callable[[], AbstractContextManager[Any]]


def connection_factory(data_source: Any) -> ConnectionFactory:
    """Accept a pool with `connection()` or a zero-argument callable returning a connection."""
    method = getattr(data_source, "connection", None)
    if callable(method):
        return method
    if callable(data_source):

        @contextlib.contextmanager
        def connect() -> Iterator[Any]:
            conn = data_source()
            try:
                yield conn
            finally:
                with contextlib.suppress(Exception):
                    conn.close()

        return connect
    raise ConfigurationError(
        "data_source must have a connection() context manager (e.g. a psycopg_pool "
        f"ConnectionPool) or be a callable returning a new connection, got {data_source!r}"
    )

"""Turn a user's data source into connections: lent by its pool, or opened beside it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from .errors import ArgumentTypeError, ConfigurationError

ConnectionFactory = Callable[[], AbstractContextManager[Any]]


def _is_async_pool(data_source: Any) -> bool:
    return any(
        cls.__name__.startswith("Async") and cls.__module__.startswith("psycopg_pool")
        for cls in type(data_source).__mro__
    )


def connection_factory(data_source: Any) -> ConnectionFactory:
    """Accept a pool with `connection()` or a zero-argument callable returning a connection."""
    if _is_async_pool(data_source):
        raise ArgumentTypeError(
            f"{type(data_source).__name__} is an asyncio pool, and workers run in threads: "
            "pass a psycopg_pool.ConnectionPool (the same conninfo works) as the data source"
        )
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


def direct_connect(data_source: Any) -> Callable[[], Any] | None:
    """A way to open a new connection outside the data source's pool, or None.

    A psycopg_pool pool gives its conninfo and kwargs, a `MySQLDataSource` its
    connect options, and a callable data source is called. The worker uses it
    for its PostgreSQL LISTEN connection and for recording abandoned jobs,
    which must not wait for a pool that the abandoned threads still hold.
    """
    conninfo = getattr(data_source, "conninfo", None)
    if isinstance(conninfo, str):
        import psycopg

        kwargs = dict(getattr(data_source, "kwargs", None) or {})
        return lambda: psycopg.connect(conninfo, **kwargs)
    connect = getattr(data_source, "connect", None)
    if callable(connect) and callable(getattr(data_source, "connection", None)):
        return connect
    if callable(data_source) and not callable(getattr(data_source, "connection", None)):
        return data_source
    return None

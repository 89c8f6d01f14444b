"""Turn a user's data source into connections: lent by its pool, or opened beside it."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from ..errors import ArgumentTypeError, ConfigurationError

ConnectionFactory = Callable[[], AbstractContextManager[Any]]


def _is_async_pool(data_source: Any) -> bool:
    return any(
        cls.__name__.startswith("Async") and cls.__module__.startswith("psycopg_pool")
        for cls in type(data_source).__mro__
    )


def is_provider(data_source: Any) -> bool:
    """Whether `data_source` is a dependency-injector provider (told by its class's module,
    so that the core never imports dependency_injector)."""
    return type(data_source).__module__.partition(".")[0] == "dependency_injector"


def _async_provider(provider: Any) -> bool:
    made_by = getattr(provider, "provides", None)
    if callable(made_by):
        made_by = inspect.unwrap(made_by)  # dependency-injector wraps what it copies
    if inspect.isasyncgenfunction(made_by) or inspect.iscoroutinefunction(made_by):
        return True
    enabled = getattr(provider, "is_async_mode_enabled", None)
    return bool(callable(enabled) and enabled())


def _refuse_async(provider: Any) -> ArgumentTypeError:
    return ArgumentTypeError(
        f"{provider!r} is an async provider (its resource is made by an async function, such "
        "as async_postgres_pool): the workers and the dashboard read in threads, which cannot "
        "await it. Declare the pool with postgres_pool or mysql_data_source, or pass the pool "
        "it made (pool = await container.pool())"
    )


def _call(provider: Any) -> Any:
    """What the provider gives now; an error for an async one, which gives an awaitable."""
    if _async_provider(provider):
        raise _refuse_async(provider)
    source = provider()
    if inspect.isawaitable(source):
        with contextlib.suppress(Exception):
            close = getattr(source, "close", None) or getattr(source, "cancel", None)
            if callable(close):
                close()
        raise _refuse_async(provider)
    return source


def resolved(data_source: Any) -> Any:
    """What a provider gives now (a `Resource` or `Singleton` its pool, started if it was
    not); a `Factory` (a new connection at each call) or any other data source as it is."""
    if not is_provider(data_source) or "Factory" in type(data_source).__name__:
        return data_source
    return _call(data_source)


def _is_pool(obj: Any) -> bool:
    return callable(getattr(obj, "connection", None))


def _is_connection(obj: Any) -> bool:
    return callable(getattr(obj, "cursor", None))


def _not_a_connection(data_source: Any, got: Any) -> ArgumentTypeError:
    kind = f"{type(got).__module__}.{type(got).__qualname__}"
    if _is_pool(got):
        return ArgumentTypeError(
            f"the data source {data_source!r} returned a pool ({kind}) where a connection was "
            "expected: a callable data source must return a new connection; pass the pool "
            "itself instead (e.g. dashboard(pool), not dashboard(lambda: pool))"
        )
    return ArgumentTypeError(
        f"the data source {data_source!r} returned {kind}, which is not a database "
        "connection (it has no cursor()): pass a pool with a connection() context manager "
        "or a callable returning a new connection"
    )


def _check_sync(data_source: Any) -> None:
    if _is_async_pool(data_source):
        raise ArgumentTypeError(
            f"{type(data_source).__name__} is an asyncio pool, and workers run in threads: "
            "pass a psycopg_pool.ConnectionPool (the same conninfo works) as the data source"
        )


@contextlib.contextmanager
def _opened(data_source: Any, conn: Any) -> Iterator[Any]:
    if not _is_connection(conn):
        raise _not_a_connection(data_source, conn)
    try:
        yield conn
    finally:
        with contextlib.suppress(Exception):
            conn.close()


def _provided(provider: Any) -> ConnectionFactory:
    """Connections from a dependency-injector provider, resolved at each use: a `Resource`
    or `Singleton` of a pool lends the pool's connections (so a container that restarts
    its resources is followed), a `Factory` of connections opens one each time."""

    @contextlib.contextmanager
    def connect() -> Iterator[Any]:
        source = _call(provider)
        _check_sync(source)
        if _is_pool(source):
            with source.connection() as conn:
                yield conn
            return
        with _opened(provider, source) as conn:
            yield conn

    return connect


def connection_factory(data_source: Any) -> ConnectionFactory:
    """Accept a pool with `connection()`, a zero-argument callable returning a connection,
    or a dependency-injector provider of either (such as `container.pool`)."""
    _check_sync(data_source)
    if is_provider(data_source):
        if _async_provider(data_source):
            raise _refuse_async(data_source)
        return _provided(data_source)
    method = getattr(data_source, "connection", None)
    if callable(method):
        return method
    if callable(data_source):

        def connect() -> AbstractContextManager[Any]:
            return _opened(data_source, data_source())

        return connect
    raise ConfigurationError(
        "data_source must have a connection() context manager (e.g. a psycopg_pool "
        f"ConnectionPool), be a callable returning a new connection or a dependency-injector "
        f"provider of either (container.pool), got {data_source!r}"
    )


def worker_connection_factory(data_source: Any) -> ConnectionFactory:
    """`connection_factory` for connections only the worker's own statements use (no user
    code is handed them): a `MySQLDataSource` then spares the check of the session's
    settings when one comes back."""
    factory = connection_factory(data_source)
    if is_provider(data_source) or not hasattr(type(data_source), "_worker_connection"):
        return factory
    own: ConnectionFactory = data_source._worker_connection
    return own


def direct_connect(data_source: Any) -> Callable[[], Any] | None:
    """A way to open a new connection outside the data source's pool, or None.

    A psycopg_pool pool gives its conninfo and kwargs, a `MySQLDataSource` its
    connect options, and a callable data source is called. The worker uses it
    for its PostgreSQL LISTEN connection and for recording abandoned jobs,
    which must not wait for a pool that the abandoned threads still hold.
    """
    data_source = resolved(data_source)
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


def check_pgbouncer_pool(data_source: Any) -> None:
    """With `pgbouncer=True`: a psycopg pool must not prepare statements. psycopg prepares a
    statement it has run five times (`prepare_threshold`), and a transaction pooler hands
    the next transaction another server connection, which lacks it (PgBouncer before 1.21
    has no protocol-level prepared statements)."""
    source = resolved(data_source)
    if not isinstance(getattr(source, "conninfo", None), str):
        return
    kwargs = getattr(source, "kwargs", None) or {}
    if kwargs.get("prepare_threshold", 5) is not None:
        raise ConfigurationError(
            "pgbouncer=True needs a pool that does not prepare statements: "
            "ConnectionPool(url, kwargs={'prepare_threshold': None}) (psycopg prepares a "
            "statement run five times, and a transaction pooler runs the next transaction "
            "on another server connection, which lacks it)"
        )

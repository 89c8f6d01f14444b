"""The connections `enqueue` unwraps, and the async drivers `enqueue_async` speaks.

A SQLAlchemy `Session`/`Connection` (or `AsyncSession`/`AsyncConnection`) is turned into
the driver connection under it, inside the transaction SQLAlchemy holds for it (begun the
way SQLAlchemy would, if none was open), so the job commits or rolls back with the
application's own writes. SQLAlchemy and asyncpg are imported only here, and only once
such an object was passed: the class's module tells, as `_dialects.base._classify` tells
drivers apart.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from ..errors import ArgumentTypeError, TransactionAborted, UnsupportedDatabase
from .dialects import Dialect, PostgresDialect

_IN_ERROR = 3  # libpq's PQTRANS_INERROR: the transaction refuses statements until a rollback
_SUPPORTED_URLS = "postgresql+psycopg:// (psycopg 3) or mysql+pymysql:// (PyMySQL)"
_SUPPORTED_ASYNC_URLS = "postgresql+psycopg:// (psycopg 3) or postgresql+asyncpg://"


_ROOTS: dict[type, frozenset[str]] = {}


def _roots(obj: Any) -> frozenset[str]:
    """The top-level packages of the classes in `obj`'s type's MRO (cached per class)."""
    cls = type(obj)
    roots = _ROOTS.get(cls)
    if roots is None:
        roots = _ROOTS[cls] = frozenset(k.__module__.partition(".")[0] for k in cls.__mro__)
    return roots


def _kind(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def is_sqlalchemy(obj: Any) -> bool:
    """Whether `obj` is a SQLAlchemy object (its class, or a base, comes from sqlalchemy)."""
    return "sqlalchemy" in _roots(obj)


def _is_async_sqlalchemy(obj: Any) -> bool:
    return any(k.__module__.startswith("sqlalchemy.ext.asyncio") for k in type(obj).__mro__)


def _failed(obj: Any, reason: BaseException | str) -> TransactionAborted:
    """The error for a transaction that already failed: nothing written, roll back first."""
    return TransactionAborted(
        f"cannot enqueue on {_kind(obj)}: its transaction has failed ({reason}); nothing was "
        "written. Roll it back (e.g. `session.rollback()`) and enqueue in a new transaction"
    )


def _check_transaction(obj: Any, connection: Any) -> None:
    """A SQLAlchemy connection whose transaction (or savepoint) SQLAlchemy knows is dead."""
    for transaction in (connection.get_transaction(), connection.get_nested_transaction()):
        if transaction is not None and not transaction.is_active:
            raise _failed(obj, "SQLAlchemy marked it inactive")


def _check_driver(obj: Any, driver: Any) -> None:
    """A psycopg connection whose server-side transaction is aborted (a failed statement)."""
    if "psycopg" in _roots(driver) and driver.info.transaction_status == _IN_ERROR:
        raise _failed(obj, "a statement in it failed")


def _driver_of(obj: Any, fairy: Any, engine_dialect: Any, urls: str) -> Any:
    """The driver connection under SQLAlchemy's pooled connection `fairy`, if we speak it."""
    from .dialects import connection_kind

    driver = fairy.driver_connection
    try:
        connection_kind(driver)
    except UnsupportedDatabase as exc:
        raise UnsupportedDatabase(
            f"{_kind(obj)} runs on SQLAlchemy's {engine_dialect.name}+{engine_dialect.driver} "
            f"driver, which proletarian-di does not speak: use an engine URL such as {urls}"
        ) from exc
    _check_driver(obj, driver)
    return driver


def driver_connection(conn: Any) -> Any:
    """The driver connection for `enqueue`: `conn` itself, or the psycopg/PyMySQL connection
    under a SQLAlchemy `Session`/`Connection`, in its transaction (begun if none is open)."""
    if not is_sqlalchemy(conn):
        return conn
    if _is_async_sqlalchemy(conn):
        raise ArgumentTypeError(
            f"enqueue needs a synchronous connection, got the async {_kind(conn)}: "
            "use `await enqueue_async(session, ...)`"
        )
    from sqlalchemy.engine import Connection
    from sqlalchemy.exc import PendingRollbackError
    from sqlalchemy.orm import Session, scoped_session

    if isinstance(conn, (Session, scoped_session)):
        try:
            connection = conn.connection()  # autobegins, as a flush or execute would
        except PendingRollbackError as exc:
            raise _failed(conn, "a previous statement or flush failed") from exc
    elif isinstance(conn, Connection):
        connection = conn
        _check_transaction(conn, connection)
        if not connection.in_transaction():
            connection.begin()  # what Connection.execute does first (autobegin)
    else:
        raise ArgumentTypeError(
            f"enqueue takes a SQLAlchemy Session or Connection, got {_kind(conn)}: "
            "e.g. `with Session(engine) as session: enqueue(session, ...)`"
        )
    return _driver_of(conn, connection.connection, connection.dialect, _SUPPORTED_URLS)


async def async_driver_connection(conn: Any) -> Any:
    """The driver connection for `enqueue_async`: `conn` itself, or the psycopg or asyncpg
    connection under a SQLAlchemy `AsyncSession`/`AsyncConnection`, in its transaction."""
    if not is_sqlalchemy(conn):
        return conn
    if not _is_async_sqlalchemy(conn):
        raise ArgumentTypeError(
            f"enqueue_async needs an async connection, got the synchronous {_kind(conn)}: "
            "use `enqueue(session, ...)` with it"
        )
    from sqlalchemy.exc import PendingRollbackError
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, async_scoped_session

    if isinstance(conn, (AsyncSession, async_scoped_session)):
        try:
            connection = await conn.connection()  # autobegins
        except PendingRollbackError as exc:
            raise _failed(conn, "a previous statement or flush failed") from exc
    elif isinstance(conn, AsyncConnection):
        connection = conn
        _check_transaction(conn, connection)
        if not connection.in_transaction():
            await connection.begin()
    else:
        raise ArgumentTypeError(
            f"enqueue_async takes a SQLAlchemy AsyncSession or AsyncConnection, got "
            f"{_kind(conn)}: e.g. `async with AsyncSession(engine) as session: "
            "await enqueue_async(session, ...)`"
        )
    fairy = await connection.get_raw_connection()
    driver = _driver_of(conn, fairy, connection.dialect, _SUPPORTED_ASYNC_URLS)
    if "asyncpg" in _roots(driver) and not driver.is_in_transaction():
        await _begin_asyncpg(connection, fairy.dbapi_connection)
    return driver


async def _begin_asyncpg(connection: Any, adapter: Any) -> None:
    """Open the transaction SQLAlchemy's asyncpg adapter opens lazily, before its first
    statement (its commit and rollback end only a transaction it started); nothing on an
    AUTOCOMMIT connection, as SQLAlchemy."""
    start = getattr(adapter, "_start_transaction", None)
    if start is not None and getattr(adapter, "_transaction", None) is None:
        await start()
    else:  # pragma: no cover - another SQLAlchemy version: its first statement begins it
        await connection.exec_driver_sql("SELECT 1")


class AsyncStatements:
    """The dialect's statements on a psycopg `AsyncConnection`."""

    def __init__(self, conn: Any, dialect: Dialect) -> None:
        self.conn = conn
        self.dialect = dialect

    async def execute(self, sql: str, params: Sequence[Any]) -> None:
        await self.conn.execute(sql, params)

    async def fetchone(self, sql: str, params: Sequence[Any]) -> Any:
        from psycopg.rows import tuple_row

        async with self.conn.cursor(row_factory=tuple_row) as cursor:
            await cursor.execute(sql, params)
            return await cursor.fetchone()

    async def fetchall(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        from psycopg.rows import tuple_row

        async with self.conn.cursor(row_factory=tuple_row) as cursor:
            await cursor.execute(sql, params)
            return list(await cursor.fetchall())


class AsyncpgStatements(AsyncStatements):
    """The same statements on an asyncpg connection: `$n` placeholders, asyncpg's codecs
    (ids come back as plain `uuid.UUID`), and a clear error in a failed transaction."""

    dialect: PostgresDialect

    async def execute(self, sql: str, params: Sequence[Any]) -> None:
        await self._run(self.conn.execute, sql, params)

    async def fetchone(self, sql: str, params: Sequence[Any]) -> Any:
        row = await self._run(self.conn.fetchrow, sql, params)
        return None if row is None else _plain(row)

    async def fetchall(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        return [_plain(row) for row in await self._run(self.conn.fetch, sql, params)]

    async def _run(self, method: Any, sql: str, params: Sequence[Any]) -> Any:
        import asyncpg

        try:
            return await method(self.dialect.numbered(sql), *params)
        except asyncpg.InFailedSQLTransactionError as exc:
            raise _failed(self.conn, exc) from exc


def _plain(row: Any) -> tuple[Any, ...]:
    return tuple(uuid.UUID(int=v.int) if isinstance(v, uuid.UUID) else v for v in row)


def async_statements(conn: Any, dialect: Dialect) -> AsyncStatements:
    """How `enqueue_async` runs `dialect`'s statements on this driver connection."""
    if "asyncpg" in _roots(conn):
        return AsyncpgStatements(conn, dialect)
    return AsyncStatements(conn, dialect)

"""Enqueue through SQLAlchemy: the job is written in the session's own transaction.

Sync `Session`/`Connection` on both databases (psycopg 3, PyMySQL); `AsyncSession`/
`AsyncConnection` on PostgreSQL (psycopg 3 async, asyncpg).
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from proletarian_di import (
    ArgumentTypeError,
    TransactionAborted,
    UnsupportedDatabase,
    enqueue,
    enqueue_async,
    enqueue_many,
)
from proletarian_di.testing import run_due_jobs

from backends import Backend, as_uuid

SYNC_DRIVERS = {"postgresql": "postgresql+psycopg", "mysql": "mysql+pymysql"}
ASYNC_DRIVERS = ["postgresql+psycopg", "postgresql+asyncpg"]


class Base(DeclarativeBase):
    """The application's models."""


class Order(Base):
    """An application row that a job is enqueued with."""

    __tablename__ = "sa_orders"
    __table_args__ = {"schema": "proletarian"}
    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)


def sqlalchemy_url(url: str, driver: str) -> str:
    """The test backend's URL with SQLAlchemy's `dialect+driver` scheme."""
    return f"{driver}://{url.partition('://')[2]}"


def stored_ids(backend: Backend) -> list[uuid.UUID]:
    """The ids of the waiting jobs, as stored."""
    rows = backend.query(f"SELECT job_id FROM {backend.job_table}")
    return sorted(as_uuid(row[0]) for row in rows)


def orders(backend: Backend) -> list[int]:
    """The committed orders' ids."""
    return [row[0] for row in backend.query("SELECT id FROM proletarian.sa_orders ORDER BY id")]


def run_all(backend: Backend) -> list[tuple[str, Any]]:
    """Run every due job with a worker's code in this thread; the (type, payload) it saw."""
    seen: list[tuple[str, Any]] = []
    ran = run_due_jobs(backend.connect, lambda job_type, payload: seen.append((job_type, payload)))
    assert ran == len(seen)
    return seen


@pytest.fixture
def engine(backend: Backend) -> Iterator[sa.Engine]:
    """A SQLAlchemy engine on the backend, with the application's table."""
    created = sa.create_engine(sqlalchemy_url(backend.url, SYNC_DRIVERS[backend.name]))
    Base.metadata.drop_all(created)
    Base.metadata.create_all(created)
    yield created
    Base.metadata.drop_all(created)
    created.dispose()


@pytest.fixture(params=["Session", "Connection"])
def opened(request: pytest.FixtureRequest, engine: sa.Engine) -> Iterator[Any]:
    """A fresh `Session`, or a `Connection`, on the engine; neither has begun a transaction."""
    if request.param == "Session":
        with Session(engine) as session:
            yield session
    else:
        with engine.connect() as connection:
            yield connection


def add_order(target: Any, order_id: int) -> None:
    """Write an application row through the Session or Connection."""
    if isinstance(target, Session):
        target.add(Order(id=order_id))
        target.flush()
    else:
        target.execute(sa.insert(Order).values(id=order_id))


# Sync: Session and Connection, on both databases ------------------------------------


def test_commit_writes_the_job_with_the_row_and_a_worker_runs_it(
    backend: Backend, opened: Any
) -> None:
    """The job and the application's row commit together; the returned id is the stored one."""
    add_order(opened, 1)
    job_id = enqueue(opened, "send_receipt", {"order": 1})
    assert opened.in_transaction()
    assert backend.jobs() == [], "enqueue must not commit"
    opened.commit()
    assert orders(backend) == [1]
    assert stored_ids(backend) == [job_id]
    assert run_all(backend) == [("send_receipt", {"order": 1})]
    assert backend.archived() == [("send_receipt", "success", 1)]


def test_rollback_leaves_neither_row_nor_job(backend: Backend, opened: Any) -> None:
    """Rolled back with the application's row: no job."""
    add_order(opened, 2)
    enqueue(opened, "send_receipt", {"order": 2})
    opened.rollback()
    assert orders(backend) == []
    assert backend.jobs() == []


def test_enqueue_first_begins_the_transaction_sqlalchemy_commits(
    backend: Backend, opened: Any
) -> None:
    """On a Session/Connection with no transaction yet, enqueue begins it, as SQLAlchemy would."""
    assert not opened.in_transaction()
    job_id = enqueue(opened, "welcome", None)
    assert opened.in_transaction()
    opened.commit()
    assert stored_ids(backend) == [job_id]


def test_enqueue_many_commits_every_job(backend: Backend, opened: Any) -> None:
    """enqueue_many writes every job in the same transaction; ids in order, as stored."""
    ids = enqueue_many(opened, [("a", {"n": 1}), ("b", {"n": 2}), ("c", {"n": 3})])
    assert len(set(ids)) == 3
    opened.commit()
    assert stored_ids(backend) == sorted(ids)
    assert sorted(run_all(backend)) == [("a", {"n": 1}), ("b", {"n": 2}), ("c", {"n": 3})]


def test_enqueue_many_rolls_back(backend: Backend, opened: Any) -> None:
    """enqueue_many on a rolled-back transaction: no jobs."""
    enqueue_many(opened, [("a", None), ("b", None)])
    opened.rollback()
    assert backend.jobs() == []


def test_a_duplicate_unique_key_returns_the_existing_id(
    backend: Backend, engine: sa.Engine
) -> None:
    """A second job with the key, from another session, writes nothing and gets the first id."""
    with Session(engine) as session:
        first = enqueue(session, "reindex", {"id": 7}, unique_key="reindex:7")
        session.commit()
    with engine.connect() as connection:
        again = enqueue(connection, "reindex", {"id": 7}, unique_key="reindex:7")
        add_order(connection, 3)  # the transaction is still usable
        connection.commit()
    assert again == first
    assert stored_ids(backend) == [first]
    assert orders(backend) == [3]


def test_a_session_whose_flush_failed_is_a_clear_error(backend: Backend, engine: sa.Engine) -> None:
    """After an IntegrityError without rollback, enqueue names the problem and writes nothing."""
    with Session(engine) as session:
        session.add(Order(id=4))
        session.commit()
        session.add(Order(id=4))
        with pytest.raises(IntegrityError):
            session.flush()
        with pytest.raises(TransactionAborted, match=r"transaction has failed.*[Rr]oll it back"):
            enqueue(session, "never", None)
        with pytest.raises(TransactionAborted, match=r"transaction has failed"):
            enqueue_many(session, [("never", None)])
        session.rollback()
        job_id = enqueue(session, "after_rollback", None)
        session.commit()
    assert stored_ids(backend) == [job_id]
    assert backend.jobs() == [("after_rollback", 0, "default")]


def test_a_connection_whose_statement_failed_on_postgresql_is_a_clear_error(pg: Backend) -> None:
    """PostgreSQL refuses statements after a failed one: a clear error, nothing written."""
    engine = sa.create_engine(sqlalchemy_url(pg.url, SYNC_DRIVERS["postgresql"]))
    try:
        with engine.connect() as connection:
            with pytest.raises(sa.exc.ProgrammingError):
                connection.execute(sa.text("SELECT * FROM no_such_table"))
            with pytest.raises(TransactionAborted, match=r"a statement in it failed.*[Rr]oll"):
                enqueue(connection, "never", None)
            connection.commit()  # what the server does with an aborted transaction: roll back
    finally:
        engine.dispose()
    assert pg.jobs() == []


def test_a_savepoint_in_a_session_holds_the_job(backend: Backend, engine: sa.Engine) -> None:
    """Inside `begin_nested()`, the job goes with the savepoint: rolled back with it."""
    with Session(engine) as session:
        kept = enqueue(session, "kept", None)
        nested = session.begin_nested()
        enqueue(session, "undone", None)
        nested.rollback()
        session.commit()
    assert stored_ids(backend) == [kept]


def test_an_unsupported_sqlalchemy_driver_names_the_urls_to_use(tmp_path: Any) -> None:
    """A Session on a driver we do not speak (SQLite here): a clear error naming the URLs."""
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'app.db'}")
    try:
        with (
            Session(engine) as session,
            pytest.raises(UnsupportedDatabase, match=r"sqlite\+pysqlite.*postgresql\+psycopg://"),
        ):
            enqueue(session, "x", None)
    finally:
        engine.dispose()


def test_a_sync_session_given_to_enqueue_async_names_enqueue(engine: sa.Engine) -> None:
    """The wrong flavour: a sync Session for enqueue_async."""
    with (
        Session(engine) as session,
        pytest.raises(ArgumentTypeError, match=r"synchronous .*Session.*enqueue\(session"),
    ):
        asyncio.run(enqueue_async(session, "x", None))


# Async: AsyncSession and AsyncConnection, on PostgreSQL (psycopg async and asyncpg) ----


@contextlib.asynccontextmanager
async def async_engine(url: str, driver: str) -> AsyncIterator[AsyncEngine]:
    """An async engine on PostgreSQL with the application's table."""
    created = create_async_engine(sqlalchemy_url(url, driver))
    try:
        async with created.begin() as connection:
            await connection.run_sync(Base.metadata.drop_all)
            await connection.run_sync(Base.metadata.create_all)
        yield created
    finally:
        await created.dispose()


@pytest.fixture(params=ASYNC_DRIVERS)
def driver(request: pytest.FixtureRequest) -> str:
    """The async SQLAlchemy driver under test."""
    return str(request.param)


def run_async(pg: Backend, driver: str, scenario: Callable[[AsyncEngine], Any]) -> Any:
    """Run `scenario(engine)` in a new event loop with an async engine on `pg`."""

    async def main() -> Any:
        async with async_engine(pg.url, driver) as engine:
            return await scenario(engine)

    return asyncio.run(main())


def test_async_session_commit_writes_the_job_and_a_worker_runs_it(pg: Backend, driver: str) -> None:
    """AsyncSession: the job commits with the row; the returned id is the stored one."""

    async def scenario(engine: AsyncEngine) -> uuid.UUID:
        async with AsyncSession(engine) as session:
            session.add(Order(id=10))
            job_id = await enqueue_async(session, "send_receipt", {"order": 10})
            assert session.in_transaction()
            assert pg.jobs() == [], "enqueue_async must not commit"
            await session.commit()
        return job_id

    job_id = run_async(pg, driver, scenario)
    assert orders(pg) == [10]
    assert stored_ids(pg) == [job_id]
    assert run_all(pg) == [("send_receipt", {"order": 10})]


def test_async_session_rollback_leaves_no_job(pg: Backend, driver: str) -> None:
    """AsyncSession rolled back (the job was its only statement): no job."""

    async def scenario(engine: AsyncEngine) -> None:
        async with AsyncSession(engine) as session:
            await enqueue_async(session, "never", None)
            await session.rollback()

    run_async(pg, driver, scenario)
    assert pg.jobs() == []


def test_async_connection_commits_and_rolls_back(pg: Backend, driver: str) -> None:
    """AsyncConnection: a committed job exists, a rolled-back one does not."""

    async def scenario(engine: AsyncEngine) -> uuid.UUID:
        async with engine.connect() as connection:
            await enqueue_async(connection, "undone", None)
            await connection.rollback()
            job_id = await enqueue_async(connection, "kept", None)
            await connection.execute(sa.insert(Order).values(id=11))
            await connection.commit()
        return job_id

    job_id = run_async(pg, driver, scenario)
    assert stored_ids(pg) == [job_id]
    assert orders(pg) == [11]
    assert run_all(pg) == [("kept", None)]


def test_async_duplicate_unique_key_returns_the_existing_id(pg: Backend, driver: str) -> None:
    """A duplicate key through an AsyncSession writes nothing and returns the first id."""

    async def scenario(engine: AsyncEngine) -> tuple[uuid.UUID, uuid.UUID]:
        async with AsyncSession(engine) as session:
            first = await enqueue_async(session, "reindex", None, unique_key="k", priority=5)
            await session.commit()
        async with AsyncSession(engine) as session:
            again = await enqueue_async(session, "reindex", None, unique_key="k")
            session.add(Order(id=12))
            await session.commit()
        return first, again

    first, again = run_async(pg, driver, scenario)
    assert type(again) is uuid.UUID
    assert again == first
    assert stored_ids(pg) == [first]
    assert pg.query(f"SELECT priority FROM {pg.job_table}") == [(5,)]
    assert orders(pg) == [12]


def test_async_session_whose_flush_failed_is_a_clear_error(pg: Backend, driver: str) -> None:
    """An AsyncSession after an IntegrityError without rollback: clear error, nothing written."""

    async def scenario(engine: AsyncEngine) -> None:
        async with AsyncSession(engine) as session:
            session.add(Order(id=13))
            await session.commit()
            session.add(Order(id=13))
            with pytest.raises(IntegrityError):
                await session.flush()
            with pytest.raises(TransactionAborted, match=r"transaction has failed.*[Rr]oll it"):
                await enqueue_async(session, "never", None)
            await session.rollback()

    run_async(pg, driver, scenario)
    assert pg.jobs() == []


def test_async_connection_whose_statement_failed_is_a_clear_error(pg: Backend, driver: str) -> None:
    """An AsyncConnection after a failed statement: clear error, nothing written."""

    async def scenario(engine: AsyncEngine) -> None:
        async with engine.connect() as connection:
            with pytest.raises(sa.exc.DBAPIError):
                await connection.execute(sa.text("SELECT * FROM no_such_table"))
            with pytest.raises(TransactionAborted, match=r"transaction has failed.*[Rr]oll"):
                await enqueue_async(connection, "never", None)
            await connection.rollback()

    run_async(pg, driver, scenario)
    assert pg.jobs() == []


def test_an_async_session_given_to_enqueue_names_enqueue_async(pg: Backend, driver: str) -> None:
    """The wrong flavour: an AsyncSession for the sync enqueue."""

    async def scenario(engine: AsyncEngine) -> None:
        async with AsyncSession(engine) as session:
            with pytest.raises(ArgumentTypeError, match=r"async .*AsyncSession.*enqueue_async"):
                enqueue(session, "x", None)

    run_async(pg, driver, scenario)
    assert pg.jobs() == []


# Optional imports ------------------------------------------------------------------


def test_sqlalchemy_and_asyncpg_are_imported_only_when_passed(pg: Backend) -> None:
    """`import proletarian_di` and an enqueue on a plain psycopg connection import neither."""
    code = (
        "import sys, psycopg, proletarian_di\n"
        "from proletarian_di import enqueue\n"
        "def loaded():\n"
        "    return sorted({m.split('.')[0] for m in sys.modules} & {'sqlalchemy', 'asyncpg'})\n"
        "print(loaded())\n"
        "with psycopg.connect(sys.argv[1]) as conn:\n"
        "    enqueue(conn, 'plain', None)\n"
        "print(loaded())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, pg.url], capture_output=True, text=True, check=True
    )
    assert result.stdout.split("\n")[:2] == ["[]", "[]"]
    assert pg.jobs() == [("plain", 0, "default")]

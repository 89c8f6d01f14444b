"""enqueue_async on a raw asyncpg connection: the same jobs, ids and notifications as psycopg."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import asyncpg
import psycopg
import pytest

from proletarian_di import (
    ArgumentTypeError,
    TransactionAborted,
    enqueue,
    enqueue_async,
    enqueue_many,
)
from proletarian_di._store.dialects.postgresql import NOTIFY_CHANNEL
from proletarian_di.testing import FakeClock, run_due_jobs

from backends import Backend

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=timezone.utc)
PAST = datetime(2020, 1, 1, tzinfo=timezone.utc)


def on_asyncpg(pg: Backend, scenario: Callable[[asyncpg.Connection], Awaitable[Any]]) -> Any:
    """Run `scenario(conn)` on a new asyncpg connection to `pg`, closed after."""

    async def main() -> Any:
        conn = await asyncpg.connect(pg.url)
        try:
            return await scenario(conn)
        finally:
            await conn.close()

    return asyncio.run(main())


def stored(pg: Backend) -> list[tuple[Any, ...]]:
    """The waiting jobs as (job_id, job_type, payload, priority, unique_key), by priority."""
    return pg.query(
        f"SELECT job_id, job_type, payload, priority, unique_key FROM {pg.job_table} "
        "ORDER BY priority DESC, job_type"
    )


def test_commit_inside_transaction_writes_the_job_with_its_id(pg: Backend) -> None:
    """In `conn.transaction()`: the job commits with it, under the id enqueue_async returned."""

    async def scenario(conn: asyncpg.Connection) -> uuid.UUID:
        async with conn.transaction():
            job_id = await enqueue_async(conn, "send_email", {"email": "a@example.com"})
            assert pg.jobs() == [], "enqueue_async must not commit"
        return job_id

    job_id = on_asyncpg(pg, scenario)
    assert type(job_id) is uuid.UUID
    assert stored(pg) == [(job_id, "send_email", '{"email":"a@example.com"}', 0, None)]
    seen: list[Any] = []
    assert run_due_jobs(pg.connect, lambda job_type, payload: seen.append(payload)) == 1
    assert seen == [{"email": "a@example.com"}]


def test_rollback_leaves_no_job(pg: Backend) -> None:
    """A transaction that raises rolls the job back."""

    async def scenario(conn: asyncpg.Connection) -> None:
        with pytest.raises(RuntimeError, match="business failed"):
            async with conn.transaction():
                await enqueue_async(conn, "send_email", None)
                raise RuntimeError("business failed")

    on_asyncpg(pg, scenario)
    assert pg.jobs() == []


def test_times_are_stored_as_psycopg_stores_them(pg: Backend) -> None:
    """enqueued_at and process_at from the clock, as aware timestamps, on both drivers."""
    clock = FakeClock(T0)

    async def scenario(conn: asyncpg.Connection) -> uuid.UUID:
        async with conn.transaction():
            return await enqueue_async(
                conn, "later", None, clock=clock, process_in=timedelta(minutes=5)
            )

    on_asyncpg_id = on_asyncpg(pg, scenario)
    with psycopg.connect(pg.url) as conn:
        psycopg_id = enqueue(conn, "later", None, clock=clock, process_in=timedelta(minutes=5))
    rows = pg.query(
        f"SELECT job_id, enqueued_at, process_at FROM {pg.job_table} ORDER BY job_id = %s",
        (on_asyncpg_id,),
    )
    assert [row[0] for row in rows] == [psycopg_id, on_asyncpg_id]
    assert {row[1:] for row in rows} == {(T0, T0 + timedelta(minutes=5))}


def test_unique_key_duplicate_returns_the_existing_id(pg: Backend) -> None:
    """A duplicate key writes nothing, returns the holder's id (a plain UUID), and the
    transaction goes on."""

    async def scenario(conn: asyncpg.Connection) -> tuple[uuid.UUID, uuid.UUID, uuid.UUID]:
        async with conn.transaction():
            first = await enqueue_async(conn, "reindex", {"id": 7}, unique_key="reindex:7")
        async with conn.transaction():
            again = await enqueue_async(conn, "reindex", {"id": 7}, unique_key="reindex:7")
            other = await enqueue_async(conn, "reindex", {"id": 8}, unique_key="reindex:8")
        return first, again, other

    first, again, other = on_asyncpg(pg, scenario)
    assert type(again) is uuid.UUID
    assert again == first != other
    assert sorted(row[0] for row in stored(pg)) == sorted([first, other])
    with psycopg.connect(pg.url) as conn:
        assert enqueue(conn, "reindex", {"id": 7}, unique_key="reindex:7") == first


def test_priorities_are_stored_and_run_first(pg: Backend) -> None:
    """A higher priority runs first among due jobs, as with psycopg."""

    async def scenario(conn: asyncpg.Connection) -> None:
        async with conn.transaction():
            await enqueue_async(conn, "low", None, clock=FakeClock(PAST))
            await enqueue_async(conn, "high", None, priority=10)

    on_asyncpg(pg, scenario)
    assert [(row[1], row[3]) for row in stored(pg)] == [("high", 10), ("low", 0)]
    order: list[str] = []
    assert run_due_jobs(pg.connect, lambda job_type, payload: order.append(job_type)) == 2
    assert order == ["high", "low"]


def test_notifications_are_the_same_as_psycopgs(pg: Backend) -> None:
    """The NOTIFY payload of a job due now and of one due later match psycopg's."""
    clock = FakeClock(T0)
    with psycopg.connect(pg.url, autocommit=True) as listener:
        listener.execute(f"LISTEN {NOTIFY_CHANNEL}")

        async def scenario(conn: asyncpg.Connection) -> None:
            async with conn.transaction():
                await enqueue_async(conn, "now", None, queue="mail", clock=clock)
                await enqueue_async(
                    conn, "later", None, queue="mail", clock=clock, process_in=timedelta(hours=1)
                )

        on_asyncpg(pg, scenario)
        with psycopg.connect(pg.url) as conn:
            enqueue(conn, "now", None, queue="mail", clock=clock)
            enqueue(conn, "later", None, queue="mail", clock=clock, process_in=timedelta(hours=1))
        payloads = [n.payload for n in listener.notifies(timeout=10, stop_after=4)]
    later = f"mail@{(T0 + timedelta(hours=1)).timestamp():.3f}"
    assert payloads == ["mail", later, "mail", later]


def test_a_failed_transaction_is_a_clear_error_and_writes_nothing(pg: Backend) -> None:
    """After a failed statement inside `transaction()`: TransactionAborted, saying to roll back."""

    async def scenario(conn: asyncpg.Connection) -> None:
        with pytest.raises(TransactionAborted, match=r"transaction has failed.*[Rr]oll it back"):
            async with conn.transaction():
                with pytest.raises(asyncpg.UndefinedTableError):
                    await conn.execute("SELECT * FROM no_such_table")
                await enqueue_async(conn, "never", None)
        with pytest.raises(TransactionAborted):
            async with conn.transaction():
                with pytest.raises(asyncpg.UndefinedTableError):
                    await conn.execute("SELECT * FROM no_such_table")
                await enqueue_async(conn, "never", None, unique_key="k")

    on_asyncpg(pg, scenario)
    assert pg.jobs() == []


def test_a_pool_connection_works_and_the_pool_names_what_to_pass(pg: Backend) -> None:
    """A connection from `pool.acquire()` is taken; the pool itself is a clear error."""

    async def main() -> uuid.UUID:
        async with asyncpg.create_pool(pg.url, min_size=1, max_size=2) as pool:
            with pytest.raises(ArgumentTypeError, match=r"pool.acquire\(\) as conn"):
                await enqueue_async(pool, "never", None)
            async with pool.acquire() as conn, conn.transaction():
                return await enqueue_async(conn, "pooled", None)

    job_id = asyncio.run(main())
    assert [row[:2] for row in stored(pg)] == [(job_id, "pooled")]


def test_the_sync_enqueue_points_to_enqueue_async(pg: Backend) -> None:
    """A raw asyncpg connection given to `enqueue`/`enqueue_many`: a clear error, no write."""

    async def scenario(conn: asyncpg.Connection) -> None:
        async with conn.transaction():
            with pytest.raises(ArgumentTypeError, match=r"async asyncpg.*await enqueue_async"):
                enqueue(conn, "never", None)
            with pytest.raises(ArgumentTypeError, match=r"await enqueue_async"):
                enqueue_many(conn, [("never", None)])

    on_asyncpg(pg, scenario)
    assert pg.jobs() == []


def test_outside_a_transaction_the_job_commits_at_once(pg: Backend) -> None:
    """Without `transaction()` asyncpg autocommits each statement, as psycopg in autocommit."""

    async def scenario(conn: asyncpg.Connection) -> uuid.UUID:
        job_id = await enqueue_async(conn, "autocommitted", None)
        assert pg.jobs() == [("autocommitted", 0, "default")]
        return job_id

    job_id = on_asyncpg(pg, scenario)
    assert [row[0] for row in stored(pg)] == [job_id]

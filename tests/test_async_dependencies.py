"""`enqueue_async(..., depends_on=...)` on PostgreSQL's async drivers (psycopg's
AsyncConnection and asyncpg): the job is written as `enqueue` writes it, blocked until its
parents end, and an unknown parent is refused with nothing written."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import psycopg
import pytest

from proletarian_di import (
    ConfigurationError,
    admin,
    create_queue_worker,
    enqueue_async,
    process_next_job,
    worker_running,
)

from backends import Backend, connection, enqueue_committed, wait_until


async def on_psycopg(pg: Backend, scenario: Callable[[Any], Awaitable[Any]]) -> Any:
    aconn = await psycopg.AsyncConnection.connect(pg.url)
    try:
        result = await scenario(aconn)
        await aconn.commit()
        return result
    finally:
        await aconn.close()


async def on_asyncpg(pg: Backend, scenario: Callable[[Any], Awaitable[Any]]) -> Any:
    conn = await asyncpg.connect(pg.url)
    try:
        async with conn.transaction():
            return await scenario(conn)
    finally:
        await conn.close()


DRIVERS = [pytest.param(on_psycopg, id="psycopg"), pytest.param(on_asyncpg, id="asyncpg")]


def enqueued_async(pg: Backend, driver: Any, *args: Any, **options: Any) -> uuid.UUID:
    """A job enqueued with `enqueue_async` on `driver`, committed."""
    return asyncio.run(driver(pg, lambda conn: enqueue_async(conn, *args, **options)))


def state(pg: Backend, job_id: uuid.UUID) -> str:
    with connection(pg) as conn:
        info = admin.get_job(conn, job_id)
    assert info is not None
    return info.state


def edges(pg: Backend) -> set[tuple[Any, ...]]:
    rows = pg.query(
        f"SELECT parent_id, job_id, wait_for, parent_status FROM {pg.job_table}_dependencies"
    )
    return set(rows)


def blocked(pg: Backend) -> set[tuple[Any, ...]]:
    return set(pg.query(f"SELECT job_id, wait_for FROM {pg.job_table}_blocked"))


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_dependent_is_blocked_until_its_parent_ends(pg: Backend, driver: Any) -> None:
    first, second = enqueue_committed(pg, ("step", 1), ("step", 2))
    child = enqueued_async(pg, driver, "after", None, depends_on=[first, second])
    assert state(pg, child) == "blocked"
    assert edges(pg) == {(first, child, "success", None), (second, child, "success", None)}
    assert blocked(pg) == {(child, "success")}
    ran: list[Any] = []
    assert process_next_job(pg.connect, lambda t, p: ran.append(p)) is True
    assert state(pg, child) == "blocked"
    assert process_next_job(pg.connect, lambda t, p: ran.append(p)) is True
    assert state(pg, child) == "queued" and blocked(pg) == set()
    assert process_next_job(pg.connect, lambda t, p: ran.append((t, p))) is True
    assert ran == [1, 2, ("after", None)] and state(pg, child) == "succeeded"


@pytest.mark.parametrize("driver", DRIVERS)
def test_an_unknown_parent_is_refused_and_nothing_is_written(pg: Backend, driver: Any) -> None:
    [parent] = enqueue_committed(pg, ("step", 1))
    stranger = uuid.uuid4()
    with pytest.raises(ConfigurationError, match=f"names job {stranger}, which is neither"):
        enqueued_async(pg, driver, "after", None, depends_on=[parent, stranger])
    assert [row[0] for row in pg.query(f"SELECT job_id FROM {pg.job_table}")] == [parent]
    assert edges(pg) == set() and blocked(pg) == set()


@pytest.mark.parametrize("driver", DRIVERS)
def test_depending_on_jobs_that_already_ended(pg: Backend, driver: Any) -> None:
    good, bad = enqueue_committed(pg, ("step", 1), ("breaks", 2))

    def handler(job_type: str, payload: Any) -> None:
        if job_type == "breaks":
            raise RuntimeError("breaks")

    while process_next_job(pg.connect, handler):
        pass
    runs = enqueued_async(pg, driver, "runs", None, depends_on=[good])
    never = enqueued_async(pg, driver, "never", None, depends_on=[good, bad])
    assert state(pg, runs) == "queued"
    assert (good, runs, "success", "success") in edges(pg)
    assert state(pg, never) == "blocked"
    pool = pg.pool(2)
    try:
        with worker_running(create_queue_worker(pool, handler, polling_interval_ms=50)):
            wait_until(
                lambda: (state(pg, never), state(pg, runs)) == ("cancelled", "succeeded"),
                timeout=20,
            )
    finally:
        pool.close()  # type: ignore[attr-defined]
    with connection(pg) as conn:
        info = admin.get_job(conn, never)
    assert info is not None and f"job {bad}, which this job depends on, failed" in info.error
    assert state(pg, runs) == "succeeded"

"""Two peer job queues on the same PostgreSQL server: pgqueuer and procrastinate.

So the table can show where proletarian-di stands among its peers, not only against
a plain driver loop, this measures the same two things for each peer: enqueuing
no-op jobs in one bulk call, and a worker draining pre-enqueued no-op jobs. Each
peer runs with its own defaults apart from the concurrency asked for, in a fresh
event loop (`asyncio.run`), on its own tables in the default schema (`pgqueuer*`,
`procrastinate_*`, emptied before every measurement), and on its preferred driver:
asyncpg for pgqueuer (see PGQUEUER_DRIVER), psycopg 3 for procrastinate.

Concurrency N means, for pgqueuer, N `QueueManager`s on a connection each (as
pgqueuer's own benchmark runs its dequeuers), each claiming batches of 10 by
default; for procrastinate, one worker with `concurrency=N` (its pool: 4 connections).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import time
from collections.abc import Callable
from typing import Any

from . import measure
from .db import Database

PEERS = ("pgqueuer", "procrastinate")
TABLES = {
    "pgqueuer": "pgqueuer, pgqueuer_log, pgqueuer_statistics",
    "procrastinate": (
        "procrastinate_jobs, procrastinate_events, procrastinate_periodic_defers, "
        "procrastinate_workers"
    ),
}
JOB_TABLE = {"pgqueuer": "pgqueuer", "procrastinate": "procrastinate_jobs"}
# Jobs not yet recorded as done: pgqueuer deletes (and logs) a finished job, procrastinate
# keeps it with status 'succeeded'.
PENDING = {
    "pgqueuer": "SELECT count(*) FROM pgqueuer",
    "procrastinate": "SELECT count(*) FROM procrastinate_jobs WHERE status <> 'succeeded'",
}
SUCCEEDED = {
    "pgqueuer": "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'",
    "procrastinate": "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'",
}
STOP_TIMEOUT = 20.0
# asyncpg, as pgqueuer's own CLI prefers. Its psycopg driver shares one connection between
# the LISTEN watcher and the queries, and the watcher holds it for up to 1 s while waiting for
# a notification: dequeues stall (1 s at start), 25-40% fewer jobs/s here. "psycopg" to compare.
PGQUEUER_DRIVER = "asyncpg"
MODULES = {"pgqueuer": ("pgqueuer", PGQUEUER_DRIVER), "procrastinate": ("procrastinate",)}


def available(peer: str) -> str | None:
    """None when `peer` can be imported, else why not (one line)."""
    if peer not in PEERS:
        return f"unknown peer {peer!r} (known: {', '.join(PEERS)})"
    try:
        for module in MODULES[peer]:
            importlib.import_module(module)
    except ImportError as exc:
        return f"{peer} not installed ({exc}): pip install 'proletarian-di[bench]'"
    return None


def install(db: Database, peer: str) -> None:
    """Install the peer's schema with its own installer, unless it is there already."""
    asyncio.run(_INSTALL[peer](db))


def clean(db: Database, peer: str) -> None:
    """Empty the peer's tables."""
    db.query(f"TRUNCATE TABLE {TABLES[peer]}")


def enqueue_bulk(db: Database, peer: str, jobs: int) -> float:
    """Jobs/s enqueuing `jobs` no-op jobs in one call of the peer's bulk API."""
    clean(db, peer)
    elapsed = asyncio.run(_ENQUEUE[peer](db, jobs))
    measure.check_count(_count(db, f"SELECT count(*) FROM {JOB_TABLE[peer]}"), jobs, "enqueued")
    return jobs / elapsed


def drain(db: Database, peer: str, workers: int, jobs: int, batch_size: int | None = None) -> float:
    """Jobs/s for a peer worker of concurrency `workers` doing `jobs` pre-enqueued no-op jobs.

    Timed from the worker's start until its handler ran for every job and the
    peer's table shows them all done; `batch_size` is pgqueuer's (default 10).
    """
    if batch_size is not None and peer != "pgqueuer":
        raise ValueError(f"{peer} has no batch size")
    clean(db, peer)
    asyncio.run(_ENQUEUE[peer](db, jobs))
    with contextlib.closing(db.connect()) as conn:
        conn.autocommit = True
        conn.execute(f"ANALYZE {JOB_TABLE[peer]}")
    elapsed = asyncio.run(_DRAIN[peer](db, workers, jobs, batch_size))
    measure.check_count(_count(db, PENDING[peer]), 0, "not done")
    measure.check_count(_count(db, SUCCEEDED[peer]), jobs, "succeeded")
    return jobs / elapsed


def _count(db: Database, sql: str) -> int:
    return int(db.query(sql)[0][0])


async def _connect(db: Database) -> Any:
    import psycopg

    return await psycopg.AsyncConnection.connect(db.url, autocommit=True, connect_timeout=10)


class Tally:
    """Handler runs, and an event set when they reach `jobs` (so nothing polls meanwhile)."""

    def __init__(self, jobs: int) -> None:
        self.jobs, self.count, self.reached = jobs, 0, asyncio.Event()

    def __call__(self) -> None:
        self.count += 1
        if self.count >= self.jobs:
            self.reached.set()


async def _until_done(
    peer: str, monitor: Any, tally: Tally, tasks: list[Any], started: float
) -> float:
    """Seconds since `started` when the handler ran for every job and the peer shows all done."""
    limit = started + measure.deadline_for(tally.jobs)
    reached = asyncio.create_task(tally.reached.wait())
    try:
        timeout = limit - time.perf_counter()
        await asyncio.wait([reached, *tasks], timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        reached.cancel()
    while True:
        done = f"{tally.count}/{tally.jobs} jobs"
        for task in tasks:
            if task.done():
                error = None if task.cancelled() else task.exception()
                raise measure.BenchError(f"{peer} worker stopped after {done}: {error!r}")
        if not tally.reached.is_set() or time.perf_counter() > limit:
            raise measure.BenchError(f"{peer} drain timed out after {done}")
        if (await (await monitor.execute(PENDING[peer])).fetchone())[0] == 0:
            return time.perf_counter() - started
        await asyncio.sleep(0.002)


async def _stopped(peer: str, tasks: list[Any]) -> None:
    """Wait for stopping workers (cancelling them after STOP_TIMEOUT); raise their errors."""
    _, pending = await asyncio.wait(tasks, timeout=STOP_TIMEOUT)
    for task in pending:
        task.cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    if pending:
        raise measure.BenchError(f"{peer} worker did not stop within {STOP_TIMEOUT:.0f} s")
    errors = [r for r in results if isinstance(r, BaseException)]
    if errors and not all(isinstance(e, asyncio.CancelledError) for e in errors):
        raise measure.BenchError(f"{peer} worker failed: {errors[0]!r}")


# pgqueuer: Queries (schema, bulk enqueue) and QueueManager (worker), one connection each.


async def _pgqueuer(db: Database, stack: contextlib.AsyncExitStack) -> Any:
    """pgqueuer's Queries on a new connection, closed with `stack`."""
    from pgqueuer import Queries

    if PGQUEUER_DRIVER == "psycopg":
        return Queries.from_psycopg_connection(await stack.enter_async_context(await _connect(db)))
    import asyncpg

    conn = await asyncpg.connect(db.url, timeout=10)
    stack.push_async_callback(conn.close)
    return Queries.from_asyncpg_connection(conn)


async def _pgqueuer_install(db: Database) -> None:
    async with contextlib.AsyncExitStack() as stack:
        queries = await _pgqueuer(db, stack)
        if not await queries.schema_is_installed():
            await queries.install()


async def _pgqueuer_enqueue(db: Database, jobs: int) -> float:
    payloads = [{"n": i} for i in range(jobs)]
    async with contextlib.AsyncExitStack() as stack:
        queries = await _pgqueuer(db, stack)
        started = time.perf_counter()
        await queries.enqueue(
            ["noop"] * jobs, [json.dumps(p).encode() for p in payloads], [0] * jobs
        )
        return time.perf_counter() - started


async def _pgqueuer_drain(db: Database, workers: int, jobs: int, batch_size: int | None) -> float:
    from pgqueuer import QueueManager

    tally = Tally(jobs)

    async def noop(job: Any) -> None:
        tally()

    options: dict[str, Any] = {} if batch_size is None else {"batch_size": batch_size}
    async with contextlib.AsyncExitStack() as stack:
        monitor = await stack.enter_async_context(await _connect(db))
        managers = [QueueManager(await _pgqueuer(db, stack)) for _ in range(workers)]
        for manager in managers:
            manager.entrypoint("noop")(noop)
        started = time.perf_counter()
        tasks = [asyncio.create_task(manager.run(**options)) for manager in managers]
        try:
            elapsed = await _until_done("pgqueuer", monitor, tally, tasks, started)
        finally:
            for manager in managers:
                manager.shutdown.set()
            await _stopped("pgqueuer", tasks)
    return elapsed


# procrastinate: an App on its PsycopgConnector (an async psycopg pool), one task "noop".


def _procrastinate_app(db: Database, tally: Callable[[], None]) -> tuple[Any, Any]:
    from procrastinate import App, PsycopgConnector

    app = App(connector=PsycopgConnector(conninfo=db.url))

    @app.task(name="noop")
    async def noop(n: int) -> None:
        tally()

    return app, noop


async def _procrastinate_install(db: Database) -> None:
    async with await _connect(db) as conn:
        row = await (await conn.execute("SELECT to_regclass('procrastinate_jobs')")).fetchone()
    if row[0] is None:
        app, _ = _procrastinate_app(db, lambda: None)
        async with app.open_async():
            await app.schema_manager.apply_schema_async()


async def _procrastinate_enqueue(db: Database, jobs: int) -> float:
    app, noop = _procrastinate_app(db, lambda: None)
    payloads = [{"n": i} for i in range(jobs)]
    async with app.open_async():
        started = time.perf_counter()
        await noop.batch_defer_async(*payloads)
        return time.perf_counter() - started


async def _procrastinate_drain(
    db: Database, workers: int, jobs: int, batch_size: int | None
) -> float:
    tally = Tally(jobs)
    app, _ = _procrastinate_app(db, tally)
    async with app.open_async(), await _connect(db) as monitor:
        started = time.perf_counter()
        # Cancelling run_worker_async is procrastinate's graceful stop (no signal handlers here).
        worker = app.run_worker_async(concurrency=workers, install_signal_handlers=False)
        tasks = [asyncio.create_task(worker)]
        try:
            elapsed = await _until_done("procrastinate", monitor, tally, tasks, started)
        finally:
            tasks[0].cancel()
            await _stopped("procrastinate", tasks)
    return elapsed


_INSTALL = {"pgqueuer": _pgqueuer_install, "procrastinate": _procrastinate_install}
_ENQUEUE = {"pgqueuer": _pgqueuer_enqueue, "procrastinate": _procrastinate_enqueue}
_DRAIN = {"pgqueuer": _pgqueuer_drain, "procrastinate": _procrastinate_drain}

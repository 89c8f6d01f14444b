"""dependency-injector resources: a PostgreSQL pool, a MySQL data source, a started worker.

Use them with `providers.Resource`, so that `container.init_resources()` starts
the whole system and `container.shutdown_resources()` stops it::

    class Container(containers.DeclarativeContainer):
        config = providers.Configuration()
        pool = providers.Resource(postgres_pool, config.database_url, max_size=10)
        handler = providers.Factory(make_handler, mailer=...)
        email_worker = providers.Resource(
            queue_worker, pool, handler, queue="email", worker_threads=4
        )

Shutdown order: dependency-injector shuts a resource down only after every
initialized resource that refers to it *directly* (as an argument) is shut
down. Pass the pool resource itself as the worker's `data_source`, as above,
and the worker drains before the pool closes.

Teardown never raises: a failing step is logged (logger `proletarian_di`) and
the container goes on shutting the others down, because dependency-injector
stops its shutdown loop at the first exception.

`scheduler` starts a `Scheduler` of periodic jobs the same way.

Sync and async: `postgres_pool`, `mysql_data_source`, `queue_worker` and `scheduler` are
generator resources for `container.init_resources()` in ordinary code (a
script, the CLI, `worker_running`, or `proletarian_di.fastapi.worker_lifespan`,
which runs them in a thread). For `await container.init_resources()` use the
async generator variants `async_postgres_pool`, `async_mysql_data_source`,
`async_queue_worker` and `async_scheduler`: same arguments, same objects, but their blocking work
(connecting, starting, draining, closing) runs in a thread via
`asyncio.to_thread`, so the event loop never blocks. dependency-injector
supports both kinds of generator resource natively.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from .._common.types import DataSource, Handler, WorkerOptions
from .._store.secrets import malformed, mask, parse_mysql_url, passwords, postgres_problem, scrub
from ..errors import ConfigurationError, DatabaseURLError
from ..lifecycle import container_workers, init_resources, shutdown_resources, teardown
from ..mysql import MySQLDataSource
from ..periodic import PeriodicJob, Scheduler, create_scheduler
from ..worker import QueueWorker, create_queue_worker

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "async_mysql_data_source",
    "async_postgres_pool",
    "async_queue_worker",
    "async_scheduler",
    "container_workers",
    "init_resources",
    "mask_conninfo",
    "mysql_data_source",
    "open_mysql_data_source",
    "open_postgres_pool",
    "postgres_pool",
    "queue_worker",
    "scheduler",
    "shutdown_resources",
    "start_queue_worker",
]

DEFAULT_WAIT_TIMEOUT = 30.0


def mask_conninfo(conninfo: str) -> str:
    """The conninfo (URL or `key=value` form) with its passwords replaced by `***`."""
    return mask(conninfo)


def _masked_error(exc: BaseException, *secrets: Any) -> str:
    """The exception's message without the given secrets nor any URL password it quotes."""
    message = str(exc).strip() or type(exc).__name__
    return scrub(message, *(s if isinstance(s, (str, bytes)) else None for s in secrets))


# Blocking open/close steps, shared by the sync and async resources ---------


def open_postgres_pool(
    conninfo: str, *, wait_timeout: float = DEFAULT_WAIT_TIMEOUT, **pool_options: Any
) -> Any:
    """Open a psycopg_pool `ConnectionPool` and wait for it; a bad URL fails here, masked.

    A conninfo libpq would reject or misread fails before psycopg sees it, and
    every driver message is scrubbed of the passwords.
    """
    import psycopg
    from psycopg_pool import ConnectionPool, PoolTimeout

    if not isinstance(conninfo, str) or not conninfo:
        raise ConfigurationError(
            "postgres_pool needs a conninfo string (postgresql://...), "
            f"got {'an empty string' if conninfo == '' else type(conninfo).__name__}"
        )
    where = mask(conninfo)
    problem = postgres_problem(conninfo)
    if problem:
        raise DatabaseURLError(malformed("PostgreSQL conninfo", conninfo, problem))
    connect_kwargs = dict(pool_options.get("kwargs") or {})
    secrets = [*passwords(conninfo), connect_kwargs.get("password")]
    connect_kwargs.setdefault("connect_timeout", max(1, round(wait_timeout)))
    try:
        psycopg.connect(conninfo, **connect_kwargs).close()
    except Exception as exc:
        raise ConfigurationError(
            f"cannot connect to PostgreSQL at {where}: {_masked_error(exc, *secrets)}"
        ) from None
    pool_options.setdefault("name", "proletarian_di")
    pool = ConnectionPool(conninfo, open=False, **pool_options)
    try:
        pool.open()
        pool.wait(timeout=wait_timeout)
    except PoolTimeout:
        pool.close()
        raise ConfigurationError(
            f"PostgreSQL pool at {where} did not get {pool.min_size} connection(s) "
            f"within {wait_timeout}s"
        ) from None
    except BaseException:
        pool.close()
        raise
    return pool


def open_mysql_data_source(url: str | None = None, **connect_options: Any) -> MySQLDataSource:
    """Create a `MySQLDataSource` and check that it connects; errors name the masked URL.

    A malformed URL is a `ConfigurationError`; driver messages are scrubbed of the passwords.
    """
    secrets = [*passwords(url or ""), connect_options.get("password")]
    if url:
        parse_mysql_url(url)
    try:
        source = MySQLDataSource(url, **connect_options)
    except Exception as exc:
        raise ConfigurationError(
            f"cannot create a MySQL data source: {_masked_error(exc, *secrets)}"
        ) from None
    where = mask(url) if url else source.description
    try:
        with source.connection() as conn:
            conn.cursor().execute("SELECT 1")
    except Exception as exc:
        source.close()
        raise ConfigurationError(
            f"cannot connect to MySQL at {where}: {_masked_error(exc, *secrets)}"
        ) from None
    return source


def start_queue_worker(
    data_source: DataSource, handler: Handler, **worker_options: Unpack[WorkerOptions]
) -> QueueWorker:
    """Create a worker and start it; a pool too small for its threads is a clear error."""
    threads = worker_options.get("worker_threads", 1)
    max_size = getattr(data_source, "max_size", None)
    if isinstance(max_size, int) and isinstance(threads, int) and max_size < threads:
        raise ConfigurationError(
            f"the pool has max_size={max_size} but queue "
            f"{worker_options.get('queue', 'default')!r} wants worker_threads={threads}: "
            "each worker thread holds a connection while it polls; raise max_size"
        )
    worker = create_queue_worker(data_source, handler, **worker_options)
    worker.start()
    return worker


def _stop_worker(worker: QueueWorker) -> None:
    teardown(worker.queue_worker_id, worker.stop)


def _close(name: str, source: Any) -> None:
    teardown(name, source.close)


# Generator resources (sync) ---------------------------------------------------


def postgres_pool(
    conninfo: str, *, wait_timeout: float = DEFAULT_WAIT_TIMEOUT, **pool_options: Any
) -> Iterator[Any]:
    """Resource: an opened, waited-for psycopg_pool `ConnectionPool`; closed on shutdown.

    `pool_options` go to `ConnectionPool` (min_size, max_size, kwargs, ...).
    Give it max_size >= the worker threads using it plus what the app needs:
    each worker thread holds one connection while it polls. A bad URL raises
    `ConfigurationError` at init, with the password masked.
    """
    pool = open_postgres_pool(conninfo, wait_timeout=wait_timeout, **pool_options)
    try:
        yield pool
    finally:
        _close("postgres_pool", pool)


def mysql_data_source(url: str | None = None, **connect_options: Any) -> Iterator[MySQLDataSource]:
    """Resource: a pooled PyMySQL `MySQLDataSource`, checked to connect; closed on shutdown.

    `url` is `mysql://user:password@host:port/db`; `connect_options` go to
    `MySQLDataSource` (max_connections, PyMySQL options such as host, user).
    """
    source = open_mysql_data_source(url, **connect_options)
    try:
        yield source
    finally:
        _close("mysql_data_source", source)


def queue_worker(
    data_source: DataSource, handler: Handler, **worker_options: Unpack[WorkerOptions]
) -> Iterator[QueueWorker]:
    """Resource: a started `QueueWorker`; shutdown stops it, draining in-flight jobs.

    Pass the pool *resource* as `data_source` so the worker stops before the
    pool closes. `worker_options` are `create_queue_worker`'s options.
    """
    worker = start_queue_worker(data_source, handler, **worker_options)
    try:
        yield worker
    finally:
        _stop_worker(worker)


def scheduler(
    data_source: DataSource, periodic_jobs: Iterable[PeriodicJob], **options: Any
) -> Iterator[Scheduler]:
    """Resource: a started `Scheduler` of `periodic_jobs` (see `create_scheduler`); stopped
    on shutdown. Declare it beside the workers; every process may run one."""
    started = _start_scheduler(data_source, periodic_jobs, **options)
    try:
        yield started
    finally:
        teardown("scheduler", started.stop)


def _start_scheduler(
    data_source: DataSource, periodic_jobs: Iterable[PeriodicJob], **options: Any
) -> Scheduler:
    created = create_scheduler(data_source, periodic_jobs, **options)
    created.start()
    return created


# Async generator resources: the blocking steps run in a thread ---------------


async def async_postgres_pool(
    conninfo: str, *, wait_timeout: float = DEFAULT_WAIT_TIMEOUT, **pool_options: Any
) -> AsyncIterator[Any]:
    """`postgres_pool` for `await container.init_resources()`: opens and closes in a thread."""
    pool = await asyncio.to_thread(
        open_postgres_pool, conninfo, wait_timeout=wait_timeout, **pool_options
    )
    try:
        yield pool
    finally:
        await asyncio.to_thread(_close, "postgres_pool", pool)


async def async_mysql_data_source(
    url: str | None = None, **connect_options: Any
) -> AsyncIterator[MySQLDataSource]:
    """`mysql_data_source` for `await container.init_resources()`: connects in a thread."""
    source = await asyncio.to_thread(open_mysql_data_source, url, **connect_options)
    try:
        yield source
    finally:
        await asyncio.to_thread(_close, "mysql_data_source", source)


async def async_queue_worker(
    data_source: DataSource, handler: Handler, **worker_options: Unpack[WorkerOptions]
) -> AsyncIterator[QueueWorker]:
    """`queue_worker` for `await container.init_resources()`: starts and drains in a thread."""
    worker = await asyncio.to_thread(start_queue_worker, data_source, handler, **worker_options)
    try:
        yield worker
    finally:
        await asyncio.to_thread(_stop_worker, worker)


async def async_scheduler(
    data_source: DataSource, periodic_jobs: Iterable[PeriodicJob], **options: Any
) -> AsyncIterator[Scheduler]:
    """`scheduler` for `await container.init_resources()`: starts and stops in a thread."""
    started = await asyncio.to_thread(_start_scheduler, data_source, periodic_jobs, **options)
    try:
        yield started
    finally:
        await asyncio.to_thread(teardown, "scheduler", started.stop)

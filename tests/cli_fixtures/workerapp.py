"""A user's application for the `proletarian-di worker` tests (imported via --path).

`Container` reads TEST_DATABASE_URL when the module is imported (one process,
one database); the functions build targets for the in-process tests.
"""

from __future__ import annotations

import os
import signal
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from dependency_injector import containers, providers

from proletarian_di import create_queue_worker
from proletarian_di.di import mysql_data_source, postgres_pool, queue_worker, scheduler
from proletarian_di.periodic import PeriodicJob

URL = os.environ.get("TEST_DATABASE_URL", "")
NOT_A_TARGET = 42


def tables() -> dict[str, str]:
    """The queue tables the tests chose (PROLETARIAN_JOB_TABLE / _ARCHIVED_JOB_TABLE)."""
    return {
        "job_table": os.environ.get("PROLETARIAN_JOB_TABLE", "proletarian.job"),
        "archived_job_table": os.environ.get(
            "PROLETARIAN_ARCHIVED_JOB_TABLE", "proletarian.archived_job"
        ),
    }


def handle(job_type: str, payload: Any) -> None:
    """Marks `<n>.started` in CLI_TEST_MARKS (holding the pid of the process that runs it),
    sleeps `seconds`, or signals its own process; `hang_first` hangs on its first run only."""
    marks = os.environ.get("CLI_TEST_MARKS")
    again = False
    if marks:
        mark = Path(marks, f"{payload['n']}.started")
        again = mark.exists()
        mark.write_text(str(os.getpid()))
    if job_type == "sigterm_me":
        os.kill(os.getpid(), signal.SIGTERM)
    if job_type == "hang_first" and not again:
        time.sleep(120)
    time.sleep(payload.get("seconds", 0))


def data_source(url: str) -> Any:
    if url.startswith("mysql"):
        return providers.Resource(mysql_data_source, url, max_connections=4)
    return providers.Resource(postgres_pool, url, min_size=1, max_size=4, wait_timeout=5)


def make_container(url: str, **worker_options: Any) -> containers.DynamicContainer:
    container = containers.DynamicContainer()
    container.pool = data_source(url)
    options: dict[str, Any] = {
        "worker_threads": 2,
        "polling_interval_ms": 10,
        **tables(),
        **worker_options,
    }
    container.worker = providers.Resource(queue_worker, container.pool, handle, **options)
    return container


class Container(containers.DeclarativeContainer):
    """What a user writes: a pool resource and a worker resource."""

    pool = data_source(URL) if URL else providers.Object(None)
    worker = providers.Resource(
        queue_worker,
        pool,
        handle,
        worker_threads=2,
        polling_interval_ms=10,
        await_termination_timeout_ms=30_000,
        **tables(),
    )


def unreachable() -> containers.DynamicContainer:
    return make_container("postgresql://postgres:s3cret@127.0.0.1:1/nowhere")


def missing_schema() -> containers.DynamicContainer:
    return make_container(
        os.environ["TEST_DATABASE_URL"],
        job_table="nosuch.job",
        archived_job_table="nosuch.archived_job",
    )


def with_scheduler() -> containers.DynamicContainer:
    """A worker and a periodic scheduler of two schedules, which never fall due in a test."""
    container = make_container(os.environ["TEST_DATABASE_URL"])
    nightly = [
        PeriodicJob("cli-nightly", "0 2 1 1 *", "noop", {"n": 0}),
        PeriodicJob("cli-weekly", "0 3 1 1 *", "noop", {"n": 0}),
    ]
    container.scheduler = providers.Resource(
        scheduler, container.pool, nightly, catch_up=False, **tables()
    )
    return container


def no_workers() -> containers.DynamicContainer:
    container = containers.DynamicContainer()
    container.pool = data_source(os.environ["TEST_DATABASE_URL"])
    return container


def plain_worker(**options: Any) -> Any:
    url = os.environ["TEST_DATABASE_URL"]
    if url.startswith("mysql"):
        from proletarian_di.mysql import MySQLDataSource

        source: Any = MySQLDataSource(url, max_connections=2)
    else:
        from psycopg_pool import ConnectionPool

        source = ConnectionPool(url, min_size=1, max_size=2, open=True)
    return create_queue_worker(
        source, handle, polling_interval_ms=10, on_shutdown=source.close, **tables(), **options
    )


def json_worker() -> Any:
    """A worker whose code says its payloads are JSON."""
    return plain_worker(serializer="json")


def impatient_worker() -> Any:
    """Abandons a job still running 100 ms after the stop signal."""
    return plain_worker(await_termination_timeout_ms=100)


def dying_worker() -> Any:
    """A worker whose only thread dies (its clock raises what no thread survives)."""
    calls = []

    def clock() -> datetime:
        calls.append(1)
        if len(calls) > 3:
            raise KeyboardInterrupt("the clock broke")
        return datetime.now(timezone.utc)

    return plain_worker(clock=clock)


def exits_at_start() -> Any:
    """An application whose worker process dies as it starts (a crash loop)."""
    os._exit(1)


def needs_arguments(url: str) -> Any:
    return make_container(url)

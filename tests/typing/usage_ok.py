"""Typed use of the public API: mypy must accept every line (tests/test_typing.py)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from proletarian_di import (
    Job,
    JSONSerializer,
    QueueWorker,
    RetrySpec,
    UUIDStrategy,
    WorkerOptions,
    create_queue_worker,
    enqueue,
    enqueue_many,
    process_next_job,
)
from proletarian_di.di import queue_worker
from proletarian_di.mysql import MySQLDataSource
from proletarian_di.testing import run_due_jobs


def handle(job_type: str, payload: Any) -> None: ...


async def handle_async(job: Job) -> None: ...


def strategy(job: Job, exc: BaseException) -> RetrySpec | None:
    return RetrySpec(retries=3, delays=[1_000])


def now() -> datetime:
    return datetime.now(timezone.utc)


def workers(pool: ConnectionPool, source: MySQLDataSource) -> list[QueueWorker]:
    options: WorkerOptions = {"queue": "email", "worker_threads": 4}
    return [
        create_queue_worker(pool, handle, **options),
        create_queue_worker(
            source,
            handle_async,
            handler_fn_mode="advanced",
            retry_strategy_fn=strategy,
            failed_job_fn=lambda job, exc: None,
            on_polling_error=lambda exc: False,
            polling_interval_ms=50,
            await_termination_timeout_ms=5_000,
            batch_size=10,
            clock=now,
            log=lambda event, data: None,
        ),
        create_queue_worker(lambda: psycopg.connect("postgresql://"), handle),
    ]


def one_off(pool: ConnectionPool) -> int:
    done: bool | None = process_next_job(pool, handle, queue="reports")
    return run_due_jobs(pool, handle, max_jobs=5) + int(bool(done))


def enqueue_some(conn: psycopg.Connection[Any]) -> None:
    enqueue(conn, "send", {"to": "a@example.com"}, process_in=timedelta(seconds=5))
    enqueue(conn, "send", None, serializer=JSONSerializer(), job_id_strategy=UUIDStrategy())
    enqueue(conn, "app/send", None, serializer="transit", job_type_style="keyword")
    enqueue_many(conn, [("send", 1), ("send", 2)], queue="email", clock=now)


def resource(pool: ConnectionPool) -> Iterator[QueueWorker]:
    return queue_worker(pool, handle, queue="email", worker_threads=2, serializer="json")

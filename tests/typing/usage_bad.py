"""Mistakes mypy must reject: each marked line must get an error containing its text."""

from __future__ import annotations

from typing import Any

from psycopg_pool import ConnectionPool

from proletarian_di import create_queue_worker, enqueue, process_next_job
from proletarian_di.di import queue_worker
from proletarian_di.testing import run_due_jobs


def handle(job_type: str, payload: Any) -> None: ...


def mistakes(pool: ConnectionPool, conn: Any) -> None:
    create_queue_worker(pool, handle, polling_intervall_ms=10)  # E: Unexpected keyword argument
    create_queue_worker(pool, handle, worker_threads="4")  # E: incompatible type
    create_queue_worker(pool, handle, handler_fn_mode="fancy")  # E: incompatible type
    create_queue_worker(pool, handle, retry_strategy_fn=3)  # E: incompatible type
    create_queue_worker(42, handle)  # E: incompatible type
    process_next_job(pool, handle, queue=7)  # E: incompatible type
    run_due_jobs(pool, handle, batch_sise=2)  # E: Unexpected keyword argument
    queue_worker(pool, handle, worker_thread=2)  # E: Unexpected keyword argument
    enqueue(conn, "x", None, serializer="xml")  # E: incompatible type
    enqueue(conn, "x", None, process_in=5)  # E: incompatible type

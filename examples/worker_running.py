"""A plain script: enqueue a few jobs, run two workers in a `with worker_running(...)` block.

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres python examples/worker_running.py

Proletarian's examples start workers from a component library (Component, Integrant,
Mount) or with bare defs; in Python a `with` block is the lifecycle: the
workers start on entry and drain and stop on exit, also when the block raises.
"""

from __future__ import annotations

import os
import threading

from psycopg_pool import ConnectionPool

from proletarian_di import create_queue_worker, enqueue, worker_running
from proletarian_di.router import JobRouter
from proletarian_di.schema import install_schema

DATABASE_URL = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
JOBS = 5


def main() -> None:
    done = threading.Semaphore(0)
    router = JobRouter()

    @router.handler("send_email")
    def send_email(job_type: str, payload: dict) -> None:
        print(f"sending email to {payload['to']}")
        done.release()

    @router.handler("build_report")
    def build_report(job_type: str, payload: dict) -> None:
        print(f"building report {payload['name']}")
        done.release()

    with ConnectionPool(DATABASE_URL, min_size=1, max_size=4) as pool:
        with pool.connection() as conn:
            install_schema(conn)
        with pool.connection() as conn:  # one transaction: all jobs or none
            for n in range(JOBS - 1):
                enqueue(conn, "send_email", {"to": f"user{n}@example.com"}, queue="email")
            enqueue(conn, "build_report", {"name": "daily"}, queue="reports")

        email = create_queue_worker(
            pool, router, queue="email", worker_threads=2, polling_interval_ms=50
        )
        reports = create_queue_worker(pool, router, queue="reports", polling_interval_ms=200)
        with worker_running(email, reports):
            for _ in range(JOBS):
                if not done.acquire(timeout=30):
                    raise SystemExit("timed out waiting for the jobs")
        print(f"done: email {email.summary()}, reports {reports.summary()}")


if __name__ == "__main__":
    main()

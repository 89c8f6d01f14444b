"""A dependency-injector application: a sign-up service enqueues welcome emails, and the
reference container's workers send them.

Run from the repository root (see README.md):

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres python -m examples.di_app.app
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from typing import Any

from proletarian_di import enqueue_many, worker_running
from proletarian_di.schema import install_schema

from containers import EMAIL_QUEUE
from containers.postgres import PostgresContainer


class Signups:
    """The application service: welcome emails are enqueued in the caller's transaction."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    def welcome(self, emails: Iterable[str]) -> list[uuid.UUID]:
        with self.pool.connection() as conn:  # one transaction for all of them
            return enqueue_many(
                conn,
                [("send_email", {"to": email, "subject": "Welcome!"}) for email in emails],
                queue=EMAIL_QUEUE,
            )


def wait_for(predicate: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("the workers did not finish in time")
        time.sleep(0.05)


def run(container: PostgresContainer, emails: list[str]) -> list[str]:
    """Start the container's workers, welcome everyone, wait for the mail, drain and stop."""
    with worker_running(container):
        with container.pool().connection() as conn:
            install_schema(conn)
        Signups(container.pool()).welcome(emails)
        mailer = container.mailer()
        wait_for(lambda: len(mailer.sent) >= len(emails))
    return sorted(to for to, _subject, _body in mailer.sent)


def main() -> None:
    sent = run(PostgresContainer(), [f"user{n}@example.com" for n in range(3)])
    print(f"sent {len(sent)} welcome emails: {', '.join(sent)}")


if __name__ == "__main__":
    main()

"""The di_app's own tests: the mailer is overridden with a stub.

Run from the repository root: DATABASE_URL=... python -m pytest examples/di_app
"""

from __future__ import annotations

import os

import pytest
from dependency_injector import providers

from proletarian_di.schema import install_schema
from proletarian_di.testing import run_due_jobs

from containers.postgres import PostgresContainer
from examples.di_app.app import Signups, run

pytestmark = pytest.mark.skipif(not os.environ.get("DATABASE_URL"), reason="needs DATABASE_URL")


class StubMailer:
    def __init__(self):
        self.sent = []

    def send(self, to, subject, body=""):
        self.sent.append((to, subject, body))


@pytest.fixture
def container():
    container = PostgresContainer()
    container.config.queues.email.polling_interval_ms.from_value(10)
    stub = StubMailer()
    container.mailer.override(providers.Object(stub))
    yield container
    container.mailer.reset_override()


def test_workers_send_welcome_emails_through_the_stub(container):
    sent = run(container, ["a@example.com", "b@example.com"])
    assert sent == ["a@example.com", "b@example.com"]
    assert all(subject == "Welcome!" for _to, subject, _body in container.mailer().sent)


def test_without_worker_threads_using_run_due_jobs(container):
    pool = container.pool.init()  # only the pool: no workers
    try:
        with pool.connection() as conn:
            install_schema(conn)
            conn.execute("DELETE FROM proletarian.job WHERE queue = 'email'")
        Signups(pool).welcome(["c@example.com"])
        assert run_due_jobs(pool, container.handler(), queue="email") == 1
        assert [to for to, _s, _b in container.mailer().sent] == ["c@example.com"]
    finally:
        container.pool.shutdown()

"""The app's own tests: its real lifespan (worker included), the mailer overridden by a stub.

Run from the repository root (the queue schema is installed if missing):

    DATABASE_URL=postgresql+asyncpg://postgres@127.0.0.1:5432/postgres \
        python -m pytest examples/fastapi_sqlalchemy
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from dependency_injector import providers
from fastapi.testclient import TestClient

from proletarian_di.schema import install_schema

from examples.fastapi_sqlalchemy.app import create_app
from examples.fastapi_sqlalchemy.containers import (
    EMAIL_QUEUE,
    Container,
    create_container,
    libpq_url,
)

pytestmark = pytest.mark.skipif(not os.environ.get("DATABASE_URL"), reason="needs DATABASE_URL")


class StubMailer:
    """Records what it is asked to send (from the worker's threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.sent: list[tuple[str, str, str]] = []

    def send(self, to: str, subject: str, body: str) -> None:
        with self._lock:
            self.sent.append((to, subject, body))


def query(sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Rows read on a fresh connection, outside the app; [] for a statement without rows."""
    with psycopg.connect(libpq_url(os.environ["DATABASE_URL"]), autocommit=True) as conn:
        cursor = conn.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


def wait_for(predicate: Callable[[], Any], what: str, timeout: float = 30.0) -> None:
    """Poll `predicate` until it is truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"not within {timeout}s: {what}"
        time.sleep(0.02)


def jobs_of_the_email_queue() -> list[tuple[Any, ...]]:
    """Every job of the email queue, waiting or archived."""
    return query(
        "SELECT job_id, job_type, payload::text FROM proletarian.job WHERE queue = %s "
        "UNION ALL SELECT job_id, job_type, payload::text FROM proletarian.archived_job "
        "WHERE queue = %s",
        (EMAIL_QUEUE, EMAIL_QUEUE),
    )


@pytest.fixture
def clean_database() -> None:
    """The queue schema installed, no `users` table yet, no job in the email queue."""
    with psycopg.connect(libpq_url(os.environ["DATABASE_URL"])) as conn:
        install_schema(conn)
        conn.execute("DROP TABLE IF EXISTS users")
        conn.execute("DELETE FROM proletarian.job WHERE queue = %s", (EMAIL_QUEUE,))
        conn.execute("DELETE FROM proletarian.archived_job WHERE queue = %s", (EMAIL_QUEUE,))


@pytest.fixture
def mailer() -> StubMailer:
    return StubMailer()


@pytest.fixture
def container(mailer: StubMailer) -> Iterator[Container]:
    container = create_container()
    container.config.polling_interval_ms.from_value(10)
    container.mailer.override(providers.Object(mailer))
    yield container
    container.mailer.reset_override()


@pytest.fixture
def client(clean_database: None, container: Container) -> Iterator[TestClient]:
    """The app under its real lifespan: tables created, worker started, then drained."""
    with TestClient(create_app(container)) as client:
        yield client


def test_the_user_is_created_and_the_worker_sends_its_welcome_email(
    client: TestClient, mailer: StubMailer
) -> None:
    response = client.post("/users", json={"email": "ada@example.com", "name": "Ada"})
    assert response.status_code == 201, response.text
    job_id = uuid.UUID(response.json()["welcome_job_id"])

    def archived() -> list[tuple[Any, ...]]:
        return query("SELECT status FROM proletarian.archived_job WHERE job_id = %s", (job_id,))

    wait_for(archived, "the welcome-email job archived")
    assert archived() == [("success",)]
    assert mailer.sent == [("ada@example.com", "Welcome!", "Hello Ada, welcome aboard.")]
    assert query("SELECT email, name FROM users") == [("ada@example.com", "Ada")]
    assert query("SELECT count(*) FROM proletarian.job WHERE job_id = %s", (job_id,)) == [(0,)]


def test_a_duplicate_email_rolls_back_the_job_enqueued_before_it(
    client: TestClient, mailer: StubMailer
) -> None:
    query("INSERT INTO users (email, name) VALUES ('ada@example.com', 'Ada')")

    response = client.post("/users", json={"email": "ada@example.com", "name": "Impostor"})

    assert response.status_code == 409, response.text
    assert "already registered" in response.json()["detail"]
    assert jobs_of_the_email_queue() == []  # the job was written, then rolled back with the user
    assert query("SELECT email, name FROM users") == [("ada@example.com", "Ada")]
    assert mailer.sent == []

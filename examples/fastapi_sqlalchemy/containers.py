"""The app's container: the SQLAlchemy engine for requests, and the email queue's worker (a
psycopg_pool and a handler built by `make_handler(mailer)`), both configured by DATABASE_URL."""

from __future__ import annotations

import logging
import threading
from typing import Any, Protocol

from dependency_injector import containers, providers
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

from proletarian_di import di
from proletarian_di.router import JobRouter

EMAIL_QUEUE = "email"
DRIVERS = ("psycopg", "asyncpg")

logger = logging.getLogger(__name__)


class Mailer(Protocol):
    """Sends one email; tests override the container's `mailer` with a stub."""

    def send(self, to: str, subject: str, body: str) -> None: ...


class LoggingMailer:
    """A mailer that logs what it would send, instead of talking SMTP."""

    def __init__(self, sender: str = "noreply@example.com") -> None:
        self.sender = sender
        self._lock = threading.Lock()
        self.sent: list[tuple[str, str, str]] = []

    def send(self, to: str, subject: str, body: str) -> None:
        with self._lock:
            self.sent.append((to, subject, body))
        logger.info("mail from=%s to=%s subject=%r", self.sender, to, subject)


def make_handler(mailer: Mailer) -> JobRouter:
    """The worker's handler, closing over the components its jobs use."""
    router = JobRouter()

    @router.handler("send_welcome_email")
    def send_welcome_email(job_type: str, payload: dict[str, Any]) -> None:
        mailer.send(payload["email"], "Welcome!", f"Hello {payload['name']}, welcome aboard.")

    return router


def sqlalchemy_url(database_url: str) -> URL:
    """DATABASE_URL for SQLAlchemy: postgresql+psycopg:// or +asyncpg:// (plain postgresql://
    means psycopg 3)."""
    if not database_url:
        raise ValueError("set DATABASE_URL, e.g. postgresql+asyncpg://postgres@127.0.0.1/postgres")
    url = make_url(database_url)
    if url.drivername in ("postgresql", "postgres"):
        return url.set(drivername="postgresql+psycopg")
    if url.get_backend_name() != "postgresql" or url.get_driver_name() not in DRIVERS:
        raise ValueError(
            f"DATABASE_URL must be postgresql+psycopg:// or postgresql+asyncpg://, "
            f"got {url.drivername}://"
        )
    return url


def libpq_url(database_url: str) -> str:
    """The same database as a libpq URL (postgresql://), for the workers' psycopg_pool."""
    url = sqlalchemy_url(database_url).set(drivername="postgresql")
    return url.render_as_string(hide_password=False)


class Container(containers.DeclarativeContainer):
    """Requests use `sessions`; `email_worker` (with its pool) runs in the app's lifespan."""

    config = providers.Configuration()

    engine = providers.Singleton(
        create_async_engine, providers.Callable(sqlalchemy_url, config.database_url)
    )
    sessions = providers.Singleton(async_sessionmaker, engine, expire_on_commit=False)

    pool = providers.Resource(
        di.postgres_pool, providers.Callable(libpq_url, config.database_url), min_size=1, max_size=4
    )
    mailer = providers.Singleton(LoggingMailer)
    handler = providers.Singleton(make_handler, mailer)
    email_worker = providers.Resource(
        di.queue_worker,
        pool,  # the pool resource itself: the worker drains before the pool closes
        handler,
        queue=EMAIL_QUEUE,
        worker_threads=2,
        polling_interval_ms=config.polling_interval_ms.as_int(),
    )


def create_container() -> Container:
    """A container configured from the environment (DATABASE_URL, EMAIL_POLLING_INTERVAL_MS)."""
    container = Container()
    container.config.database_url.from_env("DATABASE_URL", default="")
    container.config.polling_interval_ms.from_env("EMAIL_POLLING_INTERVAL_MS", default=100)
    return container

"""A MySQL or MariaDB application container: pool, components, handler, and two queue workers.

    container = MySQLContainer()      # reads mysql.yml and the environment
    with worker_running(container):   # or worker_lifespan / the CLI
        ...

Every worker names the pool resource directly as its data source, so the
workers drain before the pool closes.
"""

from __future__ import annotations

from pathlib import Path

from dependency_injector import containers, providers

from proletarian_di.di import mysql_data_source, queue_worker

from . import (
    EMAIL_QUEUE,
    REPORTS_QUEUE,
    InMemorySearchClient,
    LoggingMailer,
    System,
    email_retry_strategy,
    make_handler,
)

CONFIG_FILE = Path(__file__).with_name("mysql.yml")


class MySQLContainer(containers.DeclarativeContainer):
    """The application's queue workers on MySQL or MariaDB."""

    config = providers.Configuration(yaml_files=[CONFIG_FILE])

    pool = providers.Resource(
        mysql_data_source,
        config.database.url,
        max_connections=config.database.max_connections.as_int(),
    )

    mailer = providers.Singleton(LoggingMailer, sender=config.mailer.sender)
    search = providers.Singleton(InMemorySearchClient, url=config.search.url)
    system = providers.Singleton(System, mailer=mailer, search=search, data_source=pool)
    handler = providers.Singleton(make_handler, system)

    email_worker = providers.Resource(
        queue_worker,
        pool,
        handler,
        queue=EMAIL_QUEUE,
        worker_threads=config.queues.email.worker_threads.as_int(),
        polling_interval_ms=config.queues.email.polling_interval_ms.as_int(),
        retry_strategy_fn=email_retry_strategy,
    )
    reports_worker = providers.Resource(
        queue_worker,
        pool,
        handler,
        queue=REPORTS_QUEUE,
        worker_threads=config.queues.reports.worker_threads.as_int(),
        polling_interval_ms=config.queues.reports.polling_interval_ms.as_int(),
    )

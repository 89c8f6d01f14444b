"""`ApplicationContainer` on PostgreSQL: a psycopg_pool `ConnectionPool`, set by postgres.yml.

    container = PostgresContainer()      # reads postgres.yml and the environment
    with worker_running(container):      # or worker_lifespan / the CLI
        ...

The pool is opened and waited for at init, so a bad URL fails at start.
"""

from __future__ import annotations

from pathlib import Path

from dependency_injector import providers

from proletarian_di.di import postgres_pool

from . import ApplicationContainer, copy_providers

CONFIG_FILE = Path(__file__).with_name("postgres.yml")


@copy_providers(ApplicationContainer)
class PostgresContainer(ApplicationContainer):
    """The application's queue workers on PostgreSQL.

    The pool keeps `min_size` connections open and grows up to `max_size`.
    """

    config = providers.Configuration(yaml_files=[CONFIG_FILE])
    pool = providers.Resource(
        postgres_pool,
        config.database.url,
        min_size=config.database.min_size.as_int(),
        max_size=config.database.max_size.as_int(),
    )

"""`ApplicationContainer` on MySQL or MariaDB: PyMySQL connections pooled by DBUtils.

    container = MySQLContainer()      # reads mysql.yml and the environment
    with worker_running(container):   # or worker_lifespan / the CLI
        ...

The data source connects once at init, so a bad URL or password fails at start.
"""

from __future__ import annotations

from pathlib import Path

from dependency_injector import providers

from proletarian_di.di import mysql_data_source

from . import ApplicationContainer, copy_providers

CONFIG_FILE = Path(__file__).with_name("mysql.yml")


@copy_providers(ApplicationContainer)
class MySQLContainer(ApplicationContainer):
    """The application's queue workers on MySQL or MariaDB.

    DBUtils opens connections on demand, at most `max_connections` of them.
    """

    config = providers.Configuration(yaml_files=[CONFIG_FILE])
    pool = providers.Resource(
        mysql_data_source,
        config.database.url,
        max_connections=config.database.max_connections.as_int(),
    )

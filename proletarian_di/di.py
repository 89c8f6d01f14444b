"""dependency-injector resources; they live in `proletarian_di.contrib.di` (extra `di`)."""

from .contrib.di import (
    async_mysql_data_source,
    async_postgres_pool,
    async_queue_worker,
    container_workers,
    init_resources,
    mask_conninfo,
    mysql_data_source,
    open_mysql_data_source,
    open_postgres_pool,
    postgres_pool,
    queue_worker,
    shutdown_resources,
    start_queue_worker,
)

__all__ = [
    "async_mysql_data_source",
    "async_postgres_pool",
    "async_queue_worker",
    "container_workers",
    "init_resources",
    "mask_conninfo",
    "mysql_data_source",
    "open_mysql_data_source",
    "open_postgres_pool",
    "postgres_pool",
    "queue_worker",
    "shutdown_resources",
    "start_queue_worker",
]

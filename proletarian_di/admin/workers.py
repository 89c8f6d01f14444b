"""The live workers' registry: `list_workers` (every `QueueWorker` in every process, with
what each thread runs) and `prune_workers` (the rows of processes gone). `WorkerInfo` and
`WorkerThread` are the registry's own, from the engine."""

from __future__ import annotations

from datetime import timedelta

from .._common.types import Connection
from .._engine import registry as _registry
from .._engine.registry import WorkerInfo
from .._engine.registry import WorkerThread as WorkerThread
from .._store.dialects import Dialect, dialect_of
from .._store.tables import DEFAULT_TABLES, UPGRADE_HINT, Tables, workers_table
from ..errors import ConfigurationError, SchemaError

STALE_AFTER = timedelta(seconds=_registry.STALE_AFTER_S)
"""A worker whose row was not refreshed for this long is "stale": its process is gone."""


def _registry_table(conn: Connection, tables: Tables) -> tuple[Dialect, str]:
    dialect = dialect_of(conn, tables)
    table = workers_table(tables.job_table)
    if not dialect.table_columns(conn, table):
        raise SchemaError(f"there is no {table} table for the live workers: " + UPGRADE_HINT)
    return dialect, table


def list_workers(
    conn: Connection,
    *,
    queue: str | None = None,
    stale_after: timedelta = STALE_AFTER,
    tables: Tables = DEFAULT_TABLES,
) -> list[WorkerInfo]:
    """The running workers (each `QueueWorker`, in every process) of these tables, or of
    `queue`: host, pid, threads and what each runs, by queue, host and pid. A worker whose
    heartbeat stopped more than `stale_after` ago (by the database's clock) is listed with
    state "stale" until pruned (`prune_workers`, or any worker's heartbeat, after
    15 minutes). `SchemaError` if the tables predate the live workers' table."""
    if not isinstance(stale_after, timedelta) or stale_after <= timedelta(0):
        raise ConfigurationError(f"stale_after must be a positive timedelta, got {stale_after!r}")
    dialect, table = _registry_table(conn, tables)
    return _registry.read_workers(conn, dialect, table, queue, stale_after)


def prune_workers(
    conn: Connection,
    *,
    older_than: timedelta = STALE_AFTER,
    tables: Tables = DEFAULT_TABLES,
) -> int:
    """Delete the rows of workers not seen for `older_than` (stale by default): processes
    that died without a word. Returns how many. Commit to keep it. A live worker pruned by
    a bound shorter than its beat writes its row again at its next beat."""
    if not isinstance(older_than, timedelta) or older_than <= timedelta(0):
        raise ConfigurationError(f"older_than must be a positive timedelta, got {older_than!r}")
    dialect, table = _registry_table(conn, tables)
    with dialect.admin_write(conn):
        return _registry.prune(conn, dialect, table, older_than.total_seconds())

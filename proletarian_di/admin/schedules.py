"""The periodic schedules recorded beside the tables (`list_schedules`)."""

from __future__ import annotations

from datetime import datetime, timezone

from .._common.types import Connection
from .._store.dialects import dialect_of
from .._store.tables import DEFAULT_TABLES, UPGRADE_HINT, Tables, periodic_table
from ..errors import SchemaError
from ..periodic import Schedule, next_tick


def list_schedules(
    conn: Connection, *, tables: Tables = DEFAULT_TABLES, now: datetime | None = None
) -> list[Schedule]:
    """The periodic schedules recorded beside these tables, by name, each with its next run
    after the later of its last tick and `now`."""
    dialect = dialect_of(conn, tables)
    now = now or datetime.now(timezone.utc)
    if not dialect.table_columns(conn, periodic_table(tables.job_table)):
        raise SchemaError(
            f"there is no {periodic_table(tables.job_table)} table for the schedules: "
            + UPGRADE_HINT
        )
    rows = dialect.fetchall(
        conn,
        "SELECT name, cron, timezone, job_type, queue, last_tick, updated_at "
        f"FROM {periodic_table(tables.job_table)} ORDER BY name",
    )
    schedules = []
    for name, cron, zone, job_type, queue, last, updated in rows:
        last, updated = dialect.decode_time(last), dialect.decode_time(updated)
        upcoming = next_tick(cron, zone, max(last, now))
        schedules.append(Schedule(name, cron, zone, job_type, queue, last, upcoming, updated))
    return schedules

"""The periodic schedules recorded beside the tables (`list_schedules`), and an operator's
controls over them: `disable_schedule`, `enable_schedule`, `request_run`, `recent_runs`."""

from __future__ import annotations

from datetime import datetime, timezone

from .._common.types import Connection
from .._store.dialects import Dialect, dialect_of
from .._store.tables import DEFAULT_TABLES, UPGRADE_HINT, Tables, periodic_table
from ..errors import ConfigurationError, SchemaError
from ..periodic import CONTROL_COLUMNS, KEPT_RUNS, Run, Schedule, _stored_runs, next_tick
from ..serializers import check_serializer
from ._checks import _job_id
from .jobs import _collect, _Query


def _columns(conn: Connection, dialect: Dialect, table: str) -> set[str]:
    columns = {c.lower() for c in dialect.table_columns(conn, table)}
    if not columns:
        raise SchemaError(f"there is no {table} table for the schedules: " + UPGRADE_HINT)
    return columns


def _controlled(conn: Connection, dialect: Dialect, table: str, what: str) -> None:
    """A `SchemaError` naming the upgrade when the table lacks the controls' columns."""
    if not set(CONTROL_COLUMNS) <= _columns(conn, dialect, table):
        raise SchemaError(
            f"{what} needs the schedule_controls schema step ({table} has no "
            f"{', '.join(CONTROL_COLUMNS)} columns): " + UPGRADE_HINT
        )


def _known(conn: Connection, dialect: Dialect, table: str, name: str) -> None:
    """A `LookupError` when no schedule of that name is recorded."""
    if not isinstance(name, str) or not name:
        raise ConfigurationError(f"a schedule's name must be a non-empty str, got {name!r}")
    if dialect.fetchone(conn, f"SELECT 1 FROM {table} WHERE name = %s", (name,)) is None:
        raise LookupError(
            f"no periodic schedule named {name!r} is recorded in {table} "
            "(a scheduler records its schedules when it starts)"
        )


def _change(
    conn: Connection, tables: Tables, name: str, what: str, update: str, now: datetime | None
) -> bool:
    """`UPDATE <periodic table> <update> WHERE name = %s AND <…>` on a known schedule, each
    `%s` before the name's being `now`; whether it changed the row."""
    dialect = dialect_of(conn, tables)
    table = periodic_table(tables.job_table)
    _controlled(conn, dialect, table, what)
    _known(conn, dialect, table, name)
    at = dialect.encode_time((now or datetime.now(timezone.utc)).astimezone(timezone.utc))
    params = (at,) * (update.count("%s") - 1) + (name,)
    return bool(dialect.execute_count(conn, f"UPDATE {table} {update}", params))


def list_schedules(
    conn: Connection, *, tables: Tables = DEFAULT_TABLES, now: datetime | None = None
) -> list[Schedule]:
    """The periodic schedules recorded beside these tables, by name, each with its next run
    after the later of its last tick and `now`, whether it is disabled (since when), a run
    requested and not yet enqueued, and the jobs it enqueued lately (`Schedule.runs`,
    without their states: `recent_runs` reads those)."""
    dialect = dialect_of(conn, tables)
    now = now or datetime.now(timezone.utc)
    table = periodic_table(tables.job_table)
    controls = set(CONTROL_COLUMNS) <= _columns(conn, dialect, table)
    extra = ", ".join(CONTROL_COLUMNS) if controls else "NULL, NULL, NULL"
    rows = dialect.fetchall(
        conn,
        f"SELECT name, cron, timezone, job_type, queue, last_tick, updated_at, {extra} "
        f"FROM {table} ORDER BY name",
    )
    schedules = []
    for name, cron, zone, job_type, queue, last, updated, paused, requested, runs in rows:
        last, updated = dialect.decode_time(last), dialect.decode_time(updated)
        upcoming = next_tick(cron, zone, max(last, now))
        schedules.append(
            Schedule(
                name,
                cron,
                zone,
                job_type,
                queue,
                last,
                upcoming,
                updated,
                paused_at=paused and dialect.decode_time(paused),
                run_requested_at=requested and dialect.decode_time(requested),
                runs=tuple(_runs(runs)),
            )
        )
    return schedules


def _runs(stored: object) -> list[Run]:
    runs = []
    for run in _stored_runs(stored):
        try:
            tick = datetime.fromisoformat(str(run["tick"]))
            runs.append(Run(str(run["job_id"]), tick, bool(run.get("requested"))))
        except (KeyError, ValueError):
            continue
    return runs


def disable_schedule(
    conn: Connection, name: str, *, tables: Tables = DEFAULT_TABLES, now: datetime | None = None
) -> bool:
    """Disable the schedule `name`: no scheduler, in any process, enqueues its ticks until it
    is enabled again (a requested run is still enqueued). False if it was disabled already;
    a `LookupError` if no schedule of that name is recorded. Commit to keep it."""
    return _change(
        conn,
        tables,
        name,
        "disabling a schedule",
        "SET paused_at = %s WHERE name = %s AND paused_at IS NULL",
        now,
    )


def enable_schedule(
    conn: Connection, name: str, *, tables: Tables = DEFAULT_TABLES, now: datetime | None = None
) -> bool:
    """Enable the disabled schedule `name` again: its next tick is enqueued, not those it
    missed while disabled (its last tick moves to now, so no scheduler catches them up).
    False if it was enabled; a `LookupError` if no schedule of that name is recorded.
    Commit to keep it."""
    return _change(
        conn,
        tables,
        name,
        "enabling a schedule",
        "SET paused_at = NULL, last_tick = GREATEST(last_tick, %s), updated_at = %s "
        "WHERE name = %s AND paused_at IS NOT NULL",
        now,
    )


def request_run(
    conn: Connection, name: str, *, tables: Tables = DEFAULT_TABLES, now: datetime | None = None
) -> bool:
    """Ask for a run of the schedule `name` now: within one polling interval, one scheduler
    running the schedule (of however many) enqueues its job once, in the transaction that
    clears the request, disabled or not. False if a run was requested already and not yet
    enqueued; a `LookupError` if no schedule of that name is recorded. Commit to keep it."""
    return _change(
        conn,
        tables,
        name,
        "requesting a schedule's run",
        "SET run_requested_at = %s WHERE name = %s AND run_requested_at IS NULL",
        now,
    )


def recent_runs(
    conn: Connection, name: str, limit: int = 10, *, tables: Tables = DEFAULT_TABLES
) -> list[Run]:
    """The jobs the schedule `name` enqueued lately, newest first, at most `limit` (up to
    `KEPT_RUNS`, which its row records), each with its state now, read by id from the job
    table and the archive (None: pruned). A `LookupError` if no schedule of that name is
    recorded."""
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= KEPT_RUNS:
        raise ConfigurationError(f"limit must be an int from 1 to {KEPT_RUNS}, got {limit!r}")
    dialect = dialect_of(conn, tables)
    table = periodic_table(tables.job_table)
    _controlled(conn, dialect, table, "a schedule's recent runs")
    _known(conn, dialect, table, name)
    (stored,) = dialect.fetchone(conn, f"SELECT recent_runs FROM {table} WHERE name = %s", (name,))
    codec = check_serializer(None)
    runs = []
    with dialect.admin_read(conn):
        for run in _runs(stored)[:limit]:
            try:
                query = _Query(job_id=_job_id(run.job_id))
            except ConfigurationError:
                runs.append(run)
                continue
            found = _collect(conn, dialect, tables, query, 1, None, codec).jobs
            runs.append(Run(run.job_id, run.tick, run.requested, found[0].state if found else None))
    return runs

"""The queue's own health, read cheaply from the database's statistics (`diagnose`): what
slows every claim down before it shows as a backlog, each with a threshold and a sentence
that says what to do.

On PostgreSQL: the job table's dead rows and when it was last vacuumed, whether autovacuum
is behind on it, and the oldest transaction that holds the horizon back (no dead row newer
than its snapshot can be removed while it lives). On MariaDB/MySQL: InnoDB's purge lag (the
history list length) and the oldest open transaction. On both: the claim latency, how long
the oldest due job has waited (`oldest_due_waits`: one read of the job table by queue).
The others are one statement each on a system view.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone
from typing import Any

from .._common.types import Connection
from .._engine import pauses as _pauses
from .._store.dialects import Dialect, dialect_of
from .._store.secrets import scrub
from .._store.tables import DEFAULT_TABLES, Tables
from ..errors import ConfigurationError
from .queues import oldest_due_waits

QUERY_CHARS = 200
"""At most this much of a transaction's statement is shown."""
_NO_PRIVILEGE = (1227, 1142)  # MySQL: access denied (PROCESS needed), table access denied


@dataclasses.dataclass(frozen=True)
class Thresholds:
    """Where each reading turns from ok to a warning; each a user can set."""

    dead_rows: int = 100_000
    """Dead rows in the job table."""
    horizon_s: float = 300.0
    """Seconds a transaction may hold the horizon (PostgreSQL) or stay open (MySQL)."""
    vacuum_lag_s: float = 600.0
    """Seconds autovacuum may stay behind on the job table once its dead rows pass its
    trigger."""
    purge_lag: int = 100_000
    """Undo records InnoDB has not purged yet (its history list length)."""
    claim_latency_s: float = 60.0
    """Seconds the oldest due job may have waited."""

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ConfigurationError(
                    f"threshold {field.name} must be a positive number, got {value!r}"
                )


@dataclasses.dataclass(frozen=True)
class Finding:
    """One reading: `status` "ok", "warn", or "unknown" (it could not be read: `message`
    says why); `value` against `threshold`, and what is so with what to do in `message`."""

    check: str
    status: str
    value: float | None
    threshold: float
    message: str
    details: dict[str, Any] = dataclasses.field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def diagnose(
    conn: Connection,
    *,
    tables: Tables = DEFAULT_TABLES,
    thresholds: Thresholds | None = None,
    now: datetime | None = None,
) -> list[Finding]:
    """The queue's health findings on this connection's database (see the module)."""
    limits = thresholds or Thresholds()
    dialect = dialect_of(conn, tables)
    now = now or datetime.now(timezone.utc)
    if dialect.name == "postgresql":
        findings = _postgres_table(conn, dialect, tables, limits)
        findings.append(_horizon(conn, dialect, limits))
    else:
        findings = [_purge_lag(conn, dialect, limits), _long_transaction(conn, dialect, limits)]
    return [*findings, _claim_latency(conn, tables, limits, now)]


def degraded(findings: list[Finding]) -> list[str]:
    """The messages of the findings that warn: empty when the queue is healthy."""
    return [f.message for f in findings if f.status == "warn"]


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    return str(timedelta(seconds=round(seconds)))


def _shown_query(query: Any) -> str:
    text = " ".join(str(query or "").split())
    text = scrub(text)
    return text if len(text) <= QUERY_CHARS else text[: QUERY_CHARS - 1] + "…"


def _postgres_table(
    conn: Connection, dialect: Dialect, tables: Tables, limits: Thresholds
) -> list[Finding]:
    """The job table's dead rows and its autovacuum, from `pg_stat_all_tables`."""
    table = tables.job_table
    row = dialect.fetchone(
        conn,
        "SELECT s.n_dead_tup, s.n_live_tup, "
        "EXTRACT(EPOCH FROM now() - GREATEST(s.last_vacuum, s.last_autovacuum)), "
        "EXTRACT(EPOCH FROM now() - s.last_autovacuum), "
        "current_setting('autovacuum')::bool AND COALESCE(NOT ('autovacuum_enabled=false' = "
        "ANY(c.reloptions)), true), "
        "current_setting('autovacuum_vacuum_threshold')::float8 + "
        "current_setting('autovacuum_vacuum_scale_factor')::float8 * s.n_live_tup "
        "FROM pg_stat_all_tables s JOIN pg_class c ON c.oid = s.relid "
        "WHERE s.relid = to_regclass(%s)",
        (table,),
    )
    if row is None:
        return [Finding("dead_rows", "unknown", None, limits.dead_rows, f"{table} is not found")]
    dead, live, vacuumed, autovacuumed, autovacuum_on, trigger = row
    dead, live = int(dead), int(live)
    vacuumed = None if vacuumed is None else float(vacuumed)
    autovacuumed = None if autovacuumed is None else float(autovacuumed)
    details = {"dead_rows": dead, "live_rows": live, "last_vacuum_s": vacuumed}
    if dead > limits.dead_rows:
        dead_rows = Finding(
            "dead_rows",
            "warn",
            dead,
            limits.dead_rows,
            f"{table} holds {dead:,} dead rows beside {live:,} live ones, last vacuumed "
            f"{_age(vacuumed)} ago: every claim walks over them until vacuum removes them. "
            f"Look at the oldest transaction (below) and autovacuum, or run VACUUM {table}.",
            details,
        )
    else:
        dead_rows = Finding(
            "dead_rows", "ok", dead, limits.dead_rows, f"{table}: {dead:,} dead rows", details
        )
    behind = dead > float(trigger)
    late = autovacuumed is None or autovacuumed > limits.vacuum_lag_s
    vacuum_details = {
        "autovacuum": bool(autovacuum_on),
        "trigger_rows": round(float(trigger)),
        "last_autovacuum_s": autovacuumed,
    }
    if not autovacuum_on:
        vacuum = Finding(
            "autovacuum",
            "warn",
            autovacuumed,
            limits.vacuum_lag_s,
            f"autovacuum is off for {table}: its dead rows stay until someone runs VACUUM. "
            "Turn it on (autovacuum = on, and no autovacuum_enabled = false on the table).",
            vacuum_details,
        )
    elif behind and late:
        vacuum = Finding(
            "autovacuum",
            "warn",
            autovacuumed,
            limits.vacuum_lag_s,
            f"autovacuum is behind on {table}: {dead:,} dead rows are past its trigger "
            f"({round(float(trigger)):,}) and it last ran {_age(autovacuumed)} ago. Check "
            "that its workers are not all busy (autovacuum_max_workers) and that no "
            "transaction holds the horizon.",
            vacuum_details,
        )
    else:
        vacuum = Finding(
            "autovacuum",
            "ok",
            autovacuumed,
            limits.vacuum_lag_s,
            f"autovacuum keeps up with {table}",
            vacuum_details,
        )
    return [dead_rows, vacuum]


def _horizon(conn: Connection, dialect: Dialect, limits: Thresholds) -> Finding:
    """The oldest snapshot that holds PostgreSQL's horizon for this database's tables: a
    session's transaction (of this database, or of none: a replication sender), a prepared
    transaction or a replication slot, whichever is oldest."""
    row = dialect.fetchone(
        conn,
        "SELECT kind, who, application, seconds, query FROM ("
        "SELECT 'session' AS kind, pid::text AS who, application_name AS application, "
        "EXTRACT(EPOCH FROM now() - xact_start) AS seconds, query, age(backend_xmin) AS xids "
        "FROM pg_stat_activity WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid() "
        "AND backend_type <> 'autovacuum worker' "
        "AND (datname IS NULL OR datname = current_database()) "
        "UNION ALL SELECT 'prepared transaction', gid, owner, "
        "EXTRACT(EPOCH FROM now() - prepared), NULL, age(transaction) FROM pg_prepared_xacts "
        "WHERE database = current_database() "
        "UNION ALL SELECT 'replication slot', slot_name, plugin, NULL, NULL, age(xmin) "
        "FROM pg_replication_slots WHERE xmin IS NOT NULL "
        "AND (database IS NULL OR database = current_database())"
        ") AS holders ORDER BY xids DESC LIMIT 1",
    )
    if row is None:
        return Finding(
            "horizon", "ok", 0.0, limits.horizon_s, "no transaction holds the horizon back"
        )
    kind, who, application, seconds, query = row
    seconds = None if seconds is None else float(seconds)
    details = {"kind": kind, "id": who, "application": application, "seconds": seconds}
    if kind == "session":
        details["query"] = _shown_query(query)
    held = seconds is None or seconds > limits.horizon_s
    if not held:
        return Finding(
            "horizon",
            "ok",
            seconds,
            limits.horizon_s,
            f"the oldest transaction began {_age(seconds)} ago",
            details,
        )
    if kind == "session":
        what = (
            f"pid {who} ({application or 'no application name'}) has held a transaction "
            f"open for {_age(seconds)}, last running: {details['query'] or '(nothing)'}"
        )
        todo = f"End it (SELECT pg_terminate_backend({who})) or fix the code that leaves it open"
    elif kind == "prepared transaction":
        what = f"prepared transaction {who!r} (owner {application}) is {_age(seconds)} old"
        todo = f"COMMIT PREPARED or ROLLBACK PREPARED {who!r}"
    else:
        what = f"replication slot {who!r} holds an old xmin"
        todo = f"bring its consumer back or drop it (pg_drop_replication_slot({who!r}))"
    return Finding(
        "horizon",
        "warn",
        seconds,
        limits.horizon_s,
        f"{what}: no dead row newer than its snapshot can be removed meanwhile. {todo}.",
        details,
    )


def _purge_lag(conn: Connection, dialect: Dialect, limits: Thresholds) -> Finding:
    """InnoDB's history list length: undo records its purge has not removed yet."""
    row = dialect.fetchone(
        conn,
        "SELECT `COUNT` FROM information_schema.INNODB_METRICS WHERE NAME = 'trx_rseg_history_len'",
    )
    if row is None:
        return Finding(
            "purge_lag",
            "unknown",
            None,
            limits.purge_lag,
            "the server does not report InnoDB's history list length (INNODB_METRICS)",
        )
    length = int(row[0])
    if length <= limits.purge_lag:
        return Finding(
            "purge_lag", "ok", length, limits.purge_lag, f"InnoDB's history list: {length:,}"
        )
    return Finding(
        "purge_lag",
        "warn",
        length,
        limits.purge_lag,
        f"InnoDB's history list holds {length:,} undo records not yet purged: the rows that "
        "claims and archives delete stay in the indexes until every older transaction ends. "
        "Look at the oldest transaction (below); innodb_purge_threads and "
        "innodb_max_purge_lag tune the purge.",
        {"history_list_length": length},
    )


def _long_transaction(conn: Connection, dialect: Dialect, limits: Thresholds) -> Finding:
    """The oldest open InnoDB transaction but this connection's (needs PROCESS)."""
    try:
        row = dialect.fetchone(
            conn,
            "SELECT t.trx_mysql_thread_id, TIMESTAMPDIFF(SECOND, t.trx_started, NOW()), "
            "p.USER, p.HOST, t.trx_query FROM information_schema.INNODB_TRX t "
            "LEFT JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id "
            "WHERE t.trx_mysql_thread_id <> CONNECTION_ID() ORDER BY t.trx_started LIMIT 1",
        )
    except Exception as exc:
        if not (exc.args and exc.args[0] in _NO_PRIVILEGE):
            raise
        return Finding(
            "long_transaction",
            "unknown",
            None,
            limits.horizon_s,
            "the open transactions are not readable without the PROCESS privilege",
        )
    if row is None:
        return Finding("long_transaction", "ok", 0.0, limits.horizon_s, "no other transaction")
    thread, seconds, user, host, query = row
    seconds = float(seconds)
    details = {
        "id": int(thread),
        "user": user,
        "host": host,
        "seconds": seconds,
        "query": _shown_query(query),
    }
    if seconds <= limits.horizon_s:
        return Finding(
            "long_transaction",
            "ok",
            seconds,
            limits.horizon_s,
            f"the oldest transaction began {_age(seconds)} ago",
            details,
        )
    return Finding(
        "long_transaction",
        "warn",
        seconds,
        limits.horizon_s,
        f"connection {thread} ({user}@{host}) has had a transaction open for {_age(seconds)}, "
        f"running: {details['query'] or '(nothing now)'}: InnoDB cannot purge what it might "
        f"still read. End it (KILL {thread}) or fix the code that leaves it open.",
        details,
    )


def _claim_latency(conn: Connection, tables: Tables, limits: Thresholds, now: datetime) -> Finding:
    """How long the oldest due job of any queue that is not paused has waited."""
    paused = set(_pauses.paused_queues(conn, dialect_of(conn, tables)))
    waits = [
        (wait.total_seconds(), queue)
        for queue, wait in oldest_due_waits(conn, tables=tables, now=now).items()
        if queue not in paused
    ]
    if not waits:
        return Finding("claim_latency", "ok", 0.0, limits.claim_latency_s, "no due job is waiting")
    seconds, queue = max(waits)
    details = {"queue": queue, "seconds": seconds}
    if seconds <= limits.claim_latency_s:
        return Finding(
            "claim_latency",
            "ok",
            seconds,
            limits.claim_latency_s,
            f"the oldest due job (queue {queue}) has waited {_age(seconds)}",
            details,
        )
    return Finding(
        "claim_latency",
        "warn",
        seconds,
        limits.claim_latency_s,
        f"the oldest due job of queue {queue} has waited {_age(seconds)}: its workers do not "
        f"keep up, or none runs. `proletarian-di jobs explain` says what holds a job back; "
        "`proletarian-di workers` lists the live workers.",
        details,
    )

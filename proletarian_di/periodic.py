"""Periodic jobs: cron schedules whose ticks are enqueued exactly once over every process.

Each process that runs a `Scheduler` for a schedule computes its ticks from the cron
expression (parsed and evaluated by `cronsim`, which follows Debian cron, DST included);
a tick is enqueued by the process whose `UPDATE … SET last_tick = <tick> WHERE last_tick <
<tick>` changes the schedule's row, in the same transaction as the job's INSERT. The row
lock and the comparison make the database the judge: however many processes declare the
schedule, one of them enqueues each tick, and a crash between the two statements loses
neither (they commit together).

On a schema with the `schedule_controls` step, an operator controls each schedule through
its row (`admin.disable_schedule`, `enable_schedule`, `request_run`): the tick's UPDATE
also requires `paused_at IS NULL`, so no process enqueues a tick of a disabled schedule,
and each pass looks for a requested run, which the process whose `UPDATE … SET
run_requested_at = NULL` changes the row enqueues in the same transaction. Each job a
schedule enqueues is recorded in its row's `recent_runs` (the newest `KEPT_RUNS`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import threading
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from ._common.checks import (
    JobTypeStyle,
    check_clock,
    check_id_strategy,
    check_job_type_style,
    check_log,
    check_name,
    check_queue,
    int_at_least,
    keyword_job_type,
    utc_now,
    validated,
)
from ._common.logging import default_log, describe, safe_log
from ._common.types import Clock, Connection, DataSource, LogFn
from ._engine.options import with_storage_defaults
from ._store.datasource import connection_factory
from ._store.dialects import Dialect, dialect_for
from ._store.enqueue import enqueue
from ._store.tables import DEFAULT_ARCHIVED_JOB_TABLE, DEFAULT_JOB_TABLE, periodic_table
from .errors import ConfigurationError, PayloadError, WorkerStateError
from .jobs import DEFAULT_QUEUE
from .schema import check_schema
from .serializers import DEFAULT_SERIALIZER, Serializer, check_serializer

if TYPE_CHECKING:
    from .job_ids import JobIdStrategy

__all__ = [
    "KEPT_RUNS",
    "PeriodicJob",
    "Run",
    "Schedule",
    "Scheduler",
    "Tick",
    "create_scheduler",
    "next_tick",
]

KEPT_RUNS = 20
"""How many of its newest jobs each schedule's row records (`recent_runs`)."""

CONTROL_COLUMNS = ("paused_at", "run_requested_at", "recent_runs")
"""The periodic table's columns that the `schedule_controls` step adds."""

ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
"""The `@` names cron accepts for common schedules, and what they stand for."""

_MISSING_CRONSIM = (
    "periodic jobs need the cronsim package (Python 3.11+): pip install 'proletarian-di[periodic]'"
)


def _cronsim() -> Any:
    try:
        import cronsim
    except ImportError:  # pragma: no cover - the extra is installed wherever tests run
        raise ConfigurationError(_MISSING_CRONSIM) from None
    return cronsim


MAX_CRON_LENGTH = 255
"""The longest cron string, as declared: the schedules' table stores no more on MySQL."""

MAX_TIMEZONE_LENGTH = 64
"""The longest time zone name the schedules' table stores on MySQL (IANA's are under 40)."""


def _bounded(value: str, limit: int, what: str) -> None:
    """Refuse a text longer than its column, which MySQL would fail on at the first write."""
    if len(value) > limit:
        raise ConfigurationError(
            f"{what} must be at most {limit} characters, got {len(value)}: {value[:40]!r}…"
        )


def _zone(name: Any, where: str) -> Any:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    if not isinstance(name, str) or not name:
        raise ConfigurationError(f"{where}: timezone must be an IANA name such as 'UTC'")
    _bounded(name, MAX_TIMEZONE_LENGTH, f"{where}: timezone")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigurationError(
            f"{where}: unknown timezone {name!r} (an IANA name such as 'Europe/Berlin')"
        ) from None


def _expression(cron: Any, where: str) -> str:
    """The five-field expression `cron` stands for, checked by cronsim."""
    if not isinstance(cron, str) or not cron.strip():
        raise ConfigurationError(f"{where}: cron must be a cron expression such as '0 * * * *'")
    _bounded(cron, MAX_CRON_LENGTH, f"{where}: cron")
    text = " ".join(cron.split())
    expr = ALIASES.get(text.lower(), text)
    if expr.startswith("@"):
        raise ConfigurationError(
            f"{where}: unknown cron alias {text!r}; use one of {', '.join(ALIASES)}"
        )
    fields = len(expr.split())
    if fields != 5:
        raise ConfigurationError(
            f"{where}: cron {text!r} has {fields} field(s); it needs 5 "
            "(minute hour day-of-month month day-of-week) or an alias such as @hourly"
        )
    cronsim = _cronsim()
    try:
        cronsim.CronSim(expr, datetime(2000, 1, 1))
    except cronsim.CronSimError as exc:
        raise ConfigurationError(f"{where}: invalid cron {text!r}: {exc}") from None
    return expr


@dataclasses.dataclass(frozen=True)
class PeriodicJob:
    """A job enqueued on a cron schedule: `name` identifies it across processes and restarts.

    `cron` has five fields (minute hour day-of-month month day-of-week) or is an alias
    such as `@hourly`; it is read in `timezone` (an IANA name), with Debian cron's rules
    for daylight saving time: a time skipped by the change runs at the change, a
    repeated one runs once. `job_type_style` is `enqueue`'s: "keyword" writes the job type
    as a Clojure keyword's text, for a Clojure worker (None: the scheduler's, "plain" unless
    `create_scheduler` is given another).
    """

    name: str
    cron: str
    job_type: str
    payload: Any = None
    _: dataclasses.KW_ONLY
    queue: str = DEFAULT_QUEUE
    timezone: str = "UTC"
    job_type_style: JobTypeStyle | None = None

    def __post_init__(self) -> None:
        self._check()

    def _check(self) -> None:
        """Refuse a field the schedules' table cannot store as given, or cron cannot read:
        a `ConfigurationError` naming the schedule, before anything is written."""
        check_name(self.name, "PeriodicJob name")
        where = f"periodic job {self.name!r}"
        check_name(self.job_type, f"{where}: job_type")
        if self.job_type_style is not None:
            self.stored_job_type(self.job_type_style)
        check_queue(self.queue)
        _expression(self.cron, where)
        _zone(self.timezone, where)

    def stored_job_type(self, default_style: str = "plain") -> str:
        """The job type as its rows hold it, in its `job_type_style` (else `default_style`):
        a `ConfigurationError` naming the schedule for a style or a keyword job type
        that is not one."""
        where = f"periodic job {self.name!r}"
        try:
            style = check_job_type_style(self.job_type_style or default_style)
            return keyword_job_type(self.job_type) if style == "keyword" else self.job_type
        except ConfigurationError as exc:
            raise ConfigurationError(f"{where}: {exc}") from None

    @functools.cached_property
    def expression(self) -> str:
        """The five-field expression (an alias spelled out)."""
        return _expression(self.cron, self.name)

    def _reads_as(self, cron: str) -> bool:
        """Whether a recorded `cron` reads as this schedule's expression: spacing, the case
        of names (`MON`, `@Hourly`) and an alias for its expression are no change."""
        try:
            recorded = _expression(cron, self.name)
        except ConfigurationError:
            return False
        return recorded.upper() == self.expression.upper()

    def ticks(self, after: datetime) -> Iterator[datetime]:
        """The schedule's ticks after `after` (aware), in order, as UTC datetimes."""
        return _ticks(self.expression, self.timezone, after)

    def next_run(self, after: datetime) -> datetime | None:
        """The first tick after `after`; None if the expression never matches again."""
        return next(self.ticks(after), None)


def _ticks(expression: str, zone_name: str, after: datetime) -> Iterator[datetime]:
    if after.tzinfo is None:
        raise ConfigurationError(f"a schedule's time must be timezone-aware, got {after!r}")
    zone = _zone(zone_name, "schedule")
    for tick in _cronsim().CronSim(expression, after.astimezone(zone)):
        # Started inside a repeated hour, cronsim can give the hour's first pass first.
        if tick > after:
            yield tick.astimezone(timezone.utc)


def _latest_tick(job: PeriodicJob, after: datetime, now: datetime) -> datetime | None:
    """The newest tick in (after, now], or None: the one a late scheduler enqueues."""
    latest = job.next_run(after)
    if latest is None or latest > now:
        return None
    # Bisect (after, now] in UTC with forward steps only: cronsim's reverse iteration can
    # return times after its start near a DST change, and a second taken off a zone's wall
    # clock can land in a DST gap, an hour later. Ticks lie in (low, high] past `latest`.
    low, high = latest, now
    while high - low >= timedelta(seconds=1):
        middle = low + (high - low) / 2
        tick = job.next_run(middle)
        if tick is not None and tick <= now:
            latest = low = tick
        else:
            high = middle
    tick = job.next_run(low)  # ticks are a minute apart or more: (low, high] holds one at most
    return tick if tick is not None and tick <= now else latest


@dataclasses.dataclass(frozen=True)
class Tick:
    """A tick a scheduler handled: `job_id` is the job it enqueued, None if another
    process (or a catch-up that skips missed ticks) had it first, or the schedule is
    disabled. `requested` marks a run an operator asked for (`tick` is when it was enqueued)."""

    name: str
    tick: datetime
    job_id: Any
    requested: bool = False


@dataclasses.dataclass(frozen=True)
class SchedulerSettings:
    """`create_scheduler`'s options, validated."""

    catch_up: bool = True
    polling_interval_ms: int = 1_000
    job_table: str = DEFAULT_JOB_TABLE
    archived_job_table: str = DEFAULT_ARCHIVED_JOB_TABLE
    serializer: Serializer = DEFAULT_SERIALIZER
    job_id_strategy: JobIdStrategy | None = None
    log: LogFn = default_log
    clock: Clock = utc_now
    job_type_style: JobTypeStyle = "plain"

    def __post_init__(self) -> None:
        check_job_type_style(self.job_type_style)
        if not isinstance(self.catch_up, bool):
            raise ConfigurationError(f"catch_up must be a bool, got {self.catch_up!r}")
        int_at_least(self.polling_interval_ms, "polling_interval_ms", 1)
        object.__setattr__(self, "serializer", check_serializer(self.serializer))
        check_id_strategy(self.job_id_strategy)
        check_clock(self.clock)
        check_log(self.log)


class Scheduler:
    """Enqueues the ticks of its periodic jobs; `start()` then `stop()`, like `QueueWorker`.

    Build it with `create_scheduler`. On start it records each schedule in the database
    and, with `catch_up` (the default), enqueues the newest tick missed while no process
    ran the schedule (one job, not one per missed tick). Then a thread wakes every
    `polling_interval_ms` and enqueues the ticks that have come; before the
    `schedule_controls` schema step it touches the database only when one is due, with it
    each pass also reads whether an operator asked for a run (one SELECT on the schedules'
    small table). A disabled schedule's ticks are passed over, not enqueued.
    """

    def __init__(
        self, data_source: DataSource, jobs: Sequence[PeriodicJob], settings: SchedulerSettings
    ) -> None:
        self.jobs = tuple(jobs)
        self.settings = settings
        self._connect = connection_factory(data_source)
        self._table = periodic_table(settings.job_table)
        self._last: dict[str, datetime] = {}
        self._next: dict[str, datetime | None] = {}
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._state = "new"
        self._lock = threading.Lock()
        self._controls = False  # whether the table has the schedule_controls step's columns

    def __repr__(self) -> str:
        return f"<Scheduler {len(self.jobs)} periodic job(s) {self._state}>"

    @property
    def state(self) -> str:
        """ "new", "running" or "stopped"."""
        return self._state

    def __enter__(self) -> Scheduler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # Lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        """Check the schema, record the schedules (catching up), and start the thread."""
        with self._lock:
            if self._state != "new":
                raise WorkerStateError(f"a scheduler starts once; this one is {self._state}")
            self.register()
            self._thread = threading.Thread(
                target=self._loop, name="proletarian-scheduler", daemon=True
            )
            self._state = "running"
            self._thread.start()

    def stop(self, timeout: float | None = 10.0) -> bool:
        """Stop the thread after the pass in hand; True when it ended within `timeout`."""
        with self._lock:
            if self._state == "new":
                self._state = "stopped"
            self._stopping.set()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():
                return False
        self._state = "stopped"
        return True

    def _loop(self) -> None:
        interval = self.settings.polling_interval_ms / 1000
        while not self._stopping.wait(interval):
            try:
                self.run_pending()
            except Exception as exc:
                safe_log(self.settings.log, "scheduler_error", {"exception": exc})

    # The work ----------------------------------------------------------------------

    def register(self) -> list[Tick]:
        """Record every schedule in the database; with `catch_up`, enqueue the newest tick
        each missed while no process ran it. A schedule whose expression or time zone
        changed starts afresh: its first tick is the next one after now, or after the
        recorded last tick if that is later (another process's clock may run ahead).
        Another spelling of the same expression is no change."""
        now = self.settings.clock()
        handled: list[Tick] = []
        with self._connect() as conn:
            dialect = dialect_for(conn, self.settings.job_table, self.settings.archived_job_table)
            check_schema(
                conn,
                self.settings.job_table,
                self.settings.archived_job_table,
                archive=False,
                needs="periodic_jobs",
            )
            columns = {c.lower() for c in dialect.table_columns(conn, self._table)}
            self._controls = set(CONTROL_COLUMNS) <= columns
            try:
                for job in self.jobs:
                    tick = self._register(dialect, conn, job, now)
                    if tick is not None:
                        handled.append(tick)
                    dialect.commit(conn)
            except BaseException:
                dialect.rollback(conn)
                raise
        return handled

    def _register(
        self, dialect: Dialect, conn: Connection, job: PeriodicJob, now: datetime
    ) -> Tick | None:
        encoded_now, job_type = dialect.encode_time(now), self._type(job)
        dialect.execute(
            conn,
            f"INSERT INTO {self._table} (name, cron, timezone, job_type, queue, last_tick, "
            f"updated_at) VALUES (%s, %s, %s, %s, %s, %s, %s) {dialect.unless_exists('name')}",
            (job.name, job.cron, job.timezone, job_type, job.queue, encoded_now, encoded_now),
        )
        paused = ", paused_at" if self._controls else ", NULL"
        cron, zone, last, paused_at = dialect.fetchone(
            conn,
            f"SELECT cron, timezone, last_tick{paused} FROM {self._table} "
            "WHERE name = %s FOR UPDATE",
            (job.name,),
        )
        last = dialect.decode_time(last)
        changed = zone != job.timezone or not job._reads_as(cron)
        missed = None if changed else _latest_tick(job, last, now)
        if changed:
            # Never back: a process whose clock runs ahead may have enqueued a tick after now.
            last = max(last, now)
        elif missed is not None:
            last = missed
        dialect.execute(
            conn,
            f"UPDATE {self._table} SET cron = %s, timezone = %s, job_type = %s, queue = %s, "
            "last_tick = %s, updated_at = %s WHERE name = %s",
            (
                job.cron,
                job.timezone,
                job_type,
                job.queue,
                dialect.encode_time(last),
                encoded_now,
                job.name,
            ),
        )
        self._seen(job, last)
        if changed:
            safe_log(self.settings.log, "periodic_changed", {"name": job.name, "cron": job.cron})
        if missed is None:
            return None
        enqueues = self.settings.catch_up and paused_at is None
        job_id = self._enqueue(conn, job) if enqueues else None
        if job_id is not None:
            self._record(dialect, conn, job.name, job_id, missed, requested=False)
        event = "periodic_caught_up" if enqueues else "periodic_missed"
        safe_log(self.settings.log, event, {"name": job.name, "tick": missed, "job_id": job_id})
        return Tick(job.name, missed, job_id)

    def run_pending(self) -> list[Tick]:
        """Enqueue every tick that has come since the last one seen, at most one per
        schedule (the newest); the ticks handled. The thread calls it; tests may too."""
        now = self.settings.clock()
        due = [
            (job, tick)
            for job in self.jobs
            if (upcoming := self._next.get(job.name)) is not None
            and upcoming <= now
            and (tick := _latest_tick(job, self._last[job.name], now)) is not None
        ]
        if not due and not self._controls:
            return []
        handled = []
        with self._connect() as conn:
            dialect = dialect_for(conn, self.settings.job_table, self.settings.archived_job_table)
            for job, tick in due:
                handled.append(self._enqueue_tick(dialect, conn, job, tick, now))
            if self._controls:
                handled.extend(self._run_requested(dialect, conn, now))
        return handled

    def _run_requested(self, dialect: Dialect, conn: Connection, now: datetime) -> list[Tick]:
        """Enqueue the runs operators asked for: each by the one process whose UPDATE
        clears the request, in the same transaction (a disabled schedule's too)."""
        try:
            rows = dialect.fetchall(
                conn, f"SELECT name FROM {self._table} WHERE run_requested_at IS NOT NULL"
            )
            dialect.commit(conn)
        except BaseException:
            dialect.rollback(conn)
            raise
        asked = {name for (name,) in rows}
        handled = []
        for job in self.jobs:
            if job.name not in asked:
                continue
            job_id = self._enqueue_if_won(
                dialect,
                conn,
                job,
                f"UPDATE {self._table} SET run_requested_at = NULL, updated_at = %s "
                "WHERE name = %s AND run_requested_at IS NOT NULL",
                (dialect.encode_time(now), job.name),
                now,
                requested=True,
            )
            if job_id is not None:
                safe_log(
                    self.settings.log,
                    "periodic_run_requested",
                    {"name": job.name, "job_id": job_id},
                )
                handled.append(Tick(job.name, now, job_id, requested=True))
        return handled

    def _enqueue_if_won(
        self,
        dialect: Dialect,
        conn: Connection,
        job: PeriodicJob,
        update: str,
        params: Sequence[Any],
        at: datetime,
        *,
        requested: bool,
    ) -> Any:
        """In one transaction, committed here: the conditional `update` of the schedule's row
        and, if it changed the row (this process won), the job enqueued and recorded. The
        job's id, or None when another process won (or the condition did not hold)."""
        try:
            won = dialect.execute_count(conn, update, params)
            job_id = self._enqueue(conn, job) if won else None
            if job_id is not None:
                self._record(dialect, conn, job.name, job_id, at, requested=requested)
            dialect.commit(conn)
        except BaseException:
            dialect.rollback(conn)
            raise
        return job_id

    def _record(
        self,
        dialect: Dialect,
        conn: Connection,
        name: str,
        job_id: Any,
        tick: datetime,
        *,
        requested: bool,
    ) -> None:
        """Add the job to the newest ones the schedule's row records (its row is locked
        by this transaction's UPDATE, so no other process records at the same time)."""
        if not self._controls:
            return
        (stored,) = dialect.fetchone(
            conn, f"SELECT recent_runs FROM {self._table} WHERE name = %s", (name,)
        )
        runs = [{"job_id": str(job_id), "tick": tick.isoformat(), "requested": requested}]
        runs.extend(_stored_runs(stored)[: KEPT_RUNS - 1])
        dialect.execute(
            conn,
            f"UPDATE {self._table} SET recent_runs = %s WHERE name = %s",
            (json.dumps(runs), name),
        )

    def _seen(self, job: PeriodicJob, tick: datetime) -> None:
        """The newest tick of `job` handled (by any process), and so its next one: until that
        comes, a pass compares two times and evaluates no cron expression."""
        self._last[job.name] = tick
        self._next[job.name] = job.next_run(tick)

    def _enqueue_tick(
        self, dialect: Dialect, conn: Connection, job: PeriodicJob, tick: datetime, now: datetime
    ) -> Tick:
        enabled = " AND paused_at IS NULL" if self._controls else ""
        job_id = self._enqueue_if_won(
            dialect,
            conn,
            job,
            f"UPDATE {self._table} SET last_tick = %s, updated_at = %s "
            f"WHERE name = %s AND last_tick < %s{enabled}",
            (
                dialect.encode_time(tick),
                dialect.encode_time(now),
                job.name,
                dialect.encode_time(tick),
            ),
            tick,
            requested=False,
        )
        self._seen(job, tick)
        if job_id is not None:
            safe_log(
                self.settings.log,
                "periodic_enqueued",
                {"name": job.name, "tick": tick, "job_id": job_id},
            )
        return Tick(job.name, tick, job_id)

    def _type(self, job: PeriodicJob) -> str:
        """The job type its rows (and the schedules' table) hold."""
        return job.stored_job_type(self.settings.job_type_style)

    def _enqueue(self, conn: Connection, job: PeriodicJob) -> Any:
        s = self.settings
        return enqueue(
            conn,
            self._type(job),
            job.payload,
            queue=job.queue,
            job_table=s.job_table,
            serializer=s.serializer,
            job_id_strategy=s.job_id_strategy,
            clock=s.clock,
        )

    def next_runs(self) -> dict[str, datetime | None]:
        """Each schedule's next tick after the newest one this process has seen (or now)."""
        now = self.settings.clock()
        return {
            job.name: job.next_run(max(self._last.get(job.name, now), now)) for job in self.jobs
        }


def create_scheduler(
    data_source: DataSource, periodic_jobs: Iterable[PeriodicJob], **options: Any
) -> Scheduler:
    """A `Scheduler` for `periodic_jobs` on `data_source` (a pool or a connection factory).

    Options: `catch_up` (True: on start, enqueue the newest tick missed while no process
    ran a schedule; False: pass over them), `polling_interval_ms` (1,000: how often the
    thread looks for due ticks), `job_table`, `archived_job_table`, `serializer` (an object,
    or "json" or "transit"), `job_id_strategy`, `log`, `clock`, `job_type_style` (for the
    periodic jobs that give none). Names must be unique, every job type must be one of its
    style, and every payload must serialize: all are checked here.
    """
    options = with_storage_defaults(options, "the periodic scheduler")
    settings = validated(SchedulerSettings, "scheduler", options)
    jobs = list(periodic_jobs) if not isinstance(periodic_jobs, PeriodicJob) else [periodic_jobs]
    names: set[str] = set()
    for job in jobs:
        if not isinstance(job, PeriodicJob):
            raise ConfigurationError(f"periodic_jobs must hold PeriodicJob objects, got {job!r}")
        job._check()
        job.stored_job_type(settings.job_type_style)
        if job.name in names:
            raise ConfigurationError(f"two periodic jobs are named {job.name!r}; names are unique")
        names.add(job.name)
        try:
            settings.serializer.encode(job.payload)
        except Exception as exc:
            raise PayloadError(
                f"periodic job {job.name!r}: its payload cannot be serialized: {describe(exc)}"
            ) from exc
    return Scheduler(data_source, jobs, settings)


# Listing -----------------------------------------------------------------------------------


def next_tick(cron: str, zone: str, after: datetime) -> datetime | None:
    """The first tick of a recorded expression after `after`; None if it has no more, or
    is not one this version reads."""
    try:
        return next(_ticks(_expression(cron, "schedule"), zone, after), None)
    except ConfigurationError:
        return None


def _stored_runs(stored: Any) -> list[dict[str, Any]]:
    """The `recent_runs` a row holds, newest first ([] for none or unreadable)."""
    if not stored:
        return []
    try:
        runs = json.loads(stored)
    except ValueError:
        return []
    return [r for r in runs if isinstance(r, dict)] if isinstance(runs, list) else []


@dataclasses.dataclass(frozen=True)
class Run:
    """A job a schedule enqueued: for a tick, or (`requested`) for an operator's request,
    with the job's state now (`None`: no such job any more, pruned from the archive)."""

    job_id: str
    tick: datetime
    requested: bool
    state: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "tick": self.tick.isoformat(),
            "requested": self.requested,
            "state": self.state,
        }


@dataclasses.dataclass(frozen=True)
class Schedule:
    """A schedule as the database records it, with its next run. `paused_at` is when it was
    disabled (None: enabled), `run_requested_at` when an operator asked for a run that no
    scheduler has enqueued yet, `runs` the newest jobs it enqueued (newest first); all three
    are empty on a schema without the `schedule_controls` step."""

    name: str
    cron: str
    timezone: str
    job_type: str
    queue: str
    last_tick: datetime
    next_run: datetime | None
    updated_at: datetime
    paused_at: datetime | None = None
    run_requested_at: datetime | None = None
    runs: tuple[Run, ...] = ()

    @property
    def enabled(self) -> bool:
        """Whether its ticks are enqueued (no operator disabled it)."""
        return self.paused_at is None

    @property
    def last_run(self) -> datetime | None:
        """The newest tick handled, or None if none has come since the schedule was recorded
        (or its expression changed): until then `last_tick` holds the time it was recorded,
        which is not a tick of its expression, so that only the ticks after it are due."""
        last = self.last_tick
        ran = next_tick(self.cron, self.timezone, last - timedelta(microseconds=1)) == last
        return last if ran else None

    def as_dict(self) -> dict[str, Any]:
        """The fields for JSON, times as ISO 8601 strings; `last_run` is null until a tick came."""
        data = dataclasses.asdict(self)
        data["last_run"] = self.last_run
        data["enabled"] = self.enabled
        data["runs"] = [run.as_dict() for run in self.runs]
        for name in (
            "last_tick",
            "last_run",
            "next_run",
            "updated_at",
            "paused_at",
            "run_requested_at",
        ):
            data[name] = data[name] and data[name].isoformat()
        return data

"""Live workers: each running `QueueWorker` keeps one row in `<job table>_workers` (see
`schema.workers_table`) saying who it is (host, pid, queue, threads), since when, and what
each of its threads does now (the job a busy one runs, and for how long).

The worker's `start()` writes the row before its threads start; a thread of its own
(`Registration`) refreshes it every `BEAT_S` from the in-memory state of its slots, and
deletes it once the worker has stopped: one UPDATE of one row per beat, whatever the number
of jobs, on a connection of its own with short timeouts (never one the worker threads
need). A process that dies leaves its row behind, whose `seen_at` stops moving: readers
call it stale after `STALE_AFTER_S` by the database's clock, and any worker's beat deletes
it after `PRUNE_AFTER_S`. A beat that fails (the database down, the table missing on an
older schema) is logged, once per run of failures, and the jobs go on: the registry is for
the eyes only.

Times are the database's (`seen_at`, `started_at`); a thread's time in what it does is sent
as seconds as of the beat (`for_s`), so hosts whose clocks disagree still show true durations.

The beat also sums up the archive's hours for the overview (`_outcomes.sum_up`): an hour per
beat while some of the last day's are missing, then none until the next hour is over (a
minute's jitter apart between workers), and not at all on a schema without the table. It
counts a summed hour again once its last check is `RECHECK_AFTER` old (`_outcomes.recheck`),
an hour per beat while some are due, so that sums a change behind the workers' back made
wrong (a backfill, a restore, a DELETE by hand) are put right without an operator.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

from .._common.logging import describe
from .._store.datasource import connection_factory
from .._store.dialects import Dialect
from .._store.outcomes import HOUR, RECHECK_AFTER, SUM_UP_AFTER, recheck, sum_up
from .._store.probes import bound_statements, probe_connector
from .._store.tables import UPGRADE_HINT
from ..errors import ConfigurationError
from ..jobs import progress_value
from .attempts import unique_name
from .rates import RateLimit
from .slot import Slot

T = TypeVar("T")

BEAT_S = 5.0
"""How often a worker refreshes its row."""
STALE_AFTER_S = 20.0
"""A row not refreshed for this long (three missed beats and some) belongs to a worker that
is gone: killed, frozen or cut off from the database."""
PRUNE_AFTER_S = 900.0
"""A stale row is deleted by the next beat of any worker once it is this old."""
PRUNE_EVERY = 12
"""Beats between two prunes of a worker (one a minute), besides its first."""
TIMEOUT_S = 3.0
"""The registry connection's connect, statement and socket timeout."""
CHORE_EVERY_S = 1.0
"""How often the registry thread runs its chore while it has work (`Registration.chore`)."""
PROGRESS_EVERY_S = 1.0
"""A job's reported progress is written by an early beat, at most one per this many
seconds: many reports in a row cost one UPDATE."""


def new_worker_id() -> str:
    """A name for one running worker: its host and process, and 64 random bits."""
    return unique_name()


def thread_activity(name: str, slot: Slot, now: float) -> dict[str, Any]:
    """One worker thread as the registry stores it: its name, what it does and for how many
    seconds, and, when it runs a job, the job's id, type and attempt."""
    entry: dict[str, Any] = {
        "thread": name,
        "activity": slot.activity,
        "for_s": round(max(0.0, now - slot.since), 3),
    }
    job = slot.job
    if job is not None and slot.activity == "running":
        entry.update(job_id=str(job.job_id), job_type=job.job_type, attempt=job.attempts)
        if slot.progress is not None:
            entry["progress"] = slot.progress
    return entry


class Registration(threading.Thread):
    """The thread that keeps one worker's row: written at once, refreshed every `every_s`
    until `done` is set, then deleted."""

    def __init__(
        self,
        data_source: Any,
        dialect: Callable[[Any], Dialect],
        table: str,
        identity: dict[str, Any],
        activity: Callable[[], list[dict[str, Any]]],
        state: Callable[[], str],
        done: threading.Event,
        emit: Callable[..., None],
        name: str,
    ) -> None:
        self.dialect, self.table, self.identity = dialect, table, identity
        self.activity, self.state, self.done, self.emit = activity, state, done, emit
        self.every_s = BEAT_S
        self._direct = probe_connector(data_source, TIMEOUT_S)
        self._pooled = connection_factory(data_source) if self._direct is None else None
        self._conn: Any = None
        self.beats = 0
        self._failing: str | None = None
        self._lock = threading.Lock()
        """One beat at a time: `start()`'s first one and the thread's."""
        self._left = False
        self._summing_failed: str | None = None
        """The last failure to sum up an hour, logged once (the registry's row goes on)."""
        self._sums_up_at = time.monotonic() + self.every_s
        """When (`time.monotonic()`) the beat looks for an hour to sum up next: not in the
        first beat, which `start()` waits for."""
        self._rechecks_at = self._sums_up_at
        """When the beat looks for a summed hour to count again next (`recheck`)."""
        self._beaten = time.monotonic()
        self.chore: Callable[[Any, Dialect], bool] | None = None
        """Run on the registry's connection besides the beat: the worker's watch over jobs
        that wait on others (`Steps.watch_dependencies`). Every `CHORE_EVERY_S` while it
        returns True (it has work), else once a beat."""
        self.prune_rates: Callable[[Any, Dialect], object] | None = None
        """Run with the prune of stale rows (a minute apart, and at the first beat): the
        idle group keys' rate slots (`RateGate.prune`)."""
        self._chored = time.monotonic()
        self._chore_busy = False
        self._chore_failing: str | None = None
        self._wake = threading.Event()
        """Set by `wake()`: a job reported progress, or the worker stopped."""
        super().__init__(name=name, daemon=True)

    def run(self) -> None:
        try:
            while True:
                until = self._beaten + self.every_s
                if self.chore is not None:
                    until = min(until, self._chore_due())
                self._wake.wait(max(0.0, until - time.monotonic()))
                if self.done.is_set():
                    break
                if self._wake.is_set():  # progress: written once PROGRESS_EVERY_S has passed
                    self._wake.clear()
                    if self.done.wait(self._beaten + PROGRESS_EVERY_S - time.monotonic()):
                        break
                    self.beat()
                elif time.monotonic() >= self._beaten + self.every_s:
                    self.beat()
                if time.monotonic() >= self._chore_due():
                    self.run_chore()
        finally:
            self.leave()

    def wake(self) -> None:
        """Beat early: a job reported progress (written within `PROGRESS_EVERY_S` of the last
        beat), or the worker has stopped (`done` is set: leave now)."""
        self._wake.set()

    def beat(self) -> None:
        """Refresh the row (write it, if it is not there), and now and then prune dead ones;
        nothing once the worker has left. The worker's `start()` runs the first beat, so
        that a worker is listed before it runs a job."""
        with self._lock:
            if not self._left:
                self._beaten = time.monotonic()
                self._beat()

    def _chore_due(self) -> float:
        return self._chored + (CHORE_EVERY_S if self._chore_busy else self.every_s)

    def run_chore(self) -> None:
        """Run the chore, if any; a failure is logged once per run of failures, and the beat
        goes on. The worker's `start()` runs the first one."""
        chore = self.chore
        with self._lock:
            if self._left or chore is None:
                return
            self._chored = time.monotonic()
            try:
                with self._connection() as (conn, dialect):
                    self._chore_busy = chore(conn, dialect)
                    self._commit(conn)
            except Exception as exc:
                with contextlib.suppress(Exception):
                    if self._conn is not None:
                        self._conn.rollback()
                reason = f"watching jobs that wait on others: {describe(exc)}"
                if reason != self._chore_failing:
                    self._chore_failing = reason
                    self.emit("registry_error", exception=exc, table=self.table, reason=reason)
                return
            self._chore_failing = None

    def _entries(self) -> list[dict[str, Any]]:
        """The threads' entries for the row's `activity`, each with the worker's options that
        hold jobs back (`max_running`, `rate_limit`, `fair`) when it has them: in the entries,
        so that the row keeps the shape older readers parse."""
        entries = self.activity()
        options = _options(self.identity)
        return [{**entry, **options} for entry in entries] if options else entries

    def _beat(self) -> None:
        row = json.dumps(self._entries(), separators=(",", ":"))
        try:
            with self._connection() as (conn, dialect):
                params = (self.state(), row, self.identity["worker_id"])
                sql = (
                    f"UPDATE {self.table} SET seen_at = {dialect.db_now}, state = %s, "
                    "activity = %s WHERE worker_id = %s"
                )
                if not dialect.execute_count(conn, sql, params):
                    self._insert(conn, dialect, params[0], row)
                self._commit(conn)
                if self.beats % PRUNE_EVERY == 0:  # a statement of its own: brief locks
                    prune(conn, dialect, self.table, PRUNE_AFTER_S)
                    self._commit(conn)
                    if self.prune_rates is not None:
                        self.prune_rates(conn, dialect)
                        self._commit(conn)
                if time.monotonic() >= self._sums_up_at:
                    self._sum_up(conn, dialect)
                if time.monotonic() >= self._rechecks_at:
                    self._recheck(conn, dialect)
        except Exception as exc:
            self._failed(exc)
            return
        self.beats += 1
        if self._failing is not None:
            self._failing = None
            self.emit("registry_restored")

    def _sum_up(self, conn: Any, dialect: Dialect) -> None:
        """Sum up an hour of the archive, if one is missing; else wait for the next one to be
        over (and on a schema without the outcomes table, an hour before looking again)."""
        now = datetime.now(timezone.utc)
        summed = self._on_sums(
            conn,
            dialect,
            lambda: (
                sum_up(conn, dialect, now)
                if dialect.table_columns(conn, dialect.outcomes_table)
                else None
            ),
        )
        if summed is None:
            next_hour = now.replace(minute=0, second=0, microsecond=0) + HOUR + SUM_UP_AFTER
            wait_s = (next_hour - now).total_seconds() + random.uniform(0, 60)
            self._sums_up_at = time.monotonic() + wait_s

    def _recheck(self, conn: Any, dialect: Dialect) -> None:
        """Count a summed hour again if its check is due, then the next at the next beat while
        more are due; else wait for the next to fall due (`RECHECK_AFTER` where none can)."""
        now = datetime.now(timezone.utc)
        due = self._on_sums(conn, dialect, lambda: recheck(conn, dialect, now))
        wait_s = (RECHECK_AFTER if due is None else due - now).total_seconds()
        if wait_s > 0:
            self._rechecks_at = time.monotonic() + wait_s + random.uniform(0, 60)

    def _on_sums(self, conn: Any, dialect: Dialect, work: Callable[[], T]) -> T | None:
        """Work on the hourly sums, committed; a failure is rolled back and logged once per
        run of failures, and the beat goes on (a role without the grants, say)."""
        try:
            done = work()
            self._commit(conn)
        except Exception as exc:
            with contextlib.suppress(Exception):
                conn.rollback()
            reason = f"summing up the archive's hours: {describe(exc)}"
            if reason != self._summing_failed:
                self._summing_failed = reason
                self.emit(
                    "registry_error", exception=exc, table=dialect.outcomes_table, reason=reason
                )
            return None
        self._summing_failed = None
        return done

    def _insert(self, conn: Any, dialect: Dialect, state: str, row: str) -> None:
        who = self.identity
        dialect.execute(
            conn,
            f"INSERT INTO {self.table} (worker_id, queue, queue_worker_id, host, pid, threads, "
            f"state, started_at, seen_at, activity) VALUES (%s, %s, %s, %s, %s, %s, %s, "
            f"{dialect.db_now}, {dialect.db_now}, %s)",
            (
                who["worker_id"],
                who["queue"],
                who["queue_worker_id"],
                who["host"],
                who["pid"],
                who["threads"],
                state,
                row,
            ),
        )

    def leave(self) -> None:
        """Delete the row and close the connection: the worker has stopped."""
        with self._lock:
            self._left = True
            self._leave()
            self._close()

    def _leave(self) -> None:
        try:
            with self._connection() as (conn, dialect):
                sql = f"DELETE FROM {self.table} WHERE worker_id = %s"
                dialect.execute(conn, sql, (self.identity["worker_id"],))
                self._commit(conn)
        except Exception as exc:
            self._failed(exc)

    def _failed(self, exc: Exception) -> None:
        """Log a failure, unless it repeats the one logged last (a long outage logs once);
        the connection is kept if it still answers (a missing table, say)."""
        reason = describe(exc)
        if self._conn is not None:
            try:
                self._conn.rollback()
                if not self.dialect(self._conn).table_columns(self._conn, self.table):
                    reason = f"there is no {self.table} table: {UPGRADE_HINT}"
            except Exception:
                self._close()
        if reason != self._failing:
            self._failing = reason
            self.emit("registry_error", exception=exc, table=self.table, reason=reason)

    @contextlib.contextmanager
    def _connection(self) -> Iterator[tuple[Any, Dialect]]:
        """The registry's own connection, in autocommit mode (opened again after a failure),
        or, where the data source gives no way to open one, one of its pool's for the beat
        only."""
        if self._pooled is not None:
            with self._pooled() as conn:
                try:
                    yield conn, self.dialect(conn)
                except BaseException:
                    with contextlib.suppress(Exception):
                        conn.rollback()
                    raise
            return
        if self._conn is None:
            assert self._direct is not None
            conn = self._direct()
            try:
                self.dialect(conn).set_autocommit(conn)  # the timeouts hold for the session
                bound_statements(conn, TIMEOUT_S)
            except BaseException:
                with contextlib.suppress(Exception):
                    conn.close()
                raise
            self._conn = conn
        yield self._conn, self.dialect(self._conn)

    def _commit(self, conn: Any) -> None:
        """Commit a pool's connection; the registry's own commits each statement by itself
        (no COMMIT round trip)."""
        if self._pooled is not None:
            conn.commit()

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()


def prune(conn: Any, dialect: Dialect, table: str, older_than_s: float) -> int:
    """Delete the rows of workers not seen for `older_than_s` seconds; how many."""
    # lease_end is the database's clock plus its parameter: here, minus the age
    sql = f"DELETE FROM {table} WHERE seen_at < {dialect.lease_end}"
    return dialect.execute_count(conn, sql, (dialect.lease_seconds(-round(older_than_s * 1000)),))


# Reading the registry (admin.list_workers) -------------------------------------------------


@dataclasses.dataclass(frozen=True)
class WorkerThread:
    """One thread of a live worker, as its last beat saw it: what it does ("connecting",
    "polling", "idle", "running" a job, "backing_off"), since when (`since`, the database's
    clock) and for how long as of the read (`duration`); the job it runs, when it runs one."""

    name: str
    activity: str
    since: datetime
    duration: timedelta
    job_id: uuid.UUID | None = None
    job_type: str | None = None
    attempt: int | None = None
    progress: Any = None
    """What the job last reported with `Job.report_progress` (a float or a JSON object)."""


@dataclasses.dataclass(frozen=True)
class WorkerInfo:
    """One worker process's `QueueWorker`, from its row among the live workers.

    `state` is "running" or "stopping" (draining), or "stale" when its row has not been
    refreshed for longer than the staleness bound: its process is gone (killed, frozen, or
    cut off from the database). `worker_threads` is what it was started with, `threads`
    what its live threads do (as of `last_seen`); times are aware UTC datetimes.
    """

    worker_id: str
    queue_worker_id: str
    queues: tuple[str, ...]
    host: str
    pid: int
    state: str
    worker_threads: int
    threads: tuple[WorkerThread, ...]
    started_at: datetime
    last_seen: datetime
    seen_ago: timedelta
    """How long before the read its row was last refreshed."""
    max_running: int | None = None
    """Its `max_running` (None: none, or a worker too old to record it)."""
    rate_limit: RateLimit | None = None
    """Its `rate_limit` (None: none, or a worker too old to record it)."""
    fair: bool = False
    """Whether it takes turns across group keys (`fair=True`)."""

    @property
    def busy(self) -> int:
        """How many of its threads run a job."""
        return sum(1 for thread in self.threads if thread.job_id is not None)

    @property
    def running_job_ids(self) -> tuple[uuid.UUID, ...]:
        """The jobs its threads run."""
        return tuple(t.job_id for t in self.threads if t.job_id is not None)

    def as_dict(self) -> dict[str, Any]:
        """The fields for JSON: times as ISO 8601, durations in seconds, ids as strings."""
        return {
            **{f.name: getattr(self, f.name) for f in dataclasses.fields(self)},
            "queues": list(self.queues),
            "rate_limit": self.rate_limit and dataclasses.asdict(self.rate_limit),
            "started_at": self.started_at.isoformat(),
            "last_seen": self.last_seen.isoformat(),
            "seen_ago": round(self.seen_ago.total_seconds(), 3),
            "busy": self.busy,
            "threads": [
                {
                    "name": t.name,
                    "activity": t.activity,
                    "since": t.since.isoformat(),
                    "seconds": round(t.duration.total_seconds(), 3),
                    "job_id": t.job_id and str(t.job_id),
                    "job_type": t.job_type,
                    "attempt": t.attempt,
                }
                for t in self.threads
            ],
        }


_COLUMNS = "worker_id, queue_worker_id, queue, host, pid, state, threads, started_at, seen_at"


def read_workers(
    conn: Any,
    dialect: Dialect,
    table: str,
    queue: str | Sequence[str] | None,
    stale_after: timedelta,
) -> list[WorkerInfo]:
    """The workers registered in `table` (of `queue`, or of these queues), by queue, host,
    pid and start."""
    queues = (queue,) if isinstance(queue, str) else tuple(queue or ())
    where, params = "", queues
    if queue is not None:
        where = f"WHERE queue IN ({', '.join(['%s'] * len(queues))})" if queues else "WHERE 1 = 0"
    rows = dialect.fetchall(
        conn,
        f"SELECT {_COLUMNS}, activity, {dialect.db_now} FROM {table} {where} "
        "ORDER BY queue, host, pid, started_at, worker_id",
        params,
    )
    workers = []
    for row in rows:
        worker_id, name, queue_, host, pid, state, threads, started, seen, activity, now = row
        started, seen, now = (dialect.decode_time(t) for t in (started, seen, now))
        ago = max(timedelta(0), now - seen)
        entries = _entries(activity)
        workers.append(
            WorkerInfo(
                worker_id=worker_id,
                queue_worker_id=name,
                queues=(queue_,),
                host=host,
                pid=int(pid),
                state="stale" if ago > stale_after else state,
                worker_threads=int(threads),
                threads=_threads(entries, seen, now),
                started_at=started,
                last_seen=seen,
                seen_ago=ago,
                max_running=_max_running(entries),
                rate_limit=_rate_limit(entries),
                fair=any(isinstance(e, dict) and e.get("fair") is True for e in entries),
            )
        )
    return workers


def _entries(text: Any) -> list[Any]:
    """A row's `activity` JSON: a list of entries, one per thread ([] if it cannot be read:
    not JSON, not a list, or nested too deep to parse)."""
    try:
        entries = json.loads(text)
    except (ValueError, TypeError, RecursionError):
        return []
    return entries if isinstance(entries, list) else []


def _options(identity: dict[str, Any]) -> dict[str, Any]:
    """A worker's options that explain what holds its jobs back, as its entries carry them."""
    options: dict[str, Any] = {}
    if identity.get("max_running") is not None:
        options["max_running"] = identity["max_running"]
    rate = identity.get("rate_limit")
    if rate is not None:
        options["rate_limit"] = [rate.limit, rate.period_ms, rate.by]
    if identity.get("fair"):
        options["fair"] = True
    return options


MAX_RUNNING_READ = 100_000
"""The largest `max_running` a row is believed: a larger one (a row written by hand) reads
as none, so that no reader asks the database about more slots than a worker could take."""


def _whole(value: Any, least: int, most: int | None = None) -> int | None:
    """`value` if it is a whole number (not a bool) from `least` to `most`, else None."""
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        return None
    return value if most is None or value <= most else None


def _max_running(entries: list[Any]) -> int | None:
    """The worker's `max_running`, as its entries carry it (None: none recorded)."""
    for entry in entries:
        if isinstance(entry, dict):
            cap = _whole(entry.get("max_running"), 1, MAX_RUNNING_READ)
            if cap is not None:
                return cap
    return None


def _rate_limit(entries: list[Any]) -> RateLimit | None:
    """The worker's `rate_limit`, as its entries carry it (None: none, or not readable)."""
    for entry in entries:
        rate = entry.get("rate_limit") if isinstance(entry, dict) else None
        if isinstance(rate, list) and len(rate) == 3:
            limit, period_ms = _whole(rate[0], 1), _whole(rate[1], 1)
            if limit is None or period_ms is None:
                return None
            try:
                return RateLimit(limit, period_ms, rate[2])
            except ConfigurationError:
                return None
    return None


def _threads(entries: list[Any], seen: datetime, now: datetime) -> tuple[WorkerThread, ...]:
    """The threads a row's `activity` entries describe. An entry without a thread name, an
    activity and a finite, non-negative `for_s` that dates it is dropped (a row written by
    hand, say); an optional field of the wrong kind (job id, type, attempt, progress) reads
    as None."""
    threads = []
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        name, activity, since = entry.get("thread"), entry.get("activity"), _since(entry, seen)
        if not isinstance(name, str) or not isinstance(activity, str) or since is None:
            continue
        job_type = entry.get("job_type")
        threads.append(
            WorkerThread(
                name=name,
                activity=activity,
                since=since,
                duration=max(timedelta(0), now - since),
                job_id=_uuid(entry.get("job_id")),
                job_type=job_type if isinstance(job_type, str) else None,
                attempt=_whole(entry.get("attempt"), 0),
                progress=_progress(entry.get("progress")),
            )
        )
    return tuple(threads)


def _since(entry: dict[str, Any], seen: datetime) -> datetime | None:
    """When the thread began what it does: `for_s` seconds before the beat `seen`, or None
    if `for_s` is not a finite, non-negative number that dates it."""
    seconds = entry.get("for_s")
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool):
        return None
    if not math.isfinite(seconds) or seconds < 0:
        return None
    try:
        return seen - timedelta(seconds=seconds)
    except OverflowError:
        return None


def _uuid(value: Any) -> uuid.UUID | None:
    """A job id as an entry writes it, or None if it is not one."""
    if not isinstance(value, str):
        return None
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


def _progress(value: Any) -> Any:
    """A progress as `Job.report_progress` stores it, or None if it is not one."""
    if value is None:
        return None
    try:
        return progress_value(value)
    except (ConfigurationError, RecursionError):
        return None

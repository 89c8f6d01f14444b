"""The steps every mode shares: decode a claimed job, run its handler, decide what its
failure means (a retry or the failure archive), and write an attempt that ended outside
its run (a timeout, an abandonment at `stop()`, a callback that ended the transaction).

The two modes are paths over these steps: `_held` (the job's transaction holds its row
while it runs, Proletarian's own model) and `_leased` (the job runs under a lease, with no
transaction open). Every user callback that gets the job's connection (an advanced-mode
handler, `retry_strategy_fn`, `failed_job_fn`) runs under a savepoint: whatever it leaves
behind, its own writes are undone if it failed, and the job's bookkeeping still commits, so
every attempt is counted and no job loops.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from .._common.logging import default_log, describe, error_text, safe_log, wanted
from .._common.types import Handler, LogFn
from .._store import dependencies as _dependencies
from .._store.dialects import Dialect, JobRow, LeasedRow, TransactionLost, dialect_for
from .._store.dialects.base import running_slots
from ..errors import (
    ArgumentTypeError,
    InvalidRetrySpec,
    JobAbandoned,
    JobTimedOut,
    PayloadError,
    TransactionAborted,
)
from ..jobs import Cancel, Job, Signal, Snooze, running
from ..observers import Observer, notify
from ..retry import to_retry_spec
from .attempts import worker_name
from .coroutines import EventLoops, is_awaitable
from .crashes import ClaimCounter
from .fair import FairTurns
from .frontier import Frontier
from .leases import Leases
from .options import WorkerSettings
from .pauses import PauseWatch
from .rates import RateGate
from .slot import Slot

if TYPE_CHECKING:
    pass

_LOCK_POLL = 0.05

MAX_RESULT_BYTES = 64 * 1024
"""The largest return value a job keeps, as JSON in UTF-8 bytes (`admin.get_result`)."""


class Stats:
    """Counts of job outcomes, safe to update from many threads; each count is told to the
    worker's observers."""

    def __init__(self, observers: Sequence[Observer] = (), log: LogFn = default_log) -> None:
        self._lock = threading.Lock()
        self.succeeded = self.failed = self.retried = self.abandoned = self.timed_out = 0
        self.snoozed = self.cancelled = 0
        self.observers, self.log = list(observers), log

    def add(self, outcome: str, job: Job) -> None:
        with self._lock:
            setattr(self, outcome, getattr(self, outcome) + 1)
        if self.observers:
            notify(self.observers, self.log, "job_counted", job, outcome)

    def as_dict(self) -> dict[str, int]:
        with self._lock:
            return {
                "succeeded": self.succeeded,
                "failed": self.failed,
                "retried": self.retried,
                "abandoned": self.abandoned,
                "timed_out": self.timed_out,
                "snoozed": self.snoozed,
                "cancelled": self.cancelled,
            }


ASYNC_GRACE_S = 1.0
"""How long past its timeout an async handler gets to end after being cancelled, before the
worker gives up on its thread as on a sync handler's."""


MAX_ABANDONMENTS = 3
"""The abandonments at `stop()` in a row after which a job ends in the failure archive."""
_ABANDONMENT = re.compile(r"^JobAbandoned: .*\(abandonment (\d+) of \d+\)$", re.MULTILINE)


def abandonments(last_error: str | None) -> int:
    """How many times in a row `stop()` abandoned the job, read from its last error."""
    found = None if last_error is None else _ABANDONMENT.match(last_error)
    return 0 if found is None else int(found.group(1))


LOST_WAIT_S = 5.0
"""How long the attempt of a job whose connection a callback closed waits for its row: the
server rolls the closed connection's transaction back shortly."""


def _raise_if_closed(dialect: Dialect, conn: Any, what: str) -> None:
    if dialect.is_closed(conn):
        raise TransactionLost(f"{what} closed the job's connection")


def _interrupts(exc: BaseException) -> bool:
    """Ctrl-C or sys.exit() in the main thread (process_next_job, run_due_jobs) stops the
    caller; in a worker thread only a handler can raise them, and they fail its job."""
    return (
        isinstance(exc, (KeyboardInterrupt, SystemExit))
        and threading.current_thread() is threading.main_thread()
    )


def _no_connection() -> contextlib.AbstractContextManager[Any]:
    raise TransactionAborted("no connection to record the attempt on: the job runs again")


class Steps:
    """What a runner of one queue's jobs does to any job, whatever the mode."""

    def __init__(
        self,
        handler: Handler,
        options: WorkerSettings,
        stats: Stats | None = None,
        frontier: Frontier | None = None,
        pauses: PauseWatch | None = None,
        on_claim: Callable[[], None] = lambda: None,
    ):
        if not callable(handler):
            raise ArgumentTypeError(f"handler must be callable, got {handler!r}")
        self.handler = handler
        self.options = options
        self.stats = stats or Stats(options.observers, options.log)
        self.advanced = options.handler_fn_mode == "advanced"
        self.log = options.log
        self.clock = options.clock
        self.serializer = options.serializer
        self.base = {"queue_worker_id": options.queue_worker_id}
        self.loops = EventLoops()
        self.frontier = frontier
        self.pauses = pauses or PauseWatch(options.queue, 0.0)
        self.on_claim = on_claim
        """Called when a claim found jobs, before they run (a worker wakes an idle thread)."""
        self.running_slots = (
            None
            if options.max_running is None
            else running_slots(options.job_table, options.queue, options.max_running)
        )
        self.on_reschedule: Callable[[datetime, int], None] = lambda at, priority: None
        """Called with the time a retried job falls due and its priority (an idle worker
        wakes then, and claims from that priority)."""
        self.leases: Leases | None = None
        """Lease mode: the leases the worker's heartbeat renews."""
        self.claims: ClaimCounter | None = None
        """`max_crashes`: where each claim is counted before its job runs."""
        self.rates = (
            None
            if options.rate_limit is None
            else RateGate(options.rate_limit, options.queue, options.polling_interval_ms / 1000)
        )
        """`rate_limit`: where each claim takes its start's slot."""
        if self.rates is not None:
            self.rates.connect = lambda: self.recording_connection()
            self.rates.dialect_of = self.dialect
        self.fair = (
            FairTurns(options.queue, max(0.05, options.polling_interval_ms / 1000))
            if options.fair
            else None
        )
        """`fair`: the worker's turn across the queue's group keys."""
        self.graph_active: bool | None = None
        """Whether some job waits on others, so that jobs' ends are written for them (None:
        not known yet). A worker's registry thread reads it again every
        `_dependencies.SWEEP_EVERY_S` (`watch_dependencies`); without it, every job does."""
        self.watched = False
        """Whether `watch_dependencies` keeps `graph_active` fresh (a running worker)."""
        self._sweep_from: Any = None
        self._has_graph: bool | None = None
        """Whether the schema has the dependencies' tables (read once)."""
        self._keeps_results: bool | None = None
        """Whether the schema has the results table (read when a handler first returns)."""
        self.recording_connection: Callable[[], contextlib.AbstractContextManager[Any]] = (
            _no_connection
        )
        """A connection beside the job's, for an attempt whose callback closed the job's."""

    def dialect(self, conn: Any) -> Dialect:
        return dialect_for(conn, self.options.job_table, self.options.archived_job_table)

    def emit(self, event: str, job: Job | None = None, **data: Any) -> None:
        if not wanted(self.log, event):
            return
        payload: dict[str, Any] = dict(self.base)
        if job is not None:
            payload.update(job_id=job.job_id, job_type=job.job_type, attempt=job.attempts)
        payload.update(data)
        safe_log(self.log, event, payload)

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call a user function; a coroutine (or other awaitable) it returns is awaited."""
        result = fn(*args)
        if is_awaitable(result):
            result = self.loops.run(result)
        return result

    def _job(
        self, row: JobRow | LeasedRow, conn: Any, dialect: Dialect
    ) -> tuple[Job, PayloadError | None]:
        raw_id, queue, job_type, text, attempts, enqueued_at, process_at, last_error = row[:8]
        priority = row[8]
        strategy = self.options.job_id_strategy or dialect.default_id_strategy
        error = None
        payload: Any = text
        try:
            payload = self.serializer.decode(text)
        except PayloadError as exc:
            error = exc
        except Exception as exc:
            error = PayloadError(f"stored payload cannot be decoded: {describe(exc)}")
            error.__cause__ = exc
        job = Job(
            job_id=strategy.decode(raw_id),
            queue=queue,
            job_type=(
                job_type
                if self.options.job_type_style == "plain"
                else self.options.handed_job_type(job_type)
            ),
            payload=payload,
            attempts=attempts + 1,
            enqueued_at=dialect.decode_time(enqueued_at),
            process_at=dialect.decode_time(process_at),
            last_error=last_error,
            priority=priority,
            connection=conn,
            trace_context=row[-1],
            started_at=self.clock(),
            worker=worker_name(self.options.queue_worker_id),
        )
        return job, error

    def _run(
        self, conn: Any, dialect: Dialect, job: Job, slot: Slot | None = None
    ) -> tuple[BaseException | None, Any]:
        """Run the handler: (the exception that failed the attempt, the `Snooze` or `Cancel`
        it raised or returned, or None; its return value's JSON, to keep with the job, or
        None). A return value too large to keep fails the attempt as an exception would. An
        async handler is cancelled at the job's timeout (a sync one is left to the worker's
        watchdog)."""
        self.emit("handling_job", job)
        timeout = self.options.timeout_s(job.job_type)

        def handle(*args: Any) -> Any:
            result = self.handler(*args)
            if is_awaitable(result):
                if slot is not None:
                    slot.extend(ASYNC_GRACE_S)
                result = self.loops.run(result, timeout)
            if result is None or isinstance(result, Signal):
                return result
            return self._encoded(job, result)  # in advanced mode, inside its savepoint

        error: BaseException | None = None
        result: Any = None
        observers = self.stats.observers
        if observers:
            notify(observers, self.log, "job_started", job)
            began = time.perf_counter()
        pin = None if slot is None else slot.pin
        if pin is not None:
            pin.widen()
        if slot is not None:
            object.__setattr__(job, "_progress", slot)
        object.__setattr__(job, "_parents", self._parent_results)
        current = running(job)
        try:
            if self.advanced:
                result, error = self._guarded(conn, dialect, "handler", handle, job, slot=slot)
            else:
                try:
                    result = handle(job.job_type, job.payload)
                except BaseException as exc:
                    if _interrupts(exc):
                        raise
                    error = exc
            if error is None and isinstance(result, Signal):
                error = result
        finally:
            current.var.reset(current)
            if pin is not None:
                pin.narrow()
            if observers:
                notify(observers, self.log, "job_ended", job, error, time.perf_counter() - began)
        if slot is not None and error is not None and error is slot.timed_out:
            pass  # the watchdog counted and reported it at the deadline
        elif isinstance(error, JobTimedOut):
            self.stats.add("timed_out", job)
            assert timeout is not None
            self.emit(
                "job_timed_out",
                job,
                timeout_ms=round(timeout * 1000),
                reason="cancelled at its timeout",
            )
        elif error is not None and not isinstance(error, Signal):
            self.emit("handler_exception", job, exception=error)
        return error, (None if error is not None else result)

    def _encoded(self, job: Job, result: Any) -> str | None:
        """The JSON of a handler's return value, to keep with its archived job; None when it
        is not kept: the schema has no results table (known after the first store), or the
        value is not JSON (logged, `result_not_stored`). `PayloadError` past
        `MAX_RESULT_BYTES`."""
        if self._keeps_results is False:
            return None
        try:
            text = json.dumps(result, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            self.emit("result_not_stored", job, reason=f"not JSON: {describe(exc)}")
            return None
        size = len(text.encode())
        if size > MAX_RESULT_BYTES:
            raise PayloadError(
                f"the handler returned {size:,} bytes of JSON, more than the "
                f"{MAX_RESULT_BYTES:,} a result may have: return less (a reference to it)"
            )
        return text

    def keep_result(self, conn: Any, dialect: Dialect, raw_id: Any, job: Job, text: str) -> None:
        """Keep a success's return value (`_encoded`) in the job's transaction, where the
        schema has the results table."""
        if self._keeps_results is None:
            self._keeps_results = bool(dialect.table_columns(conn, dialect.results_table))
        if self._keeps_results:
            dialect.store_result(
                conn, raw_id, text, job.attempts, job.worker, job.started_at, self.clock()
            )

    def writes_ends(self, conn: Any, dialect: Dialect) -> bool:
        """Whether the ends of the jobs settled in this transaction are to be written for the
        jobs that wait on them (`ended`)."""
        if self.graph_active is None or not self.watched:
            return self._blocked_now(conn, dialect)
        return self.graph_active

    def ends_to_write(self, conn: Any, dialect: Dialect) -> bool:
        """Whether the successes settled now may have ends to write (`writes_ends`), so that
        their archive asks whether a job waits on them."""
        return self.graph_active is not False and self.writes_ends(conn, dialect)

    def ends_after_commit(self, conn: Any, dialect: Dialect, raw_ids: Sequence[Any]) -> None:
        """Successes whose archive has committed, which jobs wait on (as the archive's own
        round trip read): write their ends, releasing those jobs, in a transaction of their
        own, so that only a parent pays for its dependents. A process that dies in between
        leaves them to the sweep, as does an error here (told)."""
        try:
            self._write_ends(conn, dialect, raw_ids)
        except Exception as exc:
            self.emit(
                "polling_error",
                exception=exc,
                reason="writing the ends of jobs that others wait on (the sweep settles them)",
            )

    def _write_ends(self, conn: Any, dialect: Dialect, raw_ids: Sequence[Any]) -> None:
        dialect.begin(conn)
        try:
            waiting = _dependencies.ended(
                conn, dialect, raw_ids, "success", self.clock(), self._released
            )
            dialect.commit(conn)
        except BaseException:
            dialect.rollback(conn)
            raise
        self.recheck(conn, dialect, waiting)

    def _blocked_now(self, conn: Any, dialect: Dialect) -> bool:
        """Read whether some job waits on others now, into `graph_active` (False on a schema
        without the tables, which is read once)."""
        if self._has_graph is None:
            self._has_graph = _dependencies.has_tables(conn, dialect)
        self.graph_active = self._has_graph and _dependencies.blocked_now(conn, dialect)
        return self.graph_active

    def ended(
        self, conn: Any, dialect: Dialect, raw_ids: Sequence[Any], status: str, known: bool = False
    ) -> _dependencies.Waiting:
        """Jobs archived with `status` in the transaction open on `conn`: release or cancel,
        in it, the jobs that waited on them (see `_dependencies`); `known`: `writes_ends`
        said so already. Returns those to `recheck` once it has committed."""
        if known or self.writes_ends(conn, dialect):
            return _dependencies.ended(conn, dialect, raw_ids, status, self.clock(), self._released)
        return []

    def recheck(self, conn: Any, dialect: Dialect, waiting: _dependencies.Waiting) -> None:
        """After `ended`'s transaction has committed: the dependents it left waiting on a few
        others, which may have ended meanwhile (`_dependencies.recheck`)."""
        if not waiting:
            return
        try:
            _dependencies.recheck(conn, dialect, waiting, self.clock(), self._released)
        except Exception as exc:  # the jobs' own outcomes are committed: the sweep goes on
            self.emit("polling_error", exception=exc, reason="rechecking jobs that wait on others")

    def _released(self, queue: str, priority: int) -> None:
        if queue == self.options.queue:
            self.on_reschedule(self.clock(), priority)

    def _parent_results(self, job: Job) -> dict[uuid.UUID, Any]:
        """`Job.parent_results`: read on the job's own connection, else on one beside it."""
        if job.connection is not None:
            return self._read_parent_results(job.connection, job)
        with self.recording_connection() as conn:
            try:
                return self._read_parent_results(conn, job)
            finally:
                self.dialect(conn).rollback(conn)

    def _read_parent_results(self, conn: Any, job: Job) -> dict[uuid.UUID, Any]:
        dialect = self.dialect(conn)
        if not _dependencies.has_tables(conn, dialect):
            return {}
        strategy = self.options.job_id_strategy or dialect.default_id_strategy
        rows = dialect.fetchall(
            conn,
            f"SELECT d.parent_id, r.return_value FROM {dialect.dependencies_table} d "
            f"LEFT JOIN {dialect.results_table} r ON r.job_id = d.parent_id "
            "AND r.status = 'success' WHERE d.job_id = %s",
            (strategy.encode(job.job_id),),
        )
        return {
            strategy.decode(parent): None if value is None else json.loads(value)
            for parent, value in rows
        }

    def watch_dependencies(self, conn: Any, dialect: Dialect) -> bool:
        """The registry thread's chore: read whether jobs wait on others, and while some do,
        sweep what their parents' own transactions left (`_dependencies.sweep`). Whether
        some do (it is then called every second, else once a beat)."""
        if not self._blocked_now(conn, dialect):  # (the registry ends a pooled transaction)
            return False
        dialect.commit(conn)
        dialect.begin(conn)
        try:
            _, self._sweep_from = _dependencies.sweep(
                conn, dialect, self.clock(), self._sweep_from, self._released
            )
            dialect.commit(conn)
        except BaseException:
            dialect.rollback(conn)
            raise
        return True

    def _lease_lost(self, job: Job) -> None:
        self.emit(
            "lease_lost",
            job,
            reason="the lease ran out and another worker took the job: this outcome is discarded",
        )

    def _guarded(
        self,
        conn: Any,
        dialect: Dialect,
        what: str,
        fn: Callable[..., Any],
        *args: Any,
        slot: Slot | None = None,
    ) -> tuple[Any, BaseException | None]:
        """Run a callback that may use the job's connection, under a savepoint.

        Returns (its result, None), or (None, the error) after undoing its writes:
        its own exception, `TransactionAborted` when it returned but left the
        transaction refusing statements, or the `JobTimedOut` of a handler that passed
        its deadline meanwhile (`slot.timed_out`). `TransactionLost` (tagged with
        `what`) when it ended the transaction itself.
        """
        dialect.savepoint(conn)
        try:
            result = self.call(fn, *args)
        except BaseException as exc:
            if _interrupts(exc):
                raise
            try:
                _raise_if_closed(dialect, conn, what)
                dialect.rollback_to_savepoint(conn)
            except TransactionLost as lost:
                lost.stage, lost.cause = what, exc
                raise
            return None, (slot.timed_out if slot is not None and slot.timed_out else exc)
        try:
            _raise_if_closed(dialect, conn, what)
            problem = dialect.aborted(conn)
            timed_out = None if slot is None else slot.timed_out
            if problem is None and timed_out is None:
                dialect.release_savepoint(conn)
                return result, None
            dialect.rollback_to_savepoint(conn)
        except TransactionLost as lost:
            lost.stage, lost.cause = what, None
            raise
        if timed_out is not None:
            return None, timed_out
        return None, TransactionAborted(f"{what} left the transaction aborted: {problem}")

    def _retry_or_fail(
        self, conn: Any, dialect: Dialect, raw_id: Any, job: Job, exc: BaseException
    ) -> str:
        """Reschedule the job if its retry strategy allows one more attempt, else fail it."""
        plan = self._retry_plan(conn, dialect, job, exc)
        if plan is None:
            return self._fail(conn, dialect, raw_id, job, exc)
        retries, delay_ms, process_at = plan
        error = error_text(exc)
        dialect.reschedule(conn, raw_id, job.attempts, process_at, error)
        self._note_attempt(conn, dialect, raw_id, job, error)
        self.on_reschedule(process_at, job.priority)
        self.emit(
            "retrying",
            job,
            retry=job.attempts,
            retries=retries,
            delay_ms=delay_ms,
            process_at=process_at.isoformat(),
            exception=exc,
        )
        return "retried"

    def _settle_signal(
        self, conn: Any, dialect: Dialect, raw_id: Any, job: Job, signal: Signal
    ) -> str:
        """Write what a handler's `Snooze` or `Cancel` asks, in the transaction that holds the
        job: due again later with its attempts as they were, or archived as cancelled."""
        if isinstance(signal, Snooze):
            try:
                process_at = self._retry_at(signal.delay_ms)
            except InvalidRetrySpec as exc:
                return self._fail(conn, dialect, raw_id, job, exc)
            dialect.snooze(conn, raw_id, process_at)
            self.on_reschedule(process_at, job.priority)
            self.emit(
                "job_snoozed", job, delay_ms=signal.delay_ms, process_at=process_at.isoformat()
            )
            return "snoozed"
        assert isinstance(signal, Cancel)
        dialect.archive(
            conn,
            [raw_id],
            "cancelled",
            self.clock(),
            f"Cancel: {signal.reason}",
            started=[job.started_at],
            worker=job.worker,
        )
        self.ended(conn, dialect, [raw_id], "cancelled")
        self.emit("job_cancelled", job, reason=signal.reason)
        return "cancelled"

    def record_signal(
        self, conn: Any, dialect: Dialect, raw_id: Any, job: Job, signal: Signal, lease: str
    ) -> bool:
        """Lease mode: write a handler's `Snooze` or `Cancel` in a transaction of its own,
        if the lease still holds the job (the claim's counted attempt is taken back first).
        Whether it was written."""
        if not self._lock_for_record(conn, dialect, raw_id, job, lease=lease):
            return False
        job = dataclasses.replace(job, connection=conn)
        outcome = self._settle_signal(conn, dialect, raw_id, job, signal)
        if self.claims is not None:
            self.claims.forget(conn, dialect, [raw_id])
        dialect.commit(conn)
        self.stats.add(outcome, job)
        return True

    def _retry_plan(
        self, conn: Any, dialect: Dialect, job: Job, exc: BaseException
    ) -> tuple[int, int, datetime] | None:
        """(retries, delay_ms, process_at) of the next attempt, or None for no retry."""
        strategy = self.options.retry_strategy_fn
        retries = 0
        if strategy is not None:
            value, error = self._guarded(conn, dialect, "retry_strategy_fn", strategy, job, exc)
            try:
                if error is not None:
                    raise error
                spec = to_retry_spec(value)
                if spec is not None:
                    retries = spec.retries
                    if job.attempts <= spec.retries:
                        delay_ms = spec.delay_ms(job.attempts)
                        return spec.retries, delay_ms, self._retry_at(delay_ms)
            except Exception as invalid:
                self.emit("retry_strategy_error", job, exception=invalid)
                retries = 0
        self.emit("not_retrying", job, retries=retries)
        return None

    def _retry_at(self, delay_ms: int) -> datetime:
        now = self.clock()
        try:
            return (now + timedelta(milliseconds=delay_ms)).astimezone(timezone.utc)
        except OverflowError:
            raise InvalidRetrySpec(
                f"a retry delay of {delay_ms} ms from {now.isoformat()} is past the latest "
                "time that can be stored (9999-12-31)"
            ) from None

    def _fail(
        self,
        conn: Any,
        dialect: Dialect,
        raw_id: Any,
        job: Job,
        exc: BaseException,
        notify: bool = True,
    ) -> str:
        """Archive the job as a failure, then call `failed_job_fn` in the same transaction."""
        text, now = error_text(exc), self.clock()
        dialect.archive(
            conn, [raw_id], "failure", now, text, started=[job.started_at], worker=job.worker
        )
        self.ended(conn, dialect, [raw_id], "failure")
        self._note_attempt(conn, dialect, raw_id, job, text, now)
        failed_job_fn = self.options.failed_job_fn
        if failed_job_fn is not None and notify:
            _, error = self._guarded(conn, dialect, "failed_job_fn", failed_job_fn, job, exc)
            if error is not None:
                self.emit("failed_job_fn_error", job, exception=error)
        self.emit("job_failed", job, status="failure", exception=exc)
        return "failed"

    def _note_attempt(
        self,
        conn: Any,
        dialect: Dialect,
        raw_id: Any,
        job: Job,
        error: str,
        finished_at: datetime | None = None,
    ) -> None:
        """Add the failed attempt to the job's history, in the transaction that records it."""
        finished = finished_at or self.clock()
        dialect.add_attempt(conn, raw_id, job.attempts, job.started_at, finished, job.worker, error)

    def _lock_for_record(
        self,
        conn: Any,
        dialect: Dialect,
        raw_id: Any,
        job: Job,
        *,
        wait: float = 0.0,
        lease: str | None = None,
        back: int = 1,
    ) -> bool:
        """Lock the job's row in a transaction of its own, to write an attempt that ended
        outside its run: under its lease (`lease`; see `Dialect.settle` for `back`), else
        waiting up to `wait` seconds for the row lock (a connection that was just cut is
        rolled back by the server shortly). False, said in the log, when there is nothing
        to write: the job is gone, has moved on, or another worker holds it."""
        if lease is not None:
            if dialect.settle(conn, raw_id, lease, job.process_at, back):
                return True
            self._lease_lost(job)
            return False
        deadline = time.monotonic() + wait
        locked = dialect.lock_job(conn, raw_id, job.attempts - 1)
        while locked is False and time.monotonic() < deadline:
            time.sleep(_LOCK_POLL)
            locked = dialect.lock_job(conn, raw_id, job.attempts - 1)
        if not locked:
            self.emit(
                "attempt_not_recorded",
                job,
                reason="the job finished or is running elsewhere"
                if locked is None
                else "another transaction still holds the job",
            )
        return bool(locked)

    def record_abandonment(
        self,
        conn: Any,
        dialect: Dialect,
        raw_id: Any,
        job: Job,
        failure: BaseException,
        *,
        wait: float = 0.0,
        lease: str | None = None,
    ) -> bool:
        """Note an attempt that `stop()` abandoned, in a transaction of its own: a deploy
        must not turn a long job into a failure, so the job is due again at once with its
        attempts as they were and the abandonment as its last error. Only the
        `MAX_ABANDONMENTS`-th abandonment in a row ends it in the failure archive. Whether
        anything was written."""
        if not self._lock_for_record(conn, dialect, raw_id, job, wait=wait, lease=lease):
            return False
        count = abandonments(job.last_error) + 1
        failure = JobAbandoned(f"{failure} (abandonment {count} of {MAX_ABANDONMENTS})")
        if count >= MAX_ABANDONMENTS:
            outcome = self._fail(conn, dialect, raw_id, job, failure, notify=True)
            if self.claims is not None:
                self.claims.forget(conn, dialect, [raw_id])
        else:
            error = error_text(failure)
            dialect.reschedule(conn, raw_id, job.attempts - 1, self.clock(), error)
            self._note_attempt(conn, dialect, raw_id, job, error)
            outcome = "retried"
        dialect.commit(conn)
        if outcome == "failed":
            self.stats.add(outcome, job)
        return True

    def record_attempt(
        self,
        conn: Any,
        dialect: Dialect,
        raw_id: Any,
        job: Job,
        failure: BaseException,
        *,
        stage: str = "handler",
        wait: float = 0.0,
        lease: str | None = None,
        back: int = 1,
    ) -> bool:
        """Count a failed attempt of `job` in a transaction of its own: a retry or the
        failure archive, as the retry strategy decides. Waits up to `wait` seconds for the
        row lock (a connection that was just cut is rolled back by the server shortly).
        A leased job (`lease`) is recorded only while that lease holds it (see
        `Dialect.settle` for `back`).

        `stage` names the callback that already lost a transaction on this attempt; it is
        not called again, so recording always ends. False if nothing was recorded: the job
        is gone or already moved on, or another worker holds it.
        """
        if not self._lock_for_record(conn, dialect, raw_id, job, wait=wait, lease=lease, back=back):
            return False
        job = dataclasses.replace(job, connection=conn)
        try:
            if stage == "handler":
                outcome = self._retry_or_fail(conn, dialect, raw_id, job, failure)
            else:
                outcome = self._fail(conn, dialect, raw_id, job, failure, stage != "failed_job_fn")
            if outcome == "failed" and self.claims is not None:
                self.claims.forget(conn, dialect, [raw_id])
            dialect.commit(conn)
        except TransactionLost as lost:
            dialect.rollback(conn)
            later = "failed_job_fn" if lost.stage == "failed_job_fn" else "retry_strategy_fn"
            return self.record_attempt(
                conn, dialect, raw_id, job, failure, stage=later, lease=lease, back=back
            )
        self.stats.add(outcome, job)
        return True

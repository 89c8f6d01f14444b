"""Claim jobs, run their handlers, and settle each one, all in the claim's transaction.

This is Proletarian's poll/lock/run/archive cycle, shared by worker threads,
`process_next_job` and `testing.run_due_jobs`. Every user callback that gets
the job's connection (an advanced-mode handler, `retry_strategy_fn`,
`failed_job_fn`) runs under a savepoint: whatever it leaves behind, its own
writes are undone if it failed, and the job's bookkeeping still commits, so
every attempt is counted and no job loops.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import sys
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from ._async import EventLoops, is_awaitable
from ._crashes import ClaimCounter
from ._datasource import ConnectionFactory
from ._dialects import (
    Dialect,
    JobRow,
    LeasedRow,
    Session,
    TransactionLost,
    dialect_for,
    is_transient,
)
from ._dialects.base import died_running, reserved, running_slots
from ._frontier import Frontier
from ._leases import Leases, holding, lease_token
from ._logging import default_log, describe, error_text, safe_log, wanted
from ._options import WorkerSettings
from ._pauses import PauseWatch
from ._types import Handler, LogFn
from .errors import (
    ArgumentTypeError,
    CrashLoop,
    InvalidRetrySpec,
    JobAbandoned,
    JobTimedOut,
    LeaseExpired,
    PayloadError,
    TransactionAborted,
)
from .jobs import Job
from .observers import Observer, notify
from .retry import to_retry_spec

_LOCK_POLL = 0.05


class Stats:
    """Counts of job outcomes, safe to update from many threads; each count is told to the
    worker's observers."""

    def __init__(self, observers: Sequence[Observer] = (), log: LogFn = default_log) -> None:
        self._lock = threading.Lock()
        self.succeeded = self.failed = self.retried = self.abandoned = self.timed_out = 0
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


HAND_OVER_WAIT_S = 60.0
"""The longest an abandoned job's thread waits for its job's attempt to be recorded."""


class Replaced(Exception):
    """The worker gave up on this thread's job (its timeout passed) and runs another thread in
    its place: this one discards what its handler did and ends."""


class Slot:
    """What a worker thread holds right now, so `stop()` or the timeout watchdog can abandon
    it, and where it walks jobs found behind the frontier (`behind`)."""

    def __init__(self) -> None:
        self.conn: Any = None
        self.dialect: Dialect | None = None
        self.job: Job | None = None
        self.raw_id: Any = None
        self.lease: str | None = None
        self.rest: list[Any] = []
        """Lease mode: the rows of the batch still to run after the job running now."""
        self.batch: Batch | None = None
        """Held mode: the claim's transaction and what it settled so far."""
        self.checkout: Checkout | None = None
        """Held mode: the thread's connection, given back once by whoever is done with it."""
        self.timed_out: JobTimedOut | None = None
        """Set when the job's handler passed its deadline but keeps the job's transaction:
        an advanced handler, whose writes are rolled back once it returns."""
        self.started = 0.0
        self.deadline: float | None = None
        self.abandoned = False
        self.handed_over = threading.Event()
        """Set once whoever abandoned the job is done with this slot's connection: the
        thread, when its handler returns at last, waits for it before it lets go of the
        connection (whose rollback would undo the attempt being recorded on it)."""
        self.behind: Any = None
        self.lock = threading.Lock()
        self.activity = "connecting"
        """What the thread does: "connecting" or "polling" (a claim or a settle: waiting on
        the database), "idle", "running" (a handler) or "backing_off" (after an error);
        health checks read it with `since`."""
        self.since = time.monotonic()

    def mark(self, activity: str) -> None:
        """The thread moves on to `activity` now."""
        self.activity, self.since = activity, time.monotonic()

    def begin(self, job: Job, raw_id: Any, timeout_s: float | None, lease: str | None) -> None:
        """A job starts running here, to be abandoned `timeout_s` from now (None: never)."""
        with self.lock:
            self.job, self.raw_id, self.lease = job, raw_id, lease
            self.started = self.since = time.monotonic()
            self.activity = "running"
            self.deadline = None if timeout_s is None else self.started + timeout_s

    def extend(self, seconds: float) -> None:
        with self.lock:
            if self.deadline is not None:
                self.deadline += seconds

    def end(self) -> None:
        """The job's handler returned: from now on it is settled here, never abandoned.
        `Replaced` if it was abandoned meanwhile."""
        with self.lock:
            self.deadline = None
            self.activity, self.since = "polling", time.monotonic()
            abandoned = self.abandoned
        if abandoned:
            self.handed_over.wait(HAND_OVER_WAIT_S)
            raise Replaced

    def clear(self) -> None:
        with self.lock:
            self.job = self.raw_id = self.lease = self.deadline = self.timed_out = None

    def take_overdue(
        self, now: float, force: bool = False
    ) -> tuple[Job, Any, str | None, float] | None:
        """Abandon the job if its deadline has passed (or at once, with `force`): (job, raw
        id, lease, seconds it ran), or None when there is none to abandon."""
        with self.lock:
            if self.job is None or self.abandoned:
                return None
            if not force and (self.deadline is None or now < self.deadline):
                return None
            self.abandoned, self.deadline = True, None
            return self.job, self.raw_id, self.lease, now - self.started

    def overdue_in_place(self, now: float, failure: JobTimedOut) -> Job | None:
        """Mark the job timed out while its thread keeps it (an advanced handler, whose
        transaction holds the job): its job, or None when it is not overdue."""
        with self.lock:
            if self.job is None or self.abandoned or self.deadline is None or now < self.deadline:
                return None
            self.deadline, self.timed_out = None, failure
            return self.job


class Checkout:
    """A worker thread's connection from its data source, set up for the worker
    (`Dialect.attached`), and given back exactly once: by the thread, or by the watchdog
    once it has settled the thread's timed-out job (its handler never touches the
    connection again)."""

    def __init__(
        self,
        connect: ConnectionFactory,
        dialect_for: Callable[[Any], Dialect],
    ) -> None:
        self._lent = connect()
        conn = self._lent.__enter__()
        try:
            self.dialect = dialect_for(conn)
            self._attached = self.dialect.attached(conn)
            self.session = self._attached.__enter__()
        except BaseException:
            self._lent.__exit__(*sys.exc_info())
            raise
        self.conn = conn
        self._lock = threading.Lock()
        self._returned = False

    def give_back(self, error: BaseException | None = None) -> None:
        """Undo the worker's set-up and return the connection (once; later calls do nothing)."""
        with self._lock:
            if self._returned:
                return
            self._returned = True
        info = (None, None, None) if error is None else (type(error), error, error.__traceback__)
        try:
            self._attached.__exit__(*info)
        finally:
            self._lent.__exit__(*info)


class Batch:
    """The jobs of one held-mode claim, settled one by one in the claim's transaction:
    successes are archived together when it commits, in the commit's round trip."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.succeeded: list[tuple[Any, Job]] = []
        """(raw id, job) of each success, archived at the commit."""
        self.settled: list[tuple[str, Job]] = []
        """(outcome, job) of each attempt written already: "retried" or "failed"."""
        self.failed: list[Any] = []
        """Raw ids of the jobs archived as failures."""
        self.outcomes: list[bool] = []

    def commit(self, runner: JobRunner) -> None:
        """Archive the successes and commit the claim's transaction."""
        session = self.session
        if runner.claims is not None:
            runner.claims.forget(
                session.conn, session.dialect, [*(i for i, _ in self.succeeded), *self.failed]
            )
        if self.succeeded:
            session.archive_and_commit([i for i, _ in self.succeeded], runner.clock())
        else:
            session.dialect.commit(session.conn)

    def count(self, runner: JobRunner) -> None:
        """Tell the stats and the log of every outcome, once committed."""
        for outcome, job in self.settled:
            runner.stats.add(outcome, job)
        for _, job in self.succeeded:
            runner.stats.add("succeeded", job)
            runner.emit("job_finished", job, status="success")


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


class JobRunner:
    """Runs the next due jobs of one queue on a given connection."""

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

    # Claim, run, settle ------------------------------------------------------------------

    def run_next(self, conn: Any) -> bool | None:
        """Run one due job: True if it succeeded, False if it failed, None if none was due."""
        outcomes = self.run_batch(self.dialect(conn).session(conn))
        return outcomes[0] if outcomes else None

    def run_batch(self, session: Session, slot: Slot | None = None, limit: int = 1) -> list[bool]:
        """Claim up to `limit` due jobs in one transaction and settle each; [] if none, if
        the queue is paused, or if its running slots (`max_running`) are all taken.

        Each job is settled on its own (retry or failure as it comes); successes
        are archived together at the end, in the commit's round trip.

        With `max_crashes` one job per transaction: a process dying mid-batch would roll
        back the jobs that ran fine before it too, and their counted claims would make
        them look like crashes of their own.
        """
        if self.pauses.known_paused():
            return []
        if self.claims is not None:
            limit = 1
        try:
            return self._claim_and_run(session, slot, limit)
        finally:
            session.release_slot()  # nothing to do unless a MySQL slot was taken

    def _claim_and_run(self, session: Session, slot: Slot | None, limit: int) -> list[bool]:
        dialect, conn, frontier = session.dialect, session.conn, self.frontier
        start = None if frontier is None else frontier.start(slot)
        if self.running_slots is None:
            rows = session.claim(self.options.queue, self.clock(), limit, start)
        else:
            rows = session.claim_in_slot(
                self.running_slots, self.options.queue, self.clock(), limit, start
            )
        if not rows or self.pauses.check(session):
            if frontier is not None:
                frontier.missed(slot)
            dialect.rollback(conn)  # a paused queue's jobs go back unrun
            return []
        self.on_claim()
        if frontier is not None:
            frontier.claimed(slot, dialect.position(rows[-1]))
        batch = Batch(session)
        if slot is not None:
            slot.batch = batch
        job: Job | None = None
        raw_id: Any = None
        error: BaseException | None = None
        try:
            for row in rows:
                raw_id = row[0]
                job, error = self._job(row, conn, dialect)
                if error is None and self.claims is not None:
                    error = self._crash_loop(dialect, raw_id, job)
                    if error is not None:
                        job = dataclasses.replace(job, attempts=job.attempts - 1 + error.crashes)
                        dialect.count_attempts(conn, raw_id, job.attempts - 1)
                if error is not None:
                    if isinstance(error, PayloadError):
                        self.emit("payload_decode_error", job, exception=error)
                    self._settle_failure(batch, raw_id, job, error, retry=False)
                    continue
                if slot is not None:
                    slot.begin(job, raw_id, self.options.timeout_s(job.job_type), None)
                error = self._run(conn, dialect, job, slot)
                if slot is not None:
                    slot.end()
                if error is None:
                    batch.succeeded.append((raw_id, job))
                    batch.outcomes.append(True)
                else:
                    self._settle_failure(batch, raw_id, job, error)
            batch.commit(self)
        except TransactionLost as lost:
            assert job is not None
            self._after_lost(conn, dialect, raw_id, job, error, lost)
            return [False]
        finally:
            if slot is not None:
                slot.clear()
                slot.batch = None
        batch.count(self)
        return batch.outcomes

    def _settle_failure(
        self, batch: Batch, raw_id: Any, job: Job, error: BaseException, retry: bool = True
    ) -> None:
        """Write a failed attempt in the batch's transaction: a retry, if `retry` and the
        strategy allows one, else the failure archive."""
        conn, dialect = batch.session.conn, batch.session.dialect
        if retry:
            outcome = self._retry_or_fail(conn, dialect, raw_id, job, error)
        else:
            outcome = self._fail(conn, dialect, raw_id, job, error)
        batch.settled.append((outcome, job))
        if outcome == "failed":
            batch.failed.append(raw_id)
        batch.outcomes.append(False)

    def settle_timed_out(self, slot: Slot, job: Job, raw_id: Any, failure: JobTimedOut) -> bool:
        """Held mode, a sync handler past its deadline (the watchdog's thread): record its
        attempt in its own batch's transaction, which still holds its row, with the batch's
        earlier outcomes, and commit; the jobs claimed after it go back unrun. Whether the
        batch's connection may be given back now: not while it holds the job's running slot
        (`max_running`), which stays taken until the handler returns."""
        batch = slot.batch
        assert batch is not None
        session = batch.session
        job = dataclasses.replace(job, connection=session.conn)
        self._settle_failure(batch, raw_id, job, failure)
        keeps_slot = self.running_slots is not None and session.keep_slot(self.running_slots)
        batch.commit(self)
        batch.count(self)
        return not keeps_slot

    def _crash_loop(self, dialect: Dialect, raw_id: Any, job: Job) -> CrashLoop | None:
        """Count this claim; a `CrashLoop` if `max_crashes` runs of the job died before."""
        assert self.claims is not None and self.options.max_crashes is not None
        crashes = self.claims.count(dialect, raw_id) - job.attempts
        if crashes < self.options.max_crashes:
            return None
        self.emit("crash_loop", job, crashes=crashes, max_crashes=self.options.max_crashes)
        error = CrashLoop(
            f"process died {crashes} times while running this job "
            f"(max_crashes={self.options.max_crashes}); not run again"
        )
        error.crashes = crashes
        return error

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
            job_type=job_type,
            payload=payload,
            attempts=attempts + 1,
            enqueued_at=dialect.decode_time(enqueued_at),
            process_at=dialect.decode_time(process_at),
            last_error=last_error,
            priority=priority,
            connection=conn,
            trace_context=row[-1],
        )
        return job, error

    def _run(
        self, conn: Any, dialect: Dialect, job: Job, slot: Slot | None = None
    ) -> BaseException | None:
        """Run the handler; the exception that failed the attempt, or None. An async handler
        is cancelled at the job's timeout (a sync one is left to the worker's watchdog)."""
        self.emit("handling_job", job)
        timeout = self.options.timeout_s(job.job_type)

        def handle(*args: Any) -> Any:
            result = self.handler(*args)
            if not is_awaitable(result):
                return result
            if slot is not None:
                slot.extend(ASYNC_GRACE_S)
            return self.loops.run(result, timeout)

        error: BaseException | None = None
        observers = self.stats.observers
        if observers:
            notify(observers, self.log, "job_started", job)
            began = time.perf_counter()
        try:
            if self.advanced:
                _, error = self._guarded(conn, dialect, "handler", handle, job, slot=slot)
            else:
                try:
                    handle(job.job_type, job.payload)
                except BaseException as exc:
                    if _interrupts(exc):
                        raise
                    error = exc
        finally:
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
        elif error is not None:
            self.emit("handler_exception", job, exception=error)
        return error

    # Lease mode ----------------------------------------------------------------------------

    def run_leased(
        self, connect: ConnectionFactory, slot: Slot | None = None, limit: int = 1
    ) -> list[bool]:
        """Lease mode: claim up to `limit` due jobs under a lease and commit; run each with
        no connection held, and write its outcome in a short transaction of its own, if
        the lease is still ours. [] if none was due or the queue is paused."""
        if self.pauses.known_paused():
            return []
        assert self.options.lease_ms is not None
        token, frontier = lease_token(), self.frontier
        with connect() as conn:
            dialect = self.dialect(conn)
            start = None if frontier is None else frontier.start(slot)
            lease_ms = self.options.lease_ms
            rows = dialect.lease_claim(
                conn, self.options.queue, self.clock(), limit, start, lease_ms, token
            )
            if rows and self.pauses.check(dialect.session(conn)):
                dialect.give_back(conn, rows, token)  # a paused queue's jobs go back unrun
                rows = []
            dialect.rollback(conn)
        if not rows:
            if frontier is not None:
                frontier.missed(slot)
            return []
        self.on_claim()
        if frontier is not None:
            frontier.claimed(slot, max(dialect.position(row) for row in rows))
        outcomes: list[bool] = []
        with holding(self.leases, rows, token):
            for n, row in enumerate(rows):
                if slot is not None:
                    slot.rest = list(rows[n + 1 :])
                if not row[10] and not self._start_leased(connect, dialect, row, token):
                    continue
                try:
                    outcomes.append(self._run_leased(connect, dialect, row, token, slot))
                except Replaced:
                    with connect() as conn:
                        self.dialect(conn).give_back(conn, rows[n + 1 :], token)
                    raise
        return outcomes

    def _start_leased(
        self, connect: ConnectionFactory, dialect: Dialect, row: LeasedRow, token: str
    ) -> bool:
        """Start a job its batch's claim reserved; False if the reservation was lost."""
        assert self.options.lease_ms is not None
        raw_id = row[0]
        with connect() as conn:
            started = dialect.start_leased(conn, raw_id, token, self.options.lease_ms)
        if self.leases is not None:
            if started:
                self.leases.add([(raw_id, token)])
            self.leases.drop(raw_id, reserved(token))
        if not started:
            self._lease_lost(self._job(row, None, dialect)[0])
        return started

    def _run_leased(
        self,
        connect: ConnectionFactory,
        dialect: Dialect,
        row: LeasedRow,
        token: str,
        slot: Slot | None,
    ) -> bool:
        """Run one leased job and write its outcome; whether it succeeded."""
        raw_id = row[0]
        job, undecodable = self._job(row, None, dialect)
        error: BaseException | None = undecodable
        stage, back = "handler", 1
        if died_running(row[9]):
            job = dataclasses.replace(job, attempts=job.attempts - 1)
            error, back = self._lease_expired(job), 2
        elif error is not None:
            self.emit("payload_decode_error", job, exception=error)
            stage = "payload"
        else:
            if slot is not None:
                slot.begin(job, raw_id, self.options.timeout_s(job.job_type), token)
            try:
                error = self._run(None, dialect, job, slot)
                if slot is not None:
                    slot.end()
            finally:
                if slot is not None and not slot.abandoned:
                    slot.clear()
        failure = error

        def write(conn: Any) -> bool:
            dialect = self.dialect(conn)
            if failure is not None:
                self.record_attempt(
                    conn, dialect, raw_id, job, failure, stage=stage, lease=token, back=back
                )
                return False
            if not dialect.archive_leased(conn, raw_id, token, self.clock()):
                self._lease_lost(job)
                return False
            return True

        if not self._while_leased(connect, write):
            return False
        self.stats.add("succeeded", job)
        self.emit("job_finished", job, status="success")
        return True

    def _while_leased(self, connect: ConnectionFactory, write: Callable[[Any], bool]) -> bool:
        """Write a leased job's outcome; a lost connection or a server away is tried again
        (backing off) for up to half the lease, which still holds the job meanwhile."""
        assert self.options.lease_ms is not None
        deadline = time.monotonic() + self.options.lease_ms / 2000
        delay = 0.05
        while True:
            try:
                with connect() as conn:
                    return write(conn)
            except Exception as exc:
                if not is_transient(exc) or time.monotonic() + delay > deadline:
                    raise
                self.emit("polling_error", exception=exc, retrying_in_ms=round(delay * 1000))
            time.sleep(delay)
            delay = min(delay * 2, 2.0)

    def _lease_expired(self, job: Job) -> LeaseExpired:
        """A claimed job was under a lease that ran out: attempt `job.attempts` never ended."""
        self.emit("lease_expired", job, lease_ms=self.options.lease_ms)
        return LeaseExpired(
            f"attempt {job.attempts} never finished: the worker running it stopped renewing "
            f"its lease (its process died or stalled; lease_ms={self.options.lease_ms})"
        )

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
        dialect.reschedule(conn, raw_id, job.attempts, process_at, error_text(exc))
        self.on_reschedule(process_at, job.priority)
        self.emit(
            "retrying",
            job,
            retry=job.attempts,
            retries=retries,
            delay_ms=delay_ms,
            process_at=process_at.isoformat(),
        )
        return "retried"

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
        dialect.archive(conn, [raw_id], "failure", self.clock(), error_text(exc))
        failed_job_fn = self.options.failed_job_fn
        if failed_job_fn is not None and notify:
            _, error = self._guarded(conn, dialect, "failed_job_fn", failed_job_fn, job, exc)
            if error is not None:
                self.emit("failed_job_fn_error", job, exception=error)
        self.emit("job_failed", job, status="failure", exception=exc)
        return "failed"

    # Attempts recorded outside the job's run ---------------------------------------------

    def _after_lost(
        self,
        conn: Any,
        dialect: Dialect,
        raw_id: Any,
        job: Job,
        failure: BaseException | None,
        lost: TransactionLost,
    ) -> None:
        """A callback ended the job's transaction: its batch is rolled back (those jobs run
        again, as after a crash) and this job's attempt is counted in a new transaction,
        on a connection of its own if the callback closed the job's."""
        if lost.stage == "handler":
            ended = TransactionAborted(f"handler ended the job's transaction: {lost}")
            failure = lost.cause or ended
        self.emit("transaction_lost", job, callback=lost.stage, reason=str(lost))
        assert failure is not None
        if not dialect.is_closed(conn):
            dialect.rollback(conn)
            self.record_attempt(conn, dialect, raw_id, job, failure, stage=lost.stage)
            return
        with self.recording_connection() as other:
            self.record_attempt(
                other, self.dialect(other), raw_id, job, failure, stage=lost.stage, wait=LOST_WAIT_S
            )

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
            if dialect.settle(conn, raw_id, lease, back):
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
            dialect.reschedule(conn, raw_id, job.attempts - 1, self.clock(), error_text(failure))
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

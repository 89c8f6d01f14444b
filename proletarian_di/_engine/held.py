"""The held-transaction mode, Proletarian's own: claim due jobs with `SELECT … FOR UPDATE
SKIP LOCKED`, run each handler while the claim's transaction holds its row, and settle
every job in that same transaction, which commits once for the batch (successes are
archived in the commit's round trip). If the process dies, the database rolls the batch
back and its jobs run again: at-least-once.

What happens to one job, top to bottom: `run_batch` → `_claim_and_run` (claim, then for
each row: decode, `Steps._run`, then `Batch.succeeded` or `_settle_failure`) →
`Batch.commit` → `Batch.count`. A timeout settles the batch from the watchdog's thread
(`settle_timed_out`); a callback that ended the transaction, from `_after_lost`.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from collections.abc import Callable
from typing import Any

from .._store.datasource import ConnectionFactory
from .._store.dialects import Dialect, Runs, Session, TransactionLost
from ..errors import CrashLoop, JobTimedOut, PayloadError, TransactionAborted
from ..jobs import Job, Signal
from .fair import FairTurns, FirstTry
from .slot import Slot
from .steps import LOST_WAIT_S, Steps


class Checkout:
    """A worker thread's connection from its data source, set up for the worker
    (`Dialect.attached`), and given back exactly once: by the thread, or by the watchdog
    once it has settled the thread's timed-out job (its handler never touches the
    connection again)."""

    def __init__(
        self,
        connect: ConnectionFactory,
        dialect_for: Callable[[Any], Dialect],
        exclusive: bool = False,
        pgbouncer: bool = False,
        keepalive_ms: int = 0,
    ) -> None:
        self._lent = connect()
        conn = self._lent.__enter__()
        try:
            self.dialect = dialect_for(conn)
            self._attached = self.dialect.attached(conn, exclusive, pgbouncer, keepalive_ms)
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
        """(outcome, job) of each attempt written already: "retried", "failed", "snoozed"
        or "cancelled"."""
        self.ended: list[Any] = []
        """Raw ids of the jobs whose claims are settled but not successes: failures,
        snoozes and cancellations (`max_crashes` forgets their claims at the commit)."""
        self.outcomes: list[bool] = []

    def commit(self, runner: HeldMode, ahead: Ahead | None = None) -> None:
        """Archive the successes and commit the claim's transaction; with `ahead`, claim
        the next jobs in the same round trip where the session can."""
        session = self.session
        if runner.claims is not None:
            runner.claims.forget(
                session.conn, session.dialect, [*(i for i, _ in self.succeeded), *self.ended]
            )
        if not self.succeeded:
            session.dialect.commit(session.conn)
            return
        ids, now = [i for i, _ in self.succeeded], runner.clock()
        runs = Runs([job.started_at for _, job in self.succeeded], self.succeeded[0][1].worker)
        conn, dialect = session.conn, session.dialect
        probe = runner.ends_to_write(conn, dialect)
        if probe and not session.probes_ends(ids):
            if dialect.waited_on(conn, ids):  # its end written in its own transaction
                dialect.archive(conn, ids, "success", now, started=runs.started, worker=runs.worker)
                waiting = runner.ended(conn, dialect, ids, "success", known=True)
                dialect.commit(conn)
                runner.recheck(conn, dialect, waiting)
                return
            probe = False
        if (
            ahead is None
            or runner.claims is not None
            or not session.can_claim_ahead(ids, runner.running_slots)
            or not ahead.going_on()
        ):
            waited = session.archive_and_commit(ids, now, runs, probe)
        else:
            start, queue = runner.claim_start(ahead.slot), runner.options.queue
            fair_after = None if runner.fair is None else runner.fair.after
            waited = session.archive_commit_and_claim(
                ids, now, queue, ahead.limit, start, runner.running_slots, runs, fair_after, probe
            )
        if waited:  # the jobs claimed ahead go back: their locks could hold up the release
            session.drop_ahead()
            runner.ends_after_commit(conn, dialect, ids)

    def count(self, runner: Steps) -> None:
        """Tell the stats and the log of every outcome, once committed."""
        for outcome, job in self.settled:
            runner.stats.add(outcome, job)
        for _, job in self.succeeded:
            runner.stats.add("succeeded", job)
            runner.emit("job_finished", job, status="success")


@dataclasses.dataclass
class Ahead:
    """What a worker thread's next claim will be, so that a commit can make it in its own
    round trip while `going_on()` (the worker is not stopping)."""

    slot: Slot | None
    limit: int
    going_on: Callable[[], bool]


class HeldMode(Steps):
    """The held-transaction mode's path."""

    def run_next(self, conn: Any) -> bool | None:
        """Run one due job: True if it succeeded, False if it failed, None if none was due."""
        outcomes = self.run_batch(self.dialect(conn).session(conn))
        return outcomes[0] if outcomes else None

    def run_batch(
        self,
        session: Session,
        slot: Slot | None = None,
        limit: int = 1,
        going_on: Callable[[], bool] | None = None,
    ) -> list[bool]:
        """Claim up to `limit` due jobs in one transaction and settle each; [] if none, if
        the queue is paused, or if its running slots (`max_running`) are all taken.

        Each job is settled on its own (retry or failure as it comes); successes
        are archived together at the end, in the commit's round trip. A worker thread
        that will call again (`going_on`, true until it stops) has its next claim made in
        that round trip too, where the session can (`Session.archive_commit_and_claim`).

        With `max_crashes` one job per transaction: a process dying mid-batch would roll
        back the jobs that ran fine before it too, and their counted claims would make
        them look like crashes of their own.
        """
        if self.pauses.known_paused():
            session.drop_ahead()
            return []
        if self.claims is not None:
            limit = 1
        ahead = None
        if going_on is not None and (self.fair is None or self.running_slots is None):
            ahead = Ahead(slot, limit, going_on)
        try:
            return self._claim_and_run(session, slot, limit, ahead)
        finally:
            session.release_slot()  # nothing to do unless a MySQL slot was taken

    def claim_start(self, slot: Slot | None) -> Any:
        """Where the thread's next claim begins (`Frontier.start`)."""
        return None if self.frontier is None else self.frontier.start(slot)

    def _claim(self, session: Session, slot: Slot | None, limit: int) -> list[Any]:
        """The rows claimed ahead, else a claim now (in a running slot with `max_running`)."""
        if self.fair is not None:
            return self._fair_claim(session, self.fair)
        rows = session.claimed_ahead()
        if rows is not None:
            return rows
        if self.running_slots is None:
            return session.claim(self.options.queue, self.clock(), limit, self.claim_start(slot))
        start = self.claim_start(slot)
        return session.claim_in_slot(
            self.running_slots, self.options.queue, self.clock(), limit, start
        )

    def _fair_claim(self, session: Session, fair: FairTurns) -> list[Any]:
        """A fair turn, its first scan made in the last commit's round trip where it could
        be, else with the BEGIN (in a running slot with `max_running`: in the turn)."""
        now, after = self.clock(), session.ahead_after
        rows = session.claimed_ahead()
        if rows is not None:
            assert after is not None
            first: FirstTry | None = FirstTry(after, rows)
        elif self.running_slots is None:
            after = fair.after
            first = FirstTry(after, session.fair_claim(self.options.queue, after, now))
        elif session.take_running_slot(self.running_slots):
            first = None
        else:
            return []  # every running slot is taken: nothing is claimed
        return fair.claim(session.conn, session.dialect, now, gate=self.rates, first=first)

    def _claim_and_run(
        self, session: Session, slot: Slot | None, limit: int, ahead: Ahead | None = None
    ) -> list[bool]:
        dialect, conn, frontier = session.dialect, session.conn, self.frontier
        rows = self._claim(session, slot, limit)
        if not rows or self.pauses.check(session):
            if frontier is not None:
                frontier.missed(slot)
            dialect.rollback(conn)  # a paused queue's jobs go back unrun
            return []
        rates = self.rates
        if rates is not None and not rates.by_group and not rates.take(conn, dialect):
            dialect.rollback(conn)  # no start left in the window: the job goes back unrun
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
                error, result = self._run(conn, dialect, job, slot)
                if slot is not None:
                    slot.end()
                if error is None:
                    if result is not None:
                        self.keep_result(conn, dialect, raw_id, job, result)
                    batch.succeeded.append((raw_id, job))
                    batch.outcomes.append(True)
                elif isinstance(error, Signal):
                    outcome = self._settle_signal(conn, dialect, raw_id, job, error)
                    batch.settled.append((outcome, job))
                    batch.ended.append(raw_id)
                    batch.outcomes.append(False)
                else:
                    self._settle_failure(batch, raw_id, job, error)
            batch.commit(self, ahead)
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
            batch.ended.append(raw_id)
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
        on a connection of its own if the callback closed the job's. A connection the server
        (or the network) ended is no callback's doing: the server rolled the transaction
        back, and the job runs again with nothing spent, as after a crash (which
        `max_crashes` bounds)."""
        if dialect.is_broken(conn):
            self.emit(
                "transaction_lost",
                job,
                callback=lost.stage,
                reason=f"the database ended the job's connection: the job runs again ({lost})",
            )
            return
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

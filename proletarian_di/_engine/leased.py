"""Lease mode: claim due jobs under a lease and commit at once, run each with no
transaction open and no row locked (the heartbeat renews the lease meanwhile), and write
its outcome in a short transaction of its own, only if the lease is still the worker's.

What happens to one job, top to bottom: `run_leased` (the claim: the first job started,
the rest reserved) → `_start_leased` (a reserved job starts, its attempt counted) →
`_run_leased` (decode, `Steps._run`, then `write`: the archive or `Steps.record_attempt`
under the lease) → `_while_leased` (a lost connection is tried again for half the lease).
A thread's last success of a claim is archived together with its next claim
(`Dialect.archive_leased_and_claim`: one commit, and on PostgreSQL one statement), whose
jobs `_run_claimed` runs next. See `_leases` for how leases live in the job row.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from typing import Any

from .._store.datasource import ConnectionFactory
from .._store.dialects import Dialect, LeaseClaim, LeasedRow, Runs, is_transient
from .._store.dialects.base import died_running, reserved
from ..errors import LeaseExpired
from ..jobs import Job, Signal
from .attempts import lease_holder
from .leases import holding, lease_token
from .slot import Replaced, Slot
from .steps import Steps


class LeaseMode(Steps):
    """Lease mode's path."""

    def run_leased(
        self,
        connect: ConnectionFactory,
        slot: Slot | None = None,
        limit: int = 1,
        going_on: Callable[[], bool] | None = None,
    ) -> list[bool]:
        """Lease mode: claim up to `limit` due jobs under a lease and commit; run each with
        no connection held, and write its outcome in a short transaction of its own, if
        the lease is still ours. A worker thread that will call again (`going_on`, true
        until it stops) has its next claim made in the transaction that archives its last
        success, and runs it here. [] if none was due or the queue is paused."""
        if self.pauses.known_paused():
            return []
        claim = self._next_claim(slot, limit)
        with connect() as conn:
            dialect = self.dialect(conn)
            if self.rates is None and self.fair is None:
                claimed = dialect.lease_claim(conn, *claim)
            else:
                claimed = dialect.lease_claim_by(conn, claim, self._fair_select(claim), self._take)
            rows = self._claimed(conn, dialect, claimed, claim, slot)
            dialect.rollback(conn)
        outcomes: list[bool] = []
        while rows:
            rows, claim = self._run_claimed(connect, dialect, rows, claim, slot, outcomes, going_on)
            if rows and going_on is not None and not going_on():
                with connect() as conn:  # stopping: the jobs claimed ahead go back unrun
                    self.dialect(conn).give_back(conn, rows, claim.token)
                break
        return outcomes

    def _next_claim(self, slot: Slot | None, limit: int) -> LeaseClaim:
        """A claim of up to `limit` jobs under a new lease, from the thread's frontier."""
        assert self.options.lease_ms is not None
        start = None if self.frontier is None else self.frontier.start(slot)
        return LeaseClaim(
            self.options.queue, self.clock(), limit, start, self.options.lease_ms, lease_token()
        )

    def _take(self, conn: Any, dialect: Dialect) -> bool:
        """Whether a lease claim under a rate limit or fair turns commits: not on a paused
        queue, whose rows go back with the slot their start took (in the claim's select, by
        group key), and only with a slot taken (by queue)."""
        if self.pauses.check(dialect.session(conn)):
            return False
        rates = self.rates
        return rates is None or rates.by_group or rates.take(conn, dialect)

    def _fair_select(self, claim: LeaseClaim) -> Callable[[Any], list[Any]] | None:
        """`fair`: what selects the rows a lease claim takes, the next group's turn."""
        fair = self.fair
        if fair is None:
            return None
        return lambda conn: fair.claim(
            conn, self.dialect(conn), claim.now, lease=True, gate=self.rates
        )

    def _claim_ahead(
        self, slot: Slot | None, limit: int, going_on: Callable[[], bool] | None
    ) -> LeaseClaim | None:
        """The claim a success's archive makes too: only after the last job of a claim, by a
        thread that goes on (`going_on`), on a queue not known to be paused."""
        if going_on is None or not going_on() or self.pauses.known_paused():
            return None
        if self.rates is not None or self.fair is not None:
            return None  # a start is counted, a turn taken, in a claim of its own
        if slot is not None and slot.abandoned:
            return None
        return self._next_claim(slot, limit)

    def _claimed(
        self,
        conn: Any,
        dialect: Dialect,
        rows: list[LeasedRow],
        claim: LeaseClaim,
        slot: Slot | None,
    ) -> list[LeasedRow]:
        """The rows `claim` took, unless the queue is paused (they go back unrun); the
        frontier learns where the claim ended."""
        if rows and self.pauses.check(dialect.session(conn)):
            dialect.give_back(conn, rows, claim.token)
            rows = []
        if self.frontier is not None:
            if rows:
                self.frontier.claimed(slot, max(dialect.position(row) for row in rows))
            else:
                self.frontier.missed(slot)
        if rows:
            self.on_claim()
        return rows

    def _run_claimed(
        self,
        connect: ConnectionFactory,
        dialect: Dialect,
        rows: list[LeasedRow],
        claim: LeaseClaim,
        slot: Slot | None,
        outcomes: list[bool],
        going_on: Callable[[], bool] | None,
    ) -> tuple[list[LeasedRow], LeaseClaim]:
        """Run the jobs of one claim; the rows the last one's archive claimed next, if any,
        with their claim."""
        token = claim.token
        ahead: tuple[list[LeasedRow], LeaseClaim] = ([], claim)
        with holding(self.leases, rows, token):
            for n, row in enumerate(rows):
                if slot is not None:
                    slot.rest = list(rows[n + 1 :])
                if not row[10] and not self._start_leased(connect, dialect, row, token):
                    continue

                last = going_on if n == len(rows) - 1 else None
                next_claim = functools.partial(self._claim_ahead, slot, claim.limit, last)
                try:
                    outcome, ahead = self._run_leased(
                        connect, dialect, row, claim, slot, next_claim
                    )
                except Replaced:
                    with connect() as conn:
                        self.dialect(conn).give_back(conn, rows[n + 1 :], token)
                    raise
                outcomes.append(outcome)
        return ahead

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
        claim: LeaseClaim,
        slot: Slot | None,
        next_claim: Callable[[], LeaseClaim | None],
    ) -> tuple[bool, tuple[list[LeasedRow], LeaseClaim]]:
        """Run one leased job and write its outcome: whether it succeeded, and the rows its
        archive claimed next (`next_claim`), with their claim."""
        raw_id, token = row[0], claim.token
        job, undecodable = self._job(row, None, dialect)
        error: BaseException | None = undecodable
        stage, back = "handler", 1
        result: Any = None
        lease = row[9]
        if lease is not None and died_running(lease):
            job = dataclasses.replace(
                job, attempts=job.attempts - 1, started_at=None, worker=lease_holder(lease)
            )
            error, back = self._lease_expired(job), 2
        elif error is not None:
            self.emit("payload_decode_error", job, exception=error)
            stage = "payload"
        else:
            if slot is not None:
                slot.begin(job, raw_id, self.options.timeout_s(job.job_type), token)
            try:
                error, result = self._run(None, dialect, job, slot)
                if slot is not None:
                    slot.end()
            finally:
                if slot is not None and not slot.abandoned:
                    slot.clear()
        failure = error
        ahead: tuple[list[LeasedRow], LeaseClaim] = ([], claim)

        def write(conn: Any) -> bool:
            nonlocal ahead
            dialect = self.dialect(conn)
            if isinstance(failure, Signal):
                self.record_signal(conn, dialect, raw_id, job, failure, token)
                return False
            if failure is not None:
                self.record_attempt(
                    conn, dialect, raw_id, job, failure, stage=stage, lease=token, back=back
                )
                return False
            runs, due = Runs([job.started_at], job.worker), job.process_at
            probe = self.ends_to_write(conn, dialect)
            if result is not None:  # the result, the archive and the ends in one transaction
                archived = dialect.archive_under_lease(conn, raw_id, token, self.clock(), due, runs)
                if archived:
                    self.keep_result(conn, dialect, raw_id, job, result)
                    ends = probe and dialect.waited_on(conn, [raw_id])
                    waiting = (
                        self.ended(conn, dialect, [raw_id], "success", known=True) if ends else []
                    )
                    dialect.commit(conn)
                    self.recheck(conn, dialect, waiting)
                else:
                    self._lease_lost(job)
                return archived
            following = next_claim()
            if following is None:
                archived, waited = dialect.archive_leased(
                    conn, raw_id, token, self.clock(), due, runs, probe
                )
            else:
                archived, rows, waited = dialect.archive_leased_and_claim(
                    conn, raw_id, token, self.clock(), due, runs, following, probe
                )
                ahead = (self._claimed(conn, dialect, rows, following, slot), following)
            if not archived:
                self._lease_lost(job)
            elif waited:
                self.ends_after_commit(conn, dialect, [raw_id])
            return archived

        if not self._while_leased(connect, write):
            return False, ahead
        self.stats.add("succeeded", job)
        self.emit("job_finished", job, status="success")
        return True, ahead

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

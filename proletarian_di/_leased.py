"""Lease mode: claim due jobs under a lease and commit at once, run each with no
transaction open and no row locked (the heartbeat renews the lease meanwhile), and write
its outcome in a short transaction of its own, only if the lease is still the worker's.

What happens to one job, top to bottom: `run_leased` (the claim: the first job started,
the rest reserved) → `_start_leased` (a reserved job starts, its attempt counted) →
`_run_leased` (decode, `Steps._run`, then `write`: the archive or `Steps.record_attempt`
under the lease) → `_while_leased` (a lost connection is tried again for half the lease).
See `_leases` for how leases live in the job row.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from ._attempts import lease_holder
from ._datasource import ConnectionFactory
from ._dialects import Dialect, LeasedRow, Runs, is_transient
from ._dialects.base import died_running, reserved
from ._leases import holding, lease_token
from ._slot import Replaced, Slot
from ._steps import Steps
from .errors import LeaseExpired
from .jobs import Job


class LeaseMode(Steps):
    """Lease mode's path."""

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
            runs = Runs([job.started_at], job.worker)
            if not dialect.archive_leased(conn, raw_id, token, self.clock(), job.process_at, runs):
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

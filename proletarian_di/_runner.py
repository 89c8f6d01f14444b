"""Claim one job, run its handler, and settle it, all in one transaction.

This is the seeds' poll/lock/run/archive cycle for a single job, shared by
worker threads, `process_next_job` and `testing.run_due_jobs`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from ._dialects import Dialect, JobRow, dialect_for
from ._logging import describe, safe_log, wanted
from ._options import WorkerOptions
from .errors import PayloadError
from .jobs import Job
from .retry import RetrySpec, to_retry_spec

Handler = Callable[..., Any]


class Stats:
    """Counts of job outcomes, safe to update from many threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.succeeded = self.failed = self.retried = self.abandoned = 0

    def add(self, outcome: str) -> None:
        with self._lock:
            setattr(self, outcome, getattr(self, outcome) + 1)

    def as_dict(self) -> dict[str, int]:
        with self._lock:
            return {
                "succeeded": self.succeeded,
                "failed": self.failed,
                "retried": self.retried,
                "abandoned": self.abandoned,
            }


class Slot:
    """What a worker thread holds right now, so `stop()` can abandon it."""

    def __init__(self) -> None:
        self.conn: Any = None
        self.dialect: Dialect | None = None
        self.job: Job | None = None


class JobRunner:
    """Runs the next due job of one queue on a given connection."""

    def __init__(self, handler: Handler, options: WorkerOptions, stats: Stats | None = None):
        if not callable(handler):
            raise TypeError(f"handler must be callable, got {handler!r}")
        self.handler = handler
        self.options = options
        self.stats = stats or Stats()
        self.advanced = options.handler_fn_mode == "advanced"
        self.log = options.log
        self.clock = options.clock
        self.serializer = options.serializer
        self.base = {"queue_worker_id": options.queue_worker_id}

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

    def run_next(self, conn: Any, slot: Slot | None = None) -> bool | None:
        """Run one due job: True if it succeeded, False if it failed, None if none was due."""
        outcomes = self.run_batch(conn, slot, limit=1)
        return outcomes[0] if outcomes else None

    def run_batch(
        self,
        conn: Any,
        slot: Slot | None = None,
        limit: int = 1,
        dialect: Dialect | None = None,
    ) -> list[bool]:
        """Claim up to `limit` due jobs in one transaction and settle each; [] if none.

        Each job is settled on its own (retry or failure as it comes); successes
        are archived together at the end, in the commit's round trip.
        """
        dialect = dialect or self.dialect(conn)
        rows = dialect.claim(conn, self.options.queue, self.clock(), limit)
        if not rows:
            dialect.rollback(conn)
            return []
        outcomes: list[bool] = []
        succeeded: list[Any] = []
        finished: list[Job] = []
        try:
            for row in rows:
                job, decode_error = self._job(row, conn, dialect)
                if slot is not None:
                    slot.job = job
                if decode_error is not None:
                    self.emit("payload_decode_error", job, exception=decode_error)
                    self._fail(conn, dialect, row[0], job, decode_error)
                    outcomes.append(False)
                elif self._run(conn, dialect, row[0], job):
                    succeeded.append(row[0])
                    finished.append(job)
                    outcomes.append(True)
                else:
                    outcomes.append(False)
            if succeeded:
                dialect.archive_and_commit(conn, succeeded, self.clock())
            else:
                dialect.commit(conn)
        finally:
            if slot is not None:
                slot.job = None
        for job in finished:
            self.stats.add("succeeded")
            self.emit("job_finished", job, status="success")
        return outcomes

    def _job(self, row: JobRow, conn: Any, dialect: Dialect) -> tuple[Job, PayloadError | None]:
        raw_id, queue, job_type, text, attempts, enqueued_at, process_at = row
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
            connection=conn,
        )
        return job, error

    def _run(self, conn: Any, dialect: Dialect, raw_id: Any, job: Job) -> bool:
        self.emit("handling_job", job)
        if self.advanced:
            dialect.savepoint(conn)
        try:
            if self.advanced:
                self.handler(job)
            else:
                self.handler(job.job_type, job.payload)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            if self.advanced:
                dialect.rollback_to_savepoint(conn)
            self.emit("handler_exception", job, exception=exc)
            self._retry_or_fail(conn, dialect, raw_id, job, exc)
            return False
        if self.advanced:
            dialect.release_savepoint(conn)
        return True

    def _retry_spec(self, job: Job, exc: BaseException) -> RetrySpec | None:
        strategy = self.options.retry_strategy_fn
        if strategy is None:
            return None
        try:
            return to_retry_spec(strategy(job, exc))
        except Exception as error:
            self.emit("retry_strategy_error", job, exception=error)
            return None

    def _retry_or_fail(
        self, conn: Any, dialect: Dialect, raw_id: Any, job: Job, exc: BaseException
    ) -> None:
        spec = self._retry_spec(job, exc)
        if spec is None or job.attempts > spec.retries:
            self.emit("not_retrying", job, retries=spec.retries if spec else 0)
            self._fail(conn, dialect, raw_id, job, exc)
            return
        delay_ms = spec.delay_ms(job.attempts)
        process_at = self.clock() + timedelta(milliseconds=delay_ms)
        dialect.reschedule(conn, raw_id, job.attempts, process_at)
        self.stats.add("retried")
        self.emit(
            "retrying",
            job,
            retry=job.attempts,
            retries=spec.retries,
            delay_ms=delay_ms,
            process_at=process_at.isoformat(),
        )

    def _fail(self, conn: Any, dialect: Dialect, raw_id: Any, job: Job, exc: BaseException) -> None:
        dialect.archive(conn, [raw_id], "failure", self.clock())
        failed_job_fn = self.options.failed_job_fn
        if failed_job_fn is not None:
            dialect.savepoint(conn)
            try:
                failed_job_fn(job, exc)
            except KeyboardInterrupt:
                raise
            except BaseException as error:
                dialect.rollback_to_savepoint(conn)
                self.emit("failed_job_fn_error", job, exception=error)
            else:
                dialect.release_savepoint(conn)
        self.stats.add("failed")
        self.emit("job_failed", job, status="failure", exception=exc)

"""What one worker thread holds right now (`Slot`): the job it runs, its deadline, its
connection or batch, so that the timeout watchdog or `stop()` can give up on the job from
another thread, and the thread learns of it (`Replaced`) when its handler returns."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import JobTimedOut
from ..jobs import Job

if TYPE_CHECKING:
    from .._store.dialects import Dialect
    from .cpu import Pin
    from .held import Batch, Checkout

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
        self.pin: Pin | None = None
        """Where the thread keeps to the worker's shared CPU (`share_cpu`); its handlers
        run on its own CPUs."""
        self.progress: Any = None
        """The running job's last `report_progress` value, None until it reports one."""
        self.on_progress: Callable[[], None] = lambda: None
        """Called after each report (the worker's registry writes it soon)."""

    def mark(self, activity: str) -> None:
        """The thread moves on to `activity` now."""
        self.activity, self.since = activity, time.monotonic()

    def begin(self, job: Job, raw_id: Any, timeout_s: float | None, lease: str | None) -> None:
        """A job starts running here, to be abandoned `timeout_s` from now (None: never)."""
        with self.lock:
            self.job, self.raw_id, self.lease = job, raw_id, lease
            self.progress = self.timed_out = None
            self.started = self.since = time.monotonic()
            self.activity = "running"
            self.deadline = None if timeout_s is None else self.started + timeout_s

    def report_progress(self, job: Job, value: Any) -> None:
        """`job` reports its progress: kept while it is still the job running here (a
        thread its handler left behind cannot speak for the next job)."""
        with self.lock:
            if self.job is not job:
                return
            self.progress = value
        self.on_progress()

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
            self.progress = None

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

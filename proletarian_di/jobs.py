"""The job as handlers and callbacks see it, and what a handler can tell its worker: the
job's progress (`Job.report_progress`), to run it again later (`Snooze`) or to give it up
(`Cancel`)."""

from __future__ import annotations

import contextvars
import dataclasses
import json
import math
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from .errors import ConfigurationError, NoCurrentJob

DEFAULT_QUEUE = "default"
"""The queue used when none is named (Proletarian's `:proletarian/default`)."""


class ProgressSink(Protocol):
    """What keeps a running job's progress (a worker thread's `Slot`)."""

    def report_progress(self, job: Job, value: Any) -> None: ...


@dataclasses.dataclass(frozen=True)
class Job:
    """A claimed job.

    `attempts` is the number of the current attempt, starting at 1. `last_error`
    is the previous failed attempt's error (type, message and traceback), None on a
    first attempt. `priority` is the one it was enqueued with. `connection` is the
    connection of the job's own transaction (advanced mode and callbacks): writes made
    through it commit or roll back together with the job's archive. `trace_context` is the
    OpenTelemetry context of the span that enqueued it (the propagator's fields as JSON),
    None when it was enqueued outside a span. `started_at` is when this attempt started (by
    the worker's clock) and `worker` who runs it (`host:pid thread`): both are kept with the
    attempt's outcome (see `admin.get_job`'s history).
    """

    job_id: uuid.UUID
    queue: str
    job_type: str
    payload: Any
    attempts: int
    enqueued_at: datetime
    process_at: datetime
    last_error: str | None = None
    priority: int = 0
    connection: Any = dataclasses.field(default=None, repr=False, compare=False)
    trace_context: str | None = dataclasses.field(default=None, repr=False)
    started_at: datetime | None = dataclasses.field(default=None, repr=False, compare=False)
    worker: str | None = dataclasses.field(default=None, repr=False, compare=False)
    _progress: ProgressSink | None = dataclasses.field(
        default=None, init=False, repr=False, compare=False
    )
    """Where the running job's progress goes: its worker thread's slot."""
    _parents: Callable[[Job], dict[uuid.UUID, Any]] | None = dataclasses.field(
        default=None, init=False, repr=False, compare=False
    )
    """Reads the return values of the jobs it depends on (its worker's)."""

    def parent_results(self) -> dict[uuid.UUID, Any]:
        """The return values of the jobs this one depends on (`depends_on`, a workflow's
        `after=`), by job id: None for one that returned nothing, or ended without
        succeeding (`when="complete"`). Empty for a job without any, or outside a worker."""
        return {} if self._parents is None else self._parents(self)

    def report_progress(self, value: float | dict[str, Any]) -> None:
        """Say how far this attempt is: a fraction from 0 to 1, or a small JSON object (at
        most `MAX_PROGRESS_BYTES` as JSON). Its worker shows the latest value in the live
        workers' table within a second (writes are coalesced), where `admin.get_job`, `jobs
        show` and the dashboard read it while the job runs. Outside a worker
        (`process_next_job`) it is checked and then dropped: no other connection sees it."""
        checked = progress_value(value)
        if self._progress is not None:
            self._progress.report_progress(self, checked)


MAX_PROGRESS_BYTES = 2048
"""The largest progress object, as compact JSON."""


def progress_value(value: Any) -> float | dict[str, Any]:
    """`value` as progress is stored: a float in [0, 1], or a JSON object of at most
    `MAX_PROGRESS_BYTES`; `ConfigurationError` naming what is wrong otherwise."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if math.isfinite(value) and 0 <= value <= 1:
            return float(value)
        raise ConfigurationError(f"progress must be a fraction from 0 to 1, got {value!r}")
    if not isinstance(value, dict):
        raise ConfigurationError(
            f"progress must be a fraction from 0 to 1 or a JSON object, got {value!r}"
        )
    try:
        text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"progress object is not JSON: {exc}") from None
    if len(text.encode()) > MAX_PROGRESS_BYTES:
        raise ConfigurationError(
            f"progress object is {len(text.encode())} bytes as JSON, more than the "
            f"{MAX_PROGRESS_BYTES} allowed"
        )
    loaded: dict[str, Any] = json.loads(text)
    return loaded


_current: contextvars.ContextVar[Job | None] = contextvars.ContextVar(
    "proletarian_di_current_job", default=None
)


def current_job() -> Job:
    """The job whose handler is running in this context: any handler mode, either worker
    mode, sync or async. `NoCurrentJob` outside a handler."""
    job = _current.get()
    if job is None:
        raise NoCurrentJob("current_job() is called outside a running job's handler")
    return job


def running(job: Job) -> contextvars.Token[Job | None]:
    """Make `job` the current job (until `_current.reset(token)`)."""
    return _current.set(job)


class Snooze(Exception):
    """Raise it (or return it) from a handler to run the job again `delay_ms` from now: no
    failure is recorded, no retry spent, and the attempt is not counted. Raised, it undoes an
    advanced handler's writes like any exception; returned, they commit."""

    def __init__(self, delay_ms: int) -> None:
        if isinstance(delay_ms, bool) or not isinstance(delay_ms, int) or delay_ms < 0:
            raise ConfigurationError(
                f"Snooze takes a delay of 0 or more milliseconds (an int), got {delay_ms!r}"
            )
        super().__init__(delay_ms)
        self.delay_ms = delay_ms

    def __str__(self) -> str:
        return f"snoozed for {self.delay_ms} ms"


class Cancel(Exception):
    """Raise it (or return it) from a handler to give the job up: it is archived as
    "cancelled", with `reason` as its error, and not retried. Raised, it undoes an advanced
    handler's writes like any exception; returned, they commit."""

    def __init__(self, reason: str = "cancelled by its handler") -> None:
        if not isinstance(reason, str):
            raise ConfigurationError(f"Cancel takes a reason (a str), got {reason!r}")
        super().__init__(reason)
        self.reason = reason

    def __str__(self) -> str:
        return self.reason


Signal = Snooze | Cancel
"""What a handler can raise or return to settle its job other than by succeeding or
failing."""

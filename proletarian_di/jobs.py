"""The job as handlers and callbacks see it."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import datetime
from typing import Any

DEFAULT_QUEUE = "default"
"""The queue used when none is named (Proletarian's `:proletarian/default`)."""


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

"""OpenTelemetry traces: a span per job run, in the trace of the request that enqueued the job.

`enqueue` inside a span keeps the span's context with the job (the schema's `trace_context`
column). A worker given `TracingObserver()` runs each attempt in a CONSUMER span named
`process <job type>`, child of that context (so the request and the job's run are one trace)
and linked to it, as OpenTelemetry's messaging conventions have it; spans the handler starts
are children of the job's span. Needs `opentelemetry-api` (the `tracing` extra); the SDK and
its exporters are the application's to set up.

    worker = create_queue_worker(pool, handler, observers=[TracingObserver()])
"""

from __future__ import annotations

import dataclasses
import json
import threading
from contextvars import Token
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode

from .. import __version__
from ..errors import JobTimedOut
from ..jobs import Cancel, Job, Snooze
from ..observers import Observer

__all__ = ["TracingObserver", "tracing"]

SYSTEM = "proletarian"
"""The span's `messaging.system`."""
_CUT_SHORT = ("timed_out", "abandoned")
"""Outcomes the worker counts from another thread while the handler still runs."""


@dataclasses.dataclass
class _Run:
    """A job's span while its handler runs, and the context token to detach after it."""

    span: Span
    token: Token[otel_context.Context]
    outcome: str | None = None


class TracingObserver(Observer):
    """Traces each job attempt a worker runs: a span per run, joined to the enqueuer's trace.

    Attributes: `messaging.system` ("proletarian"), `messaging.operation.type` ("process"),
    `messaging.destination.name` (the queue), `messaging.message.id` (the job id),
    `proletarian.job_type`, `proletarian.attempt` (1 for the first) and, at the end,
    `proletarian.outcome`: "succeeded", "failed", or "timed_out" (also "abandoned" for a job
    given up at `stop()`, "snoozed" and "cancelled" for a handler's `Snooze` and `Cancel`). A
    failed attempt records its exception and sets status ERROR.
    """

    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        self.tracer = trace.get_tracer(__name__, __version__, tracer_provider)
        self._lock = threading.Lock()
        self._runs: dict[tuple[Any, int, int], _Run] = {}

    def job_started(self, job: Job) -> None:
        """Start the job's span as the thread's current one, so the handler's spans nest."""
        parent = _extract(job.trace_context)
        remote = trace.get_current_span(parent).get_span_context()
        span = self.tracer.start_span(
            f"process {job.job_type}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes={
                "messaging.system": SYSTEM,
                "messaging.operation.type": "process",
                "messaging.operation.name": "process",
                "messaging.destination.name": job.queue,
                "messaging.message.id": str(job.job_id),
                "proletarian.job_type": job.job_type,
                "proletarian.attempt": job.attempts,
            },
            links=[Link(remote)] if remote.is_valid else None,
        )
        token = otel_context.attach(trace.set_span_in_context(span, parent))
        with self._lock:
            self._runs[_key(job)] = _Run(span, token)

    def job_ended(self, job: Job, error: BaseException | None, seconds: float) -> None:
        """Record the attempt's outcome (and its exception), then end the span."""
        with self._lock:
            run = self._runs.pop(_key(job), None)
        if run is None:
            return
        span = run.span
        try:
            if run.outcome is not None:
                outcome = run.outcome
            elif error is None:
                outcome = "succeeded"
            elif isinstance(error, (Snooze, Cancel)):
                outcome = "snoozed" if isinstance(error, Snooze) else "cancelled"
                span.set_attribute("proletarian.outcome", outcome)
                span.set_attribute("proletarian.reason", str(error))
                return
            else:
                outcome = "timed_out" if isinstance(error, JobTimedOut) else "failed"
            span.set_attribute("proletarian.outcome", outcome)
            if error is not None:
                span.record_exception(error)
                span.set_attribute("error.type", type(error).__qualname__)
            if outcome != "succeeded":
                reason = f"{type(error).__name__}: {error}" if error is not None else outcome
                span.set_status(Status(StatusCode.ERROR, reason))
        finally:
            otel_context.detach(run.token)
            span.end()

    def job_counted(self, job: Job, outcome: str) -> None:
        """A job timed out or abandoned while its handler still runs (a sync handler left to
        the watchdog): its span says so when the handler returns."""
        if outcome not in _CUT_SHORT:
            return
        with self._lock:
            runs = [run for key, run in self._runs.items() if key[:2] == (job.job_id, job.attempts)]
            for run in runs:
                run.outcome = outcome
        for run in runs:
            run.span.add_event(f"proletarian.{outcome}")


def tracing(tracer_provider: trace.TracerProvider | None = None) -> TracingObserver:
    """A `TracingObserver` on `tracer_provider` (default: the global one), for
    `create_queue_worker(..., observers=[tracing()])`."""
    return TracingObserver(tracer_provider)


def _key(job: Job) -> tuple[Any, int, int]:
    """A run is one attempt of one job on one thread."""
    return job.job_id, job.attempts, threading.get_ident()


def _extract(stored: str | None) -> otel_context.Context:
    """The context stored at enqueue, on an empty one: a job enqueued outside a span (or with
    an unreadable context) starts a trace of its own, whatever the runner's thread holds."""
    empty = otel_context.Context()
    if not stored:
        return empty
    try:
        carrier = json.loads(stored)
        if not isinstance(carrier, dict):
            return empty
        fields = {k: v for k, v in carrier.items() if isinstance(k, str) and isinstance(v, str)}
        return propagate.extract(fields, context=empty)
    except Exception:
        return empty

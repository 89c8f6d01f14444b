"""The trace context `enqueue` keeps with a job, so that its run joins the enqueuer's trace.

The core never imports OpenTelemetry: where the application has not loaded its API, there is
no span to capture and this costs one dictionary lookup per enqueue.
"""

from __future__ import annotations

import json
import sys

from ..errors import SchemaError
from .tables import UPGRADE_HINT

TRACE_COLUMN = "trace_context"
_UNDEFINED_COLUMN = ("42703", "42S22")  # the SQLSTATEs of PostgreSQL and MySQL
_BAD_FIELD = 1054  # MySQL's ER_BAD_FIELD_ERROR (PyMySQL's first argument)


def current_trace_context() -> str | None:
    """The current span's context as the global propagator writes it (W3C `traceparent`
    by default), in compact JSON; None outside a valid span or without OpenTelemetry."""
    if "opentelemetry.trace" not in sys.modules:
        return None
    from opentelemetry import propagate, trace

    if not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return json.dumps(carrier, separators=(",", ":"), sort_keys=True) if carrier else None


def missing_column(
    exc: BaseException, job_table: str, column: str = TRACE_COLUMN
) -> SchemaError | None:
    """A clear error for an INSERT that failed because `job_table` has no trace context
    column yet (a schema older than the observability step), else None; with another
    `column`, any error (truthy) when that column is the one missing."""
    state = getattr(exc, "sqlstate", None)
    code = exc.args[0] if exc.args else None
    if (state not in _UNDEFINED_COLUMN and code != _BAD_FIELD) or column not in str(exc):
        return None
    return SchemaError(
        f"enqueue inside an OpenTelemetry span keeps its trace context in "
        f"{job_table}.{TRACE_COLUMN}, which this schema lacks (it is older than the "
        f"observability step); nothing was written: {UPGRADE_HINT}"
    )

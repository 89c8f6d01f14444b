"""Testing support: run the due jobs now, in the calling thread, with no worker threads."""

from __future__ import annotations

from typing import Any

from ._datasource import connection_factory
from ._options import worker_options
from ._runner import Handler, JobRunner

DEFAULT_MAX_JOBS = 10_000


def run_due_jobs(
    data_source: Any, handler: Handler, *, max_jobs: int = DEFAULT_MAX_JOBS, **options: Any
) -> int:
    """Run every due job of the queue in this thread, one transaction each; return how many ran.

    Takes the same options as `create_queue_worker` (queue, retry_strategy_fn,
    failed_job_fn, handler_fn_mode, job_table, ...). A retried attempt counts
    as a run, and a retry that is due at once runs again in the same call;
    jobs scheduled for later stay waiting. Stops after `max_jobs` runs so a
    handler that keeps enqueueing due jobs cannot loop forever.
    """
    if not isinstance(max_jobs, int) or max_jobs < 0:
        raise ValueError(f"max_jobs must be a non-negative int, got {max_jobs!r}")
    runner = JobRunner(handler, worker_options(**options))
    ran = 0
    try:
        with connection_factory(data_source)() as conn:
            runner.dialect(conn).check_server(conn)
            while ran < max_jobs and runner.run_next(conn) is not None:
                ran += 1
    finally:
        runner.loops.close()
    return ran

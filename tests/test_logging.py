"""The default log: standard `logging` records, with the traceback of every error."""

from __future__ import annotations

import logging
from typing import Any

from proletarian_di import RetrySpec, process_next_job

from backends import Events, enqueue_committed


def records(caplog: Any, event: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "proletarian_event", None) == event]


def failing_handler(job_type: str, payload: Any) -> None:
    print(payload["email"])


def test_a_failure_is_logged_once_at_error_with_the_handlers_traceback(backend, pool, caplog):
    caplog.set_level(logging.DEBUG, logger="proletarian_di")
    enqueue_committed(backend, ("welcome", {}))
    assert process_next_job(pool, failing_handler) is False
    (failed,) = records(caplog, "job_failed")
    assert failed.levelno == logging.ERROR
    assert failed.exc_info is not None and failed.exc_info[0] is KeyError
    (seen,) = records(caplog, "handler_exception")
    assert seen.levelno == logging.DEBUG and seen.exc_info is None
    text = caplog.text
    assert text.count("Traceback (most recent call last)") == 1, "one traceback, not one per event"
    assert 'print(payload["email"])' in text, "the line that failed is shown"
    shown = [line.strip() for line in text.splitlines() if line.strip().startswith("File ")]
    assert shown[0].endswith("in failing_handler"), "the worker's own frames are not shown"
    assert all(r.levelno < logging.WARNING for r in caplog.records if r is not failed)


def test_a_retry_is_one_warning_line_with_the_error_and_no_traceback(backend, pool, caplog):
    caplog.set_level(logging.DEBUG, logger="proletarian_di")
    enqueue_committed(backend, ("welcome", {}))
    retry_once = lambda job, exc: RetrySpec(retries=1, delays=[60_000])  # noqa: E731
    assert process_next_job(pool, failing_handler, retry_strategy_fn=retry_once) is False
    (retrying,) = records(caplog, "retrying")
    assert retrying.levelno == logging.WARNING and retrying.exc_info is None
    assert "exception=\"KeyError: 'email'\"" in retrying.getMessage()
    assert "retry=1 retries=1" in retrying.getMessage()
    assert "Traceback" not in caplog.text
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == [retrying]


def test_callback_errors_are_logged_with_their_traceback(backend, pool, caplog):
    caplog.set_level(logging.DEBUG, logger="proletarian_di")
    enqueue_committed(backend, ("welcome", {}))

    def strategy(job: Any, exc: BaseException) -> RetrySpec:
        raise ZeroDivisionError("strategy bug")

    def on_failure(job: Any, exc: BaseException) -> None:
        raise LookupError("dead-letter bug")

    assert (
        process_next_job(
            pool, failing_handler, retry_strategy_fn=strategy, failed_job_fn=on_failure
        )
        is False
    )
    for event, kind in (
        ("retry_strategy_error", ZeroDivisionError),
        ("failed_job_fn_error", LookupError),
    ):
        (record,) = records(caplog, event)
        assert record.levelno == logging.ERROR
        assert record.exc_info is not None and record.exc_info[0] is kind


def test_a_log_function_of_ones_own_still_gets_the_exception(backend, pool):
    enqueue_committed(backend, ("welcome", {}))
    events = Events()
    assert process_next_job(pool, failing_handler, log=events) is False
    (event,) = events.named("handler_exception")
    assert isinstance(event["exception"], KeyError)
    assert event["exception"].__traceback__ is not None


def test_a_timed_out_attempt_that_is_retried_logs_no_error(backend, pool, caplog):
    """A timeout is a WARNING, as a retry is: an ERROR is for a job that failed for good."""
    import asyncio

    caplog.set_level(logging.DEBUG, logger="proletarian_di")
    enqueue_committed(backend, ("slow", {}))

    async def slow(job_type: str, payload: Any) -> None:
        await asyncio.sleep(30)

    retry_once = lambda job, exc: RetrySpec(retries=1, delays=[60_000])  # noqa: E731
    options = {"job_timeout_ms": 200, "retry_strategy_fn": retry_once}
    assert process_next_job(pool, slow, **options) is False
    (timed_out,) = records(caplog, "job_timed_out")
    assert timed_out.levelno == logging.WARNING
    (retrying,) = records(caplog, "retrying")
    assert "JobTimedOut" in retrying.getMessage()
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []

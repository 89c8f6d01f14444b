"""Structured log events: `log(event, data)`, written to `logging` by default."""

from __future__ import annotations

import logging
import traceback
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._types import LogFn

logger = logging.getLogger("proletarian_di")


_LEVELS = {
    "polling_for_jobs": logging.DEBUG,
    "handling_job": logging.DEBUG,
    "job_finished": logging.INFO,
    "handler_exception": logging.WARNING,
    "retrying": logging.INFO,
    "not_retrying": logging.WARNING,
    "job_failed": logging.ERROR,
    "payload_decode_error": logging.ERROR,
    "retry_strategy_error": logging.ERROR,
    "failed_job_fn_error": logging.ERROR,
    "polling_error": logging.ERROR,
    "listener_error": logging.WARNING,
    "tables_elsewhere": logging.INFO,
    "job_abandoned": logging.ERROR,
    "transaction_lost": logging.ERROR,
    "attempt_not_recorded": logging.ERROR,
    "job_timed_out": logging.ERROR,
    "lease_expired": logging.WARNING,
    "lease_lost": logging.WARNING,
    "heartbeat_error": logging.WARNING,
    "crash_loop": logging.ERROR,
    "worker_thread_died": logging.CRITICAL,
    "on_shutdown_error": logging.ERROR,
    "log_error": logging.ERROR,
}
# Events whose exception repeats one already logged with its traceback.
_NO_TRACEBACK = frozenset({"job_failed", "not_retrying"})


def describe(exc: BaseException) -> str:
    """`Type: message`, even for exceptions whose __str__ itself fails."""
    try:
        message = str(exc)
    except Exception:
        message = "<unprintable>"
    name = type(exc).__qualname__
    return f"{name}: {message}" if message else name


ERROR_TEXT_LIMIT = 8_000


def error_text(exc: BaseException, limit: int = ERROR_TEXT_LIMIT) -> str:
    """What a job keeps of a failed attempt: `Type: message`, then the traceback, at most
    `limit` characters (a long one keeps its first lines and its end, where the error is)."""
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    body = "".join(lines[:-1]).rstrip()
    text = describe(exc) + ("\n\n" + body if body else "")
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")  # a lone surrogate: \udcff
    if len(text) <= limit:
        return text
    head = limit // 4
    cut = "\n… (cut) …\n"
    return text[:head] + cut + text[-(limit - head - len(cut)) :]


def default_log(event: str, data: dict[str, Any]) -> None:
    """Write the event to the `proletarian_di` logger, with the data as `key=value`."""
    level = _LEVELS.get(event, logging.INFO)
    if not logger.isEnabledFor(level):
        return
    fields = " ".join(f"{key}={value}" for key, value in data.items() if key != "exception")
    exc = data.get("exception")
    exc_info = None
    if isinstance(exc, BaseException):
        fields += f" exception={describe(exc)!r}"
        if event not in _NO_TRACEBACK:
            exc_info = exc
    logger.log(
        level,
        "%s %s",
        event,
        fields,
        exc_info=exc_info,
        extra={"proletarian_event": event, "proletarian_data": data},
    )


def wanted(log: LogFn, event: str) -> bool:
    """False when the default log would drop the event: skip building its data."""
    return log is not default_log or logger.isEnabledFor(_LEVELS.get(event, logging.INFO))


def safe_log(log: LogFn, event: str, data: dict[str, Any]) -> None:
    """Call the user's log function without letting its errors stop a worker."""
    try:
        log(event, data)
    except Exception as exc:
        if log is not default_log:
            default_log("log_error", {"event": event, "exception": exc})

"""Structured log events: `log(event, data)`, written to `logging` by default."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sysconfig
import traceback
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .types import LogFn

logger = logging.getLogger("proletarian_di")


_LEVELS = {
    "polling_for_jobs": logging.DEBUG,
    "handling_job": logging.DEBUG,
    "job_finished": logging.INFO,
    "handler_exception": logging.DEBUG,
    "retrying": logging.WARNING,
    "not_retrying": logging.INFO,
    "job_failed": logging.ERROR,
    "payload_decode_error": logging.ERROR,
    "retry_strategy_error": logging.ERROR,
    "failed_job_fn_error": logging.ERROR,
    "polling_error": logging.ERROR,
    "listener_error": logging.WARNING,
    "tables_elsewhere": logging.INFO,
    "pooler_detected": logging.WARNING,
    "job_abandoned": logging.ERROR,
    "transaction_lost": logging.ERROR,
    "attempt_not_recorded": logging.ERROR,
    "job_timed_out": logging.WARNING,
    "lease_expired": logging.WARNING,
    "lease_lost": logging.WARNING,
    "heartbeat_error": logging.WARNING,
    "registry_error": logging.WARNING,
    "registry_restored": logging.INFO,
    "crash_loop": logging.ERROR,
    "worker_thread_died": logging.CRITICAL,
    "on_shutdown_error": logging.ERROR,
    "log_error": logging.ERROR,
}
# Events whose exception is shown as `Type: message` only: a handler's error is logged
# once with its traceback, by the event of its outcome (`job_failed`), and a retry or a
# payload that cannot be decoded (which fails its job) has one line.
_NO_TRACEBACK = frozenset({"handler_exception", "retrying", "not_retrying", "payload_decode_error"})

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_STDLIB = tuple(
    {os.path.abspath(sysconfig.get_paths()[key]) + os.sep for key in ("stdlib", "platstdlib")}
)


def _stdlib(filename: str) -> bool:
    if filename.startswith("<frozen "):
        return True
    return filename.startswith(_STDLIB) and not any(
        part in filename for part in ("site-packages", "dist-packages")
    )


def user_traceback(tb: TracebackType | None) -> TracebackType | None:
    """`tb` from the first frame of the code the library called (the handler, a callback),
    past the worker's own frames on top (and the standard library's between them, as an
    async handler's event loop): from the first frame outside proletarian_di if all the
    others are the standard library's, and whole if the error is in the library itself."""
    outside = None
    at = tb
    while at is not None:
        filename = os.path.abspath(at.tb_frame.f_code.co_filename)
        if not filename.startswith(_PACKAGE):
            if not _stdlib(filename):
                return at
            outside = outside or at
        at = at.tb_next
    return outside or tb


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
    """What a job keeps of a failed attempt: `Type: message`, then the traceback from the
    handler's frames on (see `user_traceback`), at most `limit` characters (a long one
    keeps its first lines and its end, where the error is)."""
    lines = traceback.format_exception(type(exc), exc, user_traceback(exc.__traceback__))
    body = "".join(lines[:-1]).rstrip()
    text = describe(exc) + ("\n\n" + body if body else "")
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")  # a lone surrogate: \udcff
    if len(text) <= limit:
        return text
    head = limit // 4
    cut = "\n… (cut) …\n"
    return text[:head] + cut + text[-(limit - head - len(cut)) :]


_CONTROL = re.compile(
    r"[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb]"
)
_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_NEEDS_QUOTES = re.compile(r"[\s\"'=\\]")


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _SHORT_ESCAPES.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def escape_controls(text: str, keep: str = "") -> str:
    """`text` with its control characters (C0 with ESC, DEL, C1, line separators, bidi and
    zero-width marks) written as `\\n`, `\\r`, `\\t`, `\\xNN` or `\\uNNNN`, but those in `keep`:
    a terminal or a log reader shows them, never obeys them."""
    if keep:
        return _CONTROL.sub(lambda m: m.group() if m.group() in keep else _escaped(m), text)
    return _CONTROL.sub(_escaped, text)


def log_value(value: Any) -> str:
    """`value` as one `key=value` field: bare, or double-quoted with `\\`, `"` and control
    characters escaped when it holds a space, a quote, `=`, a backslash or a control (or is
    empty), so that no value can end its line or pass for another field."""
    try:
        text = value if isinstance(value, str) else str(value)
    except Exception:
        text = f"<unprintable {type(value).__name__}>"
    if text and not _NEEDS_QUOTES.search(text) and not _CONTROL.search(text):
        return text
    return '"' + escape_controls(text.replace("\\", "\\\\").replace('"', '\\"')) + '"'


def log_fields(data: dict[str, Any]) -> str:
    """The data as `key=value` fields, each value as `log_value` writes it."""
    return " ".join(f"{log_value(key)}={log_value(value)}" for key, value in data.items())


def traceback_text(exc: BaseException) -> str:
    """The exception's traceback as `logging` writes it, but with each message and note (of
    the exception, its causes and contexts) on one line, its controls written out: a job's
    error cannot add a line that passes for a log event. It begins with the handler's
    frames, without the worker's own above them (see `user_traceback`)."""
    summary = traceback.TracebackException(type(exc), exc, user_traceback(exc.__traceback__))
    seen: set[int] = set()
    pending = [summary]
    while pending:
        part = pending.pop()
        if id(part) in seen:
            continue
        seen.add(id(part))
        if isinstance(getattr(part, "_str", None), str):
            part._str = escape_controls(part._str)  # type: ignore[attr-defined]
        notes = getattr(part, "__notes__", None)
        if isinstance(notes, list):
            part.__notes__ = [escape_controls(str(note)) for note in notes]  # type: ignore[attr-defined]
        pending += [c for c in (part.__cause__, part.__context__) if c is not None]
        pending += list(getattr(part, "exceptions", None) or ())
    text = "".join(summary.format()).rstrip("\n")
    return escape_controls(text, keep="\n")


class _OneLineMessages(logging.Filter):
    """Gives each record of the `proletarian_di` logger with a traceback its `traceback_text`,
    which the standard formatters print in place of their own."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and not record.exc_text:
            exc = record.exc_info[1]
            if exc is not None:
                with contextlib.suppress(Exception):
                    record.exc_text = traceback_text(exc)
        return True


logger.addFilter(_OneLineMessages())


def default_log(event: str, data: dict[str, Any]) -> None:
    """Write the event to the `proletarian_di` logger, with the data as `key=value`, one
    line whatever the values hold (see `log_value`)."""
    level = _LEVELS.get(event, logging.INFO)
    if not logger.isEnabledFor(level):
        return
    fields = log_fields({key: value for key, value in data.items() if key != "exception"})
    exc = data.get("exception")
    exc_info = None
    if isinstance(exc, BaseException):
        fields += f" exception={log_value(describe(exc))}"
        if event not in _NO_TRACEBACK:
            exc_info = exc
    logger.log(
        level,
        "%s %s",
        escape_controls(event),
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

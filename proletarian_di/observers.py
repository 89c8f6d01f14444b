"""Observers: what metrics and tracing integrations hear from a worker about each job.

A worker calls its observers (`create_queue_worker(..., observers=[...])`) on the thread that
runs the job: `job_started` just before the handler, `job_ended` just after it (whatever it
did), and `job_counted` once per outcome as `summary()` counts it. An observer that raises
is logged (`observer_error`) and never fails a job.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from ._common.logging import safe_log
from ._common.types import LogFn
from .errors import ConfigurationError
from .jobs import Job

OUTCOMES = ("succeeded", "failed", "retried", "abandoned", "timed_out", "snoozed", "cancelled")
"""What `job_counted` reports; a timed-out or abandoned attempt is also counted as retried
or failed, as `QueueWorker.summary()` counts them. "snoozed" and "cancelled" are a handler's
`Snooze` and `Cancel`."""


class Observer:
    """Base class of an observer: every hook does nothing until overridden. An observer is
    shared, never copied (a dependency-injector container deep-copies provider arguments)."""

    def __copy__(self) -> Observer:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Observer:
        return self

    def job_started(self, job: Job) -> None:
        """The handler is about to run this attempt (`job.attempts`), on this thread."""

    def job_ended(self, job: Job, error: BaseException | None, seconds: float) -> None:
        """The handler returned (`error` None) or raised, after `seconds`, on this thread; a
        `Snooze` or `Cancel` it raised or returned is `error` too."""

    def job_counted(self, job: Job, outcome: str) -> None:
        """An outcome of the job was counted: one of `OUTCOMES`."""


def check_observers(observers: Any) -> tuple[Observer, ...]:
    """A sequence of `Observer`s (any object with the three hooks)."""
    if not isinstance(observers, Sequence) or isinstance(observers, (str, bytes)):
        raise ConfigurationError(f"observers must be a sequence of Observer, got {observers!r}")
    for observer in observers:
        missing = [
            name
            for name in ("job_started", "job_ended", "job_counted")
            if not callable(getattr(observer, name, None))
        ]
        if missing:
            raise ConfigurationError(
                f"observer {observer!r} lacks {', '.join(missing)}: subclass "
                "proletarian_di.observers.Observer"
            )
    return tuple(observers)


def notify(observers: Sequence[Observer], log: LogFn, hook: str, *args: Any) -> None:
    """Call `hook` on every observer; an error is logged and the others still hear it."""
    for observer in observers:
        try:
            getattr(observer, hook)(*args)
        except Exception as exc:
            safe_log(
                log, "observer_error", {"observer": repr(observer), "hook": hook, "exception": exc}
            )


_everywhere: list[Observer] = []
_everywhere_lock = threading.Lock()


@contextlib.contextmanager
def observing_all(*observers: Observer) -> Iterator[None]:
    """Every worker started inside the block tells these observers too, from its first job:
    how `proletarian-di worker --metrics-port` instruments workers a container builds."""
    check_observers(observers)
    with _everywhere_lock:
        _everywhere.extend(observers)
    try:
        yield
    finally:
        with _everywhere_lock:
            for observer in observers:
                _everywhere.remove(observer)


def observers_everywhere() -> list[Observer]:
    """The observers of `observing_all` blocks open now."""
    with _everywhere_lock:
        return list(_everywhere)

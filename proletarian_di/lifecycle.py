"""`worker_running`: start workers (or a container's resources) for a block."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


def _is_container(obj: Any) -> bool:
    return callable(getattr(obj, "init_resources", None)) and callable(
        getattr(obj, "shutdown_resources", None)
    )


@contextlib.contextmanager
def worker_running(*workers: Any) -> Iterator[tuple[Any, ...]]:
    """Start every worker (or dependency-injector container) in order; stop them
    all in reverse order on exit, also when the block raises.

    A container is started with `init_resources()` and stopped with
    `shutdown_resources()`, so its workers drain before its pools close.
    """
    started: list[Any] = []
    try:
        for item in workers:
            if _is_container(item):
                started.append(item)  # a half-started container is shut down too
                item.init_resources()
            else:
                item.start()
                started.append(item)
        yield workers
    finally:
        errors: list[BaseException] = []
        for item in reversed(started):
            try:
                if _is_container(item):
                    item.shutdown_resources()
                else:
                    item.stop()
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0]

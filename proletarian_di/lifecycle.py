"""`worker_running`: start workers (or a container's resources) for a block."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ._containers import init_resources, is_container, shutdown_resources


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
            if is_container(item):
                init_resources(item)  # a half-started container is shut down, then raises
            else:
                item.start()
            started.append(item)
        yield workers
    finally:
        errors: list[BaseException] = []
        for item in reversed(started):
            try:
                if is_container(item):
                    shutdown_resources(item)
                else:
                    item.stop()
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0]

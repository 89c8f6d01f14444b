"""Start and stop as one: `worker_running` for a block, and dependency-injector containers,
recognised by their shape.

The core never imports dependency-injector to recognise a container: an instance is
anything with `init_resources()` and `shutdown_resources()`, a declarative container
class is a class made by its metaclass. `worker_running`, the FastAPI lifespan and the
CLI all start and stop containers through the functions below.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

from .worker import QueueWorker

logger = logging.getLogger("proletarian_di")


def is_container(obj: Any) -> bool:
    """True for a container instance (declarative containers are instantiated first)."""
    return (
        not isinstance(obj, type)
        and callable(getattr(obj, "init_resources", None))
        and callable(getattr(obj, "shutdown_resources", None))
    )


def as_container(obj: Any) -> Any | None:
    """`obj` as a container instance: itself, or a new one of a declarative container class."""
    if is_container(obj):
        return obj
    if isinstance(obj, type) and type(obj).__module__.startswith("dependency_injector"):
        return obj()
    return None


def teardown(what: str, step: Callable[[], Any]) -> None:
    """Run one shutdown step; log its error instead of raising, so the others still run."""
    try:
        step()
    except Exception:
        logger.exception("resource_shutdown_error resource=%s", what)


def init_resources(container: Any) -> None:
    """`container.init_resources()`; if it fails, shut down what did start, then re-raise."""
    try:
        container.init_resources()
    except BaseException:
        teardown("container", lambda: shutdown_resources(container))
        raise


def shutdown_resources(container: Any) -> None:
    """`container.shutdown_resources()`, going on past a failing resource; raises the first error.

    dependency-injector stops shutting down at the first resource whose teardown
    raises (already marked shut down); calling it again goes on with the rest, so
    every resource gets its turn.
    """
    errors: list[Exception] = []
    for _ in range(1 + sum(1 for _ in _resources(container))):
        try:
            container.shutdown_resources()
            break
        except Exception as exc:
            errors.append(exc)
    if errors:
        raise errors[0]


def _resources(container: Any) -> Iterator[Any]:
    from dependency_injector import providers

    kind = getattr(providers, "BaseResource", providers.Resource)
    return iter(container.traverse(types=[kind]))


def container_workers(container: Any) -> list[QueueWorker]:
    """The `QueueWorker`s a container's initialized resources provide."""
    return [
        provider()
        for provider in _resources(container)
        if provider.initialized and isinstance(provider(), QueueWorker)
    ]


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

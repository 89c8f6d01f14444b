"""FastAPI (Starlette) lifespan: start a container's workers at start-up, drain them at shutdown.

    app = FastAPI(lifespan=worker_lifespan(container))

`init_resources()` and `shutdown_resources()` run in a worker thread
(`anyio.to_thread`), so connecting, starting and draining never block the
event loop. The container's resources must therefore be the sync ones
(`proletarian_di.di.postgres_pool`, `queue_worker`, ...); a container with
async resources is awaited in your own lifespan instead
(`await container.init_resources()` with the `async_*` resources).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
import anyio.to_thread

from .._containers import init_resources, is_container, shutdown_resources
from ..errors import ArgumentTypeError

Lifespan = Callable[[Any], AbstractAsyncContextManager[Any]]


def _starter(target: Any) -> tuple[Callable[[], Any], Callable[[], Any]]:
    if is_container(target):
        return (lambda: init_resources(target)), (lambda: shutdown_resources(target))
    if callable(getattr(target, "start", None)) and callable(getattr(target, "stop", None)):
        return target.start, target.stop
    raise ArgumentTypeError(
        f"worker_lifespan needs a dependency-injector container or a QueueWorker, got {target!r}"
    )


def worker_lifespan(
    container: Any, lifespan: Lifespan | None = None
) -> Callable[[Any], AbstractAsyncContextManager[Mapping[str, Any] | None]]:
    """A lifespan that runs `container`'s resources around the app's own `lifespan`.

    Start-up: `container.init_resources()` (off the event loop), then the
    app's lifespan is entered. Shutdown: the app's lifespan exits first, then
    `container.shutdown_resources()` drains the workers and closes the pools,
    off the event loop and shielded from cancellation. The app's lifespan
    state, if any, is passed through. `container` may also be a `QueueWorker`.
    """
    start, stop = _starter(container)

    @contextlib.asynccontextmanager
    async def run(app: Any) -> AsyncIterator[Mapping[str, Any] | None]:
        await anyio.to_thread.run_sync(start)
        try:
            if lifespan is None:
                yield None
            else:
                async with lifespan(app) as state:
                    yield state
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(stop)

    return run

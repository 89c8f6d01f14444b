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
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from ..health import check_health
from ..lifecycle import container_workers, init_resources, is_container, shutdown_resources
from ..worker import QueueWorker

if TYPE_CHECKING:
    from fastapi import APIRouter
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


def health_router(source: Any, **options: Any) -> APIRouter:
    """GET `/livez` and `/readyz` for `source`'s workers (a container, a QueueWorker, a list
    of them, or a function returning one): 200 or 503 with `check_health`'s details.
    `/livez` asks no database, so its `ready` is null for a running worker; `/readyz`
    asks. `options` go to `check_health` (`stuck_after_s`, `ping_timeout_s`)."""
    from fastapi import APIRouter
    from fastapi.responses import JSONResponse

    def workers() -> list[QueueWorker]:
        found = source() if callable(source) and not is_container(source) else source
        if is_container(found):
            return container_workers(found)
        return [found] if isinstance(found, QueueWorker) else list(found)

    async def answer(database: bool) -> JSONResponse:
        health = await anyio.to_thread.run_sync(
            lambda: check_health(workers, database=database, **options)
        )
        ok = health.alive and (health.ready or not database)
        return JSONResponse(health.as_dict(), status_code=200 if ok else 503)

    router = APIRouter()

    @router.get("/livez", summary="Liveness: no worker thread is stuck")
    async def livez() -> JSONResponse:
        return await answer(database=False)

    @router.get("/readyz", summary="Readiness: the workers run and their database answers")
    async def readyz() -> JSONResponse:
        return await answer(database=True)

    return router


def metrics_app(registry: Any = None) -> Any:
    """An ASGI app serving a Prometheus registry (extra `metrics`), the global one by
    default: `app.mount("/metrics", metrics_app())`.

    It collects in threads of its own, off the event loop, so a scrape while the database
    hangs holds up none of the app's other requests; the queue depth gauges answer within
    their `timeout_s`, with `proletarian_database_up 0` when the database did not. It is
    served wherever the app is, to anyone who reaches it, without authentication: keep
    `/metrics` off your public routes (or serve the metrics on a port of their own, on
    127.0.0.1 or the pod's IP, with `serve_metrics`)."""
    from .prometheus import REGISTRY
    from .prometheus import metrics_app as asgi_app

    return asgi_app(registry or REGISTRY)

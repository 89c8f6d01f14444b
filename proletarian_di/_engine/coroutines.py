"""Coroutine handlers and callbacks: awaited to completion on the calling thread's own loop.

A worker thread keeps one event loop for as long as it runs, so an async
handler's clients (an `httpx.AsyncClient` kept by the application, say) see
the same loop from one job to the next; the loop is closed when the thread
stops.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import threading
from collections.abc import Awaitable
from typing import Any, TypeVar

from ..errors import JobTimedOut

T = TypeVar("T")


async def _wait(awaitable: Awaitable[T], timeout: float | None = None) -> T:
    """Await `awaitable`; past `timeout` seconds, cancel it and raise `JobTimedOut`."""
    if timeout is None:
        return await awaitable
    task = asyncio.ensure_future(awaitable)
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if done:
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    raise JobTimedOut(f"timed out after {timeout:g} s (cancelled)")


class EventLoops:
    """One event loop per thread, created on first use and closed by `close()`."""

    def __init__(self) -> None:
        self._local = threading.local()

    def run(self, awaitable: Awaitable[T], timeout: float | None = None) -> T:
        """Await `awaitable` on this thread's loop (inside a running loop: on another thread),
        cancelling it after `timeout` seconds, if given."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            with concurrent.futures.ThreadPoolExecutor(1, "proletarian-async") as pool:
                return pool.submit(asyncio.run, _wait(awaitable, timeout)).result()
        loop: asyncio.AbstractEventLoop | None = getattr(self._local, "loop", None)
        if loop is None or loop.is_closed():
            loop = self._local.loop = asyncio.new_event_loop()
        return loop.run_until_complete(_wait(awaitable, timeout))

    def close(self) -> None:
        """Close this thread's loop, if it has one, after finishing its async generators."""
        loop: asyncio.AbstractEventLoop | None = getattr(self._local, "loop", None)
        self._local.loop = None
        if loop is None or loop.is_closed():
            return
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()


def is_awaitable(value: Any) -> bool:
    """True for a coroutine or any other awaitable a callback returned."""
    return value is not None and inspect.isawaitable(value)

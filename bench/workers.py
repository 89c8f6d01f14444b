"""Both contenders behind one small interface: start(), done(), stop()."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from proletarian_di import create_queue_worker

from .db import TABLES, Database
from .plain import PlainWorker, noop


class OurWorker:
    """A proletarian-di `QueueWorker` on its own pool, counting succeeded jobs."""

    def __init__(
        self,
        db: Database,
        threads: int,
        interval: float,
        handler: Callable[[str, Any], Any] = noop,
        **options: Any,
    ) -> None:
        self.pool = db.pool(threads)
        self.worker = create_queue_worker(
            self.pool,
            handler,
            worker_threads=threads,
            polling_interval_ms=max(0, round(interval * 1000)),
            await_termination_timeout_ms=5_000,
            **TABLES,
            **options,
        )

    def start(self) -> OurWorker:
        self.worker.start()
        return self

    def done(self) -> int:
        return self.worker.summary()["succeeded"]

    def stop(self) -> None:
        try:
            self.worker.stop()
        finally:
            self.pool.close()


def make_worker(
    impl: str,
    db: Database,
    threads: int,
    interval: float,
    handler: Callable[[str, Any], Any] = noop,
    **options: Any,
) -> Any:
    """'ours' (proletarian-di, with worker `options`) or 'plain' (the hand-written loop)."""
    if impl == "ours":
        return OurWorker(db, threads, interval, handler, **options)
    return PlainWorker(db, threads, interval, handler)

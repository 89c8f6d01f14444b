"""The queue worker: threads that poll one queue and run its jobs."""

from __future__ import annotations

import random
import threading
import time
from typing import Any

from ._datasource import connection_factory
from ._dialects import is_transient
from ._logging import safe_log, wanted
from ._options import WorkerOptions, worker_options
from ._runner import Handler, JobRunner, Slot, Stats
from ._shutdown_hook import ShutdownHook
from ._wakeup import Listener, Wakeup, listener_connect


class _Backoff:
    """Bounded exponential back-off with jitter for polling errors."""

    def __init__(self, first: float = 0.1, cap: float = 5.0) -> None:
        self.first, self.cap, self.failures = first, cap, 0

    def reset(self) -> None:
        self.failures = 0

    def next(self) -> float:
        delay = min(self.cap, self.first * 2**self.failures)
        self.failures = min(self.failures + 1, 16)
        return delay * random.uniform(0.5, 1.0)


class QueueWorker:
    """Polls one queue with `worker_threads` threads; `start()` then `stop()`.

    Build it with `create_queue_worker`. Also a context manager: `with worker:`
    starts it and stops it on exit.
    """

    def __init__(self, data_source: Any, handler: Handler, options: WorkerOptions) -> None:
        self.options = options
        self.queue_worker_id = options.queue_worker_id
        self.stats = Stats()
        self._connect = connection_factory(data_source)
        self._listener_connect = listener_connect(data_source)
        self._listener: Listener | None = None
        self._runner = JobRunner(handler, options, self.stats)
        self._lock = threading.Lock()
        self._wakeup = Wakeup(options.worker_threads)
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._slots: dict[str, Slot] = {}
        self._state = "new"
        self._stop_result = True
        self._hook = ShutdownHook(self) if options.install_shutdown_hook else None

    def __repr__(self) -> str:
        return f"<QueueWorker {self.queue_worker_id} {self._state}>"

    @property
    def running(self) -> bool:
        """True between a successful `start()` and the end of `stop()`."""
        return self._state == "running"

    def summary(self) -> dict[str, int]:
        """Job outcomes so far: succeeded, failed, retried, abandoned."""
        return self.stats.as_dict()

    def check(self) -> str:
        """Check the server version and the tables; raise a clear error if unfit.

        Returns the dialect name, 'postgresql' or 'mysql'.
        """
        with self._connect() as conn:
            dialect = self._runner.dialect(conn)
            dialect.check_server(conn)
            return dialect.name

    def start(self) -> QueueWorker:
        """Check the database, then start polling in background threads."""
        with self._lock:
            if self._state != "new":
                raise RuntimeError(f"{self!r} cannot be started twice")
            dialect = self.check()
            if dialect == "postgresql" and self._listener_connect is not None:
                self._listener = Listener(
                    self._listener_connect,
                    self.options.queue,
                    self._wakeup,
                    self._stopping,
                    lambda exc: self._emit("listener_error", exception=exc),
                    f"{self.queue_worker_id}-listener",
                )
            if self._hook is not None:
                self._hook.install()
            for n in range(self.options.worker_threads):
                name = f"{self.queue_worker_id}-{n}"
                slot = self._slots[name] = Slot()
                thread = threading.Thread(target=self._poll, args=(slot,), name=name, daemon=True)
                self._threads.append(thread)
            self._state = "running"
        for thread in self._threads:
            thread.start()
        if self._listener is not None:
            self._listener.start()
        return self

    def stop(self) -> bool:
        """Stop polling and drain in-flight jobs; False if a job had to be abandoned.

        Jobs still running after `await_termination_timeout_ms` are abandoned:
        their connection is dropped, the database rolls them back, and they run
        again later. Then `on_shutdown` runs.
        """
        with self._lock:
            if self._state != "running":
                return self._stop_result
            self._state = "stopping"
        self._emit("shutting_down")
        self._stopping.set()
        self._wakeup.close()
        deadline = time.monotonic() + self.options.await_termination_timeout_ms / 1000
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if self._listener is not None:
            self._listener.join(1.0)
        clean = True
        for thread in self._threads:
            if thread.is_alive() and self._abandon(self._slots[thread.name]):
                clean = False
        if self._hook is not None:
            self._hook.uninstall()
        if self.options.on_shutdown is not None:
            try:
                self.options.on_shutdown()
            except Exception as exc:
                self._emit("on_shutdown_error", exception=exc)
        self._stop_result = clean
        self._state = "stopped"
        self._emit("shutdown_complete", clean=clean, **self.summary())
        return clean

    def wake(self) -> None:
        """Make every idle thread poll now (say, after enqueueing on MySQL)."""
        self._wakeup.wake(self.options.worker_threads)

    def __enter__(self) -> QueueWorker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _abandon(self, slot: Slot) -> bool:
        job, conn = slot.job, slot.conn
        if job is None or conn is None or slot.dialect is None:
            return False
        self.stats.add("abandoned")
        self._runner.emit(
            "job_abandoned",
            job,
            timeout_ms=self.options.await_termination_timeout_ms,
            reason="still running after the await-termination timeout; rolled back, runs again",
        )
        try:
            slot.dialect.abort(conn)
        except Exception as exc:
            self._emit("polling_error", exception=exc)
        return True

    def _emit(self, event: str, **data: Any) -> None:
        if not wanted(self.options.log, event):
            return
        safe_log(self.options.log, event, {"queue_worker_id": self.queue_worker_id, **data})

    def _poll(self, slot: Slot) -> None:
        backoff = _Backoff()
        interval = self.options.polling_interval_ms / 1000
        batch_size = self.options.batch_size
        while not self._stopping.is_set():
            try:
                with self._connect() as conn:
                    dialect = self._runner.dialect(conn)
                    slot.conn, slot.dialect = conn, dialect
                    with dialect.attached(conn):
                        while not self._stopping.is_set():
                            self._emit("polling_for_jobs")
                            ran = self._runner.run_batch(conn, slot, batch_size, dialect)
                            backoff.reset()
                            if not ran:
                                self._wakeup.wait(interval)
            except Exception as exc:
                if self._stopping.is_set():
                    break
                self._emit("polling_error", exception=exc)
                if self._should_stop(exc):
                    threading.Thread(target=self.stop, name=f"{self.queue_worker_id}-stop").start()
                    break
                self._stopping.wait(backoff.next())
            finally:
                slot.conn = slot.dialect = None

    def _should_stop(self, exc: Exception) -> bool:
        handler = self.options.on_polling_error
        if handler is None or is_transient(exc):
            return False
        try:
            return bool(handler(exc))
        except Exception as error:
            self._emit("polling_error", exception=error, source="on_polling_error")
            return False


def create_queue_worker(data_source: Any, handler: Handler, **options: Any) -> QueueWorker:
    """Create a worker for one queue; it does not poll until `start()`.

    `data_source` is a pool with a `connection()` context manager (such as
    psycopg_pool's `ConnectionPool`) or a callable returning a new connection.
    See the docs for every option and its default.
    """
    return QueueWorker(data_source, handler, worker_options(**options))


def process_next_job(data_source: Any, handler: Handler, **options: Any) -> bool | None:
    """Run at most one due job now, in this thread: True/False for its outcome, None if none."""
    opts = worker_options(**options)
    runner = JobRunner(handler, opts)
    with connection_factory(data_source)() as conn:
        runner.dialect(conn).check_server(conn)
        return runner.run_next(conn)

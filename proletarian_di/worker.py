"""The queue worker: threads that poll one queue and run its jobs."""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ._common.logging import describe, safe_log, wanted
from ._common.types import DataSource, Handler, WorkerOptions
from ._engine.cpu import Pin, shared_cpu
from ._engine.crashes import ClaimCounter
from ._engine.frontier import Frontier
from ._engine.leases import Heartbeat, Leases
from ._engine.options import (
    WorkerSettings,
    check_pooled,
    with_storage_defaults,
    worker_settings,
)
from ._engine.pauses import LISTENING_PAUSE_READ_S, MIN_PAUSE_READ_S, PauseWatch
from ._engine.registry import TIMEOUT_S as REGISTRY_TIMEOUT_S
from ._engine.registry import Registration, new_worker_id, thread_activity
from ._engine.runner import Checkout, JobRunner, Replaced, Slot, Stats
from ._engine.signals import ShutdownHook
from ._engine.wakeup import Listener, Wakeup
from ._engine.watchdog import Watchdog
from ._store.datasource import (
    check_pgbouncer_pool,
    connection_factory,
    direct_connect,
    worker_connection_factory,
)
from ._store.dialects import Dialect, is_transient
from ._store.dialects.base import reserved
from ._store.tables import workers_table
from ._store.urls import connect_postgres
from .errors import ConfigurationError, JobAbandoned, JobTimedOut, WorkerStateError
from .jobs import DEFAULT_QUEUE, Job
from .observers import observers_everywhere
from .schema import check_schema

if TYPE_CHECKING:
    from typing_extensions import Unpack

_ABANDONED_LOCK_WAIT = 5.0


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
    starts it and stops it on exit. Its `state` moves from "new" through
    "starting", "running" and "stopping" to "stopped", or to "failed" when a
    thread could not go on; it never stays in between.
    """

    def __init__(self, data_source: DataSource, handler: Handler, options: WorkerSettings) -> None:
        self.options = options
        self.data_source = data_source
        self.queue_worker_id = options.queue_worker_id
        self.stats = Stats(options.observers, options.log)
        self._connect = connection_factory(data_source)
        self._lease_connect = (
            self._connect if options.lends_connection else worker_connection_factory(data_source)
        )
        """Lease mode's connections: its statements alone use them, unless user code is handed
        a job's connection."""
        self._direct_connect = direct_connect(data_source)
        self._listener: Listener | None = None
        self._pgbouncer = options.pgbouncer
        """Through a transaction pooler: `pgbouncer`, or found so at `start()`."""
        interval = options.polling_interval_ms / 1000
        self._pauses = PauseWatch(options.queue, max(interval, MIN_PAUSE_READ_S))
        frontier = None if options.fair else Frontier(interval)  # a fair claim has its turns
        self._wakeup = Wakeup(options.worker_threads, frontier)
        self._runner = JobRunner(
            handler, options, self.stats, frontier, self._pauses, self._wakeup.busy
        )
        self._runner.on_reschedule = lambda at, p: self._wakeup.due_at(at.timestamp(), p)
        if self._runner.rates is not None:
            self._runner.rates.free_at = self._wakeup.due_at
        self._runner.recording_connection = self._recording_connection
        self._cond = threading.Condition(threading.RLock())
        self._stopping = threading.Event()
        self._finished = threading.Event()
        self._progress_reported: Callable[[], None] = lambda: None
        """Where a slot tells of a job's progress: the registry's `wake`."""
        """Set once the drain is over: the heartbeat and the watchdog end."""
        self._threads: list[threading.Thread] = []
        self._slots: dict[str, Slot] = {}
        self._helpers: list[Heartbeat | Watchdog | Registration] = []
        self.worker_id = new_worker_id()
        """This worker's name in the live workers' table (`admin.list_workers`)."""
        self._numbered = options.worker_threads
        self._state = "new"
        self._stopper: threading.Thread | None = None
        self._cpu: int | None = None
        """The CPU the worker threads share for the queue's own work (`share_cpu`)."""
        self._stop_result = True
        self._failure: BaseException | None = None
        self._hook = (
            ShutdownHook(self.queue_worker_id, self.stop, self.summary)
            if options.install_shutdown_hook
            else None
        )

    def __repr__(self) -> str:
        return f"<QueueWorker {self.queue_worker_id} {self._state}>"

    @property
    def state(self) -> str:
        """'new', 'starting', 'running', 'stopping', 'stopped' or 'failed'."""
        return self._state

    @property
    def running(self) -> bool:
        """True between a successful `start()` and the beginning of `stop()`."""
        return self._state == "running"

    @property
    def failure(self) -> BaseException | None:
        """What ended a worker thread that could not go on (the worker then stops), or None."""
        return self._failure

    def summary(self) -> dict[str, int]:
        """Job outcomes so far: succeeded, failed, retried, abandoned, timed_out, snoozed and
        cancelled (a
        timed-out attempt is also counted as retried or failed; an abandoned one spends no
        retry, and is counted as failed at its third abandonment in a row)."""
        return self.stats.as_dict()

    def threads(self) -> list[tuple[str, str, float]]:
        """Each worker thread as (name, activity, seconds in it): "connecting" or "polling"
        (waiting on the database), "idle", "running" (a handler) or "backing_off"."""
        now = time.monotonic()
        return [
            (name, slot.activity, max(0.0, now - slot.since)) for name, slot in self._live_threads()
        ]

    def _live_threads(self) -> list[tuple[str, Slot]]:
        with self._cond:
            return [(t.name, self._slots[t.name]) for t in self._threads if t.is_alive()]

    def ping(self) -> None:
        """Run `SELECT 1` on a new connection beside the pool, whose connections the worker's
        own threads may all hold (readiness checks); in the pool if it gives no other way."""
        if self._direct_connect is None:
            with self._connect() as conn:
                self._select_one(conn)
            return
        conn = self._direct_connect()
        try:
            self._select_one(conn)
        finally:
            conn.close()

    def _select_one(self, conn: Any) -> None:
        dialect = self._runner.dialect(conn)
        dialect.fetchall(conn, "SELECT 1")
        dialect.rollback(conn)

    def check(self) -> str:
        """Check the server version, the tables and their schema version; raise a clear
        error if unfit. Returns the dialect name, 'postgresql' or 'mysql'."""
        return self._check(note=False).name

    def _check(self, note: bool) -> Dialect:
        """`check()`; with `note`, also say once when the tables sit outside the
        connection's own database (MySQL's default tables are in `proletarian`)."""
        with self._connect() as conn:
            check_schema(conn, self.options.job_table, self.options.archived_job_table)
            dialect = self._runner.dialect(conn)
            if self._runner.rates is not None:
                self._runner.rates.ensure(conn, dialect)
                dialect.commit(conn)
            if note and not self._pgbouncer and dialect.behind_pooler(conn):
                self._detected_pooler()
            locate = getattr(dialect, "locate_tables", None)
            if note and locate is not None:
                database, tables = locate(conn)
                if any(name.rpartition(".")[0] != database for name in tables.values()):
                    self._emit("tables_elsewhere", **tables, database=database)
            return dialect

    def start(self) -> QueueWorker:
        """Check the database, then start polling in background threads.

        A `stop()` from another thread meanwhile waits for the start to finish;
        with `install_shutdown_hook`, a signal that arrives meanwhile stops the
        worker as soon as it has started.
        """
        with self._cond:
            if self._state != "new":
                raise WorkerStateError(f"{self!r} cannot be started twice")
            self._state = "starting"
        for observer in observers_everywhere():
            if observer not in self.stats.observers:
                self.stats.observers.append(observer)
        try:
            if self._hook is not None:
                self._hook.install()
            dialect = self._check(note=True)
            if self._pgbouncer:
                check_pgbouncer_pool(self.data_source)
            listen = self._listen_connect()
            if dialect.listens and listen is not None:
                self._listener = Listener(
                    listen,
                    self.options.queue,
                    self._wakeup,
                    self._stopping,
                    lambda exc: self._emit("listener_error", exception=exc),
                    f"{self.queue_worker_id}-listener",
                    self._pauses.changed,
                    self._listening,
                    self._graph_changed,
                )
                # Notified of every pause and resume, the worker reads the state seldom.
                self._pauses.every_s = max(self._pauses.every_s, LISTENING_PAUSE_READ_S)
            self._set_up_long_jobs()
            if self.options.share_cpu:
                self._cpu = shared_cpu(self.options.worker_threads)
            registration = self._registered()
            registration.chore = self._runner.watch_dependencies
            rates = self._runner.rates
            if rates is not None and rates.by_group:
                registration.prune_rates = rates.prune
            self._runner.watched = True
            self._helpers.append(registration)
            self._progress_reported = registration.wake
            for n in range(self.options.worker_threads):
                self._threads.append(self._thread(f"{self.queue_worker_id}-{n}"))
            registration.beat()  # listed before it runs a job
            registration.run_chore()  # knows whether jobs wait on others before its first
        except BaseException:
            for helper in self._helpers:
                if isinstance(helper, Registration):
                    helper.leave()  # its row, if the beat wrote it, and its connection
            self._threads.clear()
            self._slots.clear()
            self._helpers.clear()
            self._listener = None
            if self._hook is not None:
                self._hook.uninstall(deliver=True)
            with self._cond:
                self._state = "new"
                self._cond.notify_all()
            raise
        with self._cond:
            for thread in self._threads:
                thread.start()
            if self._listener is not None:
                self._listener.start()
            for helper in self._helpers:
                helper.start()
            self._state = "running"
            self._cond.notify_all()
        return self

    def _set_up_long_jobs(self) -> None:
        """The heartbeat of lease mode, the watchdog of job timeouts, and the claim counter
        of `max_crashes`, each only when asked for."""
        options, name = self.options, self.queue_worker_id
        if options.lease_ms is not None:
            self._runner.leases = Leases()
            self._helpers.append(
                Heartbeat(
                    self._connect,
                    self._runner.dialect,
                    self._runner.leases,
                    options.lease_ms,
                    self._finished,
                    lambda exc: self._emit("heartbeat_error", exception=exc),
                    f"{name}-heartbeat",
                )
            )
        if options.job_timeout_ms is not None or any(options.job_timeouts.values()):
            self._helpers.append(
                Watchdog(self._live_slots, self._time_out, self._finished, f"{name}-watchdog")
            )
        if options.max_crashes is not None:
            if self._direct_connect is None:
                raise ConfigurationError(
                    "max_crashes counts claims on a connection of its own: give a data source "
                    "that can open one (a psycopg_pool pool, a MySQLDataSource, or a callable)"
                )
            self._runner.claims = ClaimCounter(self._direct_connect, options.job_table)

    def _registered(self) -> Registration:
        """The thread that keeps this worker's row among the live workers."""
        options = self.options
        identity = {
            "worker_id": self.worker_id,
            "queue": options.queue,
            "queue_worker_id": self.queue_worker_id,
            "host": self.worker_id.rsplit(":", 2)[0],
            "pid": os.getpid(),
            "threads": options.worker_threads,
            "max_running": options.max_running,
            "rate_limit": options.rate_limit,
            "fair": options.fair,
        }
        return Registration(
            self.data_source,
            self._runner.dialect,
            workers_table(options.job_table),
            identity,
            self._activity,
            lambda: "stopping" if self._stopping.is_set() else "running",
            self._finished,
            self._emit,
            f"{self.queue_worker_id}-registry",
        )

    def _activity(self) -> list[dict[str, Any]]:
        """What each worker thread does now, for the registry (memory only): those alive, and
        those about to start (the first beat runs before they do)."""
        now = time.monotonic()
        with self._cond:
            threads = [t for t in self._threads if t.ident is None or t.is_alive()]
            return [thread_activity(t.name, self._slots[t.name], now) for t in threads]

    def _thread(self, name: str) -> threading.Thread:
        slot = self._slots[name] = Slot()
        slot.on_progress = self._progress_reported
        return threading.Thread(target=self._poll, args=(slot,), name=name, daemon=True)

    def _live_slots(self) -> list[Slot]:
        with self._cond:
            return [self._slots[thread.name] for thread in self._threads]

    def _time_out(self, slot: Slot, now: float) -> None:
        """The watchdog's look at one slot: give up on its job if it is past its deadline."""
        job = slot.job
        if job is None:
            return
        timeout = self.options.timeout_s(job.job_type) or 0.0
        failure = JobTimedOut(f"timed out after {timeout:g} s (the handler was abandoned)")
        if self._runner.advanced and self.options.lease_ms is None:
            self._time_out_in_place(slot, now, failure, timeout)
            return
        taken = slot.take_overdue(now)
        if taken is None:
            return
        job, raw_id, lease, ran = taken
        try:
            self._report_timeout(job, timeout, ran, "its outcome will be discarded")
            if lease is not None:
                self._give_back_rest(slot, lease)
                self._record(job, raw_id, lease, failure)
            else:
                self._settle_held(slot, job, raw_id, failure)
            self._replace(slot)
        finally:
            slot.handed_over.set()

    def _report_timeout(self, job: Job, timeout: float, ran: float, what_then: str) -> None:
        self.stats.add("timed_out", job)
        self._runner.emit(
            "job_timed_out",
            job,
            timeout_ms=round(timeout * 1000),
            ran_ms=round(ran * 1000),
            reason=f"still running at its timeout: {what_then}",
        )

    def _settle_held(self, slot: Slot, job: Job, raw_id: Any, failure: JobTimedOut) -> None:
        """Held mode: record the attempt in the job's own transaction (its handler does not
        use the connection, and its thread will not touch it again), then give the
        connection back, unless it keeps the job's running slot until the handler returns."""
        checkout = slot.checkout
        error: BaseException | None = None
        give_back = True
        try:
            give_back = self._runner.settle_timed_out(slot, job, raw_id, failure)
        except Exception as exc:
            error = exc
            self._runner.emit("attempt_not_recorded", job, reason=describe(exc), exception=exc)
        if give_back and checkout is not None:
            self._give_back(checkout, error)

    def _give_back(self, checkout: Checkout, error: BaseException | None) -> None:
        """Return a thread's connection to the data source; a failure to is reported only
        (the data source drops a connection it cannot reset)."""
        try:
            checkout.give_back(error)
        except Exception as exc:
            self._emit("polling_error", exception=exc)

    def _time_out_in_place(
        self, slot: Slot, now: float, failure: JobTimedOut, timeout: float
    ) -> None:
        """Held mode, an advanced handler: the job's transaction is the handler's too, so the
        job stays with it, its row locked: its statement is cancelled, and once it returns,
        its writes are rolled back and its attempt is recorded as timed out by its thread."""
        job = slot.overdue_in_place(now, failure)
        if job is None:
            return
        self._report_timeout(
            job, timeout, now - slot.started, "its statement is cancelled, its writes discarded"
        )
        conn, dialect = slot.conn, slot.dialect
        if conn is None or dialect is None:
            return
        try:
            dialect.cancel_statement(conn, self._recording_connection)
        except Exception as exc:
            self._emit("polling_error", exception=exc)

    def _give_back_rest(self, slot: Slot, lease: str) -> None:
        """Lease mode: the jobs claimed in the same batch as a timed-out one go back now."""
        rest, slot.rest = slot.rest, []
        if not rest:
            return
        try:
            with self._connect() as conn:
                self._runner.dialect(conn).give_back(conn, rest, lease)
        except Exception as exc:
            self._emit("polling_error", exception=exc)
        finally:
            for row in rest:
                if self._runner.leases is not None:
                    self._runner.leases.drop(row[0], lease)
                    self._runner.leases.drop(row[0], reserved(lease))

    def _replace(self, slot: Slot) -> None:
        """Start a new worker thread in place of the one holding `slot`, so the worker keeps
        its `worker_threads` (unless it is stopping)."""
        with self._cond:
            old = next((t for t in self._threads if self._slots[t.name] is slot), None)
            if old is None or self._state != "running":
                return
            self._threads.remove(old)
            thread = self._thread(f"{self.queue_worker_id}-{self._numbered}")
            self._numbered += 1
            self._threads.append(thread)
            thread.start()

    def stop(self) -> bool:
        """Stop polling and drain in-flight jobs; False if a job had to be abandoned.

        Jobs still running after `await_termination_timeout_ms` are abandoned:
        their connection is cut, the database rolls them back, and they are put
        back to run again, no retry spent (`JobRunner.record_abandonment`). Then
        `on_shutdown` runs, once. Every caller waits for the same drain and gets
        the same result; called from one of the worker's own threads (a handler,
        say) it asks for the stop and returns True at once.
        """
        current = threading.current_thread()
        with self._cond:
            while self._state == "starting":
                self._cond.wait()
            if self._state == "new":
                return True
            if self._state != "running":
                waiting = current not in (self._stopper, *self._threads)
                while waiting and self._state == "stopping":
                    self._cond.wait()
                return self._stop_result
            self._state = "stopping"
            if current in self._threads:
                self._stopper = threading.Thread(
                    target=self._drain, name=f"{self.queue_worker_id}-stop", daemon=True
                )
                self._stopper.start()
                return True
            self._stopper = current
        return self._drain()

    def wake(self) -> None:
        """Make every idle thread poll now (say, after enqueueing on MySQL)."""
        self._wakeup.wake(self.options.worker_threads)

    def __enter__(self) -> QueueWorker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _drain(self) -> bool:
        self._emit("shutting_down")
        self._stopping.set()
        self._wakeup.close()
        deadline = time.monotonic() + self.options.await_termination_timeout_ms / 1000
        with self._cond:
            threads = list(self._threads)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if self._listener is not None:
            self._listener.join(1.0)
        with self._cond:
            threads = list(self._threads)
        abandoned = []
        for thread in threads:
            held = self._abandon(self._slots[thread.name]) if thread.is_alive() else None
            if held is not None:
                abandoned.append(held)
        for held in abandoned:
            self._record(*held)
        self._finished.set()
        for helper in self._helpers:
            if isinstance(helper, Registration):
                helper.wake()
        for helper in self._helpers:
            helper.join(REGISTRY_TIMEOUT_S * 2 if isinstance(helper, Registration) else 1.0)
        if self._runner.claims is not None:
            self._runner.claims.close()
        self._runner.loops.close()
        if self._hook is not None:
            self._hook.uninstall()
        if self.options.on_shutdown is not None:
            try:
                self.options.on_shutdown()
            except Exception as exc:
                self._emit("on_shutdown_error", exception=exc)
        clean = not abandoned
        with self._cond:
            self._stop_result = clean
            self._state = "failed" if self._failure is not None else "stopped"
            self._cond.notify_all()
        self._emit("shutdown_complete", clean=clean, **self.summary())
        return clean

    def _abandon(self, slot: Slot) -> tuple[Job, Any, str | None, JobAbandoned] | None:
        """Cut the connection under a job that outlived the timeout; what it held, or None.
        In lease mode the jobs of its batch that never started go back at once."""
        conn, dialect = slot.conn, slot.dialect
        taken = slot.take_overdue(time.monotonic(), force=True)
        if taken is None:
            return None
        job, raw_id, lease, ran = taken
        ran_ms = round(ran * 1000)
        failure = JobAbandoned(
            f"abandoned after {ran_ms} ms: still running when stop() gave up waiting "
            f"(await_termination_timeout_ms={self.options.await_termination_timeout_ms}); "
            "rolled back, it runs again"
        )
        self.stats.add("abandoned", job)
        self._runner.emit(
            "job_abandoned",
            job,
            timeout_ms=self.options.await_termination_timeout_ms,
            reason="still running after the await-termination timeout; rolled back, runs again",
        )
        if lease is not None:
            self._give_back_rest(slot, lease)
        elif conn is not None and dialect is not None:
            try:
                dialect.abort(conn)
            except Exception as exc:
                self._emit("polling_error", exception=exc)
        slot.handed_over.set()
        return job, raw_id, lease, failure

    def _record(self, job: Job, raw_id: Any, lease: str | None, failure: Exception) -> None:
        """Write an attempt that ended outside its run on the job row, on a connection of
        its own: an abandonment (`JobRunner.record_abandonment`: no retry spent) or a
        timed-out attempt (`JobRunner.record_attempt`)."""
        runner = self._runner
        record = (
            runner.record_abandonment
            if isinstance(failure, JobAbandoned)
            else runner.record_attempt
        )
        try:
            with self._recording_connection() as conn:
                dialect = runner.dialect(conn)
                record(conn, dialect, raw_id, job, failure, wait=_ABANDONED_LOCK_WAIT, lease=lease)
        except Exception as exc:
            runner.emit("attempt_not_recorded", job, reason=describe(exc), exception=exc)

    def _detected_pooler(self) -> None:
        """The connections go through a transaction pooler, though `pgbouncer` was not
        given: work as with it (and refuse what it cannot keep), and say so."""
        check_pooled(self.options, "a pooler (PgBouncer) between the worker and PostgreSQL")
        self._pgbouncer = True
        self._emit("pooler_detected", listen_conninfo=self.options.listen_conninfo is not None)

    def _listen_connect(self) -> Callable[[], Any] | None:
        """How the listener connects: around the pooler with `pgbouncer` (to
        `listen_conninfo`, else no listener: a transaction pooler does not keep a LISTEN),
        else as the data source's own new connections."""
        if not self._pgbouncer:
            return self._direct_connect
        conninfo = self.options.listen_conninfo
        if conninfo is None:
            return None
        return lambda: connect_postgres(conninfo)

    @contextlib.contextmanager
    def _recording_connection(self) -> Iterator[Any]:
        """A connection outside the pool when the data source can make one (the pool may
        be held by the abandoned threads), else one from the pool."""
        if self._direct_connect is None:
            with self._connect() as conn:
                yield conn
            return
        conn = self._direct_connect()
        try:
            yield conn
        finally:
            with contextlib.suppress(Exception):
                conn.close()

    def _emit(self, event: str, **data: Any) -> None:
        if not wanted(self.options.log, event):
            return
        safe_log(self.options.log, event, {"queue_worker_id": self.queue_worker_id, **data})

    def _poll(self, slot: Slot) -> None:
        """A worker thread: poll until stopped; if it cannot go on, say so and stop the worker."""
        if self._cpu is not None:
            slot.pin = Pin(self._cpu)
        try:
            if self.options.lease_ms is None:
                self._poll_until_stopped(slot)
            else:
                self._poll_leased(slot)
        except Replaced:
            pass  # its job timed out; another thread runs in its place
        except BaseException as exc:
            self._failure = exc
            self._emit("worker_thread_died", exception=exc, thread=threading.current_thread().name)
            self.stop()
        finally:
            self._runner.loops.close()

    def _going_on(self) -> bool:
        """Whether a worker thread will claim again (not stopping)."""
        return not self._stopping.is_set()

    def _poll_until_stopped(self, slot: Slot) -> None:
        backoff = _Backoff()
        interval = self.options.polling_interval_ms / 1000
        batch_size = self.options.batch_size
        while not self._stopping.is_set():
            slot.mark("connecting")
            checkout: Checkout | None = None
            error: Exception | None = None
            try:
                checkout = slot.checkout = Checkout(
                    self._connect,
                    self._runner.dialect,
                    not self.options.lends_connection,
                    self._pgbouncer,
                    self.options.keepalive_timeout_ms,
                )
                slot.conn, slot.dialect = checkout.conn, checkout.dialect
                while not self._stopping.is_set():
                    if self._held_back(slot):
                        continue
                    self._emit("polling_for_jobs")
                    slot.mark("polling")
                    ran = self._runner.run_batch(checkout.session, slot, batch_size, self._going_on)
                    backoff.reset()
                    if checkout.dialect.is_closed(checkout.conn):
                        break  # a handler closed it: take another
                    if not ran and not self._rate_limited():
                        self._idle(slot, interval)
            except Exception as exc:
                error = exc
            finally:
                slot.conn = slot.dialect = slot.checkout = None
                if checkout is not None:  # unless the watchdog gave it back already
                    self._give_back(checkout, error)
            # backing off only once the connection is back (handing it back may wait on it)
            if error is not None and not self._polling_failed(slot, error, backoff):
                break

    def _poll_leased(self, slot: Slot) -> None:
        """Lease mode's worker thread: it takes a connection only to claim and to settle."""
        backoff = _Backoff()
        interval = self.options.polling_interval_ms / 1000
        while not self._stopping.is_set():
            if self._held_back(slot):
                continue
            try:
                self._emit("polling_for_jobs")
                slot.mark("polling")
                ran = self._runner.run_leased(
                    self._lease_connect, slot, self.options.batch_size, self._going_on
                )
                backoff.reset()
                if not ran and not self._rate_limited():
                    self._idle(slot, interval)
            except Exception as exc:
                if not self._polling_failed(slot, exc, backoff):
                    break

    def _rate_limited(self) -> bool:
        """Whether `rate_limit` has no start left in the window now."""
        rates = self._runner.rates
        return rates is not None and rates.wait_s() > 0

    def _held_back(self, slot: Slot) -> bool:
        """`rate_limit`: while no start is left in the window, sleep until the next one is
        due (a wake-up meanwhile, such as a new job's, changes nothing); whether it slept."""
        rates = self._runner.rates
        wait = 0.0 if rates is None else rates.wait_s()
        if wait <= 0:
            return False
        slot.mark("idle")
        self._stopping.wait(wait)
        return True

    def _idle(self, slot: Slot, interval: float) -> None:
        """Wait for work: with a listener up (and no `max_running`, whose slots free up
        unannounced), until the next known due time or the fallback polling interval; else
        one polling interval."""
        slot.mark("idle")
        listener = self._listener
        if listener is None or not listener.listening.is_set() or self.options.max_running:
            self._wakeup.idle(interval)
            return
        fallback = max(interval, self.options.fallback_polling_interval_ms / 1000)
        self._wakeup.idle(interval, fallback)

    def _graph_changed(self) -> None:
        """A job was blocked: the next job's settle reads whether jobs wait on others, not
        the registry's next beat."""
        self._runner.graph_active = None

    def _listening(self, conn: Any) -> None:
        """The listener's connection listens: learn when the queue's next job falls due, and
        whether jobs wait on others (one blocked while nobody listened was not told)."""
        dialect = self._runner.dialect(conn)
        self._runner._blocked_now(conn, dialect)
        due = dialect.next_process_at(conn, self.options.queue)
        if due is not None:
            self._wakeup.due_at(due.timestamp())

    def _polling_failed(self, slot: Slot, exc: Exception, backoff: _Backoff) -> bool:
        """Report a polling error and back off: whether the thread goes on."""
        if slot.abandoned:
            raise Replaced from exc  # the error of the connection stop() or a timeout cut
        if self._stopping.is_set():
            self._emit("polling_error", exception=exc)
            return False
        self._emit("polling_error", exception=exc)
        if self._should_stop(exc):
            self.stop()
            return False
        slot.mark("backing_off")
        self._stopping.wait(backoff.next())
        return True

    def _should_stop(self, exc: Exception) -> bool:
        handler = self.options.on_polling_error
        if handler is None or is_transient(exc):
            return False
        try:
            return bool(handler(exc))
        except Exception as error:
            self._emit("polling_error", exception=error, source="on_polling_error")
            return False


def create_queue_worker(
    data_source: DataSource, handler: Handler, **options: Unpack[WorkerOptions]
) -> QueueWorker:
    """Create a worker for one queue; it does not poll until `start()`.

    `data_source` is a pool with a `connection()` context manager (such as
    psycopg_pool's `ConnectionPool` or `MySQLDataSource`) or a callable returning
    a new connection. Every option is in `WorkerOptions` and the docs' table.
    """
    queue = options.get("queue") or DEFAULT_QUEUE
    given = with_storage_defaults(options, f"the queue worker of queue {queue!r}")
    return QueueWorker(data_source, handler, worker_settings(**given))


def process_next_job(
    data_source: DataSource, handler: Handler, **options: Unpack[WorkerOptions]
) -> bool | None:
    """Run at most one due job now, in this thread: True/False for its outcome, None if none."""
    runner = JobRunner(handler, worker_settings(**options))
    connect = runner.recording_connection = connection_factory(data_source)
    try:
        with connect() as conn:
            check_schema(conn, runner.options.job_table, runner.options.archived_job_table)
            if runner.rates is not None:
                runner.rates.ensure(conn, runner.dialect(conn))
                conn.commit()
            return runner.run_next(conn)
    finally:
        runner.loops.close()

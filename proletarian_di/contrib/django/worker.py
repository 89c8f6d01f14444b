"""The worker side: a handler that runs Django tasks and records their results, and the
loop behind `manage.py proletarian_worker` (the signal semantics of `proletarian-di worker`)."""

from __future__ import annotations

import contextlib
import json
import threading
import traceback
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any, TextIO

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError, close_old_connections, connections
from django.utils.module_loading import import_string

from ..._engine.signals import Signals, exit_now, stop_all, total_summary
from ...jobs import Job
from ...worker import QueueWorker, create_queue_worker
from ._compat import (
    Status,
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    task_backends,
    task_finished,
    task_started,
)
from ._connections import data_source, driver_connection
from .backend import ProletarianBackend
from .results import (
    archived_at,
    create_results_table,
    encode_errors,
    encode_return_value,
    write_result,
)

EXIT_ABANDONED = 7
"""The exit status when jobs were abandoned at shutdown (as `proletarian-di worker`)."""


def _error(exc: BaseException) -> dict[str, str]:
    """A `TaskError`'s fields for `exc`: its class path and formatted traceback."""
    return {
        "exception_class_path": f"{type(exc).__module__}.{type(exc).__qualname__}",
        "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
    }


class TaskHandler:
    """An advanced-mode handler (`handler(job)`) that runs a job's Django task and writes its
    result on the job's connection; `failed` is its `failed_job_fn`."""

    def __init__(self, backend: ProletarianBackend) -> None:
        self.backend = backend
        self._started: dict[Any, datetime] = {}
        self._lock = threading.Lock()

    def _result(self, job: Job, task: Task[Any, Any], status: Any) -> TaskResult[Any]:
        worker = threading.current_thread().name
        return TaskResult(
            task=task,
            id=str(job.job_id),
            status=status,
            enqueued_at=job.enqueued_at,
            started_at=self._started.get(job.job_id),
            last_attempted_at=self._started.get(job.job_id),
            finished_at=None,
            args=job.payload.get("args", []),
            kwargs=job.payload.get("kwargs", {}),
            backend=self.backend.alias,
            errors=[],
            worker_ids=[worker] * job.attempts,
        )

    def __call__(self, job: Job) -> None:
        started = datetime.now(timezone.utc)
        with self._lock:
            self._started[job.job_id] = started
        task = import_string(job.payload["task"])
        if not isinstance(task, Task):
            raise TypeError(f"{job.payload['task']} is not a Django task")
        args, kwargs = job.payload.get("args", []), job.payload.get("kwargs", {})
        result = self._result(job, task, Status.RUNNING)
        task_started.send(type(self.backend), task_result=result)
        close_old_connections()
        try:
            try:
                if task.takes_context:
                    value = task.call(TaskContext(task_result=result), *args, **kwargs)
                else:
                    value = task.call(*args, **kwargs)
            finally:
                close_old_connections()
            encoded = encode_return_value(value, self.backend.max_result_bytes)
        except Exception as exc:
            # Sent inside the handler, as Django's backends do: receivers see sys.exc_info().
            error = TaskError(**_error(exc))
            self._finished(result, Status.FAILED, datetime.now(timezone.utc), errors=[error])
            raise
        finished = datetime.now(timezone.utc)
        self._write(job, Status.SUCCESSFUL, encoded, None, finished)
        self._finished(result, Status.SUCCESSFUL, finished, return_value=json.loads(encoded))

    def _finished(
        self,
        result: TaskResult[Any],
        status: Any,
        finished: datetime,
        *,
        return_value: Any = None,
        errors: Sequence[TaskError] = (),
    ) -> None:
        """Send `task_finished` for `result`, set to its outcome (the stored return value)."""
        object.__setattr__(result, "status", status)
        object.__setattr__(result, "finished_at", finished)
        object.__setattr__(result, "_return_value", return_value)
        result.errors.extend(errors)
        task_finished.send(type(self.backend), task_result=result)

    def failed(self, job: Job, exc: BaseException) -> None:
        """Record the task as FAILED with its error, in the job's transaction, with the
        archive's `finished_at`: `get_result` tells this run's row from an earlier one's."""
        errors = encode_errors([_error(exc)], self.backend.max_result_bytes)
        finished = archived_at(job.connection, self.backend.archived_job_table, job.job_id)
        self._write(job, Status.FAILED, None, errors, finished or datetime.now(timezone.utc))

    def _write(
        self, job: Job, status: Any, value: str | None, errors: str | None, finished: datetime
    ) -> None:
        """Record the task's outcome in its results row, in the job's transaction."""
        with self._lock:
            started = self._started.pop(job.job_id, None)
        write_result(
            job.connection,
            self.backend.job_table,
            job.job_id,
            status=status.value,
            return_value=value,
            errors=errors,
            attempts=job.attempts,
            worker_id=threading.current_thread().name,
            started_at=started,
            finished_at=finished,
        )


class CannotStart(Exception):
    """The workers cannot start: an unknown or unsuitable TASKS backend, a bad option, or a
    database that does not answer. The message names the problem (the command prints it)."""


def backend_named(alias: str) -> ProletarianBackend:
    """The TASKS backend `alias`, which must be a `ProletarianBackend` on a configured
    database; `CannotStart` naming the problem otherwise."""
    configured = ", ".join(repr(name) for name in task_backends.settings) or "none"
    if alias not in task_backends.settings:
        raise CannotStart(f"no TASKS backend {alias!r}; configured: {configured}")
    try:
        backend = task_backends[alias]
    except (ImproperlyConfigured, ValueError, TypeError) as exc:
        raise CannotStart(f"TASKS[{alias!r}] cannot be loaded: {exc}") from exc
    if not isinstance(backend, ProletarianBackend):
        raise CannotStart(
            f"TASKS[{alias!r}] is {type(backend).__module__}.{type(backend).__qualname__}, "
            "not proletarian_di.contrib.django.ProletarianBackend; proletarian backends: "
            + (", ".join(repr(name) for name in _proletarian_aliases()) or "none")
        )
    if backend.database not in connections.settings:
        databases = ", ".join(repr(name) for name in connections.settings) or "none"
        raise CannotStart(
            f"TASKS[{alias!r}]['OPTIONS']['DATABASE'] is {backend.database!r}, which is not in "
            f"DATABASES ({databases})"
        )
    return backend


class CheckedCommand(BaseCommand):
    """A command on a TASKS backend that checks the backend before Django's system checks.

    Django 6 runs the checks of `django.tasks` before any command, and they load every
    TASKS entry: one that cannot be loaded would end in a traceback. These commands run the
    checks themselves, after `backend_named` has named such a problem in one line."""

    requires_system_checks: Any = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--backend", default="default", help="The TASKS alias (default: 'default')."
        )
        parser.add_argument("--skip-checks", action="store_true", help="Skip system checks.")

    def backend(self, options: dict[str, Any]) -> ProletarianBackend:
        """The `--backend` to run, checked, then the system checks (unless skipped)."""
        try:
            backend = backend_named(options["backend"])
        except CannotStart as exc:
            raise CommandError(str(exc)) from None
        if not options["skip_checks"]:
            try:
                self.check()
            except (ImproperlyConfigured, ValueError, TypeError) as exc:
                raise CommandError(f"system checks: {exc}") from None
        return backend


def _proletarian_aliases() -> list[str]:
    """The TASKS aliases whose BACKEND is a ProletarianBackend (none is instantiated)."""
    found = []
    for alias, entry in task_backends.settings.items():
        with contextlib.suppress(ImportError, KeyError, TypeError, AttributeError):
            backend_class = import_string(entry["BACKEND"])
            if isinstance(backend_class, type) and issubclass(backend_class, ProletarianBackend):
                found.append(alias)
    return found


def _database_errors() -> tuple[type[BaseException], ...]:
    """Django's database errors and those of the drivers that are installed."""
    errors: list[type[BaseException]] = [DatabaseError]
    with contextlib.suppress(ImportError):
        import psycopg

        errors.append(psycopg.Error)
    with contextlib.suppress(ImportError):
        import pymysql

        errors.append(pymysql.Error)
    return tuple(errors)


def check_database(backend: ProletarianBackend) -> None:
    """Connect to the backend's database the way Django does (driver checked too), then close:
    `CannotStart` with the server's or the driver's reason if it does not answer."""
    try:
        driver_connection(backend.database)
    except ImproperlyConfigured as exc:
        raise CannotStart(str(exc)) from exc
    except _database_errors() as exc:
        raise CannotStart(f"cannot connect to database {backend.database!r}: {exc}") from exc
    finally:
        connections[backend.database].close()


def create_workers(
    backend: ProletarianBackend,
    source: Any,
    queues: Sequence[str],
    **options: Any,
) -> list[QueueWorker]:
    """One advanced-mode worker per queue, running the backend's tasks (not started)."""
    handler = TaskHandler(backend)
    return [
        create_queue_worker(
            source,
            handler,
            queue=queue,
            handler_fn_mode="advanced",
            failed_job_fn=handler.failed,
            job_table=backend.job_table,
            archived_job_table=backend.archived_job_table,
            **options,
        )
        for queue in queues
    ]


def run_workers(
    backend_alias: str,
    queues: Sequence[str],
    *,
    threads: int = 1,
    polling_interval_ms: int = 100,
    out: TextIO,
    **options: Any,
) -> int:
    """Run workers for `queues` until SIGTERM or SIGINT; drain and return the exit status
    (0, or EXIT_ABANDONED). A second signal exits at once. `CannotStart`, before anything
    runs, for a bad backend, queue or option, or a database that does not answer."""
    backend = backend_named(backend_alias)
    unknown = [q for q in queues if backend.queues and q not in backend.queues]
    if unknown:
        raise CannotStart(
            f"queue(s) {', '.join(map(repr, unknown))} not in TASKS[{backend_alias!r}]"
            f"['QUEUES'] ({', '.join(map(repr, sorted(backend.queues)))})"
        )
    check_database(backend)
    refused: tuple[type[BaseException], ...] = (ValueError, TypeError, *_database_errors())
    source = data_source(backend.database, size=threads * len(queues) + 2)
    try:
        try:
            with source.connection() as conn:
                create_results_table(conn, backend.job_table)
                conn.commit()
            workers = create_workers(
                backend,
                source,
                queues,
                worker_threads=threads,
                polling_interval_ms=polling_interval_ms,
                **options,
            )
        except refused as exc:
            raise CannotStart(str(exc)) from exc
        return _run(backend, workers, threads, out)
    finally:
        source.close()


def _run(backend: ProletarianBackend, workers: list[QueueWorker], threads: int, out: TextIO) -> int:
    say: Callable[[str], None] = lambda line: print(line, file=out, flush=True)  # noqa: E731
    with Signals(on_second=exit_now) as signals:
        started: list[QueueWorker] = []
        try:
            for worker in workers:
                worker.start()
                started.append(worker)
            say(
                f"proletarian_worker: running {', '.join(w.queue_worker_id for w in workers)} "
                f"({threads} thread{'s' if threads != 1 else ''} each) for TASKS"
                f"[{backend.alias!r}] on database {backend.database!r}"
            )
            say("stop with Ctrl-C or SIGTERM (a second signal exits at once)")
            stopped_alone: list[QueueWorker] = []
            while signals.wait(0.2) is None:
                stopped_alone = [w for w in workers if not w.running]
                if stopped_alone:
                    break
            if not stopped_alone:
                say(
                    f"{signals.first} received: draining in-flight jobs, then shutting down "
                    "(send it again to exit at once)"
                )
        finally:
            clean = stop_all(started)
    totals, summary = total_summary(workers)
    if stopped_alone:
        failure = next((w.failure for w in stopped_alone if w.failure is not None), None)
        with contextlib.suppress(Exception):
            say(f"stopped on its own ({failure!r}); {summary}")
        return 1
    if not clean:
        say(f"stopped: {totals.get('abandoned', 0)} abandoned (they run again); {summary}")
        return EXIT_ABANDONED
    say(f"stopped cleanly: {summary}")
    return 0

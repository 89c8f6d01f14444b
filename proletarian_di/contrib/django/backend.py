"""`ProletarianBackend`: Django tasks as proletarian-di jobs, enqueued in Django's transaction."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Any, TypeVar

from django.db import connections, transaction
from django.utils import timezone as django_timezone
from django.utils.module_loading import import_string

from ... import admin
from ..._store.enqueue import enqueue
from ..._store.tables import DEFAULT_ARCHIVED_JOB_TABLE, DEFAULT_JOB_TABLE
from ...errors import TransactionAborted
from ._compat import (
    BaseTaskBackend,
    Status,
    Task,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    task_enqueued,
)
from ._connections import driver_connection
from .results import (
    MAX_RESULT_BYTES,
    StoredResult,
    check_limit,
    read_result,
    results_table,
)

T = TypeVar("T")

_STATUS = {
    "queued": Status.READY,
    "scheduled": Status.READY,
    "retrying": Status.READY,
    "running": Status.RUNNING,
    "succeeded": Status.SUCCESSFUL,
    "failed": Status.FAILED,
    "cancelled": Status.FAILED,
}


class TaskCancelled(Exception):
    """The error class of a task whose job was cancelled (`admin.cancel_jobs`)."""


class JobFailed(Exception):
    """The error class of a job that failed before its task ran (e.g. a payload it could not
    decode), whose error text is the archive's."""


class ProletarianBackend(BaseTaskBackend):
    """A `django.tasks` backend that stores tasks as proletarian-di jobs.

    OPTIONS: `DATABASE` (Django alias, default "default"), `JOB_TABLE`,
    `ARCHIVED_JOB_TABLE`, `MAX_RESULT_BYTES` (default 65536).
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        options = dict(self.options)
        self.database: str = options.pop("DATABASE", "default")
        self.job_table: str = options.pop("JOB_TABLE", DEFAULT_JOB_TABLE)
        self.archived_job_table: str = options.pop("ARCHIVED_JOB_TABLE", DEFAULT_ARCHIVED_JOB_TABLE)
        self.max_result_bytes = check_limit(options.pop("MAX_RESULT_BYTES", MAX_RESULT_BYTES))
        results_table(self.job_table)  # validates the table names now
        admin.Tables(self.job_table, self.archived_job_table)
        if options:
            raise ValueError(
                f"TASKS[{alias!r}]['OPTIONS']: unknown option(s) {', '.join(sorted(options))}; "
                "valid: DATABASE, JOB_TABLE, ARCHIVED_JOB_TABLE, MAX_RESULT_BYTES"
            )

    def enqueue(self, task: Task[Any, T], args: Any, kwargs: Any) -> TaskResult[T]:
        """Insert the task's job on Django's connection, in the current atomic block (or in
        one of its own, committed at once, when Django is in autocommit)."""
        self.validate_task(task)
        payload = {"task": task.module_path, "args": list(args), "kwargs": dict(kwargs)}
        run_after = task.run_after
        if run_after is not None and django_timezone.is_naive(run_after):
            run_after = django_timezone.make_aware(run_after)
        enqueued_at = datetime.now(timezone.utc)
        self._check_transaction(task)
        with transaction.atomic(using=self.database, savepoint=False):
            driver = driver_connection(self.database)
            try:
                job_id = enqueue(
                    driver,
                    task.module_path,
                    payload,
                    queue=task.queue_name,
                    priority=task.priority,
                    process_at=run_after,
                    job_table=self.job_table,
                )
            except Exception as exc:
                if _in_failed_transaction(driver, exc):
                    raise self._aborted(task, "the database refused the insert") from exc
                raise
        result: TaskResult[T] = TaskResult(
            task=task,
            id=str(job_id),
            status=Status.READY,
            enqueued_at=enqueued_at,
            started_at=None,
            last_attempted_at=None,
            finished_at=None,
            args=list(args),
            kwargs=dict(kwargs),
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        task_enqueued.send(type(self), task_result=result)
        return result

    def _check_transaction(self, task: Task[Any, Any]) -> None:
        """`TransactionAborted` if Django's transaction can no longer commit: Django marked
        it for rollback (an error left an inner atomic block), or PostgreSQL aborted it (a
        statement failed, e.g. an `IntegrityError` that was caught). The job would be lost
        with it, or the insert refused with a driver error."""
        wrapper = connections[self.database]
        if not wrapper.in_atomic_block:
            return
        if wrapper.needs_rollback:
            raise self._aborted(task, "an error left an atomic block inside it")
        driver = driver_connection(self.database)
        if type(driver).__module__.startswith("psycopg"):
            from psycopg.pq import TransactionStatus

            if driver.info.transaction_status == TransactionStatus.INERROR:
                raise self._aborted(
                    task, "a statement in it failed, e.g. an IntegrityError that was caught"
                )

    def _aborted(self, task: Task[Any, Any], reason: str) -> TransactionAborted:
        return TransactionAborted(
            f"cannot enqueue {task.module_path}: the transaction on Django database "
            f"{self.database!r} has failed ({reason}); nothing was written. Let the error "
            "leave the atomic block (it rolls back) and enqueue in a new transaction, or run "
            "the statement that may fail in a transaction.atomic() of its own (a savepoint)"
        )

    def get_result(self, result_id: str) -> TaskResult[Any]:
        """The task's status, return value and errors, read from the queue tables and the
        results table; `TaskResultDoesNotExist` for an unknown id."""
        try:
            job_id = uuid.UUID(str(result_id))
        except ValueError:
            raise TaskResultDoesNotExist(result_id) from None
        tables = admin.Tables(self.job_table, self.archived_job_table)
        with transaction.atomic(using=self.database, savepoint=False):
            conn = driver_connection(self.database)
            info = admin.get_job(conn, job_id, tables=tables)
            stored = None
            if info is not None and info.state in ("succeeded", "failed"):
                stored = _current(info, read_result(conn, self.job_table, job_id))
        if info is None or not isinstance(info.payload, dict) or "task" not in info.payload:
            raise TaskResultDoesNotExist(result_id)
        task = import_string(info.payload["task"])
        if not isinstance(task, Task):
            raise TaskResultDoesNotExist(f"{result_id}: {info.payload['task']} is not a task")
        task = task.using(queue_name=info.queue, priority=max(-100, min(100, info.priority)))
        status = _STATUS[info.state]
        errors: list[TaskError] = []
        if stored is not None:
            status = Status(stored.status)
            errors = [TaskError(**error) for error in stored.errors]
        elif info.state == "cancelled":
            errors = [_error(TaskCancelled, info.error or "cancelled")]
        elif info.state == "failed":
            errors = [_error(JobFailed, info.error or "failed")]
        attempts = stored.attempts if stored is not None else info.attempts
        worker = stored.worker_id if stored is not None and stored.worker_id else "proletarian"
        result: TaskResult[Any] = TaskResult(
            task=task,
            id=str(job_id),
            status=status,
            enqueued_at=info.enqueued_at,
            started_at=stored.started_at if stored is not None else None,
            last_attempted_at=stored.started_at if stored is not None else None,
            finished_at=info.finished_at,
            args=info.payload.get("args", []),
            kwargs=info.payload.get("kwargs", {}),
            backend=self.alias,
            errors=errors,
            worker_ids=[worker] * attempts,
        )
        if stored is not None and status == Status.SUCCESSFUL:
            object.__setattr__(result, "_return_value", stored.return_value)
        return result


def _in_failed_transaction(driver: Any, exc: BaseException) -> bool:
    """Whether `exc` is PostgreSQL refusing a statement in an aborted transaction."""
    if not type(driver).__module__.startswith("psycopg"):
        return False
    from psycopg.errors import InFailedSqlTransaction

    return isinstance(exc, InFailedSqlTransaction)


def _current(info: admin.JobInfo, stored: StoredResult | None) -> StoredResult | None:
    """The results row if it is the outcome of the run the archive holds, else None.

    An operator's retry moves a failed job back into the queue and its results row stays
    behind: a later cancel, or a later failure whose row was not written, must not report
    it. A success writes its row in the transaction that archives it; a failure writes the
    archive's own `finished_at`, so a row of an earlier run does not match."""
    if stored is None:
        return None
    if info.state == "succeeded" and stored.status == Status.SUCCESSFUL.value:
        return stored
    if (
        info.state == "failed"
        and stored.status == Status.FAILED.value
        and stored.finished_at == info.finished_at
    ):
        return stored
    return None


def _error(cls: type[BaseException], text: str) -> TaskError:
    return TaskError(exception_class_path=f"{cls.__module__}.{cls.__qualname__}", traceback=text)

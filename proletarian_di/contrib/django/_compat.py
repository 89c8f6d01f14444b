"""The tasks framework: `django.tasks` (Django 6) or the `django_tasks` backport."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django_tasks import TaskContext, TaskResultStatus, task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskError, TaskResult
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started
else:
    try:
        from django.tasks import TaskContext, TaskResultStatus, task_backends
        from django.tasks.backends.base import BaseTaskBackend
        from django.tasks.base import Task, TaskError, TaskResult
        from django.tasks.exceptions import TaskResultDoesNotExist
        from django.tasks.signals import task_enqueued, task_finished, task_started
    except ImportError:
        try:
            from django_tasks import TaskContext, TaskResultStatus, task_backends
            from django_tasks.backends.base import BaseTaskBackend
            from django_tasks.base import Task, TaskError, TaskResult
            from django_tasks.exceptions import TaskResultDoesNotExist
            from django_tasks.signals import task_enqueued, task_finished, task_started
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError(
                "ProletarianBackend needs Django's tasks framework: Django 6 (django.tasks) or "
                "the django-tasks backport (pip install 'proletarian-di[django]')"
            ) from exc

Status: Any = TaskResultStatus
"""`TaskResultStatus`, typed loosely (its members are tuples to mypy without django-stubs)."""

__all__ = [
    "BaseTaskBackend",
    "Status",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]

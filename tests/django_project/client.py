"""Run Django-side steps for tests/test_django.py in a process of their own.

`python client.py '<json list of steps>'` prints a JSON list with one answer per step:
{"do": "enqueue", "task": "add", "args": [...], "using": {...}, "atomic": "commit"|"rollback"}
→ the result id; {"do": "result", "id": ...} → status, return value, errors, queue, priority;
{"do": "enqueue_after_error", "how": "caught"|"marked"|"savepoint"} → the result id, or the
error's class path and message (a duplicate key in proletarian.dj_unique, caught in an
atomic block: as it is, after an inner atomic(savepoint=False), or in a savepoint).
"""

import json
import os
import sys
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "djdemo.settings")

import django

django.setup()

from django.db import IntegrityError, connection, transaction  # noqa: E402
from django.utils import timezone  # noqa: E402
from djdemo import tasks  # noqa: E402


class Rollback(Exception):
    pass


def enqueue(step: dict) -> str | None:
    task = getattr(tasks, step["task"])
    using = dict(step.get("using", {}))
    if "run_after_s" in using:
        using["run_after"] = timezone.now() + timedelta(seconds=using.pop("run_after_s"))
    if using:
        task = task.using(**using)
    atomic = step.get("atomic")
    if atomic is None:
        return task.enqueue(*step.get("args", []), **step.get("kwargs", {})).id
    try:
        with transaction.atomic():
            result = task.enqueue(*step.get("args", []), **step.get("kwargs", {}))
            if atomic == "rollback":
                raise Rollback
    except Rollback:
        pass
    return result.id


def duplicate() -> None:
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO proletarian.dj_unique (k) VALUES (1)")


def enqueue_after_error(step: dict) -> str | list[str]:
    how = step["how"]
    try:
        with transaction.atomic():
            try:
                if how == "caught":
                    duplicate()
                else:
                    with transaction.atomic(savepoint=how == "savepoint"):
                        duplicate()
            except IntegrityError:
                pass
            return tasks.add.enqueue(1, 2).id
    except Exception as exc:
        return [f"{type(exc).__module__}.{type(exc).__qualname__}", str(exc)]


def result(step: dict) -> dict:
    found = getattr(tasks, step.get("task", "add")).get_backend().get_result(step["id"])
    answer = {
        "status": str(found.status),
        "errors": [[e.exception_class_path, e.traceback] for e in found.errors],
        "queue": found.task.queue_name,
        "priority": found.task.priority,
        "task": found.task.module_path,
        "args": found.args,
        "finished": found.is_finished,
    }
    if found.status == "SUCCESSFUL":
        answer["return_value"] = found.return_value
    return answer


if __name__ == "__main__":
    steps = json.loads(sys.argv[1])
    steps_by_name = {
        "enqueue": enqueue,
        "enqueue_after_error": enqueue_after_error,
        "result": result,
    }
    print(json.dumps([steps_by_name[s["do"]](s) for s in steps]))

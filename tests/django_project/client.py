"""Run Django-side steps for tests/test_django.py in a process of their own.

`python client.py '<json list of steps>'` prints a JSON list with one answer per step:
{"do": "enqueue", "task": "add", "args": [...], "using": {...}, "atomic": "commit"|"rollback"}
→ the result id; {"do": "result", "id": ...} → status, return value, errors, queue, priority.
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

from django.db import transaction  # noqa: E402
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
    print(json.dumps([{"enqueue": enqueue, "result": result}[s["do"]](s) for s in steps]))

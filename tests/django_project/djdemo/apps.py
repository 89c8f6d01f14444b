"""The test project's app: when DJDEMO_SIGNALS names a file, the task signals are noted in it."""

import json
import os
import sys
from typing import Any

from django.apps import AppConfig

try:
    from django.tasks.signals import task_finished, task_started
except ImportError:
    from django_tasks.signals import task_finished, task_started


def note(signal: str, task_result: Any) -> None:
    """Append one JSON line describing the signal's task result."""
    line = {
        "signal": signal,
        "id": task_result.id,
        "status": str(task_result.status),
        "errors": [e.exception_class_path for e in task_result.errors],
        "in_except": sys.exc_info()[0] is not None,
    }
    if task_result.status == "SUCCESSFUL":
        line["return_value"] = task_result.return_value
    with open(os.environ["DJDEMO_SIGNALS"], "a") as f:
        f.write(json.dumps(line) + "\n")


def on_started(sender: Any, task_result: Any, **kwargs: Any) -> None:
    note("started", task_result)


def on_finished(sender: Any, task_result: Any, **kwargs: Any) -> None:
    note("finished", task_result)


class DjdemoConfig(AppConfig):
    name = "djdemo"

    def ready(self) -> None:
        if os.environ.get("DJDEMO_SIGNALS"):
            task_started.connect(on_started)
            task_finished.connect(on_finished)

"""The test project's tasks."""

import os
import time
from pathlib import Path

try:
    from django.tasks import task
except ImportError:
    from django_tasks import task


@task()
def add(a: int, b: int) -> int:
    return a + b


@task()
def fail(message: str) -> None:
    raise ValueError(message)


@task()
def big(size: int) -> str:
    return "x" * size


@task(queue_name="notes")
def note(path: str, text: str) -> str:
    with open(path, "a") as f:
        f.write(text + "\n")
    return text


@task()
def hold(folder: str) -> int:
    """Note each start (with the pid), then wait until the test creates `release`."""
    starts = Path(folder, "starts")
    with starts.open("a") as f:
        f.write(f"{os.getpid()}\n")
    deadline = time.monotonic() + 60
    while not Path(folder, "release").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return len(starts.read_text().split())


@task()
def flaky(folder: str) -> str:
    """Fail until the test creates `ok` in `folder`."""
    if not Path(folder, "ok").exists():
        raise RuntimeError("not yet")
    return "ok"

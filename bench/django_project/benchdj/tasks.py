"""The benchmark's tasks: a no-op, and a sleeper that returns at once once told to."""

import os
import time
from pathlib import Path

try:
    from django.tasks import task
except ImportError:
    from django_tasks import task


@task()
def noop() -> None:
    """Nothing: the throughput measurement times the backend, not the task."""


@task()
def sleeper(folder: str, seconds: float) -> int:
    """Note each start (pid) in `folder`/starts, then sleep until `folder`/short exists."""
    starts = Path(folder, "starts")
    with starts.open("a") as f:
        f.write(f"{os.getpid()}\n")
    deadline = time.monotonic() + seconds
    while not Path(folder, "short").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return len(starts.read_text().split())

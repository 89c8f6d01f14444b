"""Dependencies with real worker processes: a SIGKILL of the worker running a last parent
leaves the dependent blocked until that parent runs again, and then it runs once; a
callback after 10,000 parents run by three processes (claiming 10 at a time) runs once,
after all of them."""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path
from typing import Any

import long_job_process
import pytest

from proletarian_di import admin, enqueue, enqueue_many

from backends import Backend, archive_by_id, connection

MODES = [pytest.param((), id="held"), pytest.param(("--lease-ms", "1000"), id="lease")]


def finish(process: subprocess.Popen[str], timeout: float = 120) -> str:
    """Wait for a worker process; its stdout (its count of jobs run), failing on errors."""
    try:
        out, err = process.communicate(timeout=timeout)
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
    assert not err.strip(), err
    return out


@pytest.mark.parametrize("mode", MODES)
def test_a_killed_last_parent_leaves_its_dependent_blocked_until_it_runs_again(
    backend: Backend, tmp_path: Path, mode: tuple[str, ...]
) -> None:
    with connection(backend) as conn:
        first = enqueue(conn, "t", "first")
        last = enqueue(conn, "t", "last")
        child = enqueue(conn, "t", "child", depends_on=[first, last])
        conn.commit()
    events = tmp_path / "events"
    killed = long_job_process.start(backend, events, "kill", "--only", "last", *mode)
    killed.wait(60)
    assert killed.returncode == -9
    assert "start last" in long_job_process.starts(events)
    with connection(backend) as conn:
        assert admin.get_job(conn, child).state == "blocked"
        assert admin.get_job(conn, last).finished_at is None
    rerun = long_job_process.start(backend, events, "ok", *mode, "--retries", "1")
    finish(rerun)
    runs = long_job_process.starts(events)
    assert runs.count("start child") == 1
    assert runs[-1] == "start child"
    assert {archive_by_id(backend)[i][0] for i in (first, last, child)} == {"success"}


@pytest.mark.parametrize(
    "count", [1_000, pytest.param(10_000, marks=pytest.mark.slow)], ids=lambda n: f"{n}-parents"
)
def test_a_callback_after_many_parents_run_by_three_processes_runs_once_after_all(
    backend: Backend, tmp_path: Path, count: int
) -> None:
    """A fan-in: `count` parents run by three processes at once, whose last ones commit
    together; the callback runs once, after every one of them."""
    with connection(backend) as conn:
        parents = enqueue_many(conn, [("t", f"p{n}") for n in range(count)])
        callback = enqueue(conn, "t", "callback", depends_on=parents)
        conn.commit()
    events = tmp_path / "events"
    processes = [
        long_job_process.start(backend, events, "ok", "--threads", "2", "--batch-size", "10")
        for _ in range(3)
    ]
    outs = [finish(process, timeout=300) for process in processes]
    assert sum(int(out) for out in outs) == count + 1
    runs = long_job_process.starts(events)
    assert len(runs) == count + 1 and runs[-1] == "start callback"
    archived: dict[Any, Any] = archive_by_id(backend)
    assert archived[callback] == ("success", 1)
    assert sum(status == "success" for status, _ in archived.values()) == count + 1

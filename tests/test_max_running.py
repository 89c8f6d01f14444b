"""`max_running`: at most N jobs of a queue run at once over every worker process using the
database, enforced by database locks held for the job's transaction, so a crashed process
gives its slot back."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from proletarian_di import ConfigurationError, create_queue_worker, process_next_job
from proletarian_di._store.dialects import dialect_for
from proletarian_di._store.dialects.base import running_slots

from backends import Backend, enqueue_committed, wait_until

SCRIPT = str(Path(__file__).with_name("limited_worker_process.py"))


def most_at_once(events: Path) -> int:
    """The most jobs between their start and end at any moment, from the events' lines."""
    moments = []
    for line in events.read_text().split("\n"):
        if line:
            what, at = line.split()
            moments.append((int(at), 0 if what == "end" else 1))
    running = most = 0
    for _, started in sorted(moments):
        running += 1 if started else -1
        most = max(most, running)
    return most


def start_workers(
    backend: Backend,
    events: Path,
    count: int,
    max_running: int | None,
    threads: int,
    hold: str,
    *rate: int,
) -> list[subprocess.Popen[str]]:
    """`count` worker processes; `rate`: a rate limit's limit and period, and lease_ms."""
    cap = "-" if max_running is None else str(max_running)
    args = [str(events), cap, str(threads), hold, *map(str, rate)]
    return [
        subprocess.Popen(
            [sys.executable, SCRIPT, *args],
            env=backend.env(),
            cwd=Path(__file__).parent,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(count)
    ]


def test_three_processes_of_four_threads_run_at_most_two_jobs_at_once(
    backend: Backend, tmp_path: Path
) -> None:
    enqueue_committed(backend, *[("t", n) for n in range(60)])
    events = tmp_path / "events"
    processes = start_workers(backend, events, 3, max_running=2, threads=4, hold="0.03")
    outputs = [p.communicate(timeout=120) for p in processes]
    for process, (_, errors) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, errors
    assert sum(int(out) for out, _ in outputs) == 60
    assert events.read_text().count("start") == 60
    assert most_at_once(events) == 2, "never more than two, and two at times"


def test_fair_workers_of_three_processes_run_at_most_two_jobs_at_once(
    backend: Backend, tmp_path: Path
) -> None:
    """`fair=True` with `max_running`: the fair claim takes a running slot first, so the cap
    holds over every process while the claims take turns across six group keys."""
    for group in range(6):
        enqueue_committed(backend, *[("t", n) for n in range(10)], group_key=f"g{group}")
    events = tmp_path / "events"
    processes = start_workers(backend, events, 3, 2, 4, "0.03", "", "", "0", "fair")
    outputs = [p.communicate(timeout=120) for p in processes]
    for process, (_, errors) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, errors
    assert sum(int(out) for out, _ in outputs) == 60
    assert events.read_text().count("start") == 60
    assert most_at_once(events) == 2, "never more than two, and two at times"


def test_a_crashed_process_gives_its_slot_back(backend: Backend, tmp_path: Path) -> None:
    """A process killed while running a job holds no slot: the lock went with its connection,
    so the only slot is free again, and the job it was running runs again elsewhere."""
    enqueue_committed(backend, ("t", "held"))
    events = tmp_path / "events"
    [stuck] = start_workers(backend, events, 1, max_running=1, threads=2, hold="forever")
    try:
        wait_until(lambda: events.exists() and "start" in events.read_text(), timeout=30)
        enqueue_committed(backend, ("t", "next"))
        ran: list[Any] = []
        source = backend.pool(1)
        try:
            assert process_next_job(source, lambda t, p: ran.append(p), max_running=1) is None
            stuck.send_signal(signal.SIGKILL)
            stuck.wait(30)
            wait_until(
                lambda: process_next_job(source, lambda t, p: ran.append(p), max_running=1),
                description="the slot of the killed process",
            )
            assert process_next_job(source, lambda t, p: ran.append(p), max_running=1)
        finally:
            source.close()
    finally:
        with contextlib.suppress(ProcessLookupError):
            stuck.kill()
        stuck.communicate(timeout=30)
    assert sorted(ran) == ["held", "next"]


def test_threads_of_one_worker_share_the_limit(backend: Backend) -> None:
    enqueue_committed(backend, *[("t", n) for n in range(12)])
    lock = threading.Lock()
    running, most, done = [0], [0], []

    def handler(job_type: str, payload: Any) -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        threading.Event().wait(0.02)
        with lock:
            running[0] -= 1
            done.append(payload)

    worker = create_queue_worker(
        backend.pool(5),
        handler,
        worker_threads=4,
        max_running=1,
        polling_interval_ms=10,
        log=lambda e, d: None,
    )
    with worker:
        wait_until(lambda: len(done) == 12, description="every job")
    assert most == [1]


def test_no_slot_is_kept_when_nothing_is_due(backend: Backend) -> None:
    """A claim that finds no job gives its slot back at once: an idle worker holds none."""
    source = backend.pool(2)
    try:
        for _ in range(3):
            assert process_next_job(source, lambda t, p: None, max_running=1) is None
        enqueue_committed(backend, ("t", None))
        assert process_next_job(source, lambda t, p: None, max_running=1) is True
    finally:
        source.close()


def test_another_queue_has_slots_of_its_own(backend: Backend) -> None:
    ran: list[str] = []
    enqueue_committed(backend, ("other", None), queue="other")
    with contextlib.closing(backend.connect()) as conn:
        dialect = dialect_for(conn, backend.job_table, backend.archived_job_table)
        held = dialect.session(conn)
        slots = running_slots(backend.job_table, "default", 1)
        enqueue_committed(backend, ("mine", None))
        assert [r[2] for r in held.claim_in_slot(slots, "default", now())] == ["mine"]
        source = backend.pool(1)
        try:
            assert process_next_job(source, lambda t, p: ran.append(t), max_running=1) is None
            options: dict[str, Any] = {"max_running": 1, "queue": "other"}
            assert process_next_job(source, lambda t, p: ran.append(t), **options) is True
        finally:
            source.close()
        dialect.rollback(conn)
        held.release_slot()
    assert ran == ["other"]


@pytest.mark.parametrize("value", [0, -1, True, 1.5, "2"])
def test_a_bad_max_running_is_refused(backend: Backend, value: Any) -> None:
    with pytest.raises(ConfigurationError, match="max_running must be an int >= 1"):
        create_queue_worker(backend.pool(1), lambda t, p: None, max_running=value)


def now() -> Any:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc)

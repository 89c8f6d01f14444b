"""Pausing a queue: its workers, in every process, finish the job in hand and claim no more
until it is resumed; enqueueing goes on; `stats` shows it; no statement per job."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
from typer.testing import CliRunner

from proletarian_di import (
    ConfigurationError,
    admin,
    create_queue_worker,
    enqueue,
    process_next_job,
)
from proletarian_di.cli import app
from proletarian_di.testing import run_due_jobs

from backends import Backend, enqueue_committed, wait_until


def pause(backend: Backend, queue: str = "default") -> bool:
    with contextlib.closing(backend.connect()) as conn:
        changed = admin.pause_queue(conn, queue)
        conn.commit()
    return changed


def resume(backend: Backend, queue: str = "default") -> bool:
    with contextlib.closing(backend.connect()) as conn:
        changed = admin.resume_queue(conn, queue)
        conn.commit()
    return changed


def waiting(backend: Backend) -> list[str]:
    return sorted(row[0] for row in backend.query(f"SELECT job_type FROM {backend.job_table}"))


def cli(backend: Backend, *args: str) -> Any:
    return CliRunner().invoke(
        app, [*args, "-d", backend.url], env={"COLUMNS": "200", "DATABASE_URL": None}
    )


def test_pause_and_resume_say_whether_they_changed_anything(backend: Backend) -> None:
    assert pause(backend) is True
    assert pause(backend) is False
    assert pause(backend, "emails") is True
    with contextlib.closing(backend.connect()) as conn:
        paused = admin.paused_queues(conn)
        conn.rollback()
    assert sorted(paused) == ["default", "emails"]
    assert all(at.tzinfo is not None for at in paused.values())
    assert resume(backend) is True
    assert resume(backend) is False
    with contextlib.closing(backend.connect()) as conn:
        assert list(admin.paused_queues(conn)) == ["emails"]
        conn.rollback()


def test_a_pause_that_is_rolled_back_pauses_nothing(backend: Backend) -> None:
    with contextlib.closing(backend.connect()) as conn:
        assert admin.pause_queue(conn, "default") is True
        conn.rollback()
    enqueue_committed(backend, ("t", None))
    assert process_next_job(backend.pool(1), lambda t, p: None) is True


def test_a_paused_queue_still_takes_jobs_and_runs_none_until_resumed(backend: Backend) -> None:
    pause(backend)
    enqueue_committed(backend, ("a", None), ("b", None))
    enqueue_committed(backend, ("other", None), queue="elsewhere")
    source = backend.pool(1)
    try:
        ran: list[str] = []
        assert process_next_job(source, lambda t, p: ran.append(t)) is None
        assert run_due_jobs(source, lambda t, p: ran.append(t)) == 0
        assert process_next_job(source, lambda t, p: ran.append(t), queue="elsewhere") is True
        assert ran == ["other"], "another queue is not paused"
        assert waiting(backend) == ["a", "b"]
        resume(backend)
        assert run_due_jobs(source, lambda t, p: ran.append(t)) == 2
    finally:
        source.close()
    assert sorted(ran) == ["a", "b", "other"]


def test_a_worker_finishes_the_job_in_hand_then_claims_nothing(backend: Backend) -> None:
    enqueue_committed(backend, *[(f"j{n}", None) for n in range(5)])
    started, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def handler(job_type: str, payload: Any) -> None:
        ran.append(job_type)
        started.set()
        release.wait(10)

    worker = create_queue_worker(
        backend.pool(2), handler, worker_threads=1, polling_interval_ms=20, log=lambda e, d: None
    )
    with worker:
        assert started.wait(10)
        pause(backend)
        time.sleep(0.15)  # past the 100 ms a worker keeps its answer (the polling interval's floor)
        release.set()
        wait_until(lambda: len(waiting(backend)) == 4, description="the job in hand finishes")
        wait_until(lambda: worker._pauses.paused, description="the next claim reads the pause")
        time.sleep(0.2)  # ten polling intervals, in which a claim would have come
        assert ran == ["j0"]
        assert len(waiting(backend)) == 4
        resume(backend)
        wait_until(lambda: not waiting(backend), description="the resumed queue drains")
    assert len(ran) == 5


def test_a_pause_from_another_process_stops_the_workers_here(backend: Backend) -> None:
    enqueue_committed(backend, ("first", None))
    ran: list[str] = []
    worker = create_queue_worker(
        backend.pool(2), lambda t, p: ran.append(t), polling_interval_ms=20, log=lambda e, d: None
    )
    with worker:
        wait_until(lambda: ran == ["first"], description="the first job")
        command = [sys.executable, "-m", "proletarian_di.contrib.cli", "queue", "pause", "default"]
        done = subprocess.run(
            [*command, "-d", backend.url],
            capture_output=True,
            text=True,
            env={**os.environ, "DATABASE_URL": ""},
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert "queue default paused" in done.stdout
        enqueue_committed(backend, ("second", None))
        wait_until(lambda: worker._pauses.paused, description="the worker reads the pause")
        time.sleep(0.2)
        assert ran == ["first"] and waiting(backend) == ["second"]
        result = cli(backend, "queue", "resume", "default")
        assert result.exit_code == 0, result.output
        assert "queue default resumed" in result.output
        wait_until(lambda: ran == ["first", "second"], description="the second job")


def test_postgres_workers_are_told_at_once(pg: Backend) -> None:
    """With a polling interval of a minute, the worker keeps its answer (not paused) for a
    minute: only the notifications make it read the pause and the resume in time."""
    ran: list[str] = []
    worker = create_queue_worker(
        pg.pool(2), lambda t, p: ran.append(t), polling_interval_ms=60_000, log=lambda e, d: None
    )
    with worker:
        assert worker._listener is not None
        wait_until(worker._listener.listening.is_set, description="the listener")
        enqueue_committed(pg, ("first", None))
        wait_until(lambda: ran == ["first"], description="the first job, read not paused")
        ran.clear()
        pause(pg)
        enqueue_committed(pg, ("held", None))
        wait_until(lambda: worker._pauses.paused, description="the pause, notified")
        time.sleep(0.2)
        assert ran == [] and waiting(pg) == ["held"]
        resume(pg)
        wait_until(lambda: ran == ["held"], description="the resume, notified")


def test_stats_show_paused_queues_even_without_jobs(backend: Backend) -> None:
    enqueue_committed(backend, ("t", None))
    pause(backend)
    pause(backend, "idle")
    with contextlib.closing(backend.connect()) as conn:
        stats = {row.queue: row for row in admin.queue_stats(conn)}
        conn.rollback()
    assert (stats["default"].paused, stats["default"].due) == (True, 1)
    assert (stats["idle"].paused, stats["idle"].due) == (True, 0)
    table = cli(backend, "stats")
    assert table.exit_code == 0, table.output
    assert "default (paused)" in table.output
    as_json = cli(backend, "stats", "--json")
    assert {row["queue"]: row["paused"] for row in json.loads(as_json.stdout)} == {
        "default": True,
        "idle": True,
    }
    resume(backend, "idle")
    with contextlib.closing(backend.connect()) as conn:
        assert [row.queue for row in admin.queue_stats(conn)] == ["default"]
        conn.rollback()


def test_pausing_a_queue_with_a_bad_name_is_refused(backend: Backend) -> None:
    with contextlib.closing(backend.connect()) as conn:
        with pytest.raises(ConfigurationError, match="queue must be a non-empty string"):
            admin.pause_queue(conn, "")
        with pytest.raises(ConfigurationError, match="at most 255 characters"):
            admin.resume_queue(conn, "q" * 256)
        conn.rollback()
    result = cli(backend, "queue", "pause", "")
    assert result.exit_code != 0


def test_a_worker_reads_the_pause_once_per_interval_and_never_while_idle(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read is per worker, not per thread or per job, and only when a claim found jobs:
    counted on a fake clock."""
    from proletarian_di._engine import pauses as _pauses
    from proletarian_di._engine.options import worker_settings
    from proletarian_di._engine.runner import JobRunner

    now, reads, held = [0.0], [], [None]
    original = _pauses.is_paused

    def counted(conn: Any, dialect: Any, queue: str) -> bool:
        if conn is held[0]:
            reads.append(queue)
        return original(conn, dialect, queue)

    monkeypatch.setattr(_pauses, "is_paused", counted)
    watch = _pauses.PauseWatch("default", 1.0, clock=lambda: now[0])
    runner = JobRunner(lambda t, p: None, worker_settings(), pauses=watch)
    source = backend.pool(1)
    try:
        with source.connection() as conn:
            held[0] = conn
            assert [runner.run_next(conn) for _ in range(20)] == [None] * 20
            assert reads == [], "an idle worker does not read it"
            enqueue_committed(backend, *[("t", n) for n in range(30)])
            assert [runner.run_next(conn) for _ in range(30)] == [True] * 30
            assert len(reads) == 1, "once per interval"
            pause(backend)
            enqueue_committed(backend, ("held", None))
            assert runner.run_next(conn) is True, "the last answer holds for the interval"
            enqueue_committed(backend, ("held", None))
            now[0] = 1.0
            assert runner.run_next(conn) is None and len(reads) == 2
            assert runner.run_next(conn) is None and len(reads) == 2, "known paused: no claim"
            resume(backend)
            watch.changed()
            assert runner.run_next(conn) is True and len(reads) == 3
    finally:
        source.close()


def test_enqueue_into_a_paused_queue(backend: Backend) -> None:
    pause(backend)
    with contextlib.closing(backend.connect()) as conn:
        enqueue(conn, "t", {"n": 1})
        conn.commit()
    assert waiting(backend) == ["t"]

"""Crash loops in the held-transaction mode (`max_crashes`): a job whose process dies while
running it is rolled back, leaving no trace in its row; counting its claims apart bounds how
often it can kill a worker process."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any

import long_job_process

from proletarian_di import admin, create_queue_worker, process_next_job
from proletarian_di.schema import claims_table

from backends import Backend, Events, archive_by_id, as_uuid, enqueue_committed, wait_until


def stored(backend: Backend, job_id: Any) -> Any:
    """A job id as its tables store it (MySQL: 16 bytes)."""
    return as_uuid(job_id).bytes if backend.name == "mysql" else as_uuid(job_id)


def claims(backend: Backend, job_id: Any) -> list[int]:
    """The job's claim count in the claims table: [] when it has no row."""
    rows = backend.query(
        f"SELECT claims FROM {claims_table(backend.job_table)} WHERE job_id = %s",
        (stored(backend, job_id),),
    )
    return [int(row[0]) for row in rows]


def last_error(backend: Backend, job_id: Any) -> str:
    """The archived job's last error ("" while it is not archived)."""
    rows = backend.query(
        f"SELECT last_error FROM {backend.archived_job_table} WHERE job_id = %s",
        (stored(backend, job_id),),
    )
    return str(rows[0][0]) if rows else ""


def starts(events: Path) -> list[str]:
    """The "start <payload>" lines the worker processes wrote."""
    if not events.exists():
        return []
    return [line for line in events.read_text().splitlines() if line.startswith("start")]


def run_process(
    backend: Backend, events: Path, behaviour: str, *options: str
) -> tuple[int, str, str]:
    """Run a worker process until it ends (it dies, or it emptied the queue): (returncode,
    stdout, stderr)."""
    process = long_job_process.start(backend, events, behaviour, *options)
    try:
        out, err = process.communicate(timeout=30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
    return process.returncode, out, err


def test_a_job_that_kills_its_process_is_archived_after_max_crashes(
    backend: Backend, tmp_path: Path
) -> None:
    """With max_crashes=2 the job runs twice, killing its process each time; the third
    process archives it as a failure instead of running it."""
    [job_id] = enqueue_committed(backend, ("t", "poison"))
    events = tmp_path / "events"
    ended = []
    for _ in range(5):
        if archive_by_id(backend):
            break
        ended.append(run_process(backend, events, "kill", "--max-crashes", "2"))
    [(status, attempts)] = archive_by_id(backend).values()
    assert status == "failure", ended
    assert attempts == 2, "the archive counts the two runs that died"
    assert "process died 2 times while running this job" in last_error(backend, job_id)
    assert "CrashLoop" in last_error(backend, job_id)
    assert starts(events) == ["start poison"] * 2
    assert [code for code, _, _ in ended] == [-9, -9, 0]
    assert claims(backend, job_id) == [], "the claim count left with the job"


def test_without_max_crashes_a_crashed_job_is_claimed_again(
    backend: Backend, tmp_path: Path
) -> None:
    """At-least-once: without max_crashes the held mode runs the job again after each
    crash, here a third time, and its row keeps no trace of the runs."""
    [job_id] = enqueue_committed(backend, ("t", "poison"))
    events = tmp_path / "events"
    ended = [run_process(backend, events, "kill") for _ in range(3)]
    assert [code for code, _, _ in ended] == [-9, -9, -9]
    assert starts(events) == ["start poison"] * 3
    assert backend.jobs() == [("t", 0, "default")]
    assert archive_by_id(backend) == {}
    assert claims(backend, job_id) == [], "nothing counts claims without max_crashes"


def test_failures_by_exception_are_not_taken_for_crashes(backend: Backend) -> None:
    """Failing by exception twice, then succeeding, is no crash loop with max_crashes=1: a
    recorded attempt accounts for each claim. The next job's count starts at one."""
    [job_id] = enqueue_committed(backend, ("t", "flaky"))
    ids = {"flaky": job_id}
    ran: list[str] = []
    counted: list[list[int]] = []
    log = Events()
    known = threading.Event()

    def handler(job_type: str, payload: Any) -> None:
        if payload == "next":
            known.wait(30)  # until its id is known
        counted.append(claims(backend, ids[payload]))
        ran.append(payload)
        if ran.count("flaky") <= 2 and payload == "flaky":
            raise RuntimeError(f"failure {len(ran)}")

    source = backend.pool(4)
    worker = create_queue_worker(
        source,
        handler,
        max_crashes=1,
        retry_strategy_fn=lambda job, exc: {"retries": 2, "delays": [0]},
        polling_interval_ms=20,
        log=log,
    )
    try:
        with worker:
            wait_until(lambda: archive_by_id(backend), description="the job archived")
            [ids["next"]] = enqueue_committed(backend, ("t", "next"))
            known.set()
            wait_until(lambda: len(archive_by_id(backend)) == 2, description="the next job")
    finally:
        source.close()
    assert ran == ["flaky", "flaky", "flaky", "next"]
    assert counted == [[1], [2], [3], [1]], "each claim counted before its run"
    assert archive_by_id(backend) == {
        as_uuid(job_id): ("success", 3),
        as_uuid(ids["next"]): ("success", 1),
    }
    assert log.named("crash_loop") == []
    assert claims(backend, job_id) == claims(backend, ids["next"]) == [], "counts left with jobs"


def test_a_failed_job_retried_by_an_operator_starts_with_no_crashes(
    backend: Backend, tmp_path: Path
) -> None:
    """A job that crashed a max_crashes worker once, then failed under process_next_job, is
    retried by the operator: it runs again rather than being archived as a crash loop."""
    [job_id] = enqueue_committed(backend, ("t", "once"))
    code, _, err = run_process(backend, tmp_path / "events", "kill", "--max-crashes", "3")
    assert code == -9, err
    source = backend.pool(2)
    try:
        assert process_next_job(source, failing) is False
        assert archive_by_id(backend) == {as_uuid(job_id): ("failure", 1)}
        with contextlib.closing(backend.connect()) as conn:
            assert admin.retry_jobs(conn, [as_uuid(job_id)]) == 1
            conn.commit()
        ran: list[Any] = []
        worker = create_queue_worker(
            source, lambda t, p: ran.append(p), max_crashes=1, polling_interval_ms=20
        )
        with worker:
            wait_until(lambda: archive_by_id(backend), description="the job archived")
    finally:
        source.close()
    assert archive_by_id(backend) == {as_uuid(job_id): ("success", 1)}
    assert ran == ["once"]


def failing(job_type: str, payload: Any) -> None:
    """A handler that always fails."""
    raise RuntimeError("fails")


def test_a_batch_mate_of_a_crashing_job_is_not_taken_for_a_crash_loop(
    backend: Backend, tmp_path: Path
) -> None:
    """With batch_size=2 a job that ran fine in the batch whose next job killed the process
    is rolled back with it; run again, it is no crash loop: only the killer is."""
    ids = enqueue_committed(backend, ("t", "innocent"), ("t", "poison"))
    events = tmp_path / "events"
    options = ("--max-crashes", "1", "--batch-size", "2", "--only", "poison")
    ended = []
    for _ in range(4):
        if len(archive_by_id(backend)) == 2:
            break
        ended.append(run_process(backend, events, "kill", *options))
    assert archive_by_id(backend) == {
        as_uuid(ids[0]): ("success", 1),
        as_uuid(ids[1]): ("failure", 1),
    }, ended
    assert "CrashLoop" in last_error(backend, ids[1])
    assert starts(events).count("start poison") == 1

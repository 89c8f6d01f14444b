"""`admin.reschedule_jobs` and `retry_jobs(at=...)` on both databases: waiting jobs made
due now or at a given time, each state checked in the database afterwards; blocked,
running and archived jobs left alone; bad times and selections refused."""

from __future__ import annotations

import threading
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from test_admin import LATER, boom

from proletarian_di import ConfigurationError, process_next_job
from proletarian_di.admin import (
    get_job,
    in_batches,
    reschedule_jobs,
    retry_jobs,
)

from backends import Backend, Gate, connection, enqueue_committed


def state_and_due(backend: Backend, job_id: uuid.UUID) -> tuple[str, datetime, int]:
    with connection(backend) as conn:
        job = get_job(conn, job_id)
    assert job is not None
    return job.state, job.process_at, job.attempts


def near(one: datetime, other: datetime) -> bool:
    return abs(one - other) < timedelta(seconds=1)


def test_waiting_jobs_run_now_or_at_a_time(backend: Backend, pool: Any) -> None:
    [scheduled, other] = enqueue_committed(
        backend, ("report", {"n": 1}), ("report", {"n": 2}), queue="s", process_in=timedelta(days=2)
    )
    [queued] = enqueue_committed(backend, ("mail", None), queue="q")
    [retrying] = enqueue_committed(backend, ("again", None), queue="r")
    assert process_next_job(pool, boom, queue="r", **LATER) is False
    [blocked] = enqueue_committed(backend, ("child", None), queue="s", depends_on=[queued])
    [failed] = enqueue_committed(backend, ("fails", None), queue="f")
    assert process_next_job(pool, boom, queue="f") is False
    assert state_and_due(backend, retrying)[0] == "retrying"
    assert state_and_due(backend, blocked)[0] == "blocked"

    with connection(backend) as conn:
        # Run now: the scheduled job of the ids given, none else.
        assert reschedule_jobs(conn, [scheduled, blocked, failed, uuid.uuid4()]) == 1
        conn.commit()
    state, due, _ = state_and_due(backend, scheduled)
    assert state == "queued" and near(due, datetime.now(timezone.utc))
    assert state_and_due(backend, other)[0] == "scheduled"
    assert state_and_due(backend, blocked)[0] == "blocked"
    assert state_and_due(backend, failed)[0] == "failed"

    at = (datetime.now(timezone.utc) + timedelta(hours=5)).replace(microsecond=0)
    with connection(backend) as conn:
        assert reschedule_jobs(conn, queue="s", dry_run=True, at=at) == 2  # not the blocked one
        assert reschedule_jobs(conn, queue="r", state="queued", at=at) == 0
        assert reschedule_jobs(conn, queue="r", state="retrying", at=at) == 1
        assert reschedule_jobs(conn, job_type="mail", at=at.replace(tzinfo=None)) == 1
        conn.commit()
    assert state_and_due(backend, retrying) == ("retrying", at, 1)
    assert state_and_due(backend, queued) == ("scheduled", at, 0)
    assert state_and_due(backend, blocked)[0] == "blocked"

    # The scheduled job made due now runs.
    seen: list[Any] = []
    assert process_next_job(pool, lambda t, p: seen.append(p), queue="s") is True
    assert seen == [{"n": 1}]


def test_a_failed_job_is_retried_at_a_time(backend: Backend, pool: Any) -> None:
    [failed] = enqueue_committed(backend, ("fails", None), queue="f")
    assert process_next_job(pool, boom, queue="f") is False
    at = (datetime.now(timezone.utc) + timedelta(days=1)).replace(microsecond=0)
    with connection(backend) as conn:
        assert retry_jobs(conn, queue="f", at=at) == 1
        conn.commit()
    assert state_and_due(backend, failed) == ("scheduled", at, 0)
    assert process_next_job(pool, boom, queue="f") is None  # not due yet: nothing runs
    assert state_and_due(backend, failed)[0] == "scheduled"


def test_a_running_job_is_passed_over_not_waited_for(
    backend: Backend, pool: Any, gate: Gate
) -> None:
    [running] = enqueue_committed(backend, ("slow", None), queue="run")
    worker = threading.Thread(target=process_next_job, args=(pool, gate), kwargs={"queue": "run"})
    worker.start()
    try:
        assert gate.started.wait(10)
        at = datetime.now(timezone.utc) + timedelta(hours=1)
        with connection(backend) as conn:
            assert reschedule_jobs(conn, queue="run", at=at, dry_run=True) == 1  # counted
            assert reschedule_jobs(conn, queue="run", at=at) == 0  # passed over
            conn.commit()
    finally:
        gate.release.set()
        worker.join(10)
    assert state_and_due(backend, running)[0] == "succeeded"


def test_in_batches_reschedules_every_matching_job(backend: Backend, pool: Any) -> None:
    ids = enqueue_committed(
        backend, *[("many", {"n": n}) for n in range(7)], queue="b", process_in=timedelta(days=3)
    )
    at = (datetime.now(timezone.utc) + timedelta(minutes=30)).replace(microsecond=0)
    with connection(backend) as conn:
        moved = []
        for step in in_batches(conn, reschedule_jobs, queue="b", at=at, batch_size=3):
            conn.commit()
            moved.append(step)
    assert moved == [3, 3, 1]
    assert {state_and_due(backend, job_id) for job_id in ids} == {("scheduled", at, 0)}


def test_bad_selections_and_times_are_refused(backend: Backend, pool: Any) -> None:
    with connection(backend) as conn:
        with pytest.raises(ConfigurationError, match="needs job ids or a filter"):
            reschedule_jobs(conn)
        with pytest.raises(ConfigurationError, match="state must be queued, scheduled or"):
            reschedule_jobs(conn, state="blocked")
        with pytest.raises(ConfigurationError, match="at must be before 9999-12-30"):
            reschedule_jobs(conn, queue="q", at=datetime(9999, 12, 31, tzinfo=timezone.utc))
        with pytest.raises(ConfigurationError, match="at must be a datetime"):
            retry_jobs(conn, queue="q", at="tomorrow")  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError, match="needs job ids or a filter"):
            list(in_batches(conn, reschedule_jobs, at=datetime.now(timezone.utc)))

"""Results: a handler's return value kept with its archived job, in the job's own
transaction (`admin.get_result`), in both worker modes, on both databases."""

from __future__ import annotations

from typing import Any

import pytest

from proletarian_di import admin, create_queue_worker, process_next_job, worker_running
from proletarian_di._engine.steps import MAX_RESULT_BYTES

from backends import (
    Backend,
    Events,
    committed,
    connection,
    enqueue_committed,
    wait_until,
    write_effect,
)

MODES = [pytest.param({}, id="held"), pytest.param({"lease_ms": 10_000}, id="lease")]


def run_all(pool: Any, handler: Any, mode: dict[str, Any], count: int, **options: Any) -> Events:
    """Run `count` jobs with a real worker; its log."""
    events = Events()
    worker = create_queue_worker(
        pool, handler, polling_interval_ms=20, log=events, **mode, **options
    )
    with worker_running(worker):
        wait_until(
            lambda: sum(worker.summary()[k] for k in ("succeeded", "failed")) == count,
            timeout=20,
        )
    return events


def result(backend: Backend, job_id: Any) -> Any:
    with connection(backend) as conn:
        return admin.get_result(conn, job_id)


@pytest.mark.parametrize("mode", MODES)
def test_a_return_value_is_kept_with_the_archived_job(backend: Backend, pool: Any, mode) -> None:
    ids = enqueue_committed(backend, ("sum", [1, 2, 3]), ("nothing", None), ("text", "é"))

    def handler(job_type: str, payload: Any) -> Any:
        if job_type == "sum":
            return {"total": sum(payload), "items": payload}
        if job_type == "text":
            return payload * 2
        return None

    run_all(pool, handler, mode, 3)
    assert [result(backend, i) for i in ids] == [{"total": 6, "items": [1, 2, 3]}, None, "éé"]
    rows = backend.query(f"SELECT COUNT(*) FROM {backend.job_table}_results")
    assert rows == [(2,)], "None is not kept"


@pytest.mark.parametrize("mode", MODES)
def test_a_result_too_large_fails_the_job_saying_so(backend: Backend, pool: Any, mode) -> None:
    [job_id] = enqueue_committed(backend, ("big", None))
    run_all(pool, lambda t, p: "x" * MAX_RESULT_BYTES, mode, 1)
    with connection(backend) as conn:
        info = admin.get_job(conn, job_id)
    assert info.state == "failed", info
    assert "more than the 65,536 a result may have" in info.error
    assert result(backend, job_id) is None


@pytest.mark.parametrize("mode", MODES)
def test_a_value_that_is_not_json_is_not_kept_and_the_job_succeeds(
    backend: Backend, pool: Any, mode
) -> None:
    [job_id] = enqueue_committed(backend, ("odd", None))
    events = run_all(pool, lambda t, p: {1, 2}, mode, 1)
    assert backend.archived() == [("odd", "success", 1)]
    assert result(backend, job_id) is None
    [skipped] = events.named("result_not_stored")
    assert skipped["job_id"] == job_id and "not JSON" in skipped["reason"]


def test_a_result_commits_with_the_job_or_not_at_all(backend: Backend, pool: Any) -> None:
    """An advanced handler that ends the job's transaction: its attempt is counted as a
    failure, and no result is kept; the retry's result is."""
    [job_id] = enqueue_committed(backend, ("flaky", None))
    calls: list[int] = []

    def handler(job: Any) -> Any:
        calls.append(job.attempts)
        if job.attempts == 1:
            job.connection.rollback()
        return {"attempt": job.attempts}

    retry = {"retry_strategy_fn": lambda job, exc: {"retries": 1}}
    assert process_next_job(pool, handler, handler_fn_mode="advanced", **retry) is False
    assert result(backend, job_id) is None
    assert process_next_job(pool, handler, handler_fn_mode="advanced", **retry) is True
    assert calls == [1, 2] and result(backend, job_id) == {"attempt": 2}


def test_purging_the_archive_deletes_the_results(backend: Backend, pool: Any) -> None:
    [job_id] = enqueue_committed(backend, ("kept", None))
    assert process_next_job(pool, lambda t, p: [1]) is True
    assert result(backend, job_id) == [1]
    assert committed(backend, admin.delete_archived, status="success") == 1
    assert backend.query(f"SELECT COUNT(*) FROM {backend.job_table}_results") == [(0,)]
    assert result(backend, job_id) is None


def test_a_schema_without_the_results_table_keeps_none(backend: Backend, pool: Any) -> None:
    backend.execute(f"DROP TABLE {backend.job_table}_results")
    try:
        [job_id] = enqueue_committed(backend, ("plain", None))
        assert process_next_job(pool, lambda t, p: {"a": 1}) is True
        assert backend.archived() == [("plain", "success", 1)]
        assert result(backend, job_id) is None
    finally:
        backend.recreate()


def test_an_advanced_handler_whose_result_is_too_large_has_its_writes_undone(
    backend: Backend, pool: Any, effects: Any
) -> None:
    [job_id] = enqueue_committed(backend, ("big", None))

    def handler(job: Any) -> str:
        write_effect(job, "written")
        return "x" * MAX_RESULT_BYTES

    assert process_next_job(pool, handler, handler_fn_mode="advanced") is False
    assert effects() == []
    with connection(backend) as conn:
        info = admin.get_job(conn, job_id)
    assert info.state == "failed" and "a result may have" in info.error

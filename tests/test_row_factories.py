"""Pools that hand out dict rows: the worker and the admin queries read their own tuples."""

from __future__ import annotations

from typing import Any

import pymysql
import pytest
from faults import running, wait_for
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from proletarian_di import RetrySpec, admin, create_queue_worker, process_next_job
from proletarian_di.mysql import MySQLDataSource
from proletarian_di.testing import run_due_jobs

from backends import enqueue_committed


@pytest.fixture
def dict_pool(backend: Any) -> Any:
    """The backend's pool, configured the way applications ask for dict rows."""
    if backend.name == "mysql":
        source: Any = MySQLDataSource(
            backend.url, max_connections=4, cursorclass=pymysql.cursors.DictCursor
        )
    else:
        source = ConnectionPool(
            backend.url, min_size=1, max_size=4, kwargs={"row_factory": dict_row}, open=True
        )
    yield source
    source.close()


def test_a_worker_on_a_dict_row_pool_runs_every_kind_of_outcome(backend, dict_pool):
    enqueue_committed(backend, ("ok", 1), ("retry", 2), ("fail", 3))

    def handler(job: Any) -> None:
        if job.job_type != "ok":
            raise RuntimeError(job.job_type)

    worker = create_queue_worker(
        dict_pool,
        handler,
        handler_fn_mode="advanced",
        polling_interval_ms=10,
        retry_strategy_fn=lambda job, exc: RetrySpec(1, [60_000]) if job.payload == 2 else None,
        failed_job_fn=lambda job, exc: None,
    )
    with running(worker):
        wait_for(lambda: len(backend.archived()) == 2, what="two archived")
    assert sorted(backend.archived()) == [("fail", "failure", 1), ("ok", "success", 1)]
    assert backend.jobs() == [("retry", 1, "default")]


def test_process_next_job_and_run_due_jobs_on_a_dict_row_pool(backend, dict_pool):
    enqueue_committed(backend, ("a", None), ("b", None))
    assert process_next_job(dict_pool, lambda t, p: None) is True
    assert run_due_jobs(dict_pool, lambda t, p: None) == 1
    assert len(backend.archived()) == 2


def test_admin_queries_on_a_dict_row_connection(backend, dict_pool):
    enqueue_committed(backend, ("a", None))
    with dict_pool.connection() as conn:
        admin.check(conn)
        (stats,) = admin.queue_stats(conn)
        assert (stats.queue, stats.due) == ("default", 1)
        assert admin.waiting(conn, ["default"]) == 1
        assert admin.missing_columns(conn) == {}

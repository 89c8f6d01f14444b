"""Callbacks that get the job's connection run under a savepoint: whatever they leave behind
(an aborted transaction, an ended one, a deadlock), the attempt is counted and no job loops."""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from typing import Any

import pytest
from faults import EventLog, running, wait_for

from proletarian_di import RetrySpec, TransactionAborted, create_queue_worker, process_next_job
from proletarian_di.schema import attempt_table

from backends import enqueue_committed


@contextlib.contextmanager
def scratch_table(backend: Any) -> Any:
    """A table with a primary key, for handlers that provoke database errors."""
    backend.execute("DROP TABLE IF EXISTS proletarian.scratch")
    backend.execute("CREATE TABLE proletarian.scratch (id INTEGER PRIMARY KEY, note VARCHAR(50))")
    backend.execute("INSERT INTO proletarian.scratch VALUES (1, 'taken')")
    try:
        yield lambda: backend.query("SELECT id, note FROM proletarian.scratch ORDER BY id")
    finally:
        backend.execute("DROP TABLE proletarian.scratch")


@pytest.fixture
def scratch(pg: Any) -> Any:
    """PostgreSQL's scratch table: only PostgreSQL aborts a transaction on an error."""
    with scratch_table(pg) as rows:
        yield rows


def execute(job: Any, sql: str, params: tuple[Any, ...] = ()) -> None:
    with contextlib.closing(job.connection.cursor()) as cursor:
        cursor.execute(sql, params)


def swallow(job: Any, sql: str, params: tuple[Any, ...] = ()) -> None:
    """Run a statement that fails, catch the error and carry on, as buggy callbacks do."""
    with contextlib.suppress(Exception):
        execute(job, sql, params)


DUPLICATE = "INSERT INTO proletarian.scratch VALUES (1, 'again')"


def test_a_handler_that_swallows_a_database_error_fails_its_attempt(pg, scratch):
    pool = pg.pool(2)
    (job_id,) = enqueue_committed(pg, ("dup", None))
    runs, seen, log = Counter(), [], EventLog()

    def handler(job: Any) -> None:
        runs[job.job_id] += 1
        execute(job, "INSERT INTO proletarian.scratch VALUES (%s, 'mine')", (job.attempts + 1,))
        swallow(job, DUPLICATE)

    def strategy(job: Any, exc: BaseException) -> RetrySpec:
        seen.append((type(exc), str(exc)))
        return RetrySpec(retries=1)

    options = {"handler_fn_mode": "advanced", "retry_strategy_fn": strategy, "log": log}
    try:
        assert process_next_job(pool, handler, **options) is False
        assert pg.jobs() == [("dup", 1, "default")], "retried: the attempt was counted"
        assert process_next_job(pool, handler, **options) is False
        assert process_next_job(pool, handler, **options) is None
    finally:
        pool.close()
    assert runs == {job_id: 2}, "never more runs than the retry spec allows"
    assert pg.archived() == [("dup", "failure", 2)]
    assert scratch() == [(1, "taken")], "the handler's writes were undone with it"
    assert seen[0][0] is TransactionAborted
    assert seen[0][1].startswith("handler left the transaction aborted: duplicate key value")
    assert len(log.named("handler_exception")) == 2


def test_one_thread_is_not_stuck_behind_such_a_job(pg, scratch):
    pool = pg.pool(3)
    enqueue_committed(pg, ("dup", None), ("ok", None), ("ok", None))
    runs = Counter()

    def handler(job: Any) -> None:
        runs[job.job_type] += 1
        if job.job_type == "dup":
            swallow(job, DUPLICATE)

    worker = create_queue_worker(
        pool, handler, handler_fn_mode="advanced", polling_interval_ms=10, log=EventLog()
    )
    try:
        with running(worker):
            wait_for(lambda: len(pg.archived()) == 3, what="all three archived")
    finally:
        pool.close()
    assert runs == {"dup": 1, "ok": 2}
    assert sorted(pg.archived()) == [("dup", "failure", 1)] + [("ok", "success", 1)] * 2


def test_a_failed_job_fn_that_swallows_a_database_error_archives_once(pg, scratch):
    pool = pg.pool(2)
    enqueue_committed(pg, ("bad", None))
    calls, log = [], EventLog()

    def failed_job_fn(job: Any, exc: BaseException) -> None:
        calls.append(job.attempts)
        execute(job, "INSERT INTO proletarian.scratch VALUES (2, 'dead letter')")
        swallow(job, DUPLICATE)

    try:
        assert (
            process_next_job(pool, failing_handler, failed_job_fn=failed_job_fn, log=log) is False
        )
        assert process_next_job(pool, failing_handler, failed_job_fn=failed_job_fn) is None
    finally:
        pool.close()
    assert calls == [1]
    assert pg.archived() == [("bad", "failure", 1)]
    assert scratch() == [(1, "taken")], "failed_job_fn's writes were undone"
    (error,) = log.named("failed_job_fn_error")
    assert isinstance(error["exception"], TransactionAborted)
    assert "failed_job_fn left the transaction aborted" in str(error["exception"])


def failing_handler(job_type: str, payload: Any) -> None:
    raise RuntimeError("boom")


def test_a_retry_strategy_whose_query_raises_fails_the_job_once(backend, pool):
    enqueue_committed(backend, ("bad", None))
    calls, log = [], EventLog()

    def strategy(job: Any, exc: BaseException) -> RetrySpec:
        calls.append(job.attempts)
        execute(job, "SELECT * FROM proletarian.no_such_table")
        return RetrySpec(retries=5)

    options = {"retry_strategy_fn": strategy, "log": log}
    assert process_next_job(pool, failing_handler, **options) is False
    assert process_next_job(pool, failing_handler, **options) is None
    assert calls == [1]
    assert backend.archived() == [("bad", "failure", 1)]
    (error,) = log.named("retry_strategy_error")
    assert "no_such_table" in str(error["exception"])


def test_a_retry_strategy_that_swallows_a_database_error_is_not_trusted(pg):
    pool = pg.pool(2)
    enqueue_committed(pg, ("bad", None))
    log = EventLog()

    def strategy(job: Any, exc: BaseException) -> RetrySpec:
        swallow(job, "SELECT * FROM proletarian.no_such_table")
        return RetrySpec(retries=5)

    try:
        assert process_next_job(pool, failing_handler, retry_strategy_fn=strategy, log=log) is False
        assert process_next_job(pool, failing_handler, retry_strategy_fn=strategy) is None
    finally:
        pool.close()
    assert pg.archived() == [("bad", "failure", 1)]
    (error,) = log.named("retry_strategy_error")
    assert str(error["exception"]).startswith("retry_strategy_fn left the transaction aborted")


def test_a_batch_keeps_the_outcomes_of_its_other_jobs(pg, scratch):
    pool = pg.pool(2)
    enqueue_committed(pg, *[("ok", n) for n in range(4)], ("dup", 9))
    runs = Counter()

    def handler(job: Any) -> None:
        runs[job.payload] += 1
        execute(job, "INSERT INTO proletarian.scratch VALUES (%s, %s)", (job.payload + 10, "run"))
        if job.job_type == "dup":
            swallow(job, DUPLICATE)

    worker = create_queue_worker(
        pool, handler, handler_fn_mode="advanced", batch_size=5, polling_interval_ms=10
    )
    try:
        with running(worker):
            wait_for(lambda: len(pg.archived()) == 5, what="the batch archived")
    finally:
        pool.close()
    assert runs == dict.fromkeys([0, 1, 2, 3, 9], 1)
    assert sorted(pg.archived()) == [("dup", "failure", 1)] + [("ok", "success", 1)] * 4
    assert scratch() == [(1, "taken"), (10, "run"), (11, "run"), (12, "run"), (13, "run")]


@pytest.mark.parametrize("ending", ["commit", "rollback"])
def test_a_handler_that_ends_the_jobs_transaction_has_its_attempt_counted(backend, pool, ending):
    (job_id,) = enqueue_committed(backend, ("ender", None))
    runs, failures, log = Counter(), [], EventLog()

    def handler(job: Any) -> None:
        runs[job.job_id] += 1
        getattr(job.connection, ending)()

    options = {
        "handler_fn_mode": "advanced",
        "retry_strategy_fn": lambda job, exc: RetrySpec(retries=1),
        "failed_job_fn": lambda job, exc: failures.append((job.attempts, type(exc))),
        "log": log,
    }
    assert process_next_job(pool, handler, **options) is False
    assert backend.jobs() == [("ender", 1, "default")]
    assert process_next_job(pool, handler, **options) is False
    assert process_next_job(pool, handler, **options) is None
    assert runs == {job_id: 2}
    assert backend.archived() == [("ender", "failure", 2)]
    assert failures == [(2, TransactionAborted)]
    assert [e["callback"] for e in log.named("transaction_lost")] == ["handler", "handler"]


def test_a_handler_that_closes_the_jobs_connection_has_its_attempt_counted(backend, pool):
    """No retries allowed: the job runs once and ends in the failure archive, its attempt
    recorded on another connection, instead of running again about once a second."""
    enqueue_committed(backend, ("closer", None))
    runs, log = Counter(), EventLog()

    def handler(job: Any) -> None:
        runs[job.job_type] += 1
        job.connection.close()

    worker = create_queue_worker(
        pool, handler, handler_fn_mode="advanced", polling_interval_ms=20, log=log
    )
    with running(worker):
        wait_for(lambda: backend.archived(), what="the job archived")
        time.sleep(0.5)
    assert runs == {"closer": 1}
    assert backend.archived() == [("closer", "failure", 1)]
    [(error,)] = backend.query(f"SELECT last_error FROM {backend.archived_job_table}")
    assert "closed the job's connection" in error
    assert process_next_job(pool, handler, handler_fn_mode="advanced") is None


def test_process_next_job_counts_the_attempt_of_a_handler_that_closes_its_connection(backend, pool):
    enqueue_committed(backend, ("closer", None))

    def handler(job: Any) -> None:
        job.connection.close()

    retry = {"retry_strategy_fn": lambda job, exc: RetrySpec(retries=1)}
    assert process_next_job(pool, handler, handler_fn_mode="advanced", **retry) is False
    assert backend.jobs() == [("closer", 1, "default")]


def test_mysql_deadlock_inside_a_handler_counts_the_attempt(my_scratch):
    """InnoDB rolls the whole job transaction back on a deadlock: its savepoint and row lock go
    with it. The attempt is still counted, with the deadlock as the failure."""
    backend, scratch = my_scratch
    pool = backend.pool(3)
    enqueue_committed(backend, ("deadlock", None))
    holds_two, other_done = threading.Event(), threading.Event()
    seen, runs = [], []

    def other() -> None:
        """A bigger transaction (so InnoDB picks the job as the victim): rows 100..199,
        then row 2, then row 1, which the job holds."""
        with contextlib.closing(backend.connect()) as conn, conn.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO proletarian.scratch VALUES (%s, 'bulk')",
                [(n,) for n in range(100, 200)],
            )
            cursor.execute("SELECT * FROM proletarian.scratch WHERE id = 2 FOR UPDATE")
            holds_two.set()
            cursor.execute("SELECT * FROM proletarian.scratch WHERE id = 1 FOR UPDATE")
            conn.rollback()
        other_done.set()

    def handler(job: Any) -> None:
        runs.append(job.attempts)
        execute(job, "SELECT * FROM proletarian.scratch WHERE id = 1 FOR UPDATE")
        threading.Thread(target=other, daemon=True).start()
        assert holds_two.wait(10)
        time.sleep(0.2)  # let the other transaction wait for row 1
        execute(job, "SELECT * FROM proletarian.scratch WHERE id = 2 FOR UPDATE")

    def strategy(job: Any, exc: BaseException) -> RetrySpec:
        seen.append(exc.args[0] if exc.args else None)
        return RetrySpec(retries=3, delays=[60_000])

    try:
        assert (
            process_next_job(pool, handler, handler_fn_mode="advanced", retry_strategy_fn=strategy)
            is False
        )
        assert other_done.wait(10)
    finally:
        pool.close()
    assert seen == [1213]
    assert runs == [1]
    assert backend.jobs() == [("deadlock", 1, "default")]
    assert backend.archived() == []
    assert scratch() == [(1, "taken"), (2, "b")]


@pytest.fixture
def my_scratch(mysql_backend: Any) -> Any:
    mysql_backend.reset()
    with scratch_table(mysql_backend) as rows:
        mysql_backend.execute("INSERT INTO proletarian.scratch VALUES (2, 'b')")
        yield mysql_backend, rows


def test_a_job_whose_connection_the_server_ends_runs_again_with_nothing_spent(backend, pool):
    """The server ends the job's connection under its handler (an operator's terminate, a
    restart): the transaction is rolled back, not failed by the handler, so the job runs
    again with its attempts as they were, and no retry strategy is needed for it."""
    [job_id] = enqueue_committed(backend, ("cut", None))
    runs, log = Counter(), EventLog()
    mysql = backend.name == "mysql"

    def handler(job: Any) -> None:
        runs[job.job_type] += 1
        if runs[job.job_type] > 1:
            return
        with contextlib.closing(job.connection.cursor()) as cursor:
            cursor.execute("SELECT CONNECTION_ID()" if mysql else "SELECT pg_backend_pid()")
            [(session,)] = cursor.fetchall()
        with contextlib.closing(backend.connect()) as other, other.cursor() as cursor:
            cursor.execute(
                f"KILL {int(session)}" if mysql else "SELECT pg_terminate_backend(%s, 5000)",
                () if mysql else (session,),
            )
            other.commit()
        execute(job, "SELECT 1")

    worker = create_queue_worker(
        pool, handler, handler_fn_mode="advanced", polling_interval_ms=20, log=log
    )
    with running(worker):
        wait_for(lambda: backend.archived(), what="the job archived")
    assert runs == {"cut": 2}
    assert backend.archived() == [("cut", "success", 1)]
    attempts = backend.query(f"SELECT COUNT(*) FROM {attempt_table(backend.job_table)}")
    assert attempts == [(0,)], "no failed attempt was recorded"
    [lost] = log.named("transaction_lost")
    assert "the database ended the job's connection" in lost["reason"]
    assert job_id

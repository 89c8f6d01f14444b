"""Lease mode (`lease_ms`): a job is claimed under a lease and committed at once, runs with no
transaction open and no row locked, is kept by its worker's heartbeat, and is taken over by
another worker once its lease runs out; a lost lease's outcome is discarded."""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import long_job_process
import pytest

from proletarian_di import ConfigurationError, QueueWorker, admin, create_queue_worker
from proletarian_di._store.dialects import MySQLDialect, PostgresDialect

from backends import (
    Backend,
    CountedConnections,
    Events,
    StatementLog,
    archive_by_id,
    as_uuid,
    enqueue_committed,
    lock_view_settled,
    logged_pool,
    wait_until,
    write_effect,
)

RETRY_ONCE = {"retry_strategy_fn": lambda job, exc: {"retries": 1}}


def stored(backend: Backend, job_id: Any) -> Any:
    """A job id as its table stores it (MySQL: 16 bytes)."""
    return as_uuid(job_id).bytes if backend.name == "mysql" else as_uuid(job_id)


def lease_of(backend: Backend, job_id: Any) -> tuple[str | None, int, datetime] | None:
    """The waiting job's (leased_by, attempts, process_at in UTC), or None once it left."""
    rows = backend.query(
        f"SELECT leased_by, attempts, process_at FROM {backend.job_table} WHERE job_id = %s",
        (stored(backend, job_id),),
    )
    if not rows:
        return None
    leased_by, attempts, process_at = rows[0]
    if process_at.tzinfo is None:  # MySQL stores UTC without a zone
        process_at = process_at.replace(tzinfo=timezone.utc)
    return leased_by, attempts, process_at


def skip_locked_sees(backend: Backend, job_id: Any) -> bool:
    """Whether another connection's locking read, skipping locked rows, finds the job."""
    with contextlib.closing(backend.connect()) as conn:
        cursor = conn.cursor()
        cursor.execute(
            f"SELECT job_id FROM {backend.job_table} WHERE job_id = %s FOR UPDATE SKIP LOCKED",
            (stored(backend, job_id),),
        )
        found = bool(cursor.fetchall())
        conn.rollback()
        return found


def open_transactions(backend: Backend) -> set[tuple[Any, ...]]:
    """Other sessions' open transactions now, each named so that it is the same while open."""
    lock_view_settled(backend)  # INNODB_TRX: no older than the last read 100 ms before
    if backend.name == "mysql":
        sql = (
            "SELECT trx_id, trx_mysql_thread_id, trx_started FROM information_schema.innodb_trx "
            "WHERE trx_mysql_thread_id <> CONNECTION_ID()"
        )
    else:
        sql = (
            "SELECT pid, xact_start FROM pg_stat_activity WHERE xact_start IS NOT NULL "
            "AND pid <> pg_backend_pid() AND backend_type = 'client backend' "
            "AND datname = current_database()"
        )
    return set(backend.query(sql))


def lasting_transactions(backend: Backend) -> set[tuple[Any, ...]]:
    """Transactions open both now and 0.3 s later: not a heartbeat's short one."""
    before = open_transactions(backend)
    time.sleep(0.3)
    return before & open_transactions(backend)


def archived_row(backend: Backend, job_id: Any) -> tuple[Any, ...] | None:
    """Every column of the job's archive row, or None."""
    rows = backend.query(
        f"SELECT * FROM {backend.archived_job_table} WHERE job_id = %s",
        (stored(backend, job_id),),
    )
    return rows[0] if rows else None


def last_error(backend: Backend, job_id: Any) -> str:
    """The archived job's last error."""
    rows = backend.query(
        f"SELECT last_error FROM {backend.archived_job_table} WHERE job_id = %s",
        (stored(backend, job_id),),
    )
    return str(rows[0][0])


def waiting_jobs(backend: Backend) -> int:
    """How many jobs are in the job table."""
    return int(backend.query(f"SELECT COUNT(*) FROM {backend.job_table}")[0][0])


@contextlib.contextmanager
def running(backend: Backend, handler: Callable[..., Any], **options: Any) -> Iterator[QueueWorker]:
    """A started worker on a pool of its own, stopped and its pool closed after the block."""
    source = backend.pool(4)
    options = {
        "polling_interval_ms": 20,
        "fallback_polling_interval_ms": 50,  # PostgreSQL too polls often: expired leases seen
        "log": lambda e, d: None,
        **options,
    }
    worker = create_queue_worker(source, handler, **options)
    try:
        with worker:
            yield worker
    finally:
        source.close()


starts = long_job_process.starts


# 1. What a running leased job holds ------------------------------------------------------


def test_a_leased_job_runs_with_no_lock_and_no_transaction(backend: Backend) -> None:
    """While the handler runs, the row names its lease and when it ends and counts the
    attempt, and nothing holds it: no lock (SKIP LOCKED sees it), no open transaction."""
    lease_ms = 3000
    [job_id] = enqueue_committed(backend, ("t", "long"))
    started, release = threading.Event(), threading.Event()

    def handler(job_type: str, payload: Any) -> None:
        started.set()
        release.wait(30)

    with running(backend, handler, lease_ms=lease_ms):
        assert started.wait(30)
        lease = lease_of(backend, job_id)
        now = datetime.now(timezone.utc)
        assert lease is not None
        leased_by, attempts, lease_end = lease
        assert leased_by
        assert attempts == 1
        # renewed every third of the lease: at least two thirds of it ahead, at most all
        assert now + timedelta(milliseconds=lease_ms / 2) < lease_end
        assert lease_end <= now + timedelta(milliseconds=lease_ms + 500)
        assert skip_locked_sees(backend, job_id)
        assert lasting_transactions(backend) == set()
        release.set()
        wait_until(lambda: archived_row(backend, job_id), description="the job archived")
    assert archive_by_id(backend) == {as_uuid(job_id): ("success", 1)}
    assert lease_of(backend, job_id) is None, "the row and its lease are gone"


def test_the_held_mode_holds_a_lock_and_a_transaction(backend: Backend) -> None:
    """For comparison (the checks above can fail): without lease_ms the running job's row is
    locked by a transaction open while it runs, and carries no lease."""
    [job_id] = enqueue_committed(backend, ("t", "long"))
    started, release = threading.Event(), threading.Event()

    def handler(job_type: str, payload: Any) -> None:
        started.set()
        release.wait(30)

    with running(backend, handler):
        assert started.wait(30)
        lease = lease_of(backend, job_id)
        assert lease is not None and lease[:2] == (None, 0)
        assert not skip_locked_sees(backend, job_id)
        assert len(lasting_transactions(backend)) == 1
        release.set()
        wait_until(lambda: archived_row(backend, job_id), description="the job archived")


def test_a_thread_archives_each_success_with_its_next_claim(backend: Backend) -> None:
    """One commit per leased job: a thread's success is archived in the transaction that
    claims its next job (on PostgreSQL in one statement), so n jobs take n + 1 claims'
    commits, not 2n; the jobs all run, once each, and are archived."""
    n = 5
    ids = enqueue_committed(backend, *[("t", i) for i in range(n)])
    ran: list[int] = []
    options = {"lease_ms": 60_000, "polling_interval_ms": 10, "log": lambda e, d: None}
    if backend.name == "postgresql":
        log = StatementLog()
        with logged_pool(backend.url, log) as pool:
            worker = create_queue_worker(pool, lambda t, p: ran.append(p), **options)
            with worker:
                wait_until(lambda: worker.summary()["succeeded"] == n)
        archives = [s for s in log.executed if s.startswith("WITH done AS")]
        assert len(archives) == n
        assert all("leased AS (" in s for s in archives), "each archive claims the next job"
    else:
        counted = CountedConnections(backend)
        worker = create_queue_worker(counted, lambda t, p: ran.append(p), **options)
        with worker:
            wait_until(lambda: worker.summary()["succeeded"] == n)
        commits = [q for q in counted.queries if q.strip().upper() == "COMMIT"]
        assert n <= len(commits) <= n + 2, counted.queries  # 2n when each had its own
    assert sorted(ran) == list(range(n))
    assert archive_by_id(backend) == {as_uuid(i): ("success", 1) for i in ids}


def test_a_job_claimed_with_an_archive_goes_back_when_the_worker_stops_meanwhile(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread told to stop just after its archive claimed the next job gives that job back
    unrun: no attempt charged, no lease left on it."""
    first, second = enqueue_committed(backend, ("t", 1), ("t", 2))
    ran: list[int] = []
    source = backend.pool(4)
    worker = create_queue_worker(
        source, lambda t, p: ran.append(p), lease_ms=60_000, log=lambda e, d: None
    )
    dialect_class = PostgresDialect if backend.name == "postgresql" else MySQLDialect
    original = dialect_class.archive_leased_and_claim
    stopping: list[threading.Thread] = []

    def archive_then_stop(self: Any, *args: Any) -> Any:
        result = original(self, *args)
        if not stopping:
            stopper = threading.Thread(target=worker.stop)
            stopper.start()
            stopping.append(stopper)
            wait_until(worker._stopping.is_set, description="stop() has begun")
        return result

    monkeypatch.setattr(dialect_class, "archive_leased_and_claim", archive_then_stop)
    try:
        worker.start()
        wait_until(lambda: stopping, description="the first archive")
        stopping[0].join(30)
    finally:
        source.close()
    assert ran == [1]
    assert archive_by_id(backend) == {as_uuid(first): ("success", 1)}
    lease = lease_of(backend, second)
    assert lease is not None and lease[:2] == (None, 0)


# 2. The heartbeat --------------------------------------------------------------------------


def test_the_heartbeat_keeps_a_job_longer_than_its_lease(backend: Backend) -> None:
    """A job running five times its lease is not taken by another lease-mode worker polling
    the queue meanwhile: it runs once and succeeds."""
    [job_id] = enqueue_committed(backend, ("t", "long"))
    ran: list[str] = []
    first, second = Events(), Events()

    def handler(job_type: str, payload: Any) -> None:
        ran.append(threading.current_thread().name)
        time.sleep(1.5)

    options: dict[str, Any] = {"lease_ms": 300, **RETRY_ONCE}
    with running(backend, handler, queue_worker_id="first", log=first, **options):
        wait_until(lambda: ran, description="the job started")
        with running(backend, handler, queue_worker_id="second", log=second, **options):
            wait_until(lambda: archived_row(backend, job_id), description="the job archived")
    assert len(ran) == 1 and ran[0].startswith("first")
    assert archive_by_id(backend) == {as_uuid(job_id): ("success", 1)}
    assert first.named("lease_lost") == second.named("lease_expired") == []


# 3. A process killed mid-job ------------------------------------------------------------


def test_a_killed_process_job_runs_again_once_its_lease_expired(
    backend: Backend, tmp_path: Path
) -> None:
    """SIGKILL while the handler runs: the job stays leased until its lease runs out, then
    another worker counts the dead attempt (LeaseExpired), retries and runs it."""
    [job_id] = enqueue_committed(backend, ("t", "doomed"))
    events = tmp_path / "events"
    process = long_job_process.start(
        backend, events, "block", "--lease-ms", "1000", "--retries", "1"
    )
    try:
        wait_until(lambda: starts(events), timeout=30, description="the job started")
        process.send_signal(signal.SIGKILL)
        process.wait(30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        process.communicate(timeout=30)
    lease = lease_of(backend, job_id)
    assert lease is not None
    leased_by, attempts, lease_end = lease
    assert leased_by is not None and attempts == 1
    assert lease_end > datetime.now(timezone.utc), "still leased right after the kill"

    ran: list[datetime] = []
    log = Events()

    def handler(job_type: str, payload: Any) -> None:
        ran.append(datetime.now(timezone.utc))

    with running(backend, handler, lease_ms=1000, log=log, **RETRY_ONCE):
        wait_until(lambda: archived_row(backend, job_id), description="the job archived")
    assert len(ran) == 1
    assert ran[0] >= lease_end, "not run before the lease ran out"
    assert starts(events) == ["start doomed"]
    assert archive_by_id(backend) == {as_uuid(job_id): ("success", 2)}
    assert "LeaseExpired" in last_error(backend, job_id)
    assert [data["attempt"] for data in log.named("lease_expired")] == [1]
    with contextlib.closing(backend.connect()) as conn:
        job = admin.get_job(conn, job_id)
    assert job is not None
    dead, rerun = job.history
    assert (dead.number, dead.started_at, dead.succeeded) == (1, None, False), "start unknown"
    assert dead.error is not None and dead.error.startswith("LeaseExpired")
    assert dead.worker == f"{socket.gethostname()}:{process.pid}", "the dead lease's holder"
    assert (rerun.number, rerun.succeeded) == (2, True)
    assert rerun.started_at is not None and rerun.started_at >= lease_end


# 4. A lost lease -----------------------------------------------------------------------


@pytest.mark.parametrize("late_outcome", ["raises", "returns"])
@pytest.mark.parametrize("when", ["after B's outcome", "while B runs"])
def test_a_lost_lease_outcome_is_discarded(backend: Backend, late_outcome: str, when: str) -> None:
    """A's lease runs out mid-run; B records A's attempt and runs the job to success. A's
    late outcome, after B's or while B runs, changes nothing."""
    [job_id] = enqueue_committed(backend, ("t", "contested"))
    a_started, a_release = threading.Event(), threading.Event()
    b_started, b_release = threading.Event(), threading.Event()
    a_log, b_log = Events(), Events()
    a_callbacks: list[str] = []
    b_ran: list[Any] = []

    def a_handler(job_type: str, payload: Any) -> None:
        a_started.set()
        a_release.wait(30)
        if late_outcome == "raises":
            raise RuntimeError("too late")

    def a_retry(job: Any, exc: BaseException) -> dict[str, int]:
        a_callbacks.append("retry")
        return {"retries": 5}

    def b_handler(job_type: str, payload: Any) -> None:
        b_ran.append(payload)
        b_started.set()
        b_release.wait(30)

    a_options: dict[str, Any] = {
        "lease_ms": 60_000,
        "queue_worker_id": "A",
        "log": a_log,
        "retry_strategy_fn": a_retry,
        "failed_job_fn": lambda job, exc: a_callbacks.append("failed"),
    }
    b_options: dict[str, Any] = {"lease_ms": 60_000, "log": b_log, **RETRY_ONCE}
    with running(backend, a_handler, **a_options) as worker_a:
        assert a_started.wait(30)
        backend.execute(
            f"UPDATE {backend.job_table} SET process_at = %s WHERE job_id = %s",
            (expired(backend), stored(backend, job_id)),
        )
        with running(backend, b_handler, **b_options):
            assert b_started.wait(30)
            if when == "while B runs":
                b_lease = lease_of(backend, job_id)
                a_release.set()
                wait_until(lambda: a_log.named("lease_lost"), description="A's lease_lost")
                assert lease_of(backend, job_id) == b_lease, "B's lease untouched"
                assert archived_row(backend, job_id) is None
            b_release.set()
            wait_until(lambda: archived_row(backend, job_id), description="B's outcome")
        outcome = archived_row(backend, job_id)
        a_release.set()
        wait_until(lambda: a_log.named("lease_lost"), description="A's lease_lost")
        assert worker_a.summary() == {
            "succeeded": 0,
            "failed": 0,
            "retried": 0,
            "abandoned": 0,
            "timed_out": 0,
            "snoozed": 0,
            "cancelled": 0,
        }
    assert b_ran == ["contested"]
    assert [data["attempt"] for data in b_log.named("lease_expired")] == [1]
    assert archived_row(backend, job_id) == outcome, "B's outcome unchanged"
    assert archive_by_id(backend) == {as_uuid(job_id): ("success", 2)}
    assert waiting_jobs(backend) == 0
    assert [data["job_id"] for data in a_log.named("lease_lost")] == [as_uuid(job_id)]
    assert a_callbacks == []
    written = {"job_finished", "retrying", "not_retrying", "job_failed"}
    assert [name for name, _ in a_log.events if name in written] == []


def expired(backend: Backend) -> datetime:
    """A moment a second ago, as the job table stores it."""
    moment = datetime.now(timezone.utc) - timedelta(seconds=1)
    return moment.replace(tzinfo=None) if backend.name == "mysql" else moment


# 5. A handler that kills its process every time -----------------------------------------


@pytest.mark.parametrize("behaviour", ["kill", "exit"])
def test_a_job_that_kills_its_process_every_time_ends_in_the_failure_archive(
    backend: Backend, tmp_path: Path, behaviour: str
) -> None:
    """Each claim counts an attempt, so after its one retry the job is archived as failed
    (LeaseExpired) instead of killing worker after worker."""
    [job_id] = enqueue_committed(backend, ("t", "poison"))
    events = tmp_path / "events"
    outputs = []
    for _ in range(6):
        if archived_row(backend, job_id):
            break
        process = long_job_process.start(
            backend, events, behaviour, "--lease-ms", "300", "--retries", "1"
        )
        try:
            outputs.append(process.communicate(timeout=30))
        finally:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
    assert archive_by_id(backend) == {as_uuid(job_id): ("failure", 2)}, outputs
    assert "LeaseExpired" in last_error(backend, job_id)
    assert "attempt 2 never finished" in last_error(backend, job_id)
    assert starts(events) == ["start poison"] * 2
    assert process.returncode == 0, outputs[-1]


# 6. The vacuum horizon (PostgreSQL) ---------------------------------------------------


@pytest.mark.parametrize("lease_ms", [60_000, None], ids=["lease", "held"])
def test_a_long_leased_job_does_not_pin_the_vacuum_horizon(
    pg: Backend, lease_ms: int | None
) -> None:
    """While a leased job runs no backend of its worker holds an xmin or an xid; the held
    mode's running job does (so the check can fail)."""
    from psycopg_pool import ConnectionPool

    name = f"lease-test-{lease_ms}"
    enqueue_committed(pg, ("t", "long"))
    started, release = threading.Event(), threading.Event()

    def handler(job_type: str, payload: Any) -> None:
        started.set()
        release.wait(30)

    source = ConnectionPool(
        pg.url, kwargs={"application_name": name}, min_size=1, max_size=4, open=True
    )
    worker = create_queue_worker(
        source, handler, lease_ms=lease_ms, polling_interval_ms=20, log=lambda e, d: None
    )
    try:
        with worker:
            assert started.wait(30)
            time.sleep(0.2)
            backends = pg.query(
                "SELECT pid, backend_xmin, backend_xid FROM pg_stat_activity "
                "WHERE application_name = %s",
                (name,),
            )
            release.set()
    finally:
        source.close()
    assert backends, "the worker's backends are found"
    pinning = [pid for pid, xmin, xid in backends if xmin is not None or xid is not None]
    if lease_ms is None:
        assert len(pinning) == 1
    else:
        assert pinning == []


# 7. Configuration errors ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"lease_ms": 1000, "handler_fn_mode": "advanced"}, "handler_fn_mode='advanced'"),
        ({"lease_ms": 1000, "max_running": 2}, "max_running"),
        ({"lease_ms": 1000, "max_crashes": 2}, "max_crashes"),
        ({"lease_ms": 99}, "lease_ms must be an int >= 100, got 99"),
        ({"lease_ms": 0}, "lease_ms must be an int >= 100, got 0"),
        ({"lease_ms": 1000.0}, "lease_ms must be an int >= 100, got 1000.0"),
        ({"lease_ms": "1000"}, "lease_ms must be an int >= 100, got '1000'"),
        ({"lease_ms": True}, "lease_ms must be an int >= 100, got True"),
    ],
)
def test_options_lease_mode_cannot_honour_are_refused(
    backend: Backend, options: dict[str, Any], named: str
) -> None:
    """A clear ConfigurationError naming lease_ms and the conflict; nothing is polled."""
    enqueue_committed(backend, ("t", None))
    ran: list[Any] = []
    source = backend.pool(2)
    try:
        with pytest.raises(ConfigurationError) as refused:
            create_queue_worker(source, lambda t, p: ran.append(p), **options)
    finally:
        source.close()
    assert "lease_ms" in str(refused.value)
    assert named in str(refused.value)
    assert ran == []
    assert backend.jobs() == [("t", 0, "default")], "nothing polled"


# 8. failed_job_fn in lease mode -----------------------------------------------------------


def test_failed_job_fn_writes_commit_with_the_failure(
    backend: Backend, effects: Callable[[], list[str]]
) -> None:
    """In lease mode failed_job_fn gets the outcome transaction's connection as
    job.connection: its write commits with the job's failure."""
    [job_id] = enqueue_committed(backend, ("t", "bad"))
    seen: list[Any] = []

    def failed(job: Any, exc: BaseException) -> None:
        seen.append(job.connection)
        write_effect(job, f"failed {job.payload} {type(exc).__name__}")

    def handler(job_type: str, payload: Any) -> None:
        raise ValueError("no")

    with running(backend, handler, lease_ms=1000, failed_job_fn=failed):
        wait_until(lambda: archived_row(backend, job_id), description="the job archived")
    assert archive_by_id(backend) == {as_uuid(job_id): ("failure", 1)}
    assert seen and seen[0] is not None
    assert effects() == ["failed bad ValueError"]


# Found while testing: a given-back lease, a retry's lease --------------------------------


def test_an_expired_lease_given_back_by_a_paused_queue_is_still_recorded(
    backend: Backend,
) -> None:
    """A paused queue's claim gives an expired lease back as it was: once resumed, the dead
    attempt is recorded (no retry: failure) and the job does not run again."""
    [job_id] = enqueue_committed(backend, ("t", "orphan"))
    backend.execute(
        f"UPDATE {backend.job_table} SET attempts = 1, leased_by = %s, process_at = %s "
        "WHERE job_id = %s",
        ("gone-host:1:dead", expired(backend), stored(backend, job_id)),
    )
    with contextlib.closing(backend.connect()) as conn:
        assert admin.pause_queue(conn, "default")
        conn.commit()
    ran: list[Any] = []
    with running(backend, lambda t, p: ran.append(p), lease_ms=1000) as worker:
        # the worker saw the pause at a claim, which it gave back
        wait_until(lambda: worker._pauses.paused, description="the pause seen at a claim")
        time.sleep(0.2)  # claims given back again while paused
        with contextlib.closing(backend.connect()) as conn:
            assert admin.resume_queue(conn, "default")
            conn.commit()
        wait_until(lambda: archived_row(backend, job_id), description="the job archived")
    assert ran == []
    assert archive_by_id(backend) == {as_uuid(job_id): ("failure", 1)}
    assert "LeaseExpired" in last_error(backend, job_id)


def test_a_timed_out_job_retried_at_once_keeps_its_new_lease(backend: Backend) -> None:
    """A timed-out job's retry runs on the same worker; its lease stays renewed when the
    abandoned first run's handler returns: no other thread takes it over."""
    [job_id] = enqueue_committed(backend, ("t", "slow"))
    runs: list[int] = []
    first_release, second_started = threading.Event(), threading.Event()
    log = Events()

    def handler(job_type: str, payload: Any) -> None:
        runs.append(len(runs) + 1)
        if len(runs) == 1:
            first_release.wait(30)  # abandoned at its timeout, returns later
        elif len(runs) == 2:
            second_started.set()
            time.sleep(1.0)  # five leases long, within the timeout

    options: dict[str, Any] = {
        "lease_ms": 200,
        "job_timeout_ms": 2000,
        "worker_threads": 2,
        "retry_strategy_fn": lambda job, exc: {"retries": 3, "delays": [0]},
        "log": log,
    }
    with running(backend, handler, **options):
        assert second_started.wait(30)
        first_release.set()
        wait_until(lambda: archived_row(backend, job_id), description="the job archived")
    assert runs == [1, 2]
    assert archive_by_id(backend) == {as_uuid(job_id): ("success", 2)}
    assert "JobTimedOut" in last_error(backend, job_id)
    assert log.named("lease_expired") == log.named("lease_lost") == []

"""PostgreSQL's hot path: one round trip per job (the archive, its COMMIT and the next
claim in one simple query), prepared statements, and recovery when the prepared
statements disappear under the worker."""

from __future__ import annotations

import contextlib
import re
import threading
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from proletarian_di import create_queue_worker, process_next_job
from proletarian_di._store import dependencies
from proletarian_di._store.dialects import PostgresDialect

from backends import Events, StatementLog, enqueue_committed, logged_pool, wait_until


@pytest.fixture
def pg_pool(pg):
    pool = pg.pool(4)
    yield pool
    pool.close()


def test_each_job_takes_one_round_trip_of_prepared_statements(pg):
    """The archive commits and the next claim begins in the same simple query."""
    enqueue_committed(pg, *[("noop", i) for i in range(3)])
    log = StatementLog()
    with logged_pool(pg.url, log) as pool:
        worker = create_queue_worker(pool, lambda t, p: None, polling_interval_ms=10)
        with worker:
            wait_until(lambda: worker.summary()["succeeded"] == 3)
    per_job = [s for s in log.about_jobs() if s.startswith(("BEGIN; EXECUTE", "EXECUTE"))]
    archives = [s for s in per_job if s.startswith("EXECUTE proletarian_archive_")]
    assert len(archives) == 3
    for archive in archives:
        first, committed, rest = archive.partition("; COMMIT; ")
        assert committed and ";" not in first
        assert rest.startswith("BEGIN; EXECUTE proletarian_claim_") or "; BEGIN; EXECUTE" in rest
    claims = [s for s in per_job if s.startswith("BEGIN; EXECUTE proletarian_claim_")]
    assert len(claims) >= 1  # the first claim of each thread; later ones ride on archives
    assert len(per_job) - len(claims) == 3
    assert any(s.startswith("PREPARE proletarian_claim_") for s in log.statements)


def test_a_job_claimed_ahead_of_a_stop_goes_back_unrun(pg):
    """Stopping after a commit that claimed the next job: that job's transaction rolls
    back, the connection goes back to the pool idle, and the job runs on the next start."""
    enqueue_committed(pg, ("first", 0), ("second", 1))
    ran = []
    stopping = threading.Event()

    def log(event, data):
        if event == "job_finished" and data["job_type"] == "first":
            threading.Thread(target=worker.stop, daemon=True).start()
            assert wait_until(lambda: worker._stopping.is_set())
            stopping.set()

    with ConnectionPool(pg.url, min_size=1, max_size=1, open=True) as pool:
        worker = create_queue_worker(
            pool, lambda t, p: ran.append(t), polling_interval_ms=10, log=log
        )
        worker.start()
        assert stopping.wait(10)
        worker.stop()
        assert ran == ["first"]
        assert pg.jobs() == [("second", 0, "default")]
        with pool.connection() as conn:
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            assert not conn.autocommit
        with create_queue_worker(pool, lambda t, p: ran.append(t), polling_interval_ms=10) as w:
            wait_until(lambda: w.summary()["succeeded"] == 1)
    assert ran == ["first", "second"]
    assert sorted(pg.archived()) == [("first", "success", 1), ("second", "success", 1)]


def test_a_claim_ahead_that_fails_after_the_commit_is_claimed_again(pg, pg_pool):
    """The archive committed; the claim riding on it finds its statement gone: the job
    stays archived once, and the next claim prepares the statement again."""
    enqueue_committed(pg, ("drop_claim", 0))
    enqueue_committed(pg, *[("ok", i) for i in range(1, 3)])
    events = Events()
    ran = []

    def handler(job):
        ran.append(job.job_type)
        if job.job_type == "drop_claim":
            [(name,)] = job.connection.execute(
                "SELECT name FROM pg_prepared_statements WHERE name LIKE 'proletarian_claim_%'"
            ).fetchall()
            job.connection.execute(f"DEALLOCATE {name}")

    worker = create_queue_worker(
        pg_pool, handler, handler_fn_mode="advanced", polling_interval_ms=10, log=events
    )
    with worker:
        wait_until(lambda: len(pg.archived()) == 3)
    assert sorted(ran) == ["drop_claim", "ok", "ok"]
    assert sorted(pg.archived()) == [("drop_claim", "success", 1)] + [("ok", "success", 1)] * 2
    assert not events.named("polling_error")


@pytest.mark.parametrize("fair", [False, True], ids=["plain", "fair"])
def test_the_connection_is_handed_back_as_it_was_lent(pg, fair):
    """Its settings as they were, and none of the worker's prepared statements (a fair
    worker's turn scan, prepared at its first claim, included)."""
    enqueue_committed(pg, ("noop", 1), group_key="g" if fair else None)
    with ConnectionPool(pg.url, min_size=1, max_size=1, open=True) as pool:
        with pool.connection() as conn:
            assert not conn.autocommit
            threshold = conn.prepare_threshold
        with create_queue_worker(
            pool, lambda t, p: None, polling_interval_ms=10, fair=fair
        ) as worker:
            wait_until(lambda: worker.summary()["succeeded"] == 1)
        with pool.connection() as conn:
            assert not conn.autocommit
            assert conn.prepare_threshold == threshold
            names = conn.execute("SELECT name FROM pg_prepared_statements").fetchall()
            assert not [n for (n,) in names if n.startswith("proletarian_")]


def test_a_handler_rolling_back_to_a_savepoint_keeps_the_statements(pg, pg_pool):
    """psycopg answers ROLLBACK with DEALLOCATE ALL when it has prepared statements of its
    own; the worker turns its automatic preparing off so a retry does not cost the batch."""
    enqueue_committed(pg, *[("ok", i) for i in range(6)], ("retry", 6))
    events = Events()

    def handler(job):
        for _ in range(6):  # enough for psycopg to prepare the statement automatically
            job.connection.execute("SELECT %s::int", (1,))
        if job.job_type == "retry":
            raise RuntimeError("again later")

    worker = create_queue_worker(
        pg_pool,
        handler,
        handler_fn_mode="advanced",
        batch_size=10,
        polling_interval_ms=10,
        retry_strategy_fn=lambda job, exc: {"retries": 1, "delays": [60_000]},
        log=events,
    )
    with worker:
        wait_until(lambda: worker.summary()["succeeded"] == 6)
    assert not events.named("polling_error")
    assert worker.summary()["retried"] == 1
    assert pg.jobs() == [("retry", 1, "default")]


def test_statements_dropped_between_jobs_are_prepared_again(pg, pg_pool):
    enqueue_committed(pg, ("drop", 0))
    enqueue_committed(pg, *[("ok", i) for i in range(1, 4)])
    events = Events()
    ran = []

    def handler(job):
        ran.append(job.job_type)
        if job.job_type == "drop":
            job.connection.execute("DEALLOCATE ALL")
            raise RuntimeError("fails after dropping the statements")

    worker = create_queue_worker(
        pg_pool, handler, handler_fn_mode="advanced", polling_interval_ms=10, log=events
    )
    with worker:
        wait_until(lambda: len(pg.archived()) == 4)
    assert sorted(ran) == ["drop", "ok", "ok", "ok"]
    assert sorted(pg.archived()) == [("drop", "failure", 1)] + [("ok", "success", 1)] * 3
    assert not events.named("polling_error")


def test_statements_dropped_mid_job_cost_a_rerun_not_a_job(pg, pg_pool):
    """The archive then fails, the transaction rolls back, and the job runs again."""
    enqueue_committed(pg, ("drop", 0), ("ok", 1))
    events = Events()
    ran = []

    def handler(job):
        ran.append(job.job_type)
        if job.job_type == "drop" and ran.count("drop") == 1:
            job.connection.execute("DEALLOCATE ALL")

    worker = create_queue_worker(
        pg_pool, handler, handler_fn_mode="advanced", polling_interval_ms=10, log=events
    )
    with worker:
        wait_until(lambda: len(pg.archived()) == 2)
    assert sorted(ran) == ["drop", "drop", "ok"]
    assert sorted(pg.archived()) == [("drop", "success", 1), ("ok", "success", 1)]
    [error] = events.named("polling_error")
    assert "does not exist" in str(error["exception"])


def test_a_pooler_that_loses_prepared_statements_gets_plain_ones(pg, pg_pool, monkeypatch):
    """PgBouncer in transaction mode runs PREPARE and EXECUTE on different server
    connections; the worker then goes on with the statements written out."""
    monkeypatch.setattr(PostgresDialect, "_prepare", lambda self, conn, fair=False: self._prepared)
    enqueue_committed(pg, *[("ok", i) for i in range(5)])
    events = Events()
    worker = create_queue_worker(pg_pool, lambda t, p: None, polling_interval_ms=10, log=events)
    with worker:
        wait_until(lambda: worker.summary()["succeeded"] == 5)
    assert not events.named("polling_error")
    assert len(pg.archived()) == 5


@pytest.mark.parametrize("queue", ["it's", "back\\slash", "semi; DROP TABLE proletarian.job; --"])
def test_queue_names_are_quoted_on_the_hot_path(pg, pg_pool, queue):
    enqueue_committed(pg, ("noop", 1), queue=queue)
    enqueue_committed(pg, ("noop", 2))
    with create_queue_worker(
        pg_pool, lambda t, p: None, queue=queue, polling_interval_ms=10
    ) as worker:
        wait_until(lambda: worker.summary()["succeeded"] == 1)
    assert pg.jobs() == [("noop", 0, "default")]


def test_an_autocommit_connection_still_holds_the_row_lock(pg):
    """Outside a worker (process_next_job on an autocommit connection) the claim still
    opens a transaction, so the job runs under its row lock."""
    enqueue_committed(pg, ("noop", 1))
    seen = []

    def handler(job_type, payload):
        with contextlib.closing(pg.connect()) as other:
            row = other.execute(
                f"SELECT job_id FROM {pg.job_table} FOR UPDATE SKIP LOCKED"
            ).fetchone()
            seen.append(row)

    connect = lambda: psycopg.connect(pg.url, autocommit=True)  # noqa: E731
    assert process_next_job(connect, handler) is True
    assert seen == [None]
    assert pg.archived() == [("noop", "success", 1)]


def test_without_psycopg_internals_a_cursor_runs_the_hot_path(pg, pg_pool, monkeypatch):
    """On a psycopg without the generator the hot path uses for speed, a cursor sends the
    same two statements per job."""
    from proletarian_di._store.dialects import libpq as _libpq

    monkeypatch.setattr(_libpq, "_direct", False)
    enqueue_committed(pg, *[("ok", i) for i in range(3)], ("bad", 3))
    events = Events()

    def handler(job_type, payload):
        if job_type == "bad":
            raise RuntimeError("no")

    with create_queue_worker(pg_pool, handler, polling_interval_ms=10, log=events) as worker:
        wait_until(lambda: len(pg.archived()) == 4)
    assert worker.summary()["succeeded"] == 3
    assert sorted(pg.archived()) == [("bad", "failure", 1)] + [("ok", "success", 1)] * 3
    assert not events.named("polling_error")


def test_a_claim_in_a_running_slot_rides_on_the_archive_too(pg):
    """With `max_running`, the COMMIT gives the slot back and the next claim, in the same
    round trip, takes one again: a statement prepared once per connection like the others
    (planning it on every claim cost the server about as much as the rest of a job)."""
    enqueue_committed(pg, *[("noop", i) for i in range(3)])
    log = StatementLog()
    with logged_pool(pg.url, log) as pool:
        worker = create_queue_worker(pool, lambda t, p: None, polling_interval_ms=10, max_running=1)
        with worker:
            wait_until(lambda: worker.summary()["succeeded"] == 3)
    archives = [s for s in log.about_jobs() if s.startswith("EXECUTE proletarian_archive_")]
    assert len(archives) == 3
    for archive in archives:
        _, committed, rest = archive.partition("; COMMIT; ")
        assert committed and rest.startswith("BEGIN; EXECUTE proletarian_slot_")
    assert any("PREPARE proletarian_slot_" in s for s in log.statements)
    prepared = [s for s in log.statements if "PREPARE proletarian_slot_" in s]
    assert "pg_try_advisory_xact_lock" in prepared[0]


@pytest.mark.parametrize("tricky", ["it's", "back\\slash", "ünï 😀", "x'); DROP TABLE t; --"])
def test_a_fair_turn_rides_on_the_archive_too(pg, tricky):
    """`fair=True`: each archive's COMMIT is followed, in the same simple query, by the
    next turn's scan past the group served (its key written in as a literal), and the
    turns still alternate between the groups, whatever their keys hold."""
    for n in range(3):
        for group in ("a", tricky):
            enqueue_committed(pg, ("noop", f"{group}-{n}"), group_key=group)
    ran: list[str] = []
    log = StatementLog()
    with logged_pool(pg.url, log) as pool:
        worker = create_queue_worker(
            pool, lambda t, p: ran.append(p), fair=True, polling_interval_ms=10
        )
        with worker:
            wait_until(lambda: worker.summary()["succeeded"] == 6)
    assert ran == [f"{g}-{n}" for n in range(3) for g in ("a", tricky)]
    archives = [s for s in log.about_jobs() if s.startswith("EXECUTE proletarian_archive_")]
    assert len(archives) == 6
    for archive in archives:
        _, committed, rest = archive.partition("; COMMIT; ")
        assert committed and "BEGIN; EXECUTE proletarian_fair_" in rest, rest
    prepared = [s for s in log.statements if "PREPARE proletarian_fair_" in s]
    assert len(prepared) == 1 and "group_key > $2" in prepared[0]
    [first] = [s for s in log.statements if "EXECUTE proletarian_fair_" in s][:1]
    assert re.search(r"group_key > +E?'|proletarian_fair_\w+\('default', +E?'", first), first
    assert pg.jobs() == []


@pytest.mark.parametrize("lease", [False, True], ids=["held", "lease"])
def test_beside_a_blocked_job_a_success_asks_for_dependents_in_its_archives_round_trip(
    pg, lease, monkeypatch
):
    """While some job is blocked, a success's archive asks whether a job waits on it in
    its own round trip, with no read of its own: held mode sends a prepared read with the
    archive, its COMMIT and the next claim; lease mode reads it in a column of the archive's
    statement. A parent with a dependent still releases it (the sweep is off)."""
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    [waited] = enqueue_committed(pg, ("later", 0), process_at=later)
    enqueue_committed(pg, ("blocked", 0), depends_on=[waited])
    [parent] = enqueue_committed(pg, ("parent", 0))
    enqueue_committed(pg, ("child", 0), depends_on=[parent])
    plain = enqueue_committed(pg, *[("plain", i) for i in range(3)])
    monkeypatch.setattr(dependencies, "sweep", lambda *args, **kwargs: (0, None))
    log = StatementLog()
    with logged_pool(pg.url, log) as pool:
        options = {"lease_ms": 30_000} if lease else {}
        worker = create_queue_worker(pool, lambda t, p: None, polling_interval_ms=10, **options)
        with worker:
            wait_until(lambda: worker.summary()["succeeded"] == 5)
    reads = [
        s
        for s in [*log.statements, *log.executed]
        if re.match(r"SELECT (1 FROM \S+_dependencies|coalesce\(bool_or)", s)
    ]
    assert reads == []
    if lease:
        archives = [s for s in log.executed if s.startswith("WITH done AS (DELETE")]
        assert len(archives) == 5 and all("parent_status IS NULL" in s for s in archives)
    else:
        for job_id in plain:
            [query] = [
                s for s in log.statements if "proletarian_archive_" in s and f"'{job_id}'" in s
            ]
            assert re.search(
                rf"EXECUTE proletarian_waited_\w+\('{job_id}'\); EXECUTE proletarian_archive_",
                query,
            ), query
            assert re.search(r"; COMMIT; BEGIN; EXECUTE proletarian_claim_", query), query
    assert sorted(t for t, *_ in pg.archived()) == ["child", "parent", "plain", "plain", "plain"]

"""MySQL's hot path: with no user code handed the worker's connection, a job's archive,
its COMMIT and the next claim go in one multi-statement query; multi-statements are off
again when the connection goes back, and never on where user code gets the connection."""

from __future__ import annotations

import threading
from datetime import datetime, timezone
from typing import Any

import pymysql
import pytest

from proletarian_di import create_queue_worker
from proletarian_di._store import dependencies
from proletarian_di._store.dialects import MySQLDialect
from proletarian_di._store.dialects.base import running_slots, unwrap_connection

from backends import CountedConnections, enqueue_committed, wait_until


@pytest.fixture
def my(mysql_backend):
    mysql_backend.reset()
    return mysql_backend


def held_connection(worker: Any) -> Any:
    """The connection the worker's only thread holds."""
    (held,) = [slot.conn for slot in worker._slots.values() if slot.conn is not None]
    return held


def multi_statements_work(conn: Any) -> bool:
    try:
        with unwrap_connection(conn).cursor() as cursor:
            cursor.execute("SELECT 1; SELECT 2")
            while cursor.nextset():
                pass
        return True
    except pymysql.err.ProgrammingError:
        return False


def test_each_job_takes_one_round_trip(my):
    """After each thread's first claim, a job costs one query: archive, COMMIT, START
    TRANSACTION and the next claim together."""
    enqueue_committed(my, *[("noop", i) for i in range(5)])
    connections = CountedConnections(my)
    worker = create_queue_worker(connections, lambda t, p: None, polling_interval_ms=10)
    with worker:
        wait_until(lambda: worker.summary()["succeeded"] == 5)
    per_job = [
        q for q in connections.queries if q.startswith(f"INSERT INTO {my.archived_job_table}")
    ]
    assert len(per_job) == 5
    for query in per_job:
        assert "; COMMIT; START TRANSACTION; SELECT " in query
        assert "FOR UPDATE SKIP LOCKED" in query
    assert sorted(my.archived()) == [("noop", "success", 1)] * 5
    assert my.jobs() == []


def test_with_max_running_each_job_still_takes_one_round_trip(my):
    """With `max_running`, a thread keeps its running slot (a session's GET_LOCK lock) from
    one job to the next claimed in the archive's query: one query per job with no lock
    statements in it, never more running than the cap, and no slot left taken once the
    worker stopped."""
    enqueue_committed(my, *[("noop", i) for i in range(12)])
    connections = CountedConnections(my)
    running, most, lock = [0], [0], threading.Lock()

    def handler(job_type: str, payload: Any) -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        threading.Event().wait(0.01)
        with lock:
            running[0] -= 1

    worker = create_queue_worker(
        connections, handler, worker_threads=3, max_running=2, polling_interval_ms=10
    )
    with worker:
        wait_until(lambda: worker.summary()["succeeded"] == 12)
    archives = [
        q for q in connections.queries if q.startswith(f"INSERT INTO {my.archived_job_table}")
    ]
    assert len(archives) == 12
    ahead = [q for q in archives if "; START TRANSACTION; SELECT " in q]
    assert ahead, "the next claims rode on the archives"
    for query in ahead:
        assert "GET_LOCK(" not in query and "RELEASE_LOCK(" not in query
    assert most[0] == 2
    slots = running_slots(my.job_table, "default", 2)
    names = [f"{slots.prefix}{n}" for n in (1, 2)]
    assert my.query("SELECT IS_USED_LOCK(%s), IS_USED_LOCK(%s)", names) == [(None, None)]
    assert sorted(my.archived()) == [("noop", "success", 1)] * 12


def test_a_running_slot_never_goes_back_to_the_pool_with_its_connection(my):
    """A slot still held when the worker lets its connection go (its claim ahead found
    nothing, or the worker stopped right after it) is given back first: a GET_LOCK lock
    belongs to the session, and would go on holding the slot from the pool."""
    slots = running_slots(my.job_table, "default", 1)
    dialect = MySQLDialect(my.job_table, my.archived_job_table)
    conn = my.connect()
    try:
        with dialect.attached(conn, exclusive=True) as session:
            assert session.claim_in_slot(slots, "default", datetime.now(timezone.utc)) == []
            assert session.slot == f"{slots.prefix}1"
            held = my.query("SELECT IS_USED_LOCK(%s)", (session.slot,))
            assert held == [(conn.thread_id(),)]
        assert my.query("SELECT IS_USED_LOCK(%s)", (f"{slots.prefix}1",)) == [(None,)]
    finally:
        conn.close()


def test_the_connection_goes_back_without_multi_statements(my):
    """On while the worker holds a pool's connection, off once the pool has it back."""
    enqueue_committed(my, ("noop", 0))
    source = my.pool(1)
    seen: list[bool] = []

    def handler(job_type: str, payload: Any) -> None:
        seen.append(multi_statements_work(held_connection(worker)))

    try:
        worker = create_queue_worker(source, handler, polling_interval_ms=10)
        with worker:
            wait_until(lambda: worker.summary()["succeeded"] == 1)
        with source.connection() as pooled:
            assert not multi_statements_work(pooled)
    finally:
        source.close()
    assert seen == [True]


@pytest.mark.parametrize(
    "options",
    [
        {"handler_fn_mode": "advanced"},
        {"failed_job_fn": lambda job, exc: None},
        {"retry_strategy_fn": lambda job, exc: None},
    ],
    ids=["advanced", "failed_job_fn", "retry_strategy_fn"],
)
def test_user_code_never_gets_a_connection_with_multi_statements(my, options):
    """Where user code is handed the job's connection, it runs as the pool lent it:
    stacked queries stay refused, whatever the code does with the connection."""
    enqueue_committed(my, ("first", 0), ("second", 1))
    connections = CountedConnections(my)
    seen: list[bool] = []
    if options.get("handler_fn_mode") == "advanced":

        def handler(job: Any) -> None:
            seen.append(multi_statements_work(job.connection))
    else:

        def handler(job_type: str, payload: Any) -> None:
            seen.append(multi_statements_work(held_connection(worker)))

    worker = create_queue_worker(connections, handler, polling_interval_ms=10, **options)
    with worker:
        wait_until(lambda: worker.summary()["succeeded"] == 2)
    assert seen == [False, False]
    assert not [q for q in connections.queries if "; COMMIT; START TRANSACTION" in q]
    assert sorted(my.archived()) == [("first", "success", 1), ("second", "success", 1)]


def test_a_claim_that_fails_after_the_commit_leaves_the_archive_and_no_transaction(my):
    """The server stops at the failing claim: the archive before it is committed, the
    claim is undone, and the next claim finds the next job."""
    enqueue_committed(my, ("first", 0), ("second", 1))
    dialect = MySQLDialect(my.job_table, my.archived_job_table)
    conn = my.connect()
    try:
        conn.autocommit(True)
        with dialect.attached(conn, exclusive=True) as session:
            assert session.multi
            now = datetime.now(timezone.utc)
            [row] = session.claim("default", now)
            assert row[2] == "first"
            # LIMIT -1 is a syntax error: the claim fails after the COMMIT ran
            session.archive_commit_and_claim([row[0]], now, "default", limit=-1)
            assert session.claimed_ahead() is None
            assert conn.get_autocommit()
            assert my.archived() == [("first", "success", 1)]
            assert my.jobs() == [("second", 0, "default")]
            [row] = session.claim("default", datetime.now(timezone.utc))
            assert row[2] == "second"
            session.archive_commit_and_claim([row[0]], datetime.now(timezone.utc), "default")
            assert session.claimed_ahead() == []
            dialect.rollback(conn)
        assert not multi_statements_work(conn)
    finally:
        conn.close()
    assert sorted(my.archived()) == [("first", "success", 1), ("second", "success", 1)]


def test_a_kept_slot_goes_back_when_the_claim_after_the_commit_fails(my):
    """The running slot kept for the next claim is released when that claim fails (the
    session then holds none), and the claim after it takes a slot anew."""
    enqueue_committed(my, ("first", 0), ("second", 1))
    slots = running_slots(my.job_table, "default", 1)
    name = f"{slots.prefix}1"
    dialect = MySQLDialect(my.job_table, my.archived_job_table)
    conn = my.connect()
    try:
        conn.autocommit(True)
        with dialect.attached(conn, exclusive=True) as session:
            [row] = session.claim_in_slot(slots, "default", datetime.now(timezone.utc))
            assert session.slot == name
            session.archive_commit_and_claim(
                [row[0]], datetime.now(timezone.utc), "default", limit=-1, slots=slots
            )
            assert session.claimed_ahead() is None
            assert session.slot is None
            assert my.query("SELECT IS_USED_LOCK(%s)", (name,)) == [(None,)]
            [row] = session.claim_in_slot(slots, "default", datetime.now(timezone.utc))
            assert row[2] == "second" and session.slot == name
            session.archive_commit_and_claim(
                [row[0]], datetime.now(timezone.utc), "default", slots=slots
            )
            assert session.claimed_ahead() == [] and session.slot == name
            assert my.query("SELECT IS_USED_LOCK(%s)", (name,)) == [(conn.thread_id(),)]
            session.release_slot()
            dialect.rollback(conn)
        assert my.query("SELECT IS_USED_LOCK(%s)", (name,)) == [(None,)]
    finally:
        conn.close()
    assert sorted(my.archived()) == [("first", "success", 1), ("second", "success", 1)]


def test_an_archive_that_fails_raises_and_commits_nothing(my):
    """An error before the COMMIT (here the archive's INSERT, its table gone) is raised,
    and nothing after it ran: the job is still claimed in the open transaction, and a
    rollback gives it back."""
    enqueue_committed(my, ("first", 0))
    dialect = MySQLDialect(my.job_table, "proletarian.no_such_archive")
    conn = my.connect()
    try:
        conn.autocommit(True)
        with dialect.attached(conn, exclusive=True) as session:
            [row] = session.claim("default", datetime.now(timezone.utc))
            with pytest.raises(pymysql.err.ProgrammingError, match="no_such_archive"):
                session.archive_commit_and_claim([row[0]], datetime.now(timezone.utc), "default")
            assert session.claimed_ahead() is None
            dialect.rollback(conn)
    finally:
        conn.close()
    assert my.jobs() == [("first", 0, "default")]
    assert my.archived() == []


def test_a_job_claimed_ahead_of_a_stop_goes_back_unrun(my):
    enqueue_committed(my, ("first", 0), ("second", 1))
    ran: list[str] = []
    stopping = threading.Event()

    def log(event: str, data: dict[str, Any]) -> None:
        if event == "job_finished" and data["job_type"] == "first":
            threading.Thread(target=worker.stop, daemon=True).start()
            assert wait_until(lambda: worker._stopping.is_set())
            stopping.set()

    connections = CountedConnections(my)
    worker = create_queue_worker(
        connections, lambda t, p: ran.append(t), polling_interval_ms=10, log=log
    )
    worker.start()
    assert stopping.wait(10)
    worker.stop()
    assert ran == ["first"]
    assert my.jobs() == [("second", 0, "default")]
    with create_queue_worker(
        connections, lambda t, p: ran.append(t), polling_interval_ms=10
    ) as again:
        wait_until(lambda: again.summary()["succeeded"] == 1)
    assert ran == ["first", "second"]


def test_a_fair_turn_rides_on_the_archive_too(my):
    """`fair=True`: each archive's query ends with the next turn's scan past the group
    served, and the turns alternate between the groups, quotes in their keys and all."""
    for n in range(3):
        for group in ("a", "it's"):
            enqueue_committed(my, ("noop", f"{group}-{n}"), group_key=group)
    ran: list[str] = []
    connections = CountedConnections(my)
    worker = create_queue_worker(
        connections, lambda t, p: ran.append(p), fair=True, polling_interval_ms=10
    )
    with worker:
        wait_until(lambda: worker.summary()["succeeded"] == 6)
    assert ran == [f"{g}-{n}" for n in range(3) for g in ("a", "it's")]
    archives = [
        q for q in connections.queries if q.startswith(f"INSERT INTO {my.archived_job_table}")
    ]
    assert len(archives) == 6
    for query in archives:
        assert "; COMMIT; START TRANSACTION; SELECT " in query and "group_key > " in query
    assert my.jobs() == []


def test_beside_a_blocked_job_a_success_asks_for_dependents_in_its_archives_query(my, monkeypatch):
    """While some job is blocked, each success's query reads first whether a job waits on
    it, then archives, commits and claims: no read of its own. A parent with a dependent
    still releases it (the sweep is off)."""
    later = datetime.now(timezone.utc).replace(year=datetime.now(timezone.utc).year + 1)
    [waited] = enqueue_committed(my, ("later", 0), process_at=later)
    enqueue_committed(my, ("blocked", 0), depends_on=[waited])
    [parent] = enqueue_committed(my, ("parent", 0))
    enqueue_committed(my, ("child", 0), depends_on=[parent])
    enqueue_committed(my, *[("plain", i) for i in range(3)])
    monkeypatch.setattr(dependencies, "sweep", lambda *args, **kwargs: (0, None))
    connections = CountedConnections(my)
    worker = create_queue_worker(connections, lambda t, p: None, polling_interval_ms=10)
    with worker:
        wait_until(lambda: worker.summary()["succeeded"] == 5)
    reads = [q for q in connections.queries if q.startswith("SELECT 1 FROM") and "parent_id" in q]
    assert reads == []
    probed = [q for q in connections.queries if q.startswith("SELECT EXISTS (SELECT 1 FROM")]
    assert len(probed) == 5
    for query in probed:
        assert f"; INSERT INTO {my.archived_job_table}" in query and "; COMMIT" in query
    assert sorted(t for t, *_ in my.archived()) == ["child", "parent", "plain", "plain", "plain"]

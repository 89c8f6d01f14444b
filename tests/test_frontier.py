"""Claims start at the worker's frontier (so they do not walk over archived jobs' dead index
entries) and still find every due job: a sweep from the beginning once per polling interval
catches jobs behind the frontier, and the thread that finds one walks on from there."""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from proletarian_di import create_queue_worker, enqueue_many
from proletarian_di._engine.frontier import MAX_LEVELS, Frontier
from proletarian_di._engine.options import worker_settings
from proletarian_di._engine.runner import JobRunner, Slot
from proletarian_di._store.dialects import dialect_for

from backends import Backend, archive_by_id, enqueue_committed, wait_until

NOW = datetime.now(timezone.utc)


def enqueue_at(backend: Backend, job_type: str, process_at: datetime) -> Any:
    """Enqueue a job due at `process_at`, in the past too: `enqueue` makes a past time now,
    so the row is written as another host with a slow clock, or a late commit, leaves it."""
    [job_id] = enqueue_committed(backend, (job_type, None))
    key = job_id.bytes if backend.name == "mysql" else job_id
    when = process_at.replace(tzinfo=None) if backend.name == "mysql" else process_at
    backend.execute(
        f"UPDATE {backend.job_table} SET process_at = %s WHERE job_id = %s", (when, key)
    )
    return job_id


class FakeTime:
    """A monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


# The rule, without a database -------------------------------------------------------------


def test_claims_sweep_first_then_start_at_the_frontier_until_the_next_sweep() -> None:
    time = FakeTime()
    frontier = Frontier(0.1, clock=time)
    assert frontier.start(None) is None
    frontier.claimed(None, (0, 5))
    assert [frontier.start(None) for _ in range(3)] == [(0, 5)] * 3
    time.now = 0.1
    assert frontier.start(None) is None
    assert frontier.start(None) == (0, 5)


def test_the_frontier_only_moves_forward_and_a_walker_stays_behind_it() -> None:
    time = FakeTime()
    frontier, walker = Frontier(1.0, clock=time), Slot()
    frontier.start(walker)
    frontier.claimed(walker, (0, 10))
    frontier.claimed(walker, (0, 3))
    assert frontier.head == (0, 10) and walker.behind == (0, 3)
    assert frontier.start(walker) == (0, 3)
    assert frontier.start(None) == (0, 10)
    frontier.claimed(walker, (0, 7))
    assert walker.behind == (0, 7)
    frontier.claimed(walker, (0, 12))
    assert (frontier.head, walker.behind) == ((0, 12), None)
    frontier.claimed(walker, (0, 4))
    frontier.missed(walker)
    assert walker.behind is None and frontier.start(walker) == (0, 12)


def test_an_expensive_sweep_holds_the_next_one_back_to_a_tenth_of_the_time() -> None:
    time = FakeTime()
    frontier, walker, other = Frontier(1.0, clock=time), Slot(), Slot()
    frontier.claimed(walker, (0, 5))
    time.now = 10.0
    assert frontier.start(walker) is None
    assert frontier.start(other) == (0, 5)
    time.now = 12.0
    frontier.missed(walker)
    time.now = 25.0
    assert frontier.start(other) == (0, 5), "a 2 s sweep puts the next one 20 s after it began"
    time.now = 30.0
    assert frontier.start(other) is None
    frontier.claimed(other, (0, 6))
    time.now = 31.0
    assert frontier.start(walker) is None, "a cheap sweep: the polling interval rules again"


def test_one_sweep_runs_at_a_time() -> None:
    time = FakeTime()
    frontier, walker, other = Frontier(1.0, clock=time), Slot(), Slot()
    frontier.claimed(walker, (0, 5))
    time.now = 10.0
    assert frontier.start(walker) is None
    time.now = 11.5
    assert frontier.start(other) == (0, 5), "the first sweep is still running"
    frontier.missed(walker)
    assert frontier.start(other) == (0, 5), "it took 1.5 s: the next waits 15 s from its start"
    time.now = 25.0
    assert frontier.start(other) is None


def test_a_failed_sweep_does_not_count_as_an_expensive_one() -> None:
    time = FakeTime()
    frontier, walker = Frontier(1.0, clock=time), Slot()
    frontier.claimed(walker, (0, 5))
    time.now = 10.0
    assert frontier.start(walker) is None  # and the claim raises: no claimed() nor missed()
    time.now = 10.5
    assert frontier.start(walker) == (0, 5)
    time.now = 15.0
    frontier.missed(walker)
    time.now = 16.0
    assert frontier.start(walker) is None


def test_no_sweep_interval_means_every_claim_starts_from_the_beginning() -> None:
    frontier = Frontier(0.0, clock=FakeTime())
    frontier.claimed(None, (0, 5))
    assert [frontier.start(None) for _ in range(3)] == [None, None, None]


def test_a_thread_woken_for_a_priority_behind_the_frontier_claims_from_that_priority() -> None:
    """Its next claim starts at that priority's own frontier, or, for a priority the worker
    never claimed, at the earliest process_at it claimed; a priority at or ahead of the
    frontier changes nothing, and a due sweep still sweeps."""
    time = FakeTime()
    frontier, woken = Frontier(1.0, clock=time), Slot()
    assert frontier.start(None) is None
    frontier.claimed(None, (0, 3))
    frontier.claimed(None, (0, 8))
    frontier.woken(10)
    assert frontier.start(woken) == (-10, 3), "never claimed: from the earliest time"
    assert frontier.start(woken) == (0, 8), "for the next claim only"
    frontier.claimed(woken, (-10, 6))
    frontier.missed(woken)
    frontier.woken(10)
    assert frontier.start(woken) == (-10, 6), "that priority's own frontier"
    for ahead in (0, -5):
        frontier.woken(ahead)
        assert frontier.start(woken) == (0, 8)
    frontier.claimed(woken, (5, 9))
    frontier.woken(0)
    assert frontier.start(woken) == (0, 8), "priority 0 after a backlog of priority -5"
    frontier.woken(10)
    time.now = 1.0
    assert frontier.start(woken) is None and frontier.start(woken) == (5, 9)


def test_a_worker_remembers_the_frontiers_of_a_bounded_number_of_priorities() -> None:
    """Past MAX_LEVELS priorities, a new one starts at the earliest process_at claimed."""
    frontier = Frontier(60.0, clock=FakeTime())
    assert frontier.start(None) is None
    frontier.claimed(None, (0, 100))
    for rank in range(1, MAX_LEVELS + 5):
        frontier.claimed(None, (-rank, 100 + rank))
    frontier.woken(1)
    assert frontier.start(None) == (-1, 101)
    frontier.woken(MAX_LEVELS + 3)
    assert frontier.start(None) == (-MAX_LEVELS - 3, 100)


def test_only_the_woken_thread_claims_from_its_priority() -> None:
    frontier = Frontier(1.0, clock=FakeTime())
    assert frontier.start(None) is None
    frontier.claimed(None, (0, 8))
    elsewhere = threading.Thread(target=frontier.woken, args=(10,))
    elsewhere.start()
    elsewhere.join()
    assert frontier.start(None) == (0, 8)


# On both databases ------------------------------------------------------------------------


@contextlib.contextmanager
def runner_session(backend: Backend, frontier: Frontier, ran: list[str]) -> Iterator[Any]:
    """A runner with `frontier` on an attached worker connection, recording job types."""
    runner = JobRunner(
        lambda job_type, payload: ran.append(job_type), worker_settings(), None, frontier
    )
    with contextlib.closing(backend.connect()) as conn:
        dialect = dialect_for(conn, backend.job_table, backend.archived_job_table)
        with dialect.attached(conn) as session:
            yield lambda slot: runner.run_batch(session, slot)


def test_a_job_behind_the_frontier_waits_for_the_sweep_then_its_thread_walks_on(
    backend: Backend,
) -> None:
    """A job due behind the frontier is passed over until the next sweep claims it, then
    the thread goes on from it, in process_at order."""
    for name, seconds in (("a", 50), ("b", 40), ("c", 30)):
        enqueue_at(backend, name, NOW - timedelta(seconds=seconds))
    time, ran, slot = FakeTime(), [], Slot()
    frontier = Frontier(1.0, clock=time)
    with runner_session(backend, frontier, ran) as run:
        assert run(slot) == [True] and run(slot) == [True]
        assert ran == ["a", "b"]
        enqueue_at(backend, "behind", NOW - timedelta(seconds=45))
        enqueue_at(backend, "old", NOW - timedelta(seconds=60))
        assert run(slot) == [True]
        assert ran[-1] == "c"
        assert run(slot) == []
        time.now = 1.0
        assert run(slot) == [True]
        assert ran[-1] == "old" and slot.behind is not None
        assert run(slot) == [True]
        assert ran[-1] == "behind"
        assert run(slot) == [] and slot.behind is None
    assert backend.query(f"SELECT COUNT(*) FROM {backend.job_table}") == [(0,)]


def test_a_worker_runs_jobs_released_or_enqueued_behind_its_frontier(backend: Backend) -> None:
    """A job another transaction held while the frontier moved past it, and a job written
    with a past process_at, both run: the sweep finds them."""
    held = enqueue_at(backend, "held", NOW - timedelta(minutes=5))
    later = enqueue_committed(backend, *(("later", n) for n in range(20)))
    done = threading.Event()
    source = backend.pool(3)
    worker = create_queue_worker(
        source, lambda job_type, payload: None, worker_threads=2, polling_interval_ms=50
    )
    with contextlib.closing(backend.connect()) as holder:
        key = held.bytes if backend.name == "mysql" else held
        with holder.cursor() as cursor:
            cursor.execute(
                f"SELECT job_id FROM {backend.job_table} WHERE job_id = %s FOR UPDATE", (key,)
            )
            cursor.fetchall()
        try:
            worker.start()
            wait_until(lambda: set(later) <= set(archive_by_id(backend)), description="later")
            assert held not in archive_by_id(backend)
        finally:
            holder.rollback()
        past = enqueue_at(backend, "past", NOW - timedelta(hours=1))
        try:
            wait_until(
                lambda: {held, past} <= set(archive_by_id(backend)),
                description="the jobs behind the frontier",
            )
            done.set()
        finally:
            worker.stop()
            source.close()
    assert done.is_set()
    assert {archive_by_id(backend)[job][0] for job in (held, past, *later)} == {"success"}


def test_postgres_prepares_its_statements_anew_on_a_sweep(pg: Backend, monkeypatch) -> None:
    """On a sweep, at most every _REPLAN_EVERY_S, the worker's statements are prepared
    again, so a plan made on a nearly empty table does not outlive it."""
    monkeypatch.setattr("proletarian_di._store.dialects.postgresql._REPLAN_EVERY_S", 0.0)
    enqueue_committed(pg, ("first", None), ("second", None))
    prepared: list[datetime] = []

    def handler(job: Any) -> None:
        cursor = job.connection.execute(
            "SELECT prepare_time FROM pg_prepared_statements WHERE name LIKE 'proletarian_claim%'"
        )
        prepared.extend(row[0] for row in cursor.fetchall())

    runner = JobRunner(handler, worker_settings(handler_fn_mode="advanced"), None, Frontier(0.0))
    with contextlib.closing(pg.connect()) as conn:
        dialect = dialect_for(conn, pg.job_table, pg.archived_job_table)
        with dialect.attached(conn) as session:
            assert runner.run_batch(session, Slot()) == [True]
            assert runner.run_batch(session, Slot()) == [True]
    assert len(prepared) == 2 and prepared[0] < prepared[1]


def run_every_job(backend: Backend, batch_size: int) -> tuple[list[Any], Any, Any]:
    """Run the due jobs in batches on one session: (job type, payload) of each in the order
    run, the dialect, and the frontier's position after them."""
    ran: list[Any] = []
    frontier = Frontier(60.0, clock=FakeTime())
    runner = JobRunner(lambda t, p: ran.append((t, p)), worker_settings(), None, frontier)
    with contextlib.closing(backend.connect()) as conn:
        dialect = dialect_for(conn, backend.job_table, backend.archived_job_table)
        with dialect.attached(conn) as session:
            while runner.run_batch(session, Slot(), batch_size):
                pass
    return ran, dialect, frontier.head


@pytest.mark.parametrize("batch_size", [1, 5])
def test_batches_move_the_frontier_to_their_last_job(backend: Backend, batch_size: int) -> None:
    ids = [enqueue_at(backend, f"j{n}", NOW - timedelta(seconds=60 - n)) for n in range(10)]
    ran, dialect, position = run_every_job(backend, batch_size)
    rank, head = position[:2]  # MySQL's position ends with the job id
    assert [job_type for job_type, _ in ran] == [f"j{n}" for n in range(10)]
    assert (rank, dialect.decode_time(head)) == (0, NOW - timedelta(seconds=51))
    assert set(ids) <= set(archive_by_id(backend))


def test_mysql_claims_range_over_every_index_column_without_a_sort(mysql_backend) -> None:
    """`queue = %s` would let the optimizer read the queue's entries from the first (the
    dead ones too, while a read view is held), and a table whose every row is due would be
    scanned and sorted, locking every row: the claim is a range on the whole claim index,
    (queue, priority_rank, process_at), from the frontier's position."""
    backend = mysql_backend
    backend.reset()
    with contextlib.closing(backend.connect()) as conn:
        enqueue_many(conn, [("t", n) for n in range(1000)])
        enqueue_many(conn, [("t", n) for n in range(100)], priority=5)
        conn.commit()
    backend.query(f"ANALYZE TABLE {backend.job_table}")
    now = datetime.now(timezone.utc)
    hour_ago = (now - timedelta(hours=1)).replace(tzinfo=None)
    with contextlib.closing(backend.connect()) as conn:
        dialect = dialect_for(conn, backend.job_table, backend.archived_job_table)
        for start, limit in itertools.product(((0, hour_ago), (-5, hour_ago), None), (1, 10)):
            cursor = conn.cursor()
            cursor.execute(
                "EXPLAIN " + dialect.claim_sql, dialect.claim_params("default", start, now, limit)
            )
            names = [column[0].lower() for column in cursor.description]
            plan = dict(zip(names, cursor.fetchone(), strict=True))
            assert plan["type"] == "range", plan
            assert plan["key"] == "job_queue_priority_process_at", plan
            assert "filesort" not in str(plan["extra"]).lower(), plan


def test_mysql_claims_start_past_the_jobs_run_among_those_tied_at_one_time(mysql_backend) -> None:
    """Jobs enqueued together share a process_at. The frontier is the last job's id too, so a
    claim starts among the tied jobs after the ones run (a range on the index's job_id) rather
    than at their first, whose index entries InnoDB keeps until its purge removes them; each
    tied job runs once, in the order of its id."""
    backend = mysql_backend
    backend.reset()
    with contextlib.closing(backend.connect()) as conn:
        ids = enqueue_many(conn, [("t", n) for n in range(30)])
        conn.commit()
    ran, dialect, head = run_every_job(backend, 4)
    with contextlib.closing(backend.connect()) as conn:
        ordered = sorted(ids, key=lambda job_id: dialect.default_id_strategy.encode(job_id))
        assert head[2] == dialect.default_id_strategy.encode(ordered[-1])
        now = datetime.now(timezone.utc)
        cursor = conn.cursor()
        cursor.execute(
            "EXPLAIN FORMAT=JSON " + dialect.claim_sql,
            dialect.claim_params("default", head, now, 1),
        )
        plan = cursor.fetchone()[0]
    assert [ids.index(job_id) for job_id in ordered] == [payload for _, payload in ran]
    assert '"used_key_parts": ["queue", "priority_rank", "process_at", "job_id"]' in plan, plan
    assert "filesort" not in plan, plan

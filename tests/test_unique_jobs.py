"""Unique jobs: at most one job per queue and `unique_key` in the job table (waiting,
scheduled, retrying or running); a duplicate returns the holder's id, writes nothing and
leaves the caller's transaction usable; concurrent enqueuers make exactly one row."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import uuid
from datetime import timedelta
from typing import Any

import pytest

from proletarian_di import (
    ConfigurationError,
    RetrySpec,
    enqueue,
    enqueue_async,
    enqueue_many,
    process_next_job,
)

from backends import Backend, as_uuid, wait_until


def rows(backend: Backend, key: str = "invoice:42") -> list[tuple[Any, ...]]:
    return backend.query(
        f"SELECT job_id, queue, job_type FROM {backend.job_table} WHERE unique_key = %s "
        "ORDER BY queue",
        (key,),
    )


def in_transaction_usable(backend: Backend, conn: Any) -> None:
    """A statement after the duplicate runs, so the transaction was not aborted."""
    cursor = conn.cursor()
    cursor.execute(f"SELECT COUNT(*) FROM {backend.job_table}")
    assert cursor.fetchone()[0] >= 1


def test_a_duplicate_returns_the_holders_id_and_writes_nothing(backend: Backend) -> None:
    with contextlib.closing(backend.connect()) as conn:
        first = enqueue(conn, "invoice", {"n": 1}, unique_key="invoice:42")
        conn.commit()
        again = enqueue(conn, "invoice", {"n": 2}, unique_key="invoice:42")
        in_transaction_usable(backend, conn)
        other = enqueue(conn, "other", None)
        conn.commit()
    assert again == first
    assert [(as_uuid(r[0]), r[2]) for r in rows(backend)] == [(first, "invoice")]
    [(payload,)] = backend.query(
        f"SELECT payload FROM {backend.job_table} WHERE unique_key = %s", ("invoice:42",)
    )
    assert json.loads(payload) == {"n": 1}, "the duplicate wrote nothing"
    assert other not in (first, again)


def test_a_duplicate_in_the_same_transaction_is_the_same_job(backend: Backend) -> None:
    with contextlib.closing(backend.connect()) as conn:
        first = enqueue(conn, "invoice", 1, unique_key="invoice:42")
        assert enqueue(conn, "invoice", 2, unique_key="invoice:42") == first
        conn.rollback()
    assert rows(backend) == [], "rolled back with the caller's transaction"


def test_keys_are_per_queue_and_jobs_without_a_key_are_never_duplicates(backend: Backend) -> None:
    with contextlib.closing(backend.connect()) as conn:
        a = enqueue(conn, "invoice", 1, unique_key="invoice:42", queue="a")
        b = enqueue(conn, "invoice", 1, unique_key="invoice:42", queue="b")
        plain = {enqueue(conn, "invoice", 1) for _ in range(3)}
        conn.commit()
    assert a != b and len(plain) == 3
    assert [r[1] for r in rows(backend)] == ["a", "b"]


def test_the_key_is_held_while_the_job_waits_retries_or_runs_and_freed_when_archived(
    backend: Backend, pool: Any
) -> None:
    with contextlib.closing(backend.connect()) as conn:
        first = enqueue(conn, "invoice", 1, unique_key="invoice:42")
        conn.commit()
    running = threading.Event()
    release = threading.Event()
    attempts = []

    def handler(job_type: str, payload: Any) -> None:
        attempts.append(payload)
        if len(attempts) == 1:
            raise RuntimeError("try again")
        running.set()
        assert release.wait(10)

    def retry(job: Any, exc: BaseException) -> RetrySpec:
        return RetrySpec(retries=1)

    assert process_next_job(pool, handler, retry_strategy_fn=retry) is False
    with contextlib.closing(backend.connect()) as conn:
        assert enqueue(conn, "invoice", 2, unique_key="invoice:42") == first, "retrying"
        conn.commit()
    worker = threading.Thread(target=process_next_job, args=(pool, handler))
    worker.start()
    try:
        assert running.wait(10)
        with contextlib.closing(backend.connect()) as conn:
            assert enqueue(conn, "invoice", 3, unique_key="invoice:42") == first, "running"
            conn.commit()
    finally:
        release.set()
        worker.join(10)
    with contextlib.closing(backend.connect()) as conn:
        fresh = enqueue(conn, "invoice", 4, unique_key="invoice:42")
        conn.commit()
    assert fresh != first
    assert [as_uuid(r[0]) for r in rows(backend)] == [fresh]


@pytest.mark.parametrize(("outcome", "racers"), [("commit", 8), ("rollback", 1)])
def test_concurrent_enqueuers_make_exactly_one_row(
    backend: Backend, outcome: str, racers: int
) -> None:
    """Transactions race for one key that a first one holds until it commits (the others
    get its id) or rolls back (the waiting one takes the key)."""
    first = backend.connect()
    holder = enqueue(first, "invoice", 0, unique_key="invoice:42")
    barrier = threading.Barrier(racers + 1)
    results: dict[int, Any] = {}
    errors: list[BaseException] = []

    def racer(n: int) -> None:
        with contextlib.closing(backend.connect()) as conn:
            try:
                barrier.wait(10)
                results[n] = enqueue(conn, "invoice", n, unique_key="invoice:42")
                conn.commit()
            except BaseException as exc:
                errors.append(exc)

    threads = [threading.Thread(target=racer, args=(n,)) for n in range(1, racers + 1)]
    for thread in threads:
        thread.start()
    barrier.wait(10)
    threading.Event().wait(0.3)  # the racers reach the key and wait on the first
    getattr(first, outcome)()
    first.close()
    for thread in threads:
        thread.join(30)
    assert errors == [] and len(results) == racers
    [(job_id, *_)] = rows(backend)
    winner = as_uuid(job_id)
    assert set(results.values()) == {winner}
    assert (winner == holder) is (outcome == "commit")


def test_a_bad_key_is_an_error_before_anything_is_written(backend: Backend) -> None:
    with contextlib.closing(backend.connect()) as conn:
        for key, message in (("", "non-empty"), ("k" * 256, "at most 255"), (42, "string")):
            with pytest.raises(ConfigurationError, match=f"unique_key must .*{message}"):
                enqueue(conn, "invoice", 1, unique_key=key)
        with pytest.raises(ConfigurationError, match="enqueue_many takes no unique_key"):
            enqueue_many(conn, [("a", 1), ("b", 2)], unique_key="k")
        conn.commit()
    assert backend.jobs() == []


def test_other_integrity_errors_are_not_taken_for_a_duplicate(backend: Backend) -> None:
    """Only the unique key's own conflict means "held": a clash on the job id raises."""

    class SameId:
        def __init__(self) -> None:
            self.id = uuid.uuid4()
            self.inner = backend_strategy(backend)

        def generate(self) -> uuid.UUID:
            return self.id

        def encode(self, job_id: uuid.UUID) -> Any:
            return self.inner.encode(job_id)

        def decode(self, value: Any) -> uuid.UUID:
            return self.inner.decode(value)

    strategy = SameId()
    with contextlib.closing(backend.connect()) as conn:
        enqueue(conn, "invoice", 1, unique_key="a", job_id_strategy=strategy)
        conn.commit()
        with pytest.raises(Exception) as raised:
            enqueue(conn, "invoice", 1, unique_key="b", job_id_strategy=strategy)
        assert "duplicate" in str(raised.value).lower()
        conn.rollback()
    assert [r[2] for r in rows(backend, "a")] == ["invoice"] and rows(backend, "b") == []


def backend_strategy(backend: Backend) -> Any:
    from proletarian_di import BinaryUUIDStrategy, UUIDStrategy

    return BinaryUUIDStrategy() if backend.name == "mysql" else UUIDStrategy()


def test_enqueue_async_honours_the_key(pg: Backend) -> None:
    import psycopg

    async def main() -> tuple[Any, Any, str]:
        async with await psycopg.AsyncConnection.connect(pg.url) as aconn:
            first = await enqueue_async(aconn, "invoice", 1, unique_key="invoice:42")
            again = await enqueue_async(aconn, "invoice", 2, unique_key="invoice:42")
            status = aconn.info.transaction_status.name
            await aconn.commit()
        return first, again, status

    first, again, status = asyncio.run(main())
    assert again == first and status == "INTRANS"
    assert [as_uuid(r[0]) for r in rows(pg)] == [first]


def test_postgres_never_aborts_the_transaction_on_a_duplicate(pg: Backend) -> None:
    with contextlib.closing(pg.connect()) as conn:
        enqueue(conn, "invoice", 1, unique_key="invoice:42")
        conn.commit()
        enqueue(conn, "invoice", 2, unique_key="invoice:42", process_in=timedelta(hours=1))
        assert conn.info.transaction_status.name == "INTRANS"
        conn.commit()
    assert len(rows(pg)) == 1


@pytest.mark.parametrize("write_first", [False, True], ids=["alone", "after-a-write"])
def test_enqueuers_racing_a_worker_that_archives_the_holder_never_deadlock(
    backend: Backend, pool: Any, write_first: bool
) -> None:
    """Two enqueuers of one key while a worker keeps archiving the job holding it: on MySQL
    both used to wait on the holder's index entry and deadlock (1213, their transactions
    rolled back) once it was deleted. Each transaction may write before it enqueues (so
    the connection's previous transaction must not count as holding the key)."""
    deadline = threading.Event()
    errors: list[BaseException] = []
    enqueued = [0, 0]
    ran: list[Any] = []
    most = [0]

    def enqueuer(n: int) -> None:
        with contextlib.closing(backend.connect()) as conn:
            while not deadline.is_set():
                try:
                    if write_first:
                        enqueue(conn, "elsewhere", n, queue="elsewhere")
                    enqueue(conn, "invoice", n, unique_key="invoice:42")
                    conn.commit()
                    enqueued[n] += 1
                except BaseException as exc:
                    errors.append(exc)
                    conn.rollback()

    def worker() -> None:
        while not deadline.is_set():
            process_next_job(pool, lambda job_type, payload: ran.append(payload))

    def watcher() -> None:
        while not deadline.is_set():
            most[0] = max(most[0], len(rows(backend)))

    threads = [threading.Thread(target=enqueuer, args=(n,)) for n in (0, 1)]
    threads += [threading.Thread(target=worker), threading.Thread(target=watcher)]
    for thread in threads:
        thread.start()
    deadline.wait(4)
    deadline.set()
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []
    assert min(enqueued) > 0 and len(ran) > 1, "the enqueuers raced the worker's archives"
    assert most[0] == 1, "at most one job holds the key"


def test_a_transaction_holding_the_key_enqueues_it_again_while_another_waits_for_it(
    backend: Backend,
) -> None:
    """The second enqueue of a key that the caller's own transaction holds does not wait
    for another transaction's enqueue of it, which waits for the caller's commit."""
    owner = backend.connect()
    first = enqueue(owner, "invoice", 1, unique_key="invoice:42")
    waiter_got: list[Any] = []
    with contextlib.closing(backend.connect()) as other:

        def waiter() -> None:
            waiter_got.append(enqueue(other, "invoice", 2, unique_key="invoice:42"))
            other.commit()

        waiting = threading.Thread(target=waiter)
        waiting.start()
        threading.Event().wait(0.3)  # the waiter reaches the key and waits on the owner
        again: list[Any] = []
        second = threading.Thread(
            target=lambda: again.append(enqueue(owner, "invoice", 3, unique_key="invoice:42"))
        )
        second.start()
        second.join(10)
        assert again == [first], "the owner's second enqueue returned its own job"
        owner.commit()
        owner.close()
        waiting.join(10)
    assert waiter_got == [first]
    assert [as_uuid(r[0]) for r in rows(backend)] == [first]


def test_mysql_finds_a_holder_committed_after_the_callers_snapshot(
    mysql_backend: Backend,
) -> None:
    """At REPEATABLE READ, a snapshot taken before the holder committed does not show it: the
    holder's id is read by a locking read, which sees the latest committed row."""
    mysql_backend.reset()
    with contextlib.closing(mysql_backend.connect()) as late:
        cursor = late.cursor()
        cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        late.begin()
        cursor.execute(f"SELECT COUNT(*) FROM {mysql_backend.job_table}")
        assert cursor.fetchone()[0] == 0, "the snapshot is fixed before the holder exists"
        with contextlib.closing(mysql_backend.connect()) as early:
            holder = enqueue(early, "invoice", 1, unique_key="invoice:42")
            early.commit()
        assert enqueue(late, "invoice", 2, unique_key="invoice:42") == holder
        late.commit()
    assert [as_uuid(r[0]) for r in rows(mysql_backend)] == [holder]


def test_mysql_a_turn_at_a_key_not_had_in_time_is_a_lock_wait_timeout_the_transaction_survives(
    mysql_backend: Backend,
) -> None:
    """An enqueuer waits for its turn at a key at most innodb_lock_wait_timeout, then goes
    without: its INSERT waits for the key's row as before, and a lock wait timeout (1205)
    rolls back that statement alone."""
    mysql_backend.reset()
    impatient = mysql_backend.connect()
    impatient.cursor().execute("SET SESSION innodb_lock_wait_timeout = 1")
    other = enqueue(impatient, "other", 1)
    owner = mysql_backend.connect()
    holder = enqueue(owner, "invoice", 1, unique_key="invoice:42")
    first_waiter: list[Any] = []

    def wait_for_the_owner() -> None:
        with contextlib.closing(mysql_backend.connect()) as conn:
            first_waiter.append(enqueue(conn, "invoice", 2, unique_key="invoice:42"))
            conn.commit()

    waiting = threading.Thread(target=wait_for_the_owner)
    waiting.start()
    try:
        threading.Event().wait(0.3)  # the first waiter takes its turn, waiting on the owner
        with contextlib.closing(impatient):
            with pytest.raises(Exception, match="Lock wait timeout") as raised:
                enqueue(impatient, "invoice", 3, unique_key="invoice:42")
            assert raised.value.args[0] == 1205
            impatient.commit()
    finally:
        owner.commit()
        owner.close()
        waiting.join(10)
    assert first_waiter == [holder]
    jobs = mysql_backend.query(f"SELECT job_id, job_type FROM {mysql_backend.job_table}")
    assert sorted((as_uuid(job_id), job_type) for job_id, job_type in jobs) == sorted(
        [(holder, "invoice"), (other, "other")]
    )


def test_mysql_an_enqueuer_of_a_key_never_waits_for_a_job_without_one(
    mysql_backend: Backend,
) -> None:
    """Seen in CI as a lock wait timeout: enqueuer B wrote a job with no key first (queue
    "elsewhere"), then enqueued a key and waited for its turn; enqueuer A, at its turn, met
    the key's holder just archived (its index entry still there, delete-marked), and its
    duplicate check locked the entry after the key's: B's job, when the index put the queue
    first. A waited for B, B for the turn: a cycle InnoDB cannot see, until A's lock wait
    timed out (1205). With the key first in the index, A's check never meets B's job."""
    mysql_backend.reset()
    table = mysql_backend.job_table
    with contextlib.closing(mysql_backend.connect()) as conn:
        holder = enqueue(conn, "invoice", 0, unique_key="invoice:42")
        conn.commit()
    a, b = mysql_backend.connect(), mysql_backend.connect()
    for conn in (a, b):
        conn.cursor().execute("SET SESSION innodb_lock_wait_timeout = 6")
    snapshot = mysql_backend.connect()  # keeps the holder's deleted entry from purge
    snapshot.cursor().execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
    # as the worker's archive does: the entry stays, delete-marked, until purged
    mysql_backend.execute(f"DELETE FROM {table} WHERE job_id = %s", (holder.bytes,))
    enqueue(b, "elsewhere", 1, queue="elsewhere")
    a_got: list[Any] = []
    a_errors: list[BaseException] = []

    def enqueue_a() -> None:
        try:
            a_got.append(enqueue(a, "invoice", 2, unique_key="invoice:42"))
            a.commit()
        except BaseException as exc:
            a_errors.append(exc)

    def a_waits_in_its_insert() -> bool:
        rows = mysql_backend.query(
            "SELECT trx_state FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = %s",
            (a.thread_id(),),
        )
        return rows == [("LOCK WAIT",)]

    a_thread = threading.Thread(target=enqueue_a)
    try:
        a_thread.start()
        wait_until(
            lambda: a_got or a_errors or a_waits_in_its_insert(),
            description="A enqueued, or waits in its INSERT",
        )
        b_got = enqueue(b, "invoice", 1, unique_key="invoice:42")
        b.commit()
        a_thread.join(15)
    finally:
        b.close()
        snapshot.close()
    a.close()
    assert a_errors == []
    assert a_got == [b_got] and b_got != holder, "A took the key; B found A's job"
    assert [as_uuid(r[0]) for r in rows(mysql_backend)] == [b_got]

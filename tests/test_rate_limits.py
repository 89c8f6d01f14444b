"""`rate_limit`: at most `limit` job starts of a queue in any window of `period_ms`, over
every process and thread, counted in the claim's transaction, so a claim that rolls back
(a killed process, a handler that ends its transaction) gives its start back; a worker
held back sleeps until the next start is due instead of polling."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from test_max_running import start_workers

from proletarian_di import (
    ConfigurationError,
    RateLimit,
    SchemaError,
    create_queue_worker,
    enqueue,
    process_next_job,
    worker_running,
)
from proletarian_di._engine.rates import prune_slots
from proletarian_di._store.dialects import dialect_for

from backends import Backend, Events, connection, enqueue_committed, wait_until

MODES = [pytest.param(0, id="held"), pytest.param(10_000, id="lease")]


def starts(events: Path) -> list[float]:
    """The jobs' start times (seconds), in order, from the events' lines."""
    lines = events.read_text().splitlines()
    return sorted(int(line.split()[1]) / 1e9 for line in lines if line.startswith("start "))


def most_in_a_window(times: list[float], window_s: float) -> int:
    """The most starts in any half-open window [t, t + window_s) (checking each start's
    window is enough: a busiest window can be slid right to begin at a start)."""
    return max(sum(1 for other in times if start <= other < start + window_s) for start in times)


@contextlib.contextmanager
def counted_starts(backend: Backend) -> Iterator[Callable[..., list[datetime]]]:
    """Log every start the rate limit counts: a trigger copies each slot's bucket and new
    `used_at` to a table, in the claim's transaction, so only the starts that committed are
    there. Yields the counted starts of a bucket (default: the default queue's)."""
    slots, log = f"{backend.job_table}_rate_slots", f"{backend.job_table}_rate_log"
    if backend.name == "mysql":
        statements = [
            f"CREATE TABLE {log} (bucket VARCHAR(255) NOT NULL, used_at DATETIME(6) NOT NULL)",
            f"CREATE TRIGGER {backend.job_table}_rate_logged AFTER UPDATE ON {slots} "
            f"FOR EACH ROW BEGIN IF NEW.used_at <> OLD.used_at THEN INSERT INTO {log} "
            "VALUES (NEW.bucket, NEW.used_at); END IF; END",
        ]
    else:
        statements = [
            f"CREATE TABLE {log} (bucket TEXT NOT NULL, used_at TIMESTAMPTZ NOT NULL)",
            f"CREATE FUNCTION {log}_write() RETURNS trigger LANGUAGE plpgsql AS "
            f"$$ BEGIN INSERT INTO {log} VALUES (NEW.bucket, NEW.used_at); RETURN NEW; END $$",
            f"CREATE TRIGGER rate_logged AFTER UPDATE ON {slots} FOR EACH ROW "
            f"WHEN (OLD.used_at IS DISTINCT FROM NEW.used_at) EXECUTE FUNCTION {log}_write()",
        ]
    for sql in statements:
        backend.execute(sql)
    try:
        yield lambda bucket="default": sorted(
            row[0]
            for row in backend.query(f"SELECT used_at FROM {log} WHERE bucket = %s", (bucket,))
        )
    finally:
        backend.execute(f"DROP TABLE {log}")
        if backend.name == "mysql":
            backend.execute(f"DROP TRIGGER IF EXISTS {backend.job_table}_rate_logged")
        else:
            backend.execute(f"DROP TRIGGER rate_logged ON {slots}")
            backend.execute(f"DROP FUNCTION {log}_write()")


@pytest.mark.parametrize("lease_ms", MODES)
def test_three_processes_start_at_most_the_limit_in_every_window(
    backend: Backend, tmp_path: Path, lease_ms: int
) -> None:
    """15 jobs, 5 starts a second, three processes of three threads each: every window of a
    second holds at most 5 of the starts counted (by the database's clock), each job
    started once, and the 15 take two periods and a bit, although the workers poll only
    every 5 seconds."""
    enqueue_committed(backend, *[("t", n) for n in range(15)])
    events = tmp_path / "events"
    with counted_starts(backend) as counted:
        processes = start_workers(backend, events, 3, None, 3, "0", 5, 1000, lease_ms)
        outputs = [p.communicate(timeout=120) for p in processes]
        for process, (_, errors) in zip(processes, outputs, strict=True):
            assert process.returncode == 0, errors
        times = [at.timestamp() for at in counted()]
    assert sum(int(out) for out, _ in outputs) == 15
    assert len(starts(events)) == len(times) == 15, "each start counted once, none rolled back"
    assert most_in_a_window(times, 1.0) == 5, "never more than 5 a second, and 5 at times"
    assert times[-1] - times[0] >= 2.0, "15 starts at 5 a second span two periods at least"
    assert times[-1] - times[0] < 12.0, "held back, a worker sleeps until the next start"


def test_a_killed_worker_does_not_use_up_the_window(backend: Backend, tmp_path: Path) -> None:
    """Held mode, one start a minute: a process killed while it runs its job gives the start
    back with its transaction, so the job runs again elsewhere at once, not a minute later."""
    (_job_id,) = enqueue_committed(backend, ("t", "stuck"))
    events = tmp_path / "events"
    [stuck] = start_workers(backend, events, 1, None, 1, "forever", 1, 60_000, 0)
    try:
        wait_until(lambda: events.exists() and "start" in events.read_text(), timeout=30)
        stuck.send_signal(signal.SIGKILL)
        stuck.wait(10)
    finally:
        stuck.kill()
    ran: list[Any] = []
    rate = {"rate_limit": RateLimit(1, 60_000)}
    wait_until(
        lambda: process_next_job(backend.pool(1), lambda t, p: ran.append(p), **rate),
        timeout=15,
        description="the killed process's job runs again within the minute",
    )
    assert ran == ["stuck"]
    assert backend.archived() == [("t", "success", 1)]


def test_a_handler_that_ends_its_transaction_gives_its_start_back(backend: Backend) -> None:
    """An advanced handler that rolls back the job's transaction rolls back its start too:
    the next job starts within the same minute."""
    enqueue_committed(backend, ("rude", None), ("polite", None))
    ran: list[str] = []

    def handler(job: Any) -> None:
        ran.append(job.job_type)
        if job.job_type == "rude":
            job.connection.rollback()

    options = {"rate_limit": RateLimit(1, 60_000), "handler_fn_mode": "advanced"}
    pool = backend.pool(2)
    assert process_next_job(pool, handler, **options) is False
    assert process_next_job(pool, handler, **options) is True
    assert ran == ["rude", "polite"]
    assert process_next_job(pool, handler, **options) is None, "the minute's start is spent"


@pytest.mark.parametrize("lease_ms", MODES)
def test_a_held_back_worker_does_not_poll(backend: Backend, lease_ms: int) -> None:
    """One start every 10 seconds, polling every 20 ms, three threads: in the second after a
    start, with ten new jobs' wake-ups meanwhile, the worker claims nothing (polling, it
    would claim 150 times)."""
    enqueue_committed(backend, *[("t", n) for n in range(3)])
    events, ran = Events(), []
    worker = create_queue_worker(
        backend.pool(4),
        lambda t, p: ran.append(p),
        worker_threads=3,
        polling_interval_ms=20,
        rate_limit=RateLimit(1, 10_000),
        lease_ms=lease_ms or None,
        log=events,
    )
    with worker_running(worker):
        wait_until(lambda: len(ran) == 1, timeout=10, description="one ran")
        time.sleep(0.2)  # the other threads find the slot taken
        before = len(events.named("polling_for_jobs"))
        for n in range(10):  # wake-ups of new jobs change nothing
            enqueue_committed(backend, ("late", n))
        time.sleep(1.0)
        polls = len(events.named("polling_for_jobs")) - before
        assert len(ran) == 1
    assert polls == 0, f"{polls} claims while held back"


def test_starts_on_both_threads_of_one_worker_stay_within_the_limit(backend: Backend) -> None:
    """In process: 3 starts per 600 ms, four threads and nine jobs: the third window's jobs
    cannot start before two periods have passed."""
    enqueue_committed(backend, *[("t", n) for n in range(9)])
    times: list[float] = []
    lock = threading.Lock()

    def handler(job_type: str, payload: Any) -> None:
        with lock:
            times.append(time.monotonic())

    worker = create_queue_worker(
        backend.pool(5),
        handler,
        worker_threads=4,
        polling_interval_ms=5_000,
        rate_limit=RateLimit(3, 600),
    )
    with worker_running(worker):
        wait_until(lambda: len(times) == 9, timeout=20, description="nine ran")
    times.sort()
    assert most_in_a_window(times, 0.55) <= 3
    assert times[-1] - times[0] >= 1.15


@pytest.mark.parametrize("lease_ms", MODES)
def test_each_group_key_starts_at_most_its_limit_and_a_held_group_holds_no_other_back(
    backend: Backend, lease_ms: int
) -> None:
    """By group key, 2 starts a second each: group a's six jobs take three seconds, every
    window of a second holding two of a's starts at most, while groups b and c, enqueued
    after all of a's, run within their own limits meanwhile rather than after a."""
    with connection(backend) as conn:
        for group, count in (("a", 6), ("b", 3), ("c", 3)):
            for n in range(count):
                enqueue(conn, "work", f"{group}-{n}", group_key=group)
        conn.commit()
    ran: dict[str, list[float]] = {"a": [], "b": [], "c": []}
    lock = threading.Lock()

    def handler(job_type: str, payload: str) -> None:
        with lock:
            ran[payload[0]].append(time.monotonic())

    worker = create_queue_worker(
        backend.pool(4),
        handler,
        worker_threads=3,
        fair=True,
        polling_interval_ms=5_000,
        rate_limit=RateLimit(2, 1000, by="group_key"),
        lease_ms=lease_ms or None,
    )
    with counted_starts(backend) as counted, worker_running(worker):
        wait_until(lambda: len(ran["a"]) == 6, timeout=30, description="a's six ran")
        by_group = {g: [at.timestamp() for at in counted(f"default\x1f{g}")] for g in "abc"}
    assert [len(by_group[g]) for g in "abc"] == [6, 3, 3], "each start counted once"
    for group in "abc":
        assert most_in_a_window(by_group[group], 1.0) == 2, group
    assert by_group["a"][-1] - by_group["a"][0] >= 2.0, "six at two a second span 2 s"
    assert max(ran["b"] + ran["c"]) < ran["a"][-1], "b and c were not held behind a"


def test_a_rate_limit_by_group_key_implies_fair_claims(backend: Backend) -> None:
    """Without `fair=True`, a limit by group key takes turns across the groups all the same:
    group a's first job, held back for an hour after a's first start, does not hold b's
    job back behind it."""
    with connection(backend) as conn:
        for group in ("a", "a", "b"):
            enqueue(conn, "work", group, group_key=group)
        conn.commit()
    ran: list[str] = []
    worker = create_queue_worker(
        backend.pool(2),
        lambda job_type, payload: ran.append(payload),
        polling_interval_ms=50,
        rate_limit=RateLimit(1, 3_600_000, by="group_key"),
    )
    assert worker.options.fair is True
    with worker_running(worker):
        wait_until(lambda: sorted(ran) == ["a", "b"], timeout=15, description="a and b ran")
    assert backend.query(f"SELECT group_key FROM {backend.job_table}") == [("a",)]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: RateLimit(0, 1000), "limit must be an int from 1 to 10,000"),
        (lambda: RateLimit(5, 0), "period_ms must be an int from 1"),
        (lambda: RateLimit(5, 1.5), "period_ms must be an int"),
        (lambda: RateLimit(5, 1000, by="tenant"), "by must be 'queue' or 'group_key'"),
    ],
)
def test_bad_rate_limits_are_clear_errors(make, message):
    with pytest.raises(ConfigurationError, match=message):
        make()


def test_rate_limit_refuses_what_it_cannot_count(backend: Backend) -> None:
    with pytest.raises(ConfigurationError, match="rate_limit must be a RateLimit"):
        create_queue_worker(backend.pool(1), print, rate_limit=5)
    with pytest.raises(ConfigurationError, match="rate_limit and batch_size > 1"):
        create_queue_worker(backend.pool(1), print, rate_limit=RateLimit(5, 100), batch_size=2)


def test_a_schema_without_the_slots_table_is_named(backend: Backend) -> None:
    backend.execute(f"DROP TABLE {backend.job_table}_rate_slots")
    try:
        with pytest.raises(SchemaError, match=r"rate_limit needs the .*_rate_slots table"):
            process_next_job(backend.pool(1), print, rate_limit=RateLimit(1, 1000))
    finally:
        backend.recreate()


@pytest.mark.parametrize("lease_ms", MODES)
def test_a_period_changed_between_restarts_governs_the_next_start(backend, pool, lease_ms):
    """The slots keep the period they were written with only until a worker with another
    one starts: an hour's limit, then a second's, and the next job runs within seconds."""
    lease = {"lease_ms": lease_ms} if lease_ms else {}
    table = f"{backend.job_table}_rate_slots"
    ran: list[Any] = []
    hourly = create_queue_worker(
        pool, lambda t, p: ran.append(p), queue="p", rate_limit=RateLimit(1, 3_600_000), **lease
    )
    with worker_running(hourly):
        enqueue_committed(backend, ("call", 1), queue="p")
        wait_until(lambda: ran == [1], description="the hour's start")
    assert backend.query(f"SELECT period_ms FROM {table} WHERE bucket = 'p'") == [(3_600_000,)]
    enqueue_committed(backend, ("call", 2), queue="p")
    secondly = create_queue_worker(
        pool, lambda t, p: ran.append(p), queue="p", rate_limit=RateLimit(1, 1_000), **lease
    )
    with worker_running(secondly):
        wait_until(lambda: ran == [1, 2], timeout=15, description="a start a second")
    assert backend.query(f"SELECT period_ms FROM {table} WHERE bucket = 'p'") == [(1_000,)]


def hold_back_groups(backend: Backend, groups: list[str], period_ms: int) -> None:
    """Enqueue two jobs of each group and stamp each group's one slot now, as if a first
    round had started one job of each: every group is held back for `period_ms`."""
    now = "UTC_TIMESTAMP(6)" if backend.name == "mysql" else "statement_timestamp()"
    table = f"{backend.job_table}_rate_slots"
    with connection(backend) as conn:
        for group in groups:
            for n in range(2):
                enqueue(conn, "work", f"{group}-{n}", group_key=group)
        cursor = conn.cursor()
        for start in range(0, len(groups), 500):
            chunk = groups[start : start + 500]
            cursor.execute(
                f"INSERT INTO {table} (bucket, slot, used_at, period_ms) VALUES "
                + ", ".join([f"(%s, 0, {now}, %s)"] * len(chunk)),
                [v for group in chunk for v in (f"default\x1f{group}", period_ms)],
            )
        conn.commit()


def a_free_group_starts_behind_held_ones(backend: Backend, count: int, lease_ms: int) -> None:
    """`count` groups held back for an hour, then one job of a new group: it starts while
    they are held, however many they are, and none of theirs does."""
    groups = [f"g{n:05}" for n in range(count)]
    hold_back_groups(backend, groups, 3_600_000)
    ran: list[str] = []
    worker = create_queue_worker(
        backend.pool(3),
        lambda job_type, payload: ran.append(payload),
        worker_threads=2,
        polling_interval_ms=200,
        rate_limit=RateLimit(1, 3_600_000, by="group_key"),
        lease_ms=lease_ms or None,
    )
    with worker_running(worker):
        time.sleep(0.5)  # the held-back groups are met first
        with connection(backend) as conn:
            enqueue(conn, "work", "new-0", group_key="new")
            conn.commit()
        wait_until(lambda: ran == ["new-0"], timeout=30, description="the new group's job")
    held = backend.query(f"SELECT COUNT(*) FROM {backend.job_table} WHERE group_key <> 'new'")
    assert held == [(2 * count,)], "no held-back group started"


@pytest.mark.parametrize("lease_ms", MODES)
@pytest.mark.parametrize("count", [80, 1_000])
def test_a_group_with_a_free_slot_starts_whatever_the_number_held_back(
    backend: Backend, lease_ms: int, count: int
) -> None:
    a_free_group_starts_behind_held_ones(backend, count, lease_ms)


@pytest.mark.slow
@pytest.mark.parametrize("lease_ms", MODES)
def test_a_group_with_a_free_slot_starts_behind_ten_thousand_held_back(
    backend: Backend, lease_ms: int
) -> None:
    a_free_group_starts_behind_held_ones(backend, 10_000, lease_ms)


@pytest.mark.parametrize("by", ["queue", "group_key"])
@pytest.mark.parametrize("lease_ms", MODES)
def test_a_claim_of_a_paused_queue_gives_its_start_back(
    backend: Backend, lease_ms: int, by: str
) -> None:
    """A start an hour, the queue paused: the workers' claims give the job back unrun, and
    its slot with it (no start counted), so once resumed the job runs at once, not an hour
    later."""
    from test_pause import pause, resume

    pause(backend)
    enqueue_committed(backend, ("t", 1), group_key="tenant" if by == "group_key" else None)
    bucket = "default\x1ftenant" if by == "group_key" else "default"
    ran: list[Any] = []
    worker = create_queue_worker(
        backend.pool(2),
        lambda job_type, payload: ran.append(payload),
        polling_interval_ms=50,
        rate_limit=RateLimit(1, 3_600_000, by=by),  # type: ignore[arg-type]
        lease_ms=lease_ms or None,
    )
    with counted_starts(backend) as counted, worker_running(worker):
        wait_until(lambda: worker._pauses.paused, description="a claim read the pause")
        time.sleep(0.3)  # a few more claims of the paused queue
        assert counted(bucket) == [], "no start counted while paused"
        resume(backend)
        wait_until(lambda: ran == [1], timeout=15, description="the job, once resumed")
        wait_until(lambda: len(counted(bucket)) == 1, description="its start, committed")


def group_slots(backend: Backend) -> list[str]:
    """The group keys that have rate slots written, in order."""
    rows = backend.query(f"SELECT DISTINCT bucket FROM {backend.job_table}_rate_slots")
    return sorted(bucket.partition("\x1f")[2] for (bucket,) in rows if "\x1f" in bucket)


@pytest.mark.parametrize("lease_ms", MODES)
def test_a_worker_prunes_the_slots_of_group_keys_idle_for_a_period(
    backend: Backend, lease_ms: int
) -> None:
    """Five tenants' jobs ran under a limit of 200 ms; a worker's first beat (and then one a
    minute) deletes their slots once they are idle for longer than that, but not a key's
    whose last start is within its period. The table no longer only grows."""
    enqueue_committed(backend, *[("t", group) for group in "abcde"])
    with connection(backend) as conn:
        for group in "abcde":
            enqueue(conn, "t", group, group_key=group)
        conn.commit()
    ran: list[str] = []
    options: dict[str, Any] = {
        "polling_interval_ms": 50,
        "rate_limit": RateLimit(1, 200, by="group_key"),
        "lease_ms": lease_ms or None,
    }
    with worker_running(
        create_queue_worker(backend.pool(2), lambda t, p: ran.append(p), **options)
    ):
        wait_until(lambda: sorted(ran) == sorted("abcde" * 2), description="every job ran")
    assert group_slots(backend) == ["", "a", "b", "c", "d", "e"]
    hold_back_groups(backend, ["busy"], 3_600_000)
    time.sleep(0.3)
    with worker_running(create_queue_worker(backend.pool(2), print, **options)):
        wait_until(lambda: group_slots(backend) == ["busy"], description="the idle keys' slots")


@pytest.mark.parametrize("lease_ms", MODES)
def test_pruning_all_along_never_allows_a_start_more_in_a_window(
    backend: Backend, lease_ms: int
) -> None:
    """One start per 300 ms by group key, three groups whose jobs fall due in bursts, two
    workers of three threads, and a prune of the idle keys' slots as fast as it can go: the
    slots are deleted between bursts and written again, and yet no window of 300 ms holds
    two starts of one group (by the database's clock)."""
    start = datetime.now(timezone.utc)
    with connection(backend) as conn:
        for group in "abc":
            for offset_s in (0, 0, 0, 0.7, 0.7, 1.4, 1.4, 1.4):
                due = start + timedelta(seconds=offset_s)
                enqueue(conn, "t", group, group_key=group, process_at=due)
        conn.commit()
    ran: list[str] = []
    lock, pruning, deleted = threading.Lock(), threading.Event(), [0]

    def prune_all_along() -> None:
        with connection(backend) as conn:
            dialect = dialect_for(conn, backend.job_table, backend.archived_job_table)
            while not pruning.is_set():
                deleted[0] += prune_slots(conn, dialect)
                conn.commit()

    def handler(job_type: str, payload: str) -> None:
        with lock:
            ran.append(payload)

    workers = [
        create_queue_worker(
            backend.pool(4),
            handler,
            worker_threads=3,
            polling_interval_ms=50,
            rate_limit=RateLimit(1, 300, by="group_key"),
            lease_ms=lease_ms or None,
        )
        for _ in range(2)
    ]
    pruner = threading.Thread(target=prune_all_along)
    with counted_starts(backend) as counted, worker_running(workers[0]):
        with worker_running(workers[1]):
            pruner.start()
            try:
                wait_until(lambda: len(ran) == 24, timeout=60, description="every job ran")
            finally:
                pruning.set()
                pruner.join()
        by_group = {g: [at.timestamp() for at in counted(f"default\x1f{g}")] for g in "abc"}
    assert deleted[0] > 0, "the prune deleted slots as it went"
    for group in "abc":
        assert len(by_group[group]) == 8, group
        assert most_in_a_window(by_group[group], 0.3) == 1, group


def test_a_prune_keeps_a_slot_a_claim_stamps_meanwhile(backend: Backend) -> None:
    """The prune finds a key idle, but a claim's transaction has just stamped its slot: the
    prune's delete waits for it, sees the new start, and keeps the slot (deleted, the key
    would start again on a fresh slot inside the window)."""
    hold_back_groups(backend, ["x"], 1_000)
    table = f"{backend.job_table}_rate_slots"
    backend.execute(f"UPDATE {table} SET used_at = '1970-01-02 00:00:00'")
    now = "UTC_TIMESTAMP(6)" if backend.name == "mysql" else "statement_timestamp()"
    deleted: list[int] = []
    with connection(backend) as claim, connection(backend) as pruner:
        claim.cursor().execute(f"UPDATE {table} SET used_at = {now}")
        dialect = dialect_for(pruner, backend.job_table, backend.archived_job_table)
        thread = threading.Thread(target=lambda: deleted.append(prune_slots(pruner, dialect)))
        thread.start()
        time.sleep(0.5)  # the prune has read the slot as idle, and waits on its lock
        claim.commit()
        thread.join(10)
        pruner.commit()
    assert deleted == [0]
    assert len(backend.query(f"SELECT slot FROM {table} WHERE bucket = %s", ("default\x1fx",))) == 1

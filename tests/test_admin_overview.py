"""`admin.overview` and `admin.throughput` on both databases: every waiting state counted
once, a running job told apart, the last day's outcomes, and the archive bucketed by
`finished_at`."""

from __future__ import annotations

import contextlib
import json
import threading
from datetime import datetime, timedelta, timezone
from typing import Any

import pymysql
import pytest

from proletarian_di import ArgumentTypeError, RetrySpec, create_queue_worker, process_next_job
from proletarian_di.admin import (
    HourlyOutcomes,
    Tables,
    overview,
    pause_queue,
    queue_stats,
    retry_failed,
    throughput,
)

from backends import committed, connection, enqueue_committed

NOW = datetime(2030, 5, 1, 12, 0, tzinfo=timezone.utc)


def boom(job_type: str, payload: Any) -> None:
    raise RuntimeError("boom")


def archive_at(backend: Any, queue: str, status: str, finished_at: datetime) -> None:
    """Enqueue a job and move it to the archive as finished at `finished_at`."""
    [job_id] = enqueue_committed(backend, ("done", None), queue=queue)
    with connection(backend) as conn:
        key = job_id.bytes if backend.name == "mysql" else job_id
        at = finished_at.replace(tzinfo=None) if backend.name == "mysql" else finished_at
        cursor = conn.cursor()
        cursor.execute(
            f"INSERT INTO {backend.archived_job_table} (job_id, queue, job_type, payload, "
            "attempts, enqueued_at, process_at, status, finished_at) SELECT job_id, queue, "
            f"job_type, payload, 1, enqueued_at, process_at, %s, %s FROM {backend.job_table} "
            "WHERE job_id = %s",
            (status, at, key),
        )
        cursor.execute(f"DELETE FROM {backend.job_table} WHERE job_id = %s", (key,))
        conn.commit()


def test_overview_counts_each_waiting_job_in_one_state(backend, pool):
    enqueue_committed(backend, ("a", 1), ("a", 2), queue="mail")
    enqueue_committed(backend, ("later", None), queue="mail", process_in=timedelta(hours=1))
    enqueue_committed(backend, ("flaky", None), queue="flaky")
    retry = {"retry_strategy_fn": lambda job, exc: RetrySpec(retries=2, delays=[3_600_000])}
    assert process_next_job(pool, boom, queue="flaky", **retry) is False
    committed(backend, pause_queue, "idle")

    with connection(backend) as conn:
        queues = {item.queue: item for item in overview(conn)}
    assert set(queues) == {"mail", "flaky", "idle"}
    mail, flaky, idle = queues["mail"], queues["flaky"], queues["idle"]
    assert (mail.queued, mail.scheduled, mail.retrying, mail.running) == (2, 1, 0, 0)
    assert (flaky.queued, flaky.scheduled, flaky.retrying, flaky.running) == (0, 0, 1, 0)
    assert mail.oldest_due is not None and flaky.oldest_due is None
    assert idle.paused and not mail.paused
    assert idle.as_dict()["oldest_due_seconds"] is None


def test_overview_moves_a_running_job_out_of_its_waiting_state(backend, pool):
    """The row a held-mode worker runs is told apart, by the overview and by `stats`."""
    started, release = threading.Event(), threading.Event()

    def slow(job_type: str, payload: Any) -> None:
        started.set()
        release.wait(20)

    enqueue_committed(backend, ("slow", None), ("slow", None), queue="slow")
    worker = create_queue_worker(pool, slow, queue="slow", polling_interval_ms=20)
    worker.start()
    try:
        assert started.wait(10)
        with connection(backend) as conn:
            [item] = overview(conn)
            conn.rollback()
            [stats] = queue_stats(conn)
        assert (item.queue, item.queued, item.running) == ("slow", 1, 1)
        assert (stats.queue, stats.due, stats.running) == ("slow", 2, 1)
        assert stats.oldest_due is not None
    finally:
        release.set()
        worker.stop()


def test_overview_counts_outcomes_of_the_last_day_only(backend):
    now = datetime.now(timezone.utc)
    archive_at(backend, "mail", "success", now - timedelta(hours=2))
    archive_at(backend, "mail", "failure", now - timedelta(hours=23))
    archive_at(backend, "mail", "failure", now - timedelta(hours=25))
    archive_at(backend, "mail", "cancelled", now - timedelta(hours=1))
    with connection(backend) as conn:
        [mail] = overview(conn)
    assert (mail.succeeded_last_day, mail.failed_last_day) == (1, 1)
    assert (mail.queued, mail.running) == (0, 0)


def test_overview_gives_each_queue_its_last_day_hour_by_hour(backend):
    now = NOW + timedelta(minutes=20)
    since = NOW - timedelta(hours=23)  # the current clock hour and the 23 before it
    archive_at(backend, "mail", "success", since)
    archive_at(backend, "mail", "success", since + timedelta(hours=1, microseconds=-1))
    archive_at(backend, "mail", "failure", since + timedelta(hours=1))
    archive_at(backend, "mail", "success", NOW + timedelta(minutes=10))
    archive_at(backend, "mail", "success", now + timedelta(minutes=1))  # a clock ahead: last hour
    archive_at(backend, "mail", "success", since - timedelta(microseconds=1))  # before the day
    archive_at(backend, "other", "failure", NOW - timedelta(hours=5, minutes=59))
    committed(backend, pause_queue, "idle")
    with connection(backend) as conn:
        queues = {item.queue: item for item in overview(conn, now=now)}
    hours = [since + timedelta(hours=n) for n in range(24)]
    for item in queues.values():
        assert [bucket.start for bucket in item.last_day] == hours
    mail = {n: (b.succeeded, b.failed) for n, b in enumerate(queues["mail"].last_day)}
    assert {n: counts for n, counts in mail.items() if counts != (0, 0)} == {
        0: (2, 0),
        1: (0, 1),
        23: (2, 0),
    }
    assert (queues["mail"].succeeded_last_day, queues["mail"].failed_last_day) == (4, 1)
    other = [(b.succeeded, b.failed) for b in queues["other"].last_day]
    assert other[17] == (0, 1) and sum(map(sum, other)) == 1
    assert all((b.succeeded, b.failed) == (0, 0) for b in queues["idle"].last_day)
    as_json = json.loads(json.dumps(queues["mail"].as_dict()))
    assert as_json["last_day"][0] == {"start": since.isoformat(), "succeeded": 2, "failed": 0}


def outcomes_of(conn: Any, now: datetime, kept: HourlyOutcomes | None = None) -> dict:
    """{queue: [(succeeded, failed) per hour]} of an overview, with kept hours or without."""
    return {
        item.queue: [(b.succeeded, b.failed) for b in item.last_day]
        for item in overview(conn, now=now, outcomes=kept)
    }


def test_kept_hours_are_not_read_again_while_their_row_count_stands(backend):
    archive_at(backend, "mail", "success", NOW - timedelta(hours=3))
    archive_at(backend, "mail", "success", NOW + timedelta(minutes=5))
    kept = HourlyOutcomes()
    with connection(backend) as conn:
        first = outcomes_of(conn, NOW + timedelta(minutes=30), kept)
        conn.rollback()
        assert first["mail"][20] == (1, 0) and first["mail"][23] == (1, 0)
        with conn.cursor() as cursor:  # an edit that keeps the count: only a read would see it
            cursor.execute(f"UPDATE {backend.archived_job_table} SET status = 'failure'")
        conn.commit()
        again = outcomes_of(conn, NOW + timedelta(minutes=31), kept)
        fresh = outcomes_of(conn, NOW + timedelta(minutes=31))
    assert again["mail"][20] == (1, 0), "an hour that is over was read again"
    assert again["mail"][23] == (0, 1), "the current hour is read on every call"
    assert fresh["mail"][20] == (0, 1) and fresh["mail"][23] == (0, 1)


def test_kept_hours_are_read_again_when_a_retry_or_a_late_job_changes_them(backend, pool):
    finished = NOW - timedelta(hours=2)
    archive_at(backend, "mail", "failure", finished)
    archive_at(backend, "mail", "success", finished)
    kept = HourlyOutcomes()
    now = NOW + timedelta(minutes=30)
    with connection(backend) as conn:
        assert outcomes_of(conn, now, kept)["mail"][21] == (1, 1)
        conn.rollback()
        assert retry_failed(conn, queue="mail") == 1
        conn.commit()
        assert outcomes_of(conn, now, kept)["mail"][21] == (1, 0)
        conn.rollback()
    archive_at(backend, "mail", "success", finished)  # a worker whose clock lags
    with connection(backend) as conn:
        assert outcomes_of(conn, now, kept)["mail"][21] == (2, 0)
        conn.rollback()
        assert outcomes_of(conn, now, kept) == outcomes_of(conn, now)


def test_kept_hours_follow_the_clock_into_the_next_hours(backend):
    for minutes in (-90, -30, 15, 45, 75, 100):
        archive_at(backend, "mail", "success", NOW + timedelta(minutes=minutes))
    kept = HourlyOutcomes()
    with connection(backend) as conn:
        for minutes in (20, 50, 61, 62, 90, 125, 24 * 60 + 30):
            now = NOW + timedelta(minutes=minutes)
            assert outcomes_of(conn, now, kept) == outcomes_of(conn, now), minutes
            conn.rollback()


def test_kept_hours_belong_to_one_archive(backend):
    kept = HourlyOutcomes()
    with connection(backend) as conn:
        overview(conn, now=NOW, outcomes=kept)
        conn.rollback()
        other = Tables(backend.job_table, backend.archived_job_table + "_other")
        with pytest.raises(ArgumentTypeError, match="keep one per table"):
            overview(conn, now=NOW, outcomes=kept, tables=other)


def test_throughput_buckets_the_archive_by_finished_at(backend):
    archive_at(backend, "mail", "success", NOW - timedelta(minutes=30))
    archive_at(backend, "mail", "success", NOW - timedelta(minutes=31))
    archive_at(backend, "mail", "failure", NOW - timedelta(hours=3, minutes=1))
    archive_at(backend, "other", "success", NOW - timedelta(hours=5, minutes=59))
    archive_at(backend, "mail", "success", NOW - timedelta(hours=7))  # before the window
    archive_at(backend, "mail", "success", NOW + timedelta(minutes=1))  # after it
    with connection(backend) as conn:
        buckets = throughput(conn, hours=6, buckets=6, now=NOW)
        mail = throughput(conn, hours=6, buckets=3, queue="mail", now=NOW)
    assert [b.start for b in buckets] == [NOW - timedelta(hours=6 - n) for n in range(6)]
    assert [(b.succeeded, b.failed) for b in buckets] == [
        (1, 0),
        (0, 0),
        (0, 1),
        (0, 0),
        (0, 0),
        (2, 0),
    ]
    assert [(b.succeeded, b.failed) for b in mail] == [(0, 0), (0, 1), (2, 0)]


@pytest.mark.parametrize("option", [{"hours": 0}, {"buckets": -1}, {"hours": 1.5}])
def test_throughput_refuses_bad_windows(backend, option):
    with connection(backend) as conn, pytest.raises(ArgumentTypeError, match="positive int"):
        throughput(conn, **option)


def test_overview_without_the_process_privilege_still_finds_a_running_job_on_mysql(
    mysql_backend,
):
    """A reader that may not see InnoDB's transactions (no PROCESS privilege) cannot tell that
    nobody holds a row, so it probes: the running job is still told apart."""
    backend = mysql_backend
    backend.reset()
    user, password = "proletarian_test_reader", "R3ader-Pw_7"
    with connection(backend) as conn:
        cursor = conn.cursor()
        cursor.execute(f"CREATE USER IF NOT EXISTS '{user}'@'%%' IDENTIFIED BY %s", (password,))
        cursor.execute(f"GRANT SELECT ON proletarian.* TO '{user}'@'%'")
    options = {**backend.options, "user": user, "password": password}
    options.pop("database", None)
    started, release = threading.Event(), threading.Event()

    def slow(job_type: str, payload: Any) -> None:
        started.set()
        release.wait(20)

    enqueue_committed(backend, ("slow", None), ("slow", None), queue="slow")
    worker = create_queue_worker(backend.pool(2), slow, queue="slow", polling_interval_ms=20)
    worker.start()
    try:
        assert started.wait(10)
        with contextlib.closing(pymysql.connect(**options)) as reader:
            with pytest.raises(pymysql.err.OperationalError):
                reader.cursor().execute("SELECT COUNT(*) FROM information_schema.INNODB_TRX")
            [item] = overview(reader)
        assert (item.queue, item.queued, item.running) == ("slow", 1, 1)
    finally:
        release.set()
        worker.stop()


def test_the_oldest_due_job_is_found_under_every_priority(backend):
    """The oldest due wait looks at every priority level of the queue's claim order, not
    only at its first (MySQL reads the head of each level from the claim index)."""
    enqueued = datetime.now(timezone.utc)
    enqueue_committed(backend, ("old", None), queue="mixed", priority=0)
    enqueue_committed(
        backend, ("urgent", None), queue="mixed", priority=5, process_in=timedelta(minutes=5)
    )
    enqueue_committed(
        backend, ("later", None), queue="mixed", priority=9, process_in=timedelta(hours=1)
    )
    enqueue_committed(backend, ("future", None), queue="idle", process_in=timedelta(hours=1))
    now = enqueued + timedelta(minutes=10)
    with connection(backend) as conn:
        items = {item.queue: item for item in overview(conn, now=now)}
        conn.rollback()
        stats = {row.queue: row for row in queue_stats(conn, now=now)}
    for found in (items["mixed"].oldest_due, stats["mixed"].oldest_due):
        assert found is not None
        assert timedelta(minutes=10) - timedelta(seconds=5) <= found <= timedelta(minutes=10)
    assert items["idle"].oldest_due is None and stats["idle"].oldest_due is None
    assert (stats["mixed"].due, stats["mixed"].scheduled) == (2, 1)

"""The outcomes table (schema step "hourly_outcomes"), on both databases: workers sum up the
archive's hours that are over, the overview and `stats` read those sums instead of a day of
the archive, and a retry or a purge of archived jobs drops the hours it changes."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from test_admin_overview import archive_at

from proletarian_di import create_queue_worker
from proletarian_di._store.dialects import dialect_of
from proletarian_di._store.outcomes import SUM_UP_AFTER, TOTAL, first_hour, sum_up
from proletarian_di.admin import Tables, delete_archived, overview, queue_stats, retry_failed
from proletarian_di.schema import outcomes_table

from backends import connection, wait_until

HOUR = timedelta(hours=1)


def hour_of(at: datetime) -> datetime:
    return at.replace(minute=0, second=0, microsecond=0)


def sum_up_all(backend: Any, now: datetime) -> list[datetime]:
    """Sum up every missing hour of the last day, as workers' beats do one by one."""
    summed = []
    with connection(backend) as conn:
        dialect = dialect_of(conn, Tables(backend.job_table, backend.archived_job_table))
        while (hour := sum_up(conn, dialect, now)) is not None:
            conn.commit()
            summed.append(hour)
        conn.commit()
    return summed


def sums(backend: Any) -> dict[tuple[datetime, str], tuple[int, int, int]]:
    """The outcomes table: (hour, queue) -> (succeeded, failed, archived)."""
    rows = backend.query(
        f"SELECT hour, queue, succeeded, failed, archived FROM {outcomes_table(backend.job_table)}"
    )
    return {
        (utc(at), queue): (int(ok), int(failed), int(archived))
        for at, queue, ok, failed, archived in rows
    }


def utc(at: datetime) -> datetime:
    return at.replace(tzinfo=timezone.utc) if at.tzinfo is None else at.astimezone(timezone.utc)


def last_day(backend: Any, now: datetime) -> dict[str, list[tuple[int, int]]]:
    with connection(backend) as conn:
        return {
            item.queue: [(bucket.succeeded, bucket.failed) for bucket in item.last_day]
            for item in overview(conn, now=now)
        }


@pytest.fixture
def now() -> datetime:
    """A time well inside its clock hour, so that the last hour is summed up too."""
    at = datetime.now(timezone.utc)
    return hour_of(at) + SUM_UP_AFTER + timedelta(minutes=10) if at.minute < 20 else at


def test_every_hour_of_the_last_day_is_summed_up_once_and_the_overview_reads_the_sums(backend, now):
    three, five = hour_of(now) - 3 * HOUR, hour_of(now) - 5 * HOUR
    archive_at(backend, "mail", "success", three + timedelta(minutes=1))
    archive_at(backend, "mail", "failure", three + timedelta(minutes=59))
    archive_at(backend, "sms", "success", five + timedelta(minutes=30))
    archive_at(backend, "mail", "cancelled", five)
    archive_at(backend, "mail", "success", now - timedelta(seconds=1))  # the current hour

    summed = sum_up_all(backend, now)
    assert summed == [hour_of(now) - n * HOUR for n in range(1, 24)], "newest first, 23 hours"
    assert sum_up_all(backend, now) == []
    table = sums(backend)
    assert table[(three, "mail")] == (1, 1, 2)
    assert table[(five, "sms")] == (1, 0, 1)
    assert table[(five, "mail")] == (0, 0, 1)  # a cancelled job: counted, neither outcome
    assert table[(five, TOTAL)] == (0, 0, 2)
    assert table[(hour_of(now) - HOUR, TOTAL)] == (0, 0, 0)
    assert len([key for key in table if key[1] == TOTAL]) == 23

    expected = last_day(backend, now)
    assert expected["mail"][20] == (1, 1) and expected["sms"][18] == (1, 0)
    assert expected["mail"][23] == (1, 0)
    # The summed hours are what is read: rows changed behind their back do not show.
    backend.execute(f"UPDATE {backend.archived_job_table} SET status = 'failure'")
    read = last_day(backend, now)
    assert read["mail"][20] == (1, 1) and read["sms"][18] == (1, 0)
    assert read["mail"][23] == (0, 1), "the current hour is read from the archive"
    with connection(backend) as conn:
        stats = {row.queue: row for row in queue_stats(conn, now=now)}
    assert (stats["mail"].succeeded_last_day, stats["mail"].failed_last_day) == (1, 2)
    assert (stats["mail"].succeeded_last_hour, stats["mail"].failed_last_hour) == (0, 1)
    assert (stats["sms"].succeeded_last_day, stats["sms"].failed_last_day) == (1, 0)


def test_an_hour_not_over_long_enough_is_not_summed_up(backend):
    at = hour_of(datetime.now(timezone.utc)) + SUM_UP_AFTER - timedelta(seconds=1)
    archive_at(backend, "mail", "success", at - timedelta(minutes=30))
    summed = sum_up_all(backend, at)
    assert summed[0] == hour_of(at) - 2 * HOUR, "the hour just over waits"
    assert last_day(backend, at)["mail"][22] == (1, 0)


def test_a_retry_or_a_purge_drops_the_hours_it_changes_and_they_are_summed_again(backend, now):
    three, five = hour_of(now) - 3 * HOUR, hour_of(now) - 5 * HOUR
    archive_at(backend, "mail", "failure", three + timedelta(minutes=5))
    archive_at(backend, "mail", "success", three + timedelta(minutes=6))
    archive_at(backend, "old", "success", five + timedelta(minutes=5))
    sum_up_all(backend, now)
    assert last_day(backend, now)["mail"][20] == (1, 1)

    with connection(backend) as conn:
        assert retry_failed(conn, queue="mail") == 1
        conn.commit()
    table = sums(backend)
    assert (three, TOTAL) not in table and (three, "mail") not in table
    assert (five, TOTAL) in table, "an hour the retry left alone keeps its sums"
    assert last_day(backend, now)["mail"][20] == (1, 0), "read from the archive again"
    assert sum_up_all(backend, now) == [three]
    assert sums(backend)[(three, "mail")] == (1, 0, 1)

    with connection(backend) as conn:
        assert delete_archived(conn, queue="old") == 1
        conn.commit()
    assert (five, TOTAL) not in sums(backend)
    assert "old" not in last_day(backend, now)
    assert sum_up_all(backend, now) == [five]


def test_a_worker_sums_up_the_newest_hour_missing_in_its_second_beat(backend, pool):
    real = datetime.now(timezone.utc)
    last = hour_of(real) - (HOUR if real - hour_of(real) >= SUM_UP_AFTER else 2 * HOUR)
    archive_at(backend, "mail", "success", last + timedelta(minutes=1))
    worker = create_queue_worker(pool, lambda job_type, payload: None, queue="mail")
    with worker:
        assert (last, TOTAL) not in sums(backend), "not in the beat start() waits for"
        wait_until(lambda: (last, TOTAL) in sums(backend), 15, description="the hour summed")
    assert sums(backend)[(last, "mail")] == (1, 0, 1)


def test_without_the_outcomes_table_readers_read_the_archive_and_workers_go_on(backend, pool, now):
    backend.execute(f"DROP TABLE {outcomes_table(backend.job_table)}")
    try:
        archive_at(backend, "mail", "failure", hour_of(now) - 2 * HOUR)
        assert last_day(backend, now)["mail"][21] == (0, 1)
        with connection(backend) as conn:
            assert retry_failed(conn, queue="mail") == 1
            conn.commit()
        done = []
        worker = create_queue_worker(pool, lambda job_type, payload: done.append(1), queue="mail")
        with worker:
            wait_until(lambda: done, 10, description="the retried job ran")
        assert worker.summary()["succeeded"] == 1
        assert last_day(backend, now)["mail"][23] == (1, 0)
    finally:
        backend.recreate()


def test_the_first_hour_of_the_day_is_where_reading_the_sums_starts(backend, now):
    first = first_hour(now)
    archive_at(backend, "mail", "success", first + timedelta(minutes=1))
    archive_at(backend, "mail", "success", first - timedelta(minutes=1))  # a day ago: not read
    sum_up_all(backend, now)
    assert last_day(backend, now)["mail"][0] == (1, 0)
    assert sum(ok for ok, _ in last_day(backend, now)["mail"]) == 1

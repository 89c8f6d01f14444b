"""The outcomes table (schema step "hourly_outcomes"), on both databases: workers sum up the
archive's hours that are over, the overview and `stats` read those sums instead of a day of
the archive, a retry or a purge of archived jobs drops the hours it changes, and sums that a
change behind the workers' back made wrong are counted again and put right (step
"outcomes_checked"): by the workers' beat, or at once by `recount_hours` and `stats --recount`."""

from __future__ import annotations

import json
import warnings
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from test_admin_overview import archive_at
from typer.testing import CliRunner

from proletarian_di import create_queue_worker
from proletarian_di._engine import registry as _registry
from proletarian_di._store import outcomes as _outcomes
from proletarian_di._store.dialects import dialect_of
from proletarian_di._store.outcomes import RECHECK_AFTER, SUM_UP_AFTER, TOTAL, first_hour, sum_up
from proletarian_di.admin import (
    HourlySums,
    Tables,
    delete_archived,
    hourly_sums,
    overview,
    queue_stats,
    recount_hours,
    retry_failed,
)
from proletarian_di.cli import app as cli_app
from proletarian_di.contrib.dashboard import dashboard
from proletarian_di.schema import outcomes_table

from backends import connection, wait_until

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

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


# Sums changed behind the workers' back ------------------------------------------------------


def archive_day(backend: Any, now: datetime) -> dict[str, list[tuple[int, int]]]:
    """The last day as the overview shows it, hour by hour, from COUNT(*)s of the archive."""
    since, day = first_hour(now), {}
    for n in range(24):
        start, end = since + n * HOUR, since + (n + 1) * HOUR
        times = [t.replace(tzinfo=None) if backend.name == "mysql" else t for t in (start, end)]
        for queue, status, count in backend.query(
            f"SELECT queue, status, COUNT(*) FROM {backend.archived_job_table} "
            "WHERE finished_at >= %s AND finished_at < %s GROUP BY queue, status",
            times,
        ):
            hours = day.setdefault(queue, [(0, 0)] * 24)
            ok, failed = hours[n]
            if status in ("success", "failure"):
                n_ok, n_failed = (count, 0) if status == "success" else (0, count)
                hours[n] = (ok + n_ok, failed + n_failed)
    return day


def checks(backend: Any) -> dict[datetime, datetime | None]:
    """The outcomes table's check time of each summed hour, as the database holds it."""
    return {
        utc(hour): None if at is None else utc(at)
        for hour, at in backend.query(
            f"SELECT hour, checked_at FROM {outcomes_table(backend.job_table)} WHERE queue = %s",
            (TOTAL,),
        )
    }


def recheck_until_none_is_due(backend: Any, now: datetime) -> int:
    """Call `recheck` as the workers' beat does, a beat after another while one is due: how
    many calls until the next check is due later than `now`."""
    with connection(backend) as conn:
        dialect = dialect_of(conn, Tables(backend.job_table, backend.archived_job_table))
        for calls in range(1, 50):
            due = _outcomes.recheck(conn, dialect, now)
            conn.commit()
            if due is None or due > now:
                return calls
    raise AssertionError("a check still due after 49 beats")


def change_behind_the_workers_back(backend: Any, now: datetime) -> None:
    """Sum up a day holding jobs in two hours, then backfill one and delete by hand from the
    other: the sums of both are wrong."""
    three, five = hour_of(now) - 3 * HOUR, hour_of(now) - 5 * HOUR
    archive_at(backend, "mail", "success", three + timedelta(minutes=1))
    archive_at(backend, "mail", "failure", three + timedelta(minutes=2))
    archive_at(backend, "sms", "success", five + timedelta(minutes=3))
    sum_up_all(backend, now)
    archive_at(backend, "mail", "success", three + timedelta(minutes=10))  # a backfill
    archive_at(backend, "import", "failure", five + timedelta(minutes=10))  # an import
    backend.execute(f"DELETE FROM {backend.archived_job_table} WHERE queue = %s", ("sms",))
    assert last_day(backend, now) != archive_day(backend, now), "the sums went wrong"


def test_sums_changed_behind_the_workers_back_are_recounted_once_their_check_is_due(backend, now):
    change_behind_the_workers_back(backend, now)
    assert set(checks(backend).values()) == {now}, "summing an hour up is its first check"
    assert recheck_until_none_is_due(backend, now) == 1, "no check is due yet"
    assert last_day(backend, now) != archive_day(backend, now)

    # The checks fall due RECHECK_AFTER later: every summed hour is counted again, one a beat.
    table = outcomes_table(backend.job_table)
    due = now - RECHECK_AFTER
    backend.execute(
        f"UPDATE {table} SET checked_at = %s",
        (due.replace(tzinfo=None) if backend.name == "mysql" else due,),
    )
    assert recheck_until_none_is_due(backend, now) == 23
    assert last_day(backend, now) == archive_day(backend, now)
    assert checks(backend) == {hour_of(now) - n * HOUR: now for n in range(1, 24)}
    three, five = hour_of(now) - 3 * HOUR, hour_of(now) - 5 * HOUR
    table = sums(backend)
    assert table[(three, "mail")] == (2, 1, 3) and table[(three, TOTAL)] == (0, 0, 3)
    assert (five, "sms") not in table and table[(five, "import")] == (0, 1, 1)
    with connection(backend) as conn:
        stats = {row.queue: row for row in queue_stats(conn, now=now)}
        assert hourly_sums(conn, now=now).checked_at == now
    assert (stats["mail"].succeeded_last_day, stats["mail"].failed_last_day) == (2, 1)
    assert "sms" not in stats and stats["import"].failed_last_day == 1


def test_a_worker_recounts_the_summed_hours_changed_behind_its_back(backend, pool, monkeypatch):
    """The primary path: a running worker's beat, with its timing made small (a beat every
    50 ms, every check due at once), puts the sums right without an operator."""
    real = datetime.now(timezone.utc)
    change_behind_the_workers_back(backend, real)
    monkeypatch.setattr(_registry, "BEAT_S", 0.05)
    monkeypatch.setattr(_outcomes, "RECHECK_AFTER", timedelta(0))
    with create_queue_worker(pool, lambda job_type, payload: None, queue="mail"):
        wait_until(
            lambda: all(at is not None and at > real for at in checks(backend).values()),
            15,
            description="every summed hour checked again",
        )
    assert last_day(backend, real) == archive_day(backend, real)


def test_recount_hours_puts_the_sums_right_at_once_and_says_which_changed(backend, now):
    change_behind_the_workers_back(backend, now)
    later = now + timedelta(seconds=5)
    with connection(backend) as conn:
        done = recount_hours(conn, now=later)
        conn.commit()
    three, five = hour_of(now) - 3 * HOUR, hour_of(now) - 5 * HOUR
    assert done.changed == [five, three]
    assert done.checked == [hour_of(now) - n * HOUR for n in range(23, 0, -1)]
    assert last_day(backend, now) == archive_day(backend, now)
    assert set(checks(backend).values()) == {later}
    with connection(backend) as conn:
        assert recount_hours(conn, now=later).changed == [], "nothing left to change"


def run_cli(backend: Any, *args: str) -> Any:
    env = {
        "DATABASE_URL": None,
        "PROLETARIAN_JOB_TABLE": backend.job_table,
        "PROLETARIAN_ARCHIVED_JOB_TABLE": backend.archived_job_table,
        "COLUMNS": "200",
    }
    result = CliRunner().invoke(cli_app, [*args, "-d", backend.url], env=env)
    assert result.exit_code == 0, result.output
    return result


def flat(text: str) -> str:
    """`text` with rich's line wrapping undone."""
    return " ".join(text.split())


def test_stats_recount_puts_the_sums_right_and_stats_shows_when_they_were_checked(backend):
    real = datetime.now(timezone.utc)
    change_behind_the_workers_back(backend, real)
    summed = len(checks(backend))  # 22 in an hour's first five minutes, else 23
    before = flat(run_cli(backend, "stats").stdout)
    assert f"24h: {summed} hours from workers' sums, all checked against the archive" in before

    result = run_cli(backend, "stats", "--recount")
    three, five = hour_of(real) - 3 * HOUR, hour_of(real) - 5 * HOUR
    assert (
        f"recounted {summed} summed hours of {backend.archived_job_table} on" in result.stdout
        and f": 2 changed ({five:%Y-%m-%d %H:00}, {three:%Y-%m-%d %H:00} UTC)" in result.stdout
    )
    assert last_day(backend, real) == archive_day(backend, real)
    [oldest] = {at for at in checks(backend).values()}
    shown = f"all checked against the archive since {oldest:%Y-%m-%d %H:%M:%S} UTC."
    assert shown in flat(result.stdout)
    rows = {
        line.split()[0]: line.split()[-2:]
        for line in result.stdout.splitlines()
        if line.split() and line.split()[0] in ("mail", "import")
    }
    assert rows == {"mail": ["2", "1"], "import": ["0", "1"]}

    quiet = run_cli(backend, "stats", "--recount", "--json")
    assert ": 0 changed" in quiet.stderr and f"24h: {summed} hours from" in quiet.stderr
    assert {row["queue"] for row in json.loads(quiet.stdout)} == {"mail", "import"}


def test_the_overview_page_shows_when_the_sums_were_last_checked(backend, now):
    page = TestClient(dashboard(backend.connect))
    assert "no hour is summed up by workers yet" in page.get("/").text
    archive_at(backend, "mail", "success", hour_of(now) - 2 * HOUR)
    sum_up_all(backend, now)
    with connection(backend) as conn:
        dialect = dialect_of(conn, Tables(backend.job_table, backend.archived_job_table))
        hour = hour_of(now) - 7 * HOUR
        _outcomes.recount(conn, dialect, hour, now + timedelta(minutes=1))
        conn.commit()
    [(oldest,)] = backend.query(
        f"SELECT MIN(checked_at) FROM {outcomes_table(backend.job_table)} WHERE queue = %s",
        (TOTAL,),
    )
    shown = page.get("/").text
    assert f'datetime="{utc(oldest).isoformat()}">{utc(oldest):%Y-%m-%d %H:%M:%S} UTC' in shown
    assert "23 hours of the last day come from workers' sums" in shown

    backend.execute(
        f"UPDATE {outcomes_table(backend.job_table)} SET checked_at = NULL WHERE hour = %s",
        (hour.replace(tzinfo=None) if backend.name == "mysql" else hour,),
    )
    assert "not all checked against the archive yet" in page.get("/").text


def test_without_check_times_the_sums_are_kept_and_recount_hours_still_puts_them_right(
    backend, now
):
    """Tables before step outcomes_checked: workers sum up and never recheck, readers show
    no check time, and a recount still replaces the sums that are wrong."""
    backend.execute(f"ALTER TABLE {outcomes_table(backend.job_table)} DROP COLUMN checked_at")
    try:
        change_behind_the_workers_back(backend, now)
        assert recheck_until_none_is_due(backend, now) == 1
        with connection(backend) as conn:
            assert hourly_sums(conn, now=now) == HourlySums(23, None)
            assert len(recount_hours(conn, now=now).changed) == 2
            conn.commit()
        assert last_day(backend, now) == archive_day(backend, now)
    finally:
        backend.recreate()

"""Periodic jobs where the scheduler meets a clock: catch-up across a daylight-saving change,
a changed expression while two processes' clocks disagree, and several schedulers starting
together after downtime. In each, a tick is enqueued once."""

from __future__ import annotations

import contextlib
import threading
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from test_periodic import UTC, at, enqueued, register_at

from proletarian_di import PeriodicJob, create_scheduler
from proletarian_di.periodic import Tick, _latest_tick
from proletarian_di.testing import FakeClock

from backends import Backend, Events, wait_until


@pytest.fixture
def schedules(backend: Backend) -> Backend:
    """The backend with no schedule recorded."""
    backend.execute(f"DELETE FROM {backend.job_table}_periodic")
    return backend


def local(text: str, zone: str) -> datetime:
    """A wall-clock time in `zone`, as UTC."""
    return datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(zone)).astimezone(UTC)


# Catch-up across a spring-forward change -----------------------------------------------------


@pytest.mark.parametrize(
    ("cron", "zone", "restart", "down", "newest"),
    [
        # The two: 24 jobs one per pass, then 120.
        ("0 * * * *", "Europe/Berlin", "2026-03-29 03:30", timedelta(days=1), "03-29 01:00"),
        ("* * * * *", "America/New_York", "2026-03-08 03:00:30", timedelta(hours=2), "03-08 07:00"),
        ("0 * * * *", "Europe/London", "2026-03-29 02:30", timedelta(hours=5), "03-29 01:00"),
        ("*/15 * * * *", "Australia/Sydney", "2026-10-04 03:05", timedelta(hours=3), "10-03 16:00"),
        ("45 * * * *", "Pacific/Chatham", "2026-09-27 03:50", timedelta(hours=6), "09-26 14:00"),
        # Autumn, after the repeated hour: 02:30 CET.
        ("30 * * * *", "Europe/Berlin", "2026-10-25 03:10", timedelta(hours=4), "10-25 01:30"),
    ],
)  # fmt: skip
def test_catch_up_across_a_dst_change_enqueues_the_newest_missed_tick_once(
    schedules: Backend, cron: str, zone: str, restart: str, down: timedelta, newest: str
) -> None:
    """Started on the change's day, a scheduler enqueues the newest tick it missed, and no
    later pass enqueues an older one."""
    job = PeriodicJob("catch-up", cron, "report", timezone=zone)
    now = local(restart, zone)
    register_at(schedules, now - down, [job])
    source = schedules.pool(1)
    try:
        clock = FakeClock(now)
        scheduler = create_scheduler(source, [job], clock=clock)
        caught_up = scheduler.register()
        later: list[Tick] = []
        for _ in range(5):
            clock.advance(timedelta(seconds=5))
            later += scheduler.run_pending()
    finally:
        source.close()
    assert [t.tick for t in caught_up] == [at(f"2026-{newest}")]
    assert later == []
    assert enqueued(schedules) == [("report", None)]


def transitions(zone: str, year: int = 2026) -> list[datetime]:
    """The moments (UTC, to the half hour) when `zone`'s offset changes in `year`."""
    tz = ZoneInfo(zone)
    moment = datetime(year, 1, 1, tzinfo=UTC)
    offset = moment.astimezone(tz).utcoffset()
    found = []
    while moment.year == year:
        moment += timedelta(minutes=30)
        if (now := moment.astimezone(tz).utcoffset()) != offset:
            found.append(moment)
            offset = now
    return found


def newest_by_stepping(job: PeriodicJob, after: datetime, now: datetime) -> datetime | None:
    newest = None
    for tick in job.ticks(after):
        if tick > now:
            break
        newest = tick
    return newest


@pytest.mark.parametrize(
    "zone",
    ["Europe/Berlin", "America/New_York", "Europe/Dublin", "America/St_Johns",
     "Australia/Sydney", "America/Santiago"],
)  # fmt: skip
def test_the_catch_up_tick_is_the_newest_tick_around_every_change(zone: str) -> None:
    """Around each of the zone's changes, the tick a late scheduler enqueues is the newest
    one stepping through the ticks finds, and after it nothing is due until a later one."""
    wrong = []
    for cron in ("0 * * * *", "*/15 * * * *", "30 2 * * *", "* * * * *"):
        job = PeriodicJob("j", cron, "t", timezone=zone)
        for change in transitions(zone):
            for minutes in range(-120, 121, 13):
                now = change + timedelta(minutes=minutes, seconds=7)
                for down in (timedelta(minutes=3), timedelta(hours=6)):
                    after = now - down
                    newest = _latest_tick(job, after, now)
                    if newest != newest_by_stepping(job, after, now) or (
                        newest is not None and _latest_tick(job, newest, now) is not None
                    ):
                        wrong.append((cron, after, now, newest))
    assert wrong == []


# A changed expression, and clocks that disagree ----------------------------------------------


def test_a_changed_expression_does_not_enqueue_a_tick_again_when_clocks_disagree(
    schedules: Backend,
) -> None:
    """The old expression's process (100 ms ahead) enqueues 11:00; a process with the new
    expression (100 ms behind) starts just after: 11:00 is not due again for it."""
    old = PeriodicJob("report", "0 * * * *", "report")
    new = PeriodicJob("report", "*/15 * * * *", "report")
    skew = timedelta(milliseconds=100)
    sources = [schedules.pool(1), schedules.pool(1)]
    try:
        ahead = FakeClock(at("2026-05-01 10:30") + skew)
        running = create_scheduler(sources[0], [old], clock=ahead)
        running.register()
        ahead.now = at("2026-05-01 11:00")  # real time 10:59:59.9
        assert [t.tick for t in running.run_pending()] == [at("2026-05-01 11:00")]
        log = Events()
        behind = FakeClock(at("2026-05-01 11:00") - skew)  # real time 11:00:00.0
        started = create_scheduler(sources[1], [new], clock=behind, log=log)
        assert started.register() == []
        assert log.named("periodic_changed") == [{"name": "report", "cron": "*/15 * * * *"}]
        behind.now = at("2026-05-01 11:00:00.5")
        assert started.run_pending() == [], "11:00 was enqueued already"
        behind.now = at("2026-05-01 11:15:00.1")
        assert [t.tick for t in started.run_pending()] == [at("2026-05-01 11:15")]
    finally:
        for source in sources:
            source.close()
    assert len(enqueued(schedules)) == 2


@pytest.mark.parametrize(
    ("recorded", "declared"),
    [
        ("0 9-17 * * MON-FRI", " 0  9-17 * *\tmon-fri "),
        ("@HOURLY", "@hourly"),
        ("@hourly", "0 * * * *"),
    ],
)
def test_a_change_of_spacing_or_case_is_not_a_changed_expression(
    schedules: Backend, recorded: str, declared: str
) -> None:
    """It still catches up the missed tick, and logs no change."""
    register_at(schedules, at("2026-05-04 10:30"), [PeriodicJob("r", recorded, "report")])
    log = Events()
    caught_up, _ = register_at(
        schedules, at("2026-05-04 12:10"), [PeriodicJob("r", declared, "report")], log=log
    )
    assert [t.tick for t in caught_up] == [at("2026-05-04 12:00")]
    assert log.named("periodic_changed") == []
    assert len(enqueued(schedules)) == 1


# Several schedulers starting together after downtime -----------------------------------------


def lock_waits(backend: Backend) -> int:
    """How many other sessions wait in a statement on the schedules' table (MariaDB's
    INNODB_TRX does not always list a waiting INSERT; its process list does)."""
    if backend.name == "postgresql":
        sql = (
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND datname = current_database() AND query LIKE %s"
        )
    else:
        sql = (
            "SELECT count(*) FROM information_schema.processlist "
            "WHERE command = 'Query' AND id <> CONNECTION_ID() AND info LIKE %s"
        )
    [(count,)] = backend.query(sql, (f"%{backend.job_table}_periodic%",))
    return int(count)


def test_schedulers_starting_together_after_downtime_enqueue_the_missed_tick_once(
    schedules: Backend,
) -> None:
    """The start-up read of a schedule locks its row: with the row held, both schedulers
    wait; whichever reads it first enqueues 15:00, and the other then reads 15:00 as the
    newest tick. A plain read would let both see 10:30 and both enqueue."""
    hourly = [PeriodicJob("hourly", "0 * * * *", "report")]
    register_at(schedules, at("2026-05-01 10:30"), hourly)
    sources = [schedules.pool(1), schedules.pool(1)]
    results: list[list[Tick]] = []
    errors: list[BaseException] = []

    def start(source: Any) -> None:
        try:
            scheduler = create_scheduler(source, hourly, clock=FakeClock(at("2026-05-01 15:10")))
            results.append(scheduler.register())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(source,)) for source in sources]
    try:
        with contextlib.closing(schedules.connect()) as holder:
            cur = holder.cursor()
            cur.execute(
                f"SELECT last_tick FROM {schedules.job_table}_periodic WHERE name = %s FOR UPDATE",
                ("hourly",),
            )
            cur.fetchall()
            for thread in threads:
                thread.start()
            wait_until(
                lambda: errors or lock_waits(schedules) == 2, description="both schedulers wait"
            )
            holder.rollback()
        for thread in threads:
            thread.join(30)
    finally:
        for source in sources:
            source.close()
    assert errors == []
    won = [t.tick for ticks in results for t in ticks if t.job_id is not None]
    assert won == [at("2026-05-01 15:00")]
    assert len(enqueued(schedules)) == 1

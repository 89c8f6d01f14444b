"""Periodic jobs: each tick enqueued exactly once over every process declaring the schedule,
the newest missed tick caught up on start (or passed over), a changed expression taking
effect on restart, and Debian cron's daylight-saving rules, on a fake clock."""

from __future__ import annotations

import contextlib
import importlib
import json
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from proletarian_di import (
    ConfigurationError,
    PayloadError,
    PeriodicJob,
    SchemaError,
    WorkerStateError,
    create_scheduler,
    worker_running,
)
from proletarian_di.admin import list_schedules
from proletarian_di.schema import MIGRATIONS
from proletarian_di.testing import FakeClock

from backends import Backend, Events, wait_until

UTC = timezone.utc
BERLIN = "Europe/Berlin"
SCRIPT = str(Path(__file__).with_name("scheduler_process.py"))


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def utc(ticks: list[datetime]) -> list[str]:
    return [t.astimezone(UTC).strftime("%Y-%m-%d %H:%M") for t in ticks]


def enqueued(backend: Backend) -> list[tuple[str, Any]]:
    """The waiting jobs' (job_type, payload), oldest first."""
    rows = backend.query(
        f"SELECT job_type, payload FROM {backend.job_table} ORDER BY enqueued_at, job_id"
    )
    return [(job_type, json.loads(payload)) for job_type, payload in rows]


@pytest.fixture
def schedules(backend: Backend) -> Backend:
    """The backend with no schedule recorded."""
    backend.execute(f"DELETE FROM {backend.job_table}_periodic")
    return backend


# Declaring schedules, without a database -------------------------------------------------


@pytest.mark.parametrize(
    ("cron", "message"),
    [
        ("0 * * *", "has 4 field(s); it needs 5"),
        ("0 0 * * * *", "has 6 field(s)"),
        ("61 * * * *", "invalid cron '61 * * * *'"),
        ("@fortnightly", "unknown cron alias '@fortnightly'"),
        ("", "cron must be a cron expression"),
    ],
)
def test_a_bad_expression_is_an_error_naming_the_schedule(cron: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match="periodic job 'report'") as caught:
        PeriodicJob("report", cron, "report")
    assert message in str(caught.value)


def test_a_bad_time_zone_and_a_bad_name_are_errors() -> None:
    with pytest.raises(ConfigurationError, match="unknown timezone 'Mars/Olympus'"):
        PeriodicJob("report", "@daily", "report", timezone="Mars/Olympus")
    with pytest.raises(ConfigurationError, match="PeriodicJob name must be a non-empty string"):
        PeriodicJob("", "@daily", "report")
    with pytest.raises(ConfigurationError, match="job_type must be a non-empty string"):
        PeriodicJob("report", "@daily", "")


def long_cron(length: int) -> str:
    """A valid expression of exactly `length` characters (from 237): every minute and hour
    listed, padded with spaces."""
    minutes = ",".join(str(m) for m in range(60))
    hours = ",".join(str(h) for h in range(24))
    return minutes + " " * (length - 236) + hours + " * * *"


def test_a_cron_longer_than_its_column_is_refused_when_the_job_is_made() -> None:
    """MySQL's VARCHAR(255) would refuse it at the scheduler's first write (DataError 1406)."""
    assert PeriodicJob("wide", long_cron(255), "t").expression.startswith("0,1,2")
    with pytest.raises(
        ConfigurationError, match="periodic job 'wide': cron must be at most 255 characters"
    ):
        PeriodicJob("wide", long_cron(256), "t")


@pytest.mark.parametrize(
    ("field", "message"),
    [
        ("name", "PeriodicJob name must be at most 255 characters"),
        ("job_type", "job_type must be at most 255 characters"),
        ("queue", "queue must be at most 255 characters"),
    ],
)
def test_a_name_type_or_queue_longer_than_its_column_is_refused(field: str, message: str) -> None:
    fields = {"name": "n", "cron": "@hourly", "job_type": "t", field: "x" * 256}
    with pytest.raises(ConfigurationError, match=message):
        PeriodicJob(**fields)


@pytest.fixture
def long_zone(tmp_path: Path) -> Iterator[str]:
    """A real time zone file under a name longer than the table's 64 characters."""
    import zoneinfo

    name = "Very/" * 12 + "Long/Berlin"
    found = [Path(p, BERLIN) for p in zoneinfo.TZPATH if Path(p, BERLIN).is_file()]
    source = found[0] if found else Path(importlib.import_module("tzdata").__file__).parent
    if not found:
        source = source / "zoneinfo" / BERLIN
    target = tmp_path / name
    target.parent.mkdir(parents=True)
    target.write_bytes(source.read_bytes())
    zoneinfo.reset_tzpath(to=[str(tmp_path), *zoneinfo.TZPATH])
    try:
        assert zoneinfo.ZoneInfo(name).key == name
        yield name
    finally:
        zoneinfo.reset_tzpath()


def test_a_time_zone_longer_than_its_column_is_refused(long_zone: str) -> None:
    with pytest.raises(
        ConfigurationError, match="periodic job 'far': timezone must be at most 64 characters"
    ):
        PeriodicJob("far", "@daily", "t", timezone=long_zone)


def test_create_scheduler_checks_each_field_again(schedules: Backend) -> None:
    """A job altered after it was made (a frozen dataclass can be) is refused before the
    scheduler touches the database; the longest cron the column holds is recorded whole."""
    altered = PeriodicJob("wide", "@hourly", "t")
    object.__setattr__(altered, "cron", long_cron(256))
    source = schedules.pool(1)
    try:
        with pytest.raises(ConfigurationError, match="cron must be at most 255 characters"):
            create_scheduler(source, [altered])
    finally:
        source.close()
    assert list_schedules_now(schedules, datetime.now(UTC)) == []
    register_at(schedules, at("2026-05-01 10:30"), [PeriodicJob("wide", long_cron(255), "t")])
    [schedule] = list_schedules_now(schedules, at("2026-05-01 10:30"))
    assert schedule.cron == long_cron(255)
    assert schedule.next_run == at("2026-05-01 10:31")


@pytest.mark.parametrize(
    ("alias", "expression"),
    [("@hourly", "0 * * * *"), ("@daily", "0 0 * * *"), ("@weekly", "0 0 * * 0"),
     ("@monthly", "0 0 1 * *"), ("@yearly", "0 0 1 1 *"), ("@annually", "0 0 1 1 *"),
     ("@midnight", "0 0 * * *")],
)  # fmt: skip
def test_aliases_stand_for_their_expressions(alias: str, expression: str) -> None:
    job = PeriodicJob("j", alias, "t")
    assert job.expression == expression
    assert job.next_run(at("2026-01-01 12:30")) == PeriodicJob("k", expression, "t").next_run(
        at("2026-01-01 12:30")
    )


def test_ticks_are_read_in_the_schedules_time_zone() -> None:
    job = PeriodicJob("j", "0 9 * * 1-5", "t", timezone="America/New_York")
    # Friday 2026-01-02 15:00 UTC is 10:00 in New York: the next is Monday 09:00 EST.
    assert job.next_run(at("2026-01-02 15:00")) == at("2026-01-05 14:00")


def test_create_scheduler_checks_names_payloads_and_options(pool: Any) -> None:
    job = PeriodicJob("j", "@hourly", "t")
    with pytest.raises(ConfigurationError, match="two periodic jobs are named 'j'"):
        create_scheduler(pool, [job, PeriodicJob("j", "@daily", "u")])
    with pytest.raises(PayloadError, match="periodic job 'p': its payload cannot be serialized"):
        create_scheduler(pool, [PeriodicJob("p", "@hourly", "t", payload={"at": object()})])
    with pytest.raises(ConfigurationError, match=r"unknown scheduler option.*catchup"):
        create_scheduler(pool, [job], catchup=True)
    with pytest.raises(ConfigurationError, match="catch_up must be a bool"):
        create_scheduler(pool, [job], catch_up="yes")
    with pytest.raises(ConfigurationError, match="must hold PeriodicJob objects"):
        create_scheduler(pool, ["@hourly"])


# Daylight saving time: Debian cron's rules, as cronsim documents them ----------------------


def ticks_between(job: PeriodicJob, start: datetime, end: datetime) -> list[datetime]:
    ticks = []
    for tick in job.ticks(start):
        if tick > end:
            return ticks
        ticks.append(tick)
    return ticks


def test_a_daily_time_skipped_by_the_spring_change_runs_at_the_change() -> None:
    job = PeriodicJob("j", "30 2 * * *", "t", timezone=BERLIN)
    # 2026-03-29: clocks go from 02:00 to 03:00 CEST; 02:30 does not exist that day.
    assert utc(ticks_between(job, at("2026-03-28 00:00"), at("2026-03-30 12:00"))) == [
        "2026-03-28 01:30",  # 02:30 CET
        "2026-03-29 01:00",  # 03:00 CEST: the change itself
        "2026-03-30 00:30",  # 02:30 CEST
    ]


def test_a_daily_time_repeated_by_the_autumn_change_runs_once() -> None:
    job = PeriodicJob("j", "30 2 * * *", "t", timezone=BERLIN)
    # 2026-10-25: clocks go from 03:00 CEST back to 02:00 CET; 02:30 happens twice.
    assert utc(ticks_between(job, at("2026-10-24 12:00"), at("2026-10-26 12:00"))) == [
        "2026-10-25 00:30",  # 02:30 CEST, the first; not 02:30 CET an hour later
        "2026-10-26 01:30",
    ]


def test_an_hourly_schedule_runs_every_hour_across_both_changes() -> None:
    job = PeriodicJob("j", "30 * * * *", "t", timezone=BERLIN)
    autumn = ticks_between(job, at("2026-10-24 23:00"), at("2026-10-25 02:59"))
    assert utc(autumn) == [
        "2026-10-24 23:30",
        "2026-10-25 00:30",  # 02:30 CEST
        "2026-10-25 01:30",  # 02:30 CET: the repeated hour runs too
        "2026-10-25 02:30",
    ]
    spring = ticks_between(job, at("2026-03-28 23:00"), at("2026-03-29 02:59"))
    assert utc(spring) == [
        "2026-03-28 23:30",  # 00:30 CET
        "2026-03-29 00:30",  # 01:30 CET; 02:30 does not exist
        "2026-03-29 01:30",  # 03:30 CEST: still one hour after the last
        "2026-03-29 02:30",
    ]


def test_the_next_run_from_inside_a_repeated_hour_is_after_it() -> None:
    """Chatham's clocks go from 03:45 back to 02:45; from 02:51 the second time, cronsim's
    first answer is 03:00 the first time, 51 minutes earlier."""
    job = PeriodicJob("j", "0 3 * * *", "t", timezone="Pacific/Chatham")
    assert job.next_run(at("2026-04-04 14:06:06")) == at("2026-04-05 14:15")


def test_the_scheduler_enqueues_the_dst_days_ticks_once_each(schedules: Backend) -> None:
    clock = FakeClock(at("2026-10-24 22:00"))
    jobs = [
        PeriodicJob("daily", "30 2 * * *", "daily", timezone=BERLIN),
        PeriodicJob("hourly", "30 * * * *", "hourly", timezone=BERLIN),
    ]
    source = schedules.pool(2)
    try:
        scheduler = create_scheduler(source, jobs, clock=clock)
        scheduler.register()
        handled = []
        while clock.now < at("2026-10-25 03:00"):
            clock.advance(timedelta(minutes=1))
            handled += [(t.name, t.tick) for t in scheduler.run_pending()]
    finally:
        source.close()
    assert [(name, utc([tick])[0]) for name, tick in handled] == [
        ("hourly", "2026-10-24 22:30"),
        ("hourly", "2026-10-24 23:30"),
        ("daily", "2026-10-25 00:30"),
        ("hourly", "2026-10-25 00:30"),
        ("hourly", "2026-10-25 01:30"),
        ("hourly", "2026-10-25 02:30"),
    ]
    assert Counter(job_type for job_type, _ in enqueued(schedules)) == {"hourly": 5, "daily": 1}


# Exactly once, whatever the number of processes ---------------------------------------------


def test_each_tick_is_enqueued_once_by_many_schedulers_racing(schedules: Backend) -> None:
    jobs = [PeriodicJob("every-minute", "* * * * *", "tick", payload={"n": 1})]
    start = at("2026-05-01 10:00")
    sources = [schedules.pool(1) for _ in range(4)]
    try:
        schedulers = [create_scheduler(source, jobs, clock=FakeClock(start)) for source in sources]
        for scheduler in schedulers:
            scheduler.register()
        barrier = threading.Barrier(len(schedulers))
        won: Counter[datetime] = Counter()
        lock = threading.Lock()

        def race(scheduler: Any) -> None:
            clock = scheduler.settings.clock
            for minute in range(1, 31):
                clock.now = start + timedelta(minutes=minute, seconds=1)
                barrier.wait(timeout=30)
                for tick in scheduler.run_pending():
                    if tick.job_id is not None:
                        with lock:
                            won[tick.tick] += 1

        threads = [threading.Thread(target=race, args=(s,)) for s in schedulers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        for source in sources:
            source.close()
    expected = {start + timedelta(minutes=m) for m in range(1, 31)}
    assert set(won) == expected and set(won.values()) == {1}
    assert len(enqueued(schedules)) == 30


def test_each_tick_is_enqueued_once_by_several_processes(schedules: Backend) -> None:
    processes = [
        subprocess.Popen(
            [sys.executable, SCRIPT, "2026-05-01T10:00:00+00:00", "40"],
            env=schedules.env(),
            cwd=Path(__file__).parent,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outputs = [p.communicate(timeout=120) for p in processes]
    for process, (_, errors) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, errors
    claimed = Counter(line for out, _ in outputs for line in out.split())
    assert len(claimed) == 40 and set(claimed.values()) == {1}, claimed
    assert sorted(p["tick"] for _, p in enqueued(schedules)) == sorted(claimed)


# Start-up: the newest missed tick, once ------------------------------------------------------


def register_at(backend: Backend, moment: datetime, jobs: list[PeriodicJob], **options: Any):
    source = backend.pool(1)
    try:
        scheduler = create_scheduler(source, jobs, clock=FakeClock(moment), **options)
        return scheduler.register(), scheduler
    finally:
        source.close()


def test_a_schedule_missed_while_down_enqueues_its_newest_tick_once(schedules: Backend) -> None:
    hourly = [PeriodicJob("hourly", "0 * * * *", "report", payload={"what": "sales"})]
    first, _ = register_at(schedules, at("2026-05-01 10:30"), hourly)
    assert first == [] and enqueued(schedules) == []
    log = Events()
    caught_up, _ = register_at(schedules, at("2026-05-01 15:10"), hourly, log=log)
    assert [(t.name, t.tick) for t in caught_up] == [("hourly", at("2026-05-01 15:00"))]
    assert enqueued(schedules) == [("report", {"what": "sales"})]
    assert log.named("periodic_caught_up")[0]["tick"] == at("2026-05-01 15:00")
    again, _ = register_at(schedules, at("2026-05-01 15:20"), hourly)
    assert again == [] and len(enqueued(schedules)) == 1


def test_catch_up_false_passes_over_missed_ticks(schedules: Backend) -> None:
    hourly = [PeriodicJob("hourly", "0 * * * *", "report")]
    register_at(schedules, at("2026-05-01 10:30"), hourly)
    log = Events()
    skipped, scheduler = register_at(
        schedules, at("2026-05-01 15:10"), hourly, catch_up=False, log=log
    )
    assert [(t.tick, t.job_id) for t in skipped] == [(at("2026-05-01 15:00"), None)]
    assert log.named("periodic_missed") and enqueued(schedules) == []
    assert scheduler.next_runs() == {"hourly": at("2026-05-01 16:00")}


def test_a_changed_expression_takes_effect_on_restart(schedules: Backend) -> None:
    register_at(schedules, at("2026-05-01 10:30"), [PeriodicJob("r", "0 0 * * *", "report")])
    log = Events()
    source = schedules.pool(1)
    try:
        clock = FakeClock(at("2026-05-01 15:10"))
        scheduler = create_scheduler(
            source, [PeriodicJob("r", "*/15 * * * *", "report")], clock=clock, log=log
        )
        assert scheduler.register() == [], "a new expression is not a missed tick"
        assert log.named("periodic_changed") == [{"name": "r", "cron": "*/15 * * * *"}]
        clock.advance(timedelta(minutes=5))
        assert [t.tick for t in scheduler.run_pending()] == [at("2026-05-01 15:15")]
    finally:
        source.close()
    [schedule] = list_schedules_now(schedules, at("2026-05-01 15:16"))
    assert (schedule.cron, schedule.last_tick) == ("*/15 * * * *", at("2026-05-01 15:15"))
    assert schedule.next_run == at("2026-05-01 15:30")


def list_schedules_now(backend: Backend, now: datetime) -> list[Any]:
    with contextlib.closing(backend.connect()) as conn:
        return list_schedules(conn, now=now)


# The running scheduler -----------------------------------------------------------------------


def test_a_started_scheduler_enqueues_each_tick_as_the_clock_reaches_it(
    schedules: Backend,
) -> None:
    clock = FakeClock(at("2026-05-01 10:00:30"))
    job = PeriodicJob("m", "* * * * *", "tick", queue="periodic")
    source = schedules.pool(2)
    try:
        scheduler = create_scheduler(source, [job], clock=clock, polling_interval_ms=5)
        with worker_running(scheduler):
            assert scheduler.state == "running"
            for minute in (1, 2, 3):
                clock.now = at("2026-05-01 10:00") + timedelta(minutes=minute, seconds=1)
                wait_until(lambda m=minute: len(enqueued(schedules)) == m)
        assert scheduler.state == "stopped"
        with pytest.raises(WorkerStateError, match="starts once"):
            scheduler.start()
    finally:
        source.close()
    queues = schedules.query(f"SELECT DISTINCT queue FROM {schedules.job_table}")
    assert queues == [("periodic",)]


def rename(backend: Backend, table: str, new_name: str) -> None:
    if backend.name == "postgresql":
        backend.execute(f"ALTER TABLE {table} RENAME TO {new_name.rpartition('.')[2]}")
    else:
        backend.execute(f"RENAME TABLE {table} TO {new_name}")


def test_a_database_error_is_logged_and_the_tick_enqueued_once_it_is_back(
    schedules: Backend,
) -> None:
    clock = FakeClock(at("2026-05-01 10:00:30"))
    log = Events()
    table = f"{schedules.job_table}_periodic"
    source = schedules.pool(2)
    try:
        job = PeriodicJob("m", "* * * * *", "tick")
        scheduler = create_scheduler(source, [job], clock=clock, log=log, polling_interval_ms=5)
        with worker_running(scheduler):
            rename(schedules, table, f"{table}_away")
            try:
                clock.now = at("2026-05-01 10:01:01")
                wait_until(lambda: log.named("scheduler_error"))
                assert enqueued(schedules) == []
            finally:
                rename(schedules, f"{table}_away", table)
            wait_until(lambda: len(enqueued(schedules)) == 1)
            wait_until(lambda: log.named("periodic_enqueued"))  # logged once it has committed
            assert [e["tick"] for e in log.named("periodic_enqueued")] == [at("2026-05-01 10:01")]
    finally:
        source.close()


def test_a_scheduler_on_an_old_schema_names_the_upgrade(schedules: Backend) -> None:
    table = f"{schedules.job_table}_periodic"
    version_table = f"{schedules.job_table}_schema_version"
    [(version,)] = schedules.query(f"SELECT version FROM {version_table}")
    before = next(m.version for m in MIGRATIONS[schedules.name] if m.name == "periodic_jobs") - 1
    rename(schedules, table, f"{table}_away")
    schedules.execute(f"UPDATE {version_table} SET version = %s", (before,))
    source = schedules.pool(1)
    try:
        scheduler = create_scheduler(source, [PeriodicJob("m", "@hourly", "t")])
        with pytest.raises(SchemaError, match="proletarian-di schema upgrade"):
            scheduler.start()
        with pytest.raises(SchemaError, match=f"there is no {table} table"):
            list_schedules_now(schedules, datetime.now(UTC))
    finally:
        source.close()
        rename(schedules, f"{table}_away", table)
        schedules.execute(f"UPDATE {version_table} SET version = %s", (version,))


# Seeing and wiring schedules -----------------------------------------------------------------


def cli_list(backend: Backend, *args: str) -> Any:
    from test_cli import run

    tables = ["--job-table", backend.job_table, "--archived-job-table", backend.archived_job_table]
    return run("periodic", "list", *args, *tables, "-d", backend.url)


def test_periodic_list_shows_each_schedule_with_its_next_run(schedules: Backend) -> None:
    assert "no periodic jobs recorded" in cli_list(schedules).stdout
    now = datetime.now(UTC)
    register_at(
        schedules,
        now,
        [
            PeriodicJob("nightly", "0 2 * * *", "report", timezone=BERLIN),
            PeriodicJob("cleanup", "*/15 * * * *", "cleanup", queue="maintenance"),
        ],
    )
    result = cli_list(schedules, "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [(r["name"], r["cron"], r["timezone"], r["queue"]) for r in rows] == [
        ("cleanup", "*/15 * * * *", "UTC", "maintenance"),
        ("nightly", "0 2 * * *", BERLIN, "default"),
    ]
    cleanup_next = datetime.fromisoformat(rows[0]["next_run"])
    assert now < cleanup_next <= now + timedelta(minutes=15) and cleanup_next.minute % 15 == 0
    nightly_next = datetime.fromisoformat(rows[1]["next_run"])
    assert (nightly_next.astimezone(ZoneInfo(BERLIN)).hour, nightly_next.minute) == (2, 0)
    text = cli_list(schedules)
    assert text.exit_code == 0, text.output
    assert "cleanup  */15 * * * * (UTC)" in text.stdout
    assert "maintenance · cleanup" in text.stdout
    assert f"next {cleanup_next.isoformat()}" in text.stdout


def test_a_container_starts_its_scheduler_and_stops_it_on_shutdown(schedules: Backend) -> None:
    from dependency_injector import containers, providers

    from proletarian_di.di import scheduler as scheduler_resource

    source = schedules.pool(2)

    class Container(containers.DeclarativeContainer):
        pool = providers.Object(source)
        periodic = providers.Resource(
            scheduler_resource, pool, [PeriodicJob("m", "@hourly", "tick")]
        )

    container = Container()
    try:
        with worker_running(container):
            started = container.periodic()
            assert started.state == "running"
        assert started.state == "stopped"
    finally:
        source.close()
    assert [s.name for s in list_schedules_now(schedules, datetime.now(UTC))] == ["m"]


def test_a_schedule_that_never_ran_shows_never_until_its_first_tick(schedules: Backend) -> None:
    """Its recorded time is no run: the CLI, its JSON and the dashboard say so, and a tick
    still comes at its time."""
    import warnings

    from proletarian_di.admin import Tables
    from proletarian_di.contrib.dashboard import dashboard

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
        from starlette.testclient import TestClient

    hourly = [PeriodicJob("hourly", "0 * * * *", "report")]
    register_at(schedules, at("2026-05-01 10:30"), hourly)
    source = schedules.pool(1)
    try:
        site = TestClient(dashboard(source, tables=Tables(schedules.job_table)))

        def last_run_cell() -> str:
            page = site.get("/schedules")
            assert page.status_code == 200, page.text
            row = page.text.split('<th scope="row">hourly</th>', 1)[1].split("</tr>", 1)[0]
            return row.split("<td>")[5]

        (schedule,) = list_schedules_now(schedules, at("2026-05-01 10:31"))
        assert schedule.last_run is None and schedule.last_tick == at("2026-05-01 10:30")
        assert json.loads(cli_list(schedules, "--json").stdout)[0]["last_run"] is None
        assert "  last never\n" in cli_list(schedules).stdout
        assert last_run_cell().startswith("never</td>")

        caught_up, _ = register_at(schedules, at("2026-05-01 11:05"), hourly)
        assert [t.tick for t in caught_up] == [at("2026-05-01 11:00")]
        (schedule,) = list_schedules_now(schedules, at("2026-05-01 11:06"))
        assert schedule.last_run == at("2026-05-01 11:00")
        row = json.loads(cli_list(schedules, "--json").stdout)[0]
        assert datetime.fromisoformat(row["last_run"]) == at("2026-05-01 11:00")
        assert "  last 2026-05-01T11:00:00+00:00 (" in cli_list(schedules).stdout
        assert 'datetime="2026-05-01T11:00:00+00:00"' in last_run_cell()
    finally:
        source.close()

"""Schedules an operator controls, kept in the database: disabled and enabled (no tick
enqueued while disabled, no catch-up of those missed on enable), a run requested now
(enqueued once, by one of every scheduler running the schedule), each schedule's recent
runs with their states, and the same read by `periodic list`, the CLI's controls and an
older schema, which names the upgrade only when a control is used."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from proletarian_di import PeriodicJob, SchemaError, create_scheduler, worker_running
from proletarian_di.admin import (
    disable_schedule,
    enable_schedule,
    list_schedules,
    recent_runs,
    request_run,
)
from proletarian_di.schema import MIGRATIONS
from proletarian_di.testing import FakeClock

from backends import Backend, Events, wait_until

UTC = timezone.utc


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.fixture
def schedules(backend: Backend) -> Backend:
    backend.execute(f"DELETE FROM {backend.job_table}_periodic")
    return backend


def waiting(backend: Backend) -> list[tuple[str, Any]]:
    rows = backend.query(
        f"SELECT job_type, payload FROM {backend.job_table} ORDER BY enqueued_at, job_id"
    )
    return [(job_type, json.loads(payload)) for job_type, payload in rows]


def row(backend: Backend, name: str) -> tuple[Any, Any, Any, Any]:
    """The schedule's (last_tick, paused_at, run_requested_at, recent_runs) as stored."""
    [found] = backend.query(
        "SELECT last_tick, paused_at, run_requested_at, recent_runs "
        f"FROM {backend.job_table}_periodic WHERE name = %s",
        (name,),
    )
    return found


def operate(backend: Backend, action: Any, *args: Any, **kwargs: Any) -> Any:
    """Run an admin function on a connection of its own and commit."""
    with contextlib.closing(backend.connect()) as conn:
        result = action(conn, *args, **kwargs)
        conn.commit()
        return result


@contextlib.contextmanager
def schedulers(
    backend: Backend, jobs: list[PeriodicJob], clock: FakeClock, count: int = 1, **options: Any
) -> Iterator[list[Any]]:
    sources = [backend.pool(2) for _ in range(count)]
    try:
        made = [
            create_scheduler(source, jobs, clock=clock, polling_interval_ms=5, **options)
            for source in sources
        ]
        with contextlib.ExitStack() as stack:
            for scheduler in made:
                stack.enter_context(worker_running(scheduler))
            yield made
    finally:
        for source in sources:
            source.close()


MINUTELY = PeriodicJob("m", "* * * * *", "tick", payload={"n": 1})


def test_a_disabled_schedule_enqueues_no_tick_in_any_scheduler_and_on_enable_only_the_next(
    schedules: Backend,
) -> None:
    clock = FakeClock(at("2026-05-01 10:00:30"))
    with schedulers(schedules, [MINUTELY], clock, count=2):
        clock.now = at("2026-05-01 10:01:01")
        wait_until(lambda: len(waiting(schedules)) == 1)
        assert operate(schedules, disable_schedule, "m", now=at("2026-05-01 10:01:30")) is True
        assert operate(schedules, disable_schedule, "m") is False, "disabled already"
        assert row(schedules, "m")[1] is not None
        for minute in (2, 3, 4):
            clock.now = at("2026-05-01 10:00") + timedelta(minutes=minute, seconds=1)
            time.sleep(0.3)  # some 60 passes of each scheduler, 5 ms apart
        assert len(waiting(schedules)) == 1, "no tick enqueued while disabled"
        clock.now = at("2026-05-01 10:04:30")
        assert operate(schedules, enable_schedule, "m", now=clock.now) is True
        assert operate(schedules, enable_schedule, "m") is False, "enabled already"
        assert row(schedules, "m")[1] is None
        clock.now = at("2026-05-01 10:05:01")
        wait_until(lambda: len(waiting(schedules)) == 2)
    assert len(waiting(schedules)) == 2, "the ticks missed while disabled are not caught up"
    [schedule] = operate(schedules, list_schedules)
    assert schedule.enabled and schedule.paused_at is None
    assert [r.tick for r in schedule.runs] == [at("2026-05-01 10:05"), at("2026-05-01 10:01")]


def test_a_scheduler_started_after_enable_catches_up_nothing_missed_while_disabled(
    schedules: Backend,
) -> None:
    hourly = [PeriodicJob("h", "0 * * * *", "report")]
    source = schedules.pool(1)
    try:
        create_scheduler(source, hourly, clock=FakeClock(at("2026-05-01 10:30"))).register()
        assert operate(schedules, disable_schedule, "h")
        caught = create_scheduler(source, hourly, clock=FakeClock(at("2026-05-01 12:10")))
        assert [t.job_id for t in caught.register()] == [None], "disabled: passed over"
        assert operate(schedules, enable_schedule, "h", now=at("2026-05-01 14:20"))
        later = create_scheduler(source, hourly, clock=FakeClock(at("2026-05-01 14:30")))
        assert later.register() == []
    finally:
        source.close()
    assert waiting(schedules) == []


def test_a_requested_run_is_enqueued_once_by_one_of_two_schedulers_even_disabled(
    schedules: Backend,
) -> None:
    log = Events()
    hourly = PeriodicJob("h", "0 * * * *", "report", payload={"what": "sales"})
    clock = FakeClock(at("2026-05-01 10:30"))
    with schedulers(schedules, [hourly], clock, count=2, log=log):
        assert operate(schedules, disable_schedule, "h")
        assert operate(schedules, request_run, "h") is True
        wait_until(lambda: len(log.named("periodic_run_requested")) >= 1)
        wait_until(lambda: row(schedules, "h")[2] is None)
        assert operate(schedules, request_run, "h") is True, "a new request after the first"
        wait_until(lambda: len(log.named("periodic_run_requested")) >= 2)
    assert len(log.named("periodic_run_requested")) == 2, "each request enqueued once"
    assert waiting(schedules) == [("report", {"what": "sales"})] * 2
    runs = operate(schedules, recent_runs, "h")
    assert [r.requested for r in runs] == [True, True]
    assert {r.job_id for r in runs} == {
        str(e["job_id"]) for e in log.named("periodic_run_requested")
    }
    assert [r.state for r in runs] == ["queued", "queued"]


def test_recent_runs_follow_the_jobs_to_the_archive(schedules: Backend) -> None:
    clock = FakeClock(at("2026-05-01 10:00:30"))
    with schedulers(schedules, [MINUTELY], clock):
        for minute in (1, 2, 3):
            clock.now = at("2026-05-01 10:00") + timedelta(minutes=minute, seconds=1)
            wait_until(lambda m=minute: len(waiting(schedules)) == m)
    runs = operate(schedules, recent_runs, "m", limit=2)
    assert [r.tick for r in runs] == [at("2026-05-01 10:03"), at("2026-05-01 10:02")]
    done = runs[0].job_id
    schedules.execute(
        f"INSERT INTO {schedules.archived_job_table} (job_id, queue, job_type, payload, "
        "attempts, enqueued_at, process_at, status, finished_at) SELECT job_id, queue, "
        "job_type, payload, attempts, enqueued_at, process_at, 'success', enqueued_at "
        f"FROM {schedules.job_table} WHERE job_id = %s",
        (done if schedules.name == "postgresql" else bytes.fromhex(done.replace("-", "")),),
    )
    schedules.execute(
        f"DELETE FROM {schedules.job_table} WHERE job_id = %s",
        (done if schedules.name == "postgresql" else bytes.fromhex(done.replace("-", "")),),
    )
    runs = operate(schedules, recent_runs, "m")
    assert [r.state for r in runs] == ["succeeded", "queued", "queued"]
    stored = json.loads(row(schedules, "m")[3])
    assert [r["job_id"] for r in stored] == [r.job_id for r in runs]


def test_an_unknown_schedule_is_a_clear_error(schedules: Backend) -> None:
    for action in (disable_schedule, enable_schedule, request_run, recent_runs):
        with pytest.raises(LookupError, match="no periodic schedule named 'nope'"):
            operate(schedules, action, "nope")


def cli(backend: Backend, *args: str) -> Any:
    from test_cli import run

    tables = ["--job-table", backend.job_table, "--archived-job-table", backend.archived_job_table]
    return run("periodic", *args, *tables, "-d", backend.url)


def test_the_cli_disables_enables_requests_and_lists_the_state_from_the_row(
    schedules: Backend,
) -> None:
    source = schedules.pool(1)
    try:
        create_scheduler(source, [MINUTELY], clock=FakeClock(at("2026-05-01 10:00:30"))).register()
    finally:
        source.close()
    result = cli(schedules, "disable", "m")
    assert result.exit_code == 0, result.output
    assert "disabled" in result.stdout
    paused_at = row(schedules, "m")[1]
    assert paused_at is not None
    assert cli(schedules, "disable", "m").exit_code == 0
    assert "already disabled" in cli(schedules, "disable", "m").stdout
    assert cli(schedules, "run", "m").exit_code == 0
    assert row(schedules, "m")[2] is not None
    listed = json.loads(cli(schedules, "list", "--json").stdout)
    assert listed[0]["enabled"] is False and listed[0]["paused_at"] is not None
    assert listed[0]["run_requested_at"] is not None
    text = cli(schedules, "list").stdout
    assert "disabled since" in text and "run requested" in text
    assert cli(schedules, "enable", "m").exit_code == 0
    assert row(schedules, "m")[1] is None
    assert json.loads(cli(schedules, "list", "--json").stdout)[0]["enabled"] is True
    missing = cli(schedules, "disable", "nope")
    assert missing.exit_code != 0 and "no periodic schedule named 'nope'" in missing.output


def drop_controls(backend: Backend) -> None:
    table = f"{backend.job_table}_periodic"
    backend.execute(
        f"ALTER TABLE {table} DROP COLUMN paused_at, DROP COLUMN run_requested_at, "
        "DROP COLUMN recent_runs"
    )
    step = next(m.version for m in MIGRATIONS[backend.name] if m.name == "schedule_controls")
    backend.execute(f"UPDATE {backend.job_table}_schema_version SET version = %s", (step - 1,))


def test_an_older_schema_runs_schedules_and_names_the_upgrade_only_for_the_controls(
    schedules: Backend,
) -> None:
    drop_controls(schedules)
    try:
        clock = FakeClock(at("2026-05-01 10:00:30"))
        with schedulers(schedules, [MINUTELY], clock):
            clock.now = at("2026-05-01 10:01:01")
            wait_until(lambda: len(waiting(schedules)) == 1)
        [schedule] = operate(schedules, list_schedules)
        assert schedule.enabled and schedule.runs == ()
        for action in (disable_schedule, enable_schedule, request_run, recent_runs):
            with pytest.raises(SchemaError, match="proletarian-di schema upgrade"):
                operate(schedules, action, "m")
    finally:
        schedules.install()


def test_schedulers_racing_on_each_request_enqueue_it_once(schedules: Backend) -> None:
    """Four schedulers pass at the same moment after each request: one job per request."""
    hourly = [PeriodicJob("h", "0 * * * *", "report")]
    sources = [schedules.pool(1) for _ in range(4)]
    try:
        racers = [
            create_scheduler(source, hourly, clock=FakeClock(at("2026-05-01 10:30")))
            for source in sources
        ]
        for scheduler in racers:
            scheduler.register()
        barrier = threading.Barrier(len(racers))
        won: list[Any] = []
        lock = threading.Lock()

        def race(scheduler: Any) -> None:
            for _ in range(8):
                barrier.wait(timeout=30)  # the request is in
                ticks = scheduler.run_pending()
                with lock:
                    won.extend(t.job_id for t in ticks if t.requested)
                barrier.wait(timeout=30)  # every racer has passed

        threads = [threading.Thread(target=race, args=(s,)) for s in racers[1:]]
        for thread in threads:
            thread.start()
        for _ in range(8):
            assert operate(schedules, request_run, "h") is True
            barrier.wait(timeout=30)
            with lock:
                won.extend(t.job_id for t in racers[0].run_pending() if t.requested)
            barrier.wait(timeout=30)
        for thread in threads:
            thread.join(60)
    finally:
        for source in sources:
            source.close()
    assert len(won) == 8 and len(set(won)) == 8, "each request enqueued once"
    assert len(waiting(schedules)) == 8

"""`proletarian-di queue pause` and `resume`, against the real databases."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from cli_fixtures.cli_db import ARCHIVE, JOB, CliDB
from test_cli import one_line, process, run

from proletarian_di import admin
from proletarian_di.schema import periodic_table

from backends import committed


@pytest.fixture
def db(backend):
    return CliDB(backend)


def paused(db: CliDB) -> set[str]:
    return set(committed(db.backend, admin.paused_queues, tables=admin.Tables(JOB, ARCHIVE)))


def schedule(db: CliDB, queue: str) -> None:
    now = datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(minutes=1)
    db.backend.execute(
        f"INSERT INTO {periodic_table(JOB)} "
        "(name, cron, timezone, job_type, queue, last_tick, updated_at) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s)",
        ("nightly", "0 2 * * *", "UTC", "report", queue, now, now),
    )


def test_pausing_a_queue_nothing_used_warns_naming_the_known_ones_and_pauses_it(db):
    db.enqueue(("ok", 1), queue="default")
    db.enqueue(("mail", 2), queue="email")
    result = run("queue", "pause", "emial", "-d", db.url)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "queue emial paused"
    assert one_line(result.stderr) == (
        "warning: no job has ever used queue 'emial'; known queues: 'default', 'email'"
    )
    assert "emial" in paused(db)


def test_pausing_where_no_queue_is_known_says_none(db):
    result = run("queue", "pause", "ahead", "-d", db.url)
    assert result.exit_code == 0, result.output
    assert "known queues: none" in one_line(result.stderr)


@pytest.mark.parametrize("known_by", ["waiting job", "archived job", "schedule", "pause"])
def test_pausing_a_known_queue_says_nothing_more(db, pool, known_by):
    if known_by == "waiting job":
        db.enqueue(("ok", 1), queue="email")
    elif known_by == "archived job":
        db.enqueue(("ok", 1), queue="email")
        assert process(pool, lambda t, p: None, queue="email") is True
        assert db.archived() and not db.jobs()
    elif known_by == "schedule":
        schedule(db, "email")
    else:
        assert "warning" in run("queue", "pause", "email", "-d", db.url).stderr
    result = run("queue", "pause", "email", "-d", db.url)
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    assert "email" in paused(db)


def test_resuming_an_unknown_queue_says_it_was_not_paused_and_which_queues_exist(db):
    db.enqueue(("mail", 2), queue="email")
    result = run("queue", "resume", "emial", "-d", db.url)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "queue emial was not paused"
    assert "no job has ever used queue 'emial'; known queues: 'email'" in one_line(result.stderr)


def test_resuming_a_paused_queue_warns_of_nothing(db):
    assert run("queue", "pause", "email", "-d", db.url).exit_code == 0
    result = run("queue", "resume", "email", "-d", db.url)
    assert result.stdout.strip() == "queue email resumed"
    assert result.stderr == ""

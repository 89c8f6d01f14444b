"""What the CLI prints of the data anyone who can enqueue controls: shown, never obeyed.

Job types, queue names, payloads, errors and schedules holding terminal control sequences
(clear screen, window title, cursor moves), rich markup or emoji codes reach the
operator's terminal written out, in every table and listing, on both databases.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from cli_fixtures.cli_db import JOB, TABLES, CliDB
from test_cli import run

from proletarian_di import process_next_job
from proletarian_di.schema import periodic_table

CLEAR = "\x1b[2J\x1b[H"
TITLE = "\x1b]0;owned\x07"
EVIL_TYPE = f"mail{CLEAR}{TITLE}\rfake\x9b31m\x7f\u202eexe.txt[bold red]loud[/] :thumbs_up:"
EVIL_QUEUE = f"q{CLEAR}\x1b[31mred\n\x85[blink]x[/]"
# What must not reach the terminal raw: C0 (but newline and tab where text has lines),
# DEL, C1, and the bidi override.
RAW = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e]")


def fail(job_type: str, payload: Any) -> None:
    raise RuntimeError(f"boom {CLEAR}{TITLE} [red]x[/]")


@pytest.fixture
def db(backend):
    return CliDB(backend)


def shown(result) -> str:
    assert result.exit_code == 0, result.output
    text = result.stdout + result.stderr
    assert not RAW.search(text), repr(text)
    assert "👍" not in text, "emoji codes in data are not replaced"
    return text


def flat(text: str) -> str:
    """`text` without its spaces and line breaks (rich wraps at 80 columns)."""
    return "".join(text.split())


def has(text: str, *pieces: str) -> bool:
    return all(flat(piece) in flat(text) for piece in pieces)


def test_jobs_list_and_show_write_control_characters_out(db, pool):
    [failed] = db.enqueue((EVIL_TYPE, 1), queue=EVIL_QUEUE)
    process_next_job(pool, fail, queue=EVIL_QUEUE, **TABLES)
    [waiting] = db.enqueue((EVIL_TYPE, {"note": f"n{CLEAR}\x9b2J"}), queue=EVIL_QUEUE)
    listed = shown(run("jobs", "list", "-d", db.url))
    assert has(listed, "mail\\x1b[2J\\x1b[H\\x1b]0;owned\\x07\\rfake\\x9b31m\\x7f\\u202eexe.txt")
    assert has(listed, "[bold red]loud[/]"), "markup in data is printed, not applied"
    assert has(listed, ":thumbs_up:")
    assert has(listed, "q\\x1b[2J\\x1b[H\\x1b[31mred\\n\\x85[blink]x[/]")
    for job_id in (waiting, failed):
        text = shown(run("jobs", "show", str(job_id), "-d", db.url))
        assert has(text, "\\x1b]0;owned\\x07", "[bold red]loud[/]")
    text = shown(run("jobs", "show", str(waiting), "-d", db.url))
    assert has(text, "\\x9b2J"), "the payload's C1 controls too"
    failed_text = shown(run("jobs", "show", str(failed), "-d", db.url))
    assert has(failed_text, "boom \\x1b[2J", "[red]x[/]")
    assert "Traceback (most recent call last):\n" in failed_text, "the error keeps its lines"


def test_stats_and_retry_failed_write_them_out(db, pool):
    db.enqueue((EVIL_TYPE, 1), (EVIL_TYPE, 2), queue=EVIL_QUEUE)
    process_next_job(pool, fail, queue=EVIL_QUEUE, **TABLES)
    text = shown(run("stats", "-d", db.url))
    assert has(text, "\\x1b[31mred", "[blink]x[/]")
    dry = shown(run("retry-failed", "--dry-run", "-d", db.url))
    assert has(dry, "\\x1b]0;owned\\x07")
    shown(run("retry-failed", "--job-type", EVIL_TYPE, "-d", db.url))
    assert db.archived() == []


def test_queue_pause_and_cancel_write_them_out(db):
    db.enqueue((EVIL_TYPE, 1), queue=EVIL_QUEUE)
    text = shown(run("queue", "pause", EVIL_QUEUE, "-d", db.url))
    assert has(text, "\\x1b[31mred")
    assert "(paused)" in shown(run("stats", "-d", db.url))
    shown(run("queue", "resume", EVIL_QUEUE, "-d", db.url))
    shown(run("jobs", "cancel", "--queue", EVIL_QUEUE, "-d", db.url))


def test_periodic_list_writes_them_out(db):
    table = periodic_table(JOB)
    db.backend.execute(f"DELETE FROM {table}")
    now = datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(minutes=1)
    db.backend.execute(
        f"INSERT INTO {table} (name, cron, timezone, job_type, queue, last_tick, updated_at) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s)",
        (f"nightly{TITLE}", "0 2 * * *", "UTC", EVIL_TYPE, EVIL_QUEUE, now, now),
    )
    try:
        text = shown(run("periodic", "list", "-d", db.url))
        assert has(text, "nightly\\x1b]0;owned\\x07", "[bold red]loud[/]")
        as_json = run("periodic", "list", "--json", "-d", db.url)
        assert json.loads(as_json.stdout)[0]["job_type"] == EVIL_TYPE
    finally:
        db.backend.execute(f"DELETE FROM {table}")


def test_json_output_keeps_the_data_exact(db):
    db.enqueue((EVIL_TYPE, 1), queue=EVIL_QUEUE)
    result = run("jobs", "list", "--json", "-d", db.url)
    assert not RAW.search(result.stdout)
    [job] = json.loads(result.stdout)
    assert (job["job_type"], job["queue"]) == (EVIL_TYPE, EVIL_QUEUE)

"""`proletarian-di jobs` (list, find, show, retry, cancel), the stats Running column and
`retry-failed --dry-run`'s listing, against the real databases."""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from cli_fixtures.cli_db import JOB, TABLES, CliDB
from test_cli import flat, one_line, run

from proletarian_di import RetrySpec, process_next_job

from backends import lock_view_settled

MISSING = "00000000-0000-7000-8000-000000000000"


@pytest.fixture
def db(backend):
    return CliDB(backend)


def fail(job_type: str, payload: Any) -> None:
    raise RuntimeError(f"boom on {payload}")


def process(pool: Any, handler: Any, **options: Any) -> bool:
    return process_next_job(pool, handler, **TABLES, **options)


@contextlib.contextmanager
def held(db: CliDB, job_id: uuid.UUID) -> Iterator[None]:
    """Hold a job's row lock, as a worker running it does, until the block ends."""
    conn = db.backend.connect()
    try:
        key = job_id.bytes if db.name == "mysql" else job_id
        cursor = conn.cursor()
        cursor.execute(f"SELECT job_id FROM {JOB} WHERE job_id = %s FOR UPDATE", (key,))
        assert cursor.fetchall()
        lock_view_settled(db.backend)  # MySQL's view of row locks lags 100 ms behind
        yield
    finally:
        conn.rollback()
        conn.close()


def listed(*args: str, url: str) -> list[dict[str, Any]]:
    result = run("jobs", "list", "--json", *args, "-d", url)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_list_shows_every_state_newest_first(db, pool):
    [done, failed] = db.enqueue(("ok", 1), ("bad", 2), queue="a")
    assert process(pool, lambda t, p: None, queue="a") is True
    assert process(pool, fail, queue="a") is False
    [later] = db.enqueue(("later", 3), queue="b", process_in=timedelta(hours=1))
    [running, waiting] = db.enqueue(("slow", 4), ("ok", 5), queue="b")
    with held(db, running):
        states = {row["job_id"]: row["state"] for row in listed(url=db.url)}
        assert listed("--state", "running", url=db.url)[0]["job_id"] == str(running)
        text = run("jobs", "list", "-d", db.url, env={"COLUMNS": "80"})
    assert states == {
        str(done): "succeeded",
        str(failed): "failed",
        str(later): "scheduled",
        str(running): "running",
        str(waiting): "queued",
    }
    assert text.exit_code == 0, text.output
    assert str(running) in text.stdout and "running" in text.stdout
    assert "b · slow" in text.stdout
    assert max(len(line) for line in text.stdout.splitlines()) <= 80


def test_list_filters_and_pages(db):
    ids = db.enqueue(*(("mail", n) for n in range(5)), queue="a")
    db.enqueue(("report", 9), queue="a")
    db.enqueue(("mail", 10), queue="b")
    assert [row["job_type"] for row in listed("--queue", "a", "-n", "10", url=db.url)].count(
        "mail"
    ) == 5
    first = run("jobs", "list", "--queue", "a", "--job-type", "mail", "-n", "3", "-d", db.url)
    assert first.exit_code == 0, first.output
    cursor = first.stdout.split("next page: --before ")[1].split()[0]
    second = listed("--queue", "a", "--job-type", "mail", "--before", cursor, url=db.url)
    wanted = set(map(str, ids))
    page_one = [line.split()[0] for line in first.stdout.splitlines() if line[:36] in wanted]
    page_two = [row["job_id"] for row in second]
    assert (len(page_one), len(page_two)) == (3, 2)
    assert set(page_one + page_two) == wanted
    assert "next page" not in run("jobs", "list", "--queue", "b", "-d", db.url).stdout


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["--state", "lost"], "state"),
        (["--limit", "0"], "--limit"),
        (["--before", "not-a-cursor"], "cursor"),
    ],
)
def test_list_bad_options_are_usage_errors(db, args, problem):
    result = run("jobs", "list", *args, "-d", db.url)
    assert result.exit_code == 2, result.output
    assert problem in result.stderr
    assert "Traceback" not in result.output


def test_find_by_an_ids_end_or_start_and_by_payload(db, pool):
    [sent, other] = db.enqueue(("mail", {"to": "ada@example.com"}), ("report", 7), queue="a")
    assert process(pool, fail, queue="a") is False  # the mail failed: it is in the archive
    tail = sent.hex[-12:]
    found = run("jobs", "find", tail, "-d", db.url)
    assert found.exit_code == 0, found.output
    assert str(sent) in found.stdout and str(other) not in found.stdout
    as_json = run("jobs", "find", str(sent)[:13], "--by", "id", "--json", "-d", db.url)
    assert as_json.exit_code == 0, as_json.output
    assert str(sent) in [row["job_id"] for row in json.loads(as_json.stdout)]
    payload = run("jobs", "find", "ada@example", "--by", "payload", "--json", "-d", db.url)
    assert [(row["job_id"], row["state"]) for row in json.loads(payload.stdout)] == [
        (str(sent), "failed")
    ]
    nothing = run("jobs", "find", "nobody", "-d", db.url)
    assert nothing.exit_code == 0 and "no jobs" in nothing.stdout


def test_find_payload_text_as_typed(db):
    [path, quoted, _] = db.enqueue(
        ("copy", {"from": "C:\\temp\\new"}), ("say", {"text": 'say "hi"'}), ("say", {"say": "hi"})
    )
    for text, job_id in (("C:\\temp\\new", path), ('say "hi"', quoted)):
        result = run("jobs", "find", text, "--by", "payload", "--json", "-d", db.url)
        assert result.exit_code == 0, result.output
        assert [row["job_id"] for row in json.loads(result.stdout)] == [str(job_id)], text


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["zz-top", "--by", "id"], "is not a job id nor the start or end of one"),
        (["x", "--by", "queue"], "by must be one of any, id, job_type, payload"),
    ],
)
def test_find_bad_input_is_a_usage_error(db, args, problem):
    result = run("jobs", "find", *args, "-d", db.url)
    assert result.exit_code == 2, result.output
    assert problem in one_line(result.stderr)


def test_show_prints_payload_and_the_whole_error(db, pool):
    [job_id] = db.enqueue(("bad", {"order": "A-17", "note": "ü" * 3}))
    assert process(pool, fail) is False
    text = run("jobs", "show", str(job_id), "-d", db.url)
    assert text.exit_code == 0, text.output
    for expected in (str(job_id), "failed", '"order": "A-17"', "üüü", "RuntimeError: boom on"):
        assert expected in text.stdout
    shown = run("jobs", "show", str(job_id), "--json", "-d", db.url)
    record = json.loads(shown.stdout)
    assert record["state"] == "failed" and record["attempts"] == 1
    assert record["payload"] == {"order": "A-17", "note": "üüü"}
    assert "Traceback" in record["error"] and "boom on" in record["error"]


def test_show_lists_every_attempt(db, pool):
    [job_id] = db.enqueue(("flaky", 1))
    failed: list[int] = []

    def flaky(job_type: str, payload: Any) -> None:
        if not failed:
            failed.append(payload)
            raise TimeoutError("upstream slow")

    once = {"retry_strategy_fn": lambda job, exc: RetrySpec(retries=1)}
    assert process(pool, flaky, **once) is False
    assert process(pool, flaky, **once) is True
    text = run("jobs", "show", str(job_id), "-d", db.url, env={"COLUMNS": "200"})
    assert text.exit_code == 0, text.output
    lines = [line.strip() for line in text.stdout.splitlines()]
    start = lines.index("history")
    first, second = lines[start + 1 : start + 3]
    assert first.startswith("#1 ") and first.endswith("TimeoutError: upstream slow")
    assert second.startswith("#2 ") and second.endswith("succeeded")
    for line in (first, second):
        assert re.search(r" \d+\.\d{3}s ", line) and " proletarian[default] " in line
    record = json.loads(run("jobs", "show", str(job_id), "--json", "-d", db.url).stdout)
    assert [a["number"] for a in record["history"]] == [1, 2]
    assert record["history"][0]["error"].startswith("TimeoutError: upstream slow")
    assert record["history"][1]["error"] is None
    assert record["history"][1]["duration_seconds"] >= 0


def test_show_missing_or_malformed_id(db):
    missing = run("jobs", "show", MISSING, "-d", db.url)
    assert missing.exit_code == 1
    assert f"no job {MISSING}" in one_line(missing.stderr)
    malformed = run("jobs", "show", "42", "-d", db.url)
    assert malformed.exit_code == 2
    assert "not a job id" in one_line(malformed.stderr)


def test_a_status_another_process_wrote_is_printed_escaped(db, pool):
    """An archived job's status as another writer left it (the Django backend writes its
    own): `jobs list` and `jobs explain` write its control characters out, never obey them."""
    [done] = db.enqueue(("ok", 1))
    assert process(pool, lambda t, p: None) is True
    db.backend.execute(f"UPDATE {TABLES['archived_job_table']} SET status = %s", ("\x1b[2J",))
    for args in (["jobs", "list"], ["jobs", "explain", str(done)]):
        result = run(*args, "-d", db.url)
        assert result.exit_code == 0, result.output
        assert "\x1b" not in result.output and "\\x1b[2J" in result.output, result.output


def test_explain_says_what_holds_a_job_back(db, pool):
    [later] = db.enqueue(("later", 1), queue="reports", process_in=timedelta(hours=1))
    text = run("jobs", "explain", str(later), "-d", db.url, env={"COLUMNS": "200"})
    assert text.exit_code == 0, text.output
    shown = flat(text.stdout)
    assert f"{later} scheduled in queue reports - scheduled until " in shown
    assert shown.endswith("UTC - no live worker polls queue 'reports'")
    record = json.loads(run("jobs", "explain", str(later), "--json", "-d", db.url).stdout)
    assert (record["job_id"], record["state"], record["note"]) == (str(later), "scheduled", None)
    assert record["reasons"][0].startswith("scheduled until ") and len(record["reasons"]) == 2
    [done] = db.enqueue(("ok", 2))
    assert process(pool, lambda t, p: None) is True
    finished = flat(run("jobs", "explain", str(done), "-d", db.url).stdout)
    assert f"{done} succeeded in queue default succeeded at " in finished
    assert " - " not in finished.split("in queue default", 1)[1]
    missing = run("jobs", "explain", MISSING, "-d", db.url)
    assert missing.exit_code == 1
    assert f"no job {MISSING}" in one_line(missing.stderr)
    malformed = run("jobs", "explain", "42", "-d", db.url)
    assert malformed.exit_code == 2
    assert "not a job id" in one_line(malformed.stderr)


def test_retry_by_id_moves_only_failed_jobs(db, pool):
    [first, second, kept] = db.enqueue(("bad", 1), ("bad", 2), ("waiting", 3), queue="a")
    assert process(pool, fail, queue="a") is False
    assert process(pool, fail, queue="a") is False
    moved = run("jobs", "retry", str(first), str(kept), "-d", db.url)
    assert moved.exit_code == 0, moved.output
    assert "moved 1 failed job " in moved.stdout
    assert db.jobs() == [("bad", 0, "a"), ("waiting", 0, "a")]
    assert db.archived() == [("bad", "failure", 1)]
    by_filter = run("jobs", "retry", "--job-type", "bad", "--since", "1h", "-d", db.url)
    assert "moved 1 failed job " in by_filter.stdout
    assert db.archived() == []
    assert str(second) in {row["job_id"] for row in listed("--state", "queued", url=db.url)}


def test_cancel_skips_the_running_job(db):
    [running, waiting, other] = db.enqueue(("slow", 1), ("slow", 2), ("mail", 3), queue="a")
    with held(db, running):
        result = run("jobs", "cancel", "--job-type", "slow", "-d", db.url)
    assert result.exit_code == 0, result.output
    assert "cancelled 1 waiting job " in result.stdout
    assert db.jobs() == [("mail", 0, "a"), ("slow", 0, "a")]
    assert db.archived() == [("slow", "cancelled", 0)]
    assert listed("--state", "cancelled", url=db.url)[0]["job_id"] == str(waiting)
    by_id = run("jobs", "cancel", str(other), "-d", db.url)
    assert "cancelled 1 waiting job " in by_id.stdout
    assert db.jobs() == [("slow", 0, "a")]


@pytest.mark.parametrize("command", ["retry", "cancel"])
def test_retry_or_cancel_without_ids_or_filter_is_refused(db, command):
    db.enqueue(("mail", 1))
    result = run("jobs", command, "-d", db.url)
    assert result.exit_code == 2
    assert "give job ids, or a filter (--queue, --job-type" in one_line(result.stderr)
    assert db.jobs() == [("mail", 0, "default")]


def test_stats_counts_the_running_job(db):
    [running, _] = db.enqueue(("slow", 1), ("slow", 2), queue="a")
    with held(db, running):
        result = run("stats", "--json", "-d", db.url)
        table = run("stats", "-d", db.url, env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.stdout)
    assert (row["queue"], row["due"], row["running"]) == ("a", 2, 1)
    assert table.exit_code == 0, table.output
    assert "Running" in table.stdout
    assert max(len(line.rstrip()) for line in table.stdout.splitlines()) <= 80
    [after] = json.loads(run("stats", "--json", "-d", db.url).stdout)
    assert after["running"] == 0


def test_retry_failed_dry_run_lists_what_it_would_move(db, pool, monkeypatch):
    monkeypatch.setattr("proletarian_di.contrib.cli.admin._DRY_RUN_SHOWN", 2)
    ids = db.enqueue(("bad", 1), ("bad", 2), ("bad", 3), queue="a")
    for _ in ids:
        assert process(pool, fail, queue="a") is False
    dry = run("retry-failed", "--dry-run", "-d", db.url)
    assert dry.exit_code == 0, dry.output
    assert "would move 3 failed jobs" in dry.stdout
    assert sum(str(job_id) in dry.stdout for job_id in ids) == 2
    assert "… and 1 more" in dry.stdout
    assert len(db.archived()) == 3 and db.jobs() == []

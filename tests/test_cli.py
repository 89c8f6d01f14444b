"""`proletarian-di` commands through typer's CliRunner, against the real databases."""

from __future__ import annotations

import json
import logging
import uuid
from datetime import datetime, timedelta, timezone

import pytest
from cli_fixtures.cli_db import ARCHIVE, ENV, JOB, TABLES, CliDB
from typer.testing import CliRunner

from proletarian_di import create_queue_worker, process_next_job
from proletarian_di._store.outcomes import first_hour
from proletarian_di.cli import app
from proletarian_di.contrib.cli._app import CLIError, console, parse_duration, parse_moment
from proletarian_di.mysql import mask, parse_mysql_url
from proletarian_di.schema import outcomes_table

runner = CliRunner()
UNREACHABLE = "postgresql://u@127.0.0.1:1/nowhere"
COMMANDS = ["demo", "worker", "schema", "enqueue", "stats", "retry-failed", "purge-archive"]
WITH_BOTH_TABLES = [["stats"], ["retry-failed"], ["purge-archive", "--older-than", "1d"]]


def run(*args: str, env: dict[str, str | None] | None = None):
    """Invoke the CLI on the CLI tests' own tables (named by environment variables), with
    DATABASE_URL unset unless `env` sets it (only for the invocation: None unsets)."""
    return runner.invoke(app, list(args), env={"DATABASE_URL": None, **ENV, **(env or {})})


def one_line(text: str) -> str:
    """The only line of `text` (stderr), with no traceback."""
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


def flat(text: str) -> str:
    """`text` with rich's line wrapping undone."""
    return " ".join(text.split())


def fail(job_type, payload):
    raise RuntimeError("boom")


def process(pool, handler, **options):
    return process_next_job(pool, handler, **TABLES, **options)


@pytest.fixture
def db(backend):
    return CliDB(backend)


def test_help_lists_commands_and_env_vars():
    result = run("--help")
    assert result.exit_code == 0
    for command in COMMANDS:
        assert command in result.output
    wide = {"COLUMNS": "200"}
    stats_help = run("stats", "--help", env=wide).output
    assert "PROLETARIAN_DATABASE_URL" in stats_help
    assert "PROLETARIAN_JOB_TABLE" in stats_help
    assert "PROLETARIAN_PATH" in run("worker", "--help", env=wide).output
    assert "DATABASE_URL; PROLETARIAN_DATABASE_URL wins" in flat(stats_help)


@pytest.mark.parametrize(
    "command",
    [[], *([c] for c in COMMANDS), *(["schema", c] for c in ("print", "install", "check"))],
)
def test_help_shows_no_bool_metavar(command):
    result = run(*command, "--help", env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "<bool>" not in result.output
    assert "--help" in result.output


def test_usage_lines_name_arguments_as_usual():
    wide = {"COLUMNS": "200"}
    enqueue = run("enqueue", "--help", env=wide).output
    assert "proletarian-di enqueue [OPTIONS] JOB_TYPE [PAYLOAD_JSON]" in enqueue
    assert "proletarian-di worker [OPTIONS] TARGET" in run("worker", "--help", env=wide).output
    assert "schema upgrade [OPTIONS]" in run("schema", "upgrade", "--help", env=wide).output


@pytest.mark.parametrize("dialect", ["postgresql", "mysql"])
def test_schema_print_renders_custom_table_names(dialect):
    result = run(
        "schema",
        "print",
        "--dialect",
        dialect,
        "--job-table",
        "app.jobs",
        "--archived-job-table",
        "app.done",
    )
    assert result.exit_code == 0, result.output
    assert "CREATE TABLE IF NOT EXISTS app.jobs" in result.stdout
    assert "CREATE TABLE IF NOT EXISTS app.done" in result.stdout
    assert ("UUID" if dialect == "postgresql" else "BINARY(16)") in result.stdout


def test_schema_print_takes_the_dialect_from_the_url():
    result = run("schema", "print", "-d", "mysql://root:pw@127.0.0.1/test")
    assert result.exit_code == 0
    assert "ENGINE=InnoDB" in result.stdout


def test_schema_print_needs_a_dialect():
    result = run("schema", "print")
    assert result.exit_code == 2
    assert "--dialect" in result.stderr


def test_schema_install_then_check_custom_tables(backend):
    tables = [
        "--job-table",
        "cli_custom.custom_job",
        "--archived-job-table",
        "cli_custom.custom_archived_job",
    ]
    backend.will_create("cli_custom")
    installed = run("schema", "install", "-d", backend.url, *tables)
    assert installed.exit_code == 0, installed.output
    again = run("schema", "install", "-d", backend.url, *tables)
    assert again.exit_code == 0, again.output
    checked = run("schema", "check", "-d", backend.url, *tables)
    assert checked.exit_code == 0, checked.output
    assert "ready" in checked.stdout
    assert backend.query("SELECT COUNT(*) FROM cli_custom.custom_archived_job")[0][0] == 0


def test_schema_check_missing_tables_exits_6(backend):
    result = run(
        "schema",
        "check",
        "-d",
        backend.url,
        "--job-table",
        "cli_absent.job",
        "--archived-job-table",
        "cli_absent.archived_job",
    )
    assert result.exit_code == 6
    assert "cli_absent.job" in result.stderr
    assert "Traceback" not in result.output


def test_enqueue_prints_the_job_id_and_schedules(db):
    result = run(
        "enqueue",
        "send_email",
        '{"to": "a@example.com"}',
        "--queue",
        "mail",
        "--in",
        "60",
        "-d",
        db.url,
    )
    assert result.exit_code == 0, result.output
    job_id = uuid.UUID(result.stdout.strip())
    assert db.jobs() == [("send_email", 0, "mail")]
    stats = json.loads(run("stats", "--json", "-d", db.url).stdout)
    assert stats[0]["queue"] == "mail"
    assert (stats[0]["due"], stats[0]["scheduled"]) == (0, 1)
    assert job_id.version == 7


def test_enqueue_reads_the_url_from_the_environment(db):
    result = run("enqueue", "ping", env={"PROLETARIAN_DATABASE_URL": db.url})
    assert result.exit_code == 0, result.output
    assert db.jobs() == [("ping", 0, "default")]


def test_enqueue_priority_runs_that_job_first(db, pool):
    assert run("enqueue", "low", "-d", db.url).exit_code == 0
    result = run("enqueue", "high", "--priority", "5", "-d", db.url)
    assert result.exit_code == 0, result.output
    assert flat(result.stderr).endswith("due now, priority 5")
    ran = []
    assert process(pool, lambda job_type, payload: ran.append(job_type)) is True
    assert ran == ["high"]


@pytest.mark.parametrize("value", [str(2**31), str(-(2**31))])
def test_enqueue_refuses_a_priority_out_of_range(db, value):
    result = run("enqueue", "x", "--priority", value, "-d", db.url)
    assert result.exit_code == 2
    assert "priority must be between -2147483647 and 2147483647" in one_line(result.stderr)
    assert db.jobs() == []


def test_enqueue_unique_key_enqueues_once_and_prints_the_holder(db):
    first = run("enqueue", "sync", '{"n": 1}', "--unique-key", "nightly", "-d", db.url)
    assert first.exit_code == 0, first.output
    assert flat(first.stderr).endswith("due now, unique key 'nightly'")
    again = run("enqueue", "sync", '{"n": 2}', "--unique-key", "nightly", "-d", db.url)
    assert again.exit_code == 0, again.output
    assert again.stdout == first.stdout
    job_id = first.stdout.strip()
    assert flat(again.stderr).startswith(f"enqueued nothing: job {job_id} on queue 'default'")
    assert flat(again.stderr).endswith("holds unique key 'nightly'")
    assert db.jobs() == [("sync", 0, "default")]
    assert db.payloads(JOB) == [{"n": 1}]
    other_queue = run("enqueue", "sync", "--unique-key", "nightly", "-q", "b", "-d", db.url)
    assert other_queue.stdout != first.stdout
    assert len(db.jobs()) == 2


def test_enqueue_rejects_invalid_json(db):
    result = run("enqueue", "ping", "{not json", "-d", db.url)
    assert result.exit_code == 2
    assert "PAYLOAD_JSON is not valid JSON" in result.stderr
    assert db.jobs() == []


def test_stats_counts_due_scheduled_and_outcomes(db, pool):
    db.enqueue(("ok", 1), ("ok", 2), ("bad", 3), queue="a")
    db.enqueue(("later", 4), queue="b", process_in=timedelta(hours=1))
    db.enqueue(("ok", 5), queue="b")
    assert process(pool, lambda t, p: None, queue="a") is True
    assert process(pool, lambda t, p: None, queue="a") is True
    assert process(pool, fail, queue="a") is False
    result = run("stats", "--json", "-d", db.url)
    assert result.exit_code == 0, result.output
    rows = {row["queue"]: row for row in json.loads(result.stdout)}
    assert rows["a"]["due"] == 0 and rows["a"]["scheduled"] == 0
    assert rows["a"]["oldest_due_seconds"] is None
    assert (rows["a"]["succeeded_last_day"], rows["a"]["failed_last_day"]) == (2, 1)
    assert (rows["a"]["succeeded_last_hour"], rows["a"]["failed_last_hour"]) == (2, 1)
    assert (rows["b"]["due"], rows["b"]["scheduled"]) == (1, 1)
    assert rows["b"]["oldest_due_seconds"] >= 0
    table = run("stats", "-d", db.url, env={"COLUMNS": "200"})
    assert table.exit_code == 0
    assert all(header in table.stdout for header in ("Due", "Running", "Later", "OK 1h", "OK 24h"))


@pytest.mark.parametrize("columns", [80, 40])
def test_stats_never_cuts_a_number(db, columns, monkeypatch):
    """In 80 columns (and 40) every figure is printed whole, as `--json` and the database
    have it: the outcomes of a summed-up hour (the day's first) are in the table, their
    queue name long."""
    queue = "notifications-digest"
    hour = first_hour(datetime.now(timezone.utc) + timedelta(seconds=10))  # the test's hour
    at = hour.replace(tzinfo=None) if db.name == "mysql" else hour
    for name, succeeded, failed in ((queue, 123456789012, 43), ("", 123456789012, 43)):
        db.backend.execute(
            f"INSERT INTO {outcomes_table(JOB)} (hour, queue, succeeded, failed, archived) "
            "VALUES (%s, %s, %s, %s, %s)",
            (at, name, succeeded, failed, succeeded + failed),
        )
    db.enqueue(*[("ok", n) for n in range(12)], queue=queue)
    [stats] = json.loads(run("stats", "--json", "-d", db.url).stdout)
    [(due,)] = db.backend.query(f"SELECT COUNT(*) FROM {JOB} WHERE queue = %s", (queue,))
    assert (stats["due"], stats["succeeded_last_day"], stats["failed_last_day"]) == (
        due,
        123456789012,
        43,
    )
    monkeypatch.setattr(
        console, "_width", columns
    )  # restored to None: the width follows COLUMNS again
    table = run("stats", "-d", db.url)
    assert table.exit_code == 0, table.output
    assert max(len(line) for line in table.stdout.splitlines()) <= columns, table.stdout
    figures = table.stdout.split()
    assert "…" not in table.stdout
    for name in ("due", "succeeded_last_day", "failed_last_day"):
        assert str(stats[name]) in figures, (name, table.stdout)


def test_stats_counts_outcomes_of_the_last_hour_and_day_only(db, pool):
    db.enqueue(("ok", 1), ("ok", 2), ("bad", 3), queue="a")
    for handler in (lambda t, p: None, lambda t, p: None, fail):
        process(pool, handler, queue="a")
    now = datetime.now(timezone.utc)
    for job_type, ago in (("ok", timedelta(hours=3)), ("bad", timedelta(days=2))):
        [(job_id,), *_] = db.backend.query(
            f"SELECT job_id FROM {ARCHIVE} WHERE job_type = %s", (job_type,)
        )
        when = (now - ago).replace(tzinfo=None) if db.name == "mysql" else now - ago
        db.backend.execute(
            f"UPDATE {ARCHIVE} SET finished_at = %s WHERE job_id = %s", (when, job_id)
        )
    [row] = json.loads(run("stats", "--json", "-d", db.url).stdout)
    assert (row["succeeded_last_hour"], row["failed_last_hour"]) == (1, 0)
    assert (row["succeeded_last_day"], row["failed_last_day"]) == (2, 0)


def test_stats_without_schema_exits_6(db):
    result = run(
        "stats",
        "-d",
        db.url,
        "--job-table",
        "cli_absent.job",
        "--archived-job-table",
        "cli_absent.archived_job",
    )
    assert result.exit_code == 6
    assert "schema" in result.stderr


def _failures(db, pool):
    db.enqueue(("mail", {"n": 1}), ("report", {"n": 2}), queue="a")
    db.enqueue(("mail", {"n": 3}), queue="b")
    for queue in ("a", "a", "b"):
        assert process(pool, fail, queue=queue) is False
    assert len(db.archived()) == 3


def test_retry_failed_moves_filtered_failures_back(db, pool):
    _failures(db, pool)
    dry = run("retry-failed", "--queue", "a", "--dry-run", "-d", db.url)
    assert dry.exit_code == 0, dry.output
    assert "would move 2" in dry.stdout
    assert db.jobs() == []
    moved = run("retry-failed", "--queue", "a", "--job-type", "mail", "-d", db.url)
    assert moved.exit_code == 0, moved.output
    assert "moved 1" in moved.stdout
    assert db.jobs() == [("mail", 0, "a")]
    assert sorted(db.archived()) == [("mail", "failure", 1), ("report", "failure", 1)]
    seen = []
    assert process(pool, lambda t, p: seen.append(p), queue="a") is True
    assert seen == [{"n": 1}]


def test_retry_failed_time_filters(db, pool):
    _failures(db, pool)
    none = run("retry-failed", "--until", "1h", "-d", db.url)
    assert none.exit_code == 0, none.output
    assert "moved 0" in none.stdout
    recent = run("retry-failed", "--since", "1h", "-d", db.url)
    assert "moved 3" in recent.stdout
    assert sorted(db.jobs()) == [("mail", 0, "a"), ("mail", 0, "b"), ("report", 0, "a")]
    assert db.archived() == []


def test_retry_failed_bad_time_is_a_usage_error(db):
    result = run("retry-failed", "--since", "yesterday-ish", "-d", db.url)
    assert result.exit_code == 2


def test_purge_archive(db, pool):
    db.enqueue(("ok", 1), ("bad", 2), ("ok", 3))
    for handler in (lambda t, p: None, fail, lambda t, p: None):
        process(pool, handler)
    kept = run("purge-archive", "--older-than", "1h", "-d", db.url)
    assert kept.exit_code == 0, kept.output
    assert "deleted 0" in kept.stdout
    dry = run("purge-archive", "--older-than", "0s", "--dry-run", "-d", db.url)
    assert "would delete 3" in dry.stdout
    failures = run("purge-archive", "--older-than", "0s", "--status", "failure", "-d", db.url)
    assert "deleted 1" in failures.stdout
    assert [row[1] for row in db.archived()] == ["success", "success"]
    everything = run("purge-archive", "--older-than", "0", "-d", db.url)
    assert "deleted 2" in everything.stdout
    assert db.archived() == []


def test_purge_archive_keeps_and_says_what_waiting_jobs_need(db, pool):
    [parent] = db.enqueue(("ok", 1))
    db.enqueue(("later", 2), depends_on=[parent], archived_job_table=ARCHIVE, queue="elsewhere")
    assert process(pool, lambda t, p: None) is True
    assert db.jobs() == [("later", 0, "elsewhere")]
    result = run("purge-archive", "--older-than", "0s", "-d", db.url)
    assert result.exit_code == 0, result.output
    assert "deleted 0 archived jobs" in result.stdout
    assert "kept 1 archived job that jobs still waiting need" in result.stdout
    assert process(pool, lambda t, p: None, queue="elsewhere") is True
    result = run("purge-archive", "--older-than", "0s", "-d", db.url)
    assert "deleted 2 archived jobs" in result.stdout and "kept" not in result.stdout
    assert db.archived() == []


def test_purge_archive_needs_older_than(db):
    result = run("purge-archive", "-d", db.url)
    assert result.exit_code == 2


@pytest.mark.parametrize(
    "url",
    ["postgresql://app:s3cret@127.0.0.1:1/db", "mysql://app:s3cret@127.0.0.1:1/db"],
)
def test_unreachable_database_exits_5_with_the_password_masked(url):
    result = run("stats", "-d", url)
    assert result.exit_code == 5
    assert "database unreachable" in result.stderr
    assert "s3cret" not in result.output
    assert "app:***@127.0.0.1:1" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_missing_or_unknown_database_url_is_a_usage_error():
    missing = run("stats", env={"PROLETARIAN_DATABASE_URL": ""})
    assert missing.exit_code == 2
    assert "PROLETARIAN_DATABASE_URL" in missing.stderr
    unknown = run("stats", "-d", "sqlite://u:s3cret@/tmp/x.db")
    assert unknown.exit_code == 2
    assert "s3cret" not in unknown.output


def test_version():
    from proletarian_di import __version__

    result = run("--version")
    assert result.exit_code == 0
    assert result.stdout.strip() == f"proletarian-di {__version__}"


# DATABASE_URL -------------------------------------------------------------------------------


def test_database_url_alone_is_read(db):
    result = run("enqueue", "ping", env={"DATABASE_URL": db.url})
    assert result.exit_code == 0, result.output
    assert db.jobs() == [("ping", 0, "default")]
    stats = run("stats", "--json", env={"DATABASE_URL": db.url})
    assert stats.exit_code == 0, stats.output
    assert json.loads(stats.stdout)[0]["due"] == 1


def test_proletarian_database_url_wins_over_database_url(db):
    wins = run(
        "stats", "--json", env={"DATABASE_URL": UNREACHABLE, "PROLETARIAN_DATABASE_URL": db.url}
    )
    assert wins.exit_code == 0, wins.output
    loses = run("stats", env={"DATABASE_URL": db.url, "PROLETARIAN_DATABASE_URL": UNREACHABLE})
    assert loses.exit_code == 5
    assert "127.0.0.1:1/nowhere" in one_line(loses.stderr)
    given = run("stats", "--json", "-d", db.url, env={"PROLETARIAN_DATABASE_URL": UNREACHABLE})
    assert given.exit_code == 0, given.output


def test_an_empty_proletarian_database_url_falls_back_to_database_url(db):
    result = run("stats", "--json", env={"PROLETARIAN_DATABASE_URL": "", "DATABASE_URL": db.url})
    assert result.exit_code == 0, result.output


def test_no_url_anywhere_names_both_variables():
    result = run("stats", env={"PROLETARIAN_DATABASE_URL": None})
    assert result.exit_code == 2
    line = one_line(result.stderr)
    assert "PROLETARIAN_DATABASE_URL" in line and "DATABASE_URL)" in line


# Durations ----------------------------------------------------------------------------------

FORMS = {
    "90": timedelta(seconds=90),
    "250ms": timedelta(milliseconds=250),
    "90s": timedelta(seconds=90),
    "15m": timedelta(minutes=15),
    "2h": timedelta(hours=2),
    "3d": timedelta(days=3),
    "1w": timedelta(weeks=1),
    "1.5h": timedelta(minutes=90),
}


@pytest.mark.parametrize(("text", "expected"), FORMS.items())
def test_every_duration_form_parses(text, expected):
    assert parse_duration(text, "--in") == expected
    now = datetime(2024, 5, 1, 12, tzinfo=timezone.utc)
    assert parse_moment(text, now, "--since") == now - expected


def test_iso_times_are_points_in_time():
    now = datetime(2024, 5, 1, 12, tzinfo=timezone.utc)
    assert parse_moment("2024-05-01T10:00", now, "--since") == datetime(
        2024, 5, 1, 10, tzinfo=timezone.utc
    )
    assert parse_moment("2024-05-01T12:00+02:00", now, "--until") == datetime(
        2024, 5, 1, 10, tzinfo=timezone.utc
    )


@pytest.mark.parametrize(("text", "expected"), FORMS.items())
def test_enqueue_in_takes_every_duration_form(db, text, expected):
    result = run("enqueue", "later", "--in", text, "-d", db.url)
    assert result.exit_code == 0, result.output
    [(enqueued_at, process_at)] = db.backend.query(f"SELECT enqueued_at, process_at FROM {JOB}")
    assert abs((process_at - enqueued_at) - expected) < timedelta(milliseconds=1)


def test_the_other_duration_options_take_the_same_forms(db):
    for text in FORMS:
        purge = run("purge-archive", "--older-than", text, "--dry-run", "-d", db.url)
        assert purge.exit_code == 0, purge.output
        for option in ("--since", "--until"):
            retry = run("retry-failed", option, text, "--dry-run", "-d", db.url)
            assert retry.exit_code == 0, retry.output
    iso = run("retry-failed", "--since", "2024-05-01T12:00:00Z", "--dry-run", "-d", db.url)
    assert iso.exit_code == 0, iso.output
    interval = run("stats", "--interval", "250ms", "--json", "-d", db.url)
    assert interval.exit_code == 0, interval.output


@pytest.mark.parametrize(
    "args",
    [
        ["enqueue", "x", "--in", "1e30"],
        ["enqueue", "x", "--in", "-5"],
        ["enqueue", "x", "--in", "1e999"],
        ["enqueue", "x", "--in", "soon"],
        ["purge-archive", "--older-than", "99999999d"],
        ["purge-archive", "--older-than", "-1h"],
        ["retry-failed", "--since", "99999999d"],
        ["retry-failed", "--until", "9999999999w"],
        ["retry-failed", "--since", "0001-01-01T00:00+01:00"],
        ["stats", "--interval", "1e400"],
        ["stats", "--interval", "10ms"],
    ],
)
def test_bad_or_out_of_range_durations_are_one_line_usage_errors(args):
    # The URL is unreachable: exit 2 (not 5) shows the value is refused before connecting.
    result = run(*args, "-d", UNREACHABLE)
    assert result.exit_code == 2, result.output
    line = one_line(result.stderr)
    assert args[-2] in line
    assert "OverflowError" not in result.output


def test_out_of_range_says_so():
    with pytest.raises(CLIError, match=r"out of range: at most 36500d"):
        parse_duration("99999999d", "--older-than")
    with pytest.raises(CLIError, match="out of range: it is negative"):
        parse_duration("-5", "--in")
    assert parse_duration("-0", "--in") == timedelta(0)


# The tables each command works on -------------------------------------------------------------


def test_commands_print_the_qualified_tables_they_work_on(db, pool):
    where = f"{JOB} / {ARCHIVE} on {mask(db.url)}"
    enqueued = run("enqueue", "ping", "-d", db.url)
    assert f"in {JOB} on {mask(db.url)}, due now" in flat(enqueued.stderr)
    table = run("stats", "-d", db.url, env={"COLUMNS": "200"})
    assert where in flat(table.stdout)
    as_json = run("stats", "--json", "-d", db.url)
    assert where in as_json.stderr
    json.loads(as_json.stdout)
    assert process(pool, fail) is False
    retried = run("retry-failed", "--dry-run", "-d", db.url)
    assert f"would move 1 failed job from {ARCHIVE} back into {JOB} on" in flat(retried.stdout)
    purged = run("purge-archive", "--older-than", "0", "--dry-run", "-d", db.url)
    assert f"would delete 1 archived job from {ARCHIVE} on" in flat(purged.stdout)
    upgraded = run("schema", "upgrade", "--dry-run", "-d", db.url)
    assert where in flat(upgraded.stdout)
    installed = run("schema", "install", "-d", db.url)
    assert f"installed {JOB} and {ARCHIVE}" in flat(installed.stdout)


def _home(backend) -> str:
    """The connection's schema (PostgreSQL) or database (MySQL): where unqualified names go."""
    sql = "SELECT current_schema()" if backend.name == "postgresql" else "SELECT DATABASE()"
    return backend.query(sql)[0][0]


def test_unqualified_tables_are_printed_qualified(backend):
    names = ["--job-table", "cli_plain_job", "--archived-job-table", "cli_plain_archived_job"]
    installed = run("schema", "install", "-d", backend.url, *names)
    assert installed.exit_code == 0, installed.output
    home = _home(backend)
    stats = run("stats", "--json", "-d", backend.url, *names)
    assert stats.exit_code == 0, stats.output
    assert f"{home}.cli_plain_job / {home}.cli_plain_archived_job on" in stats.stderr
    checked = flat(run("schema", "check", "-d", backend.url, *names).stdout)
    assert f"{home}.cli_plain_job and {home}.cli_plain_archived_job" in checked
    if backend.name == "mysql":
        assert f"in database {home} (the URL's) are ready" in checked


def test_schema_check_on_mysql_says_which_database_holds_the_tables(mysql_backend):
    default = ["--job-table", "proletarian.job", "--archived-job-table", "proletarian.archived_job"]
    url_database = parse_mysql_url(mysql_backend.url)["database"]
    ready = run("schema", "check", "-d", mysql_backend.url, *default)
    assert ready.exit_code == 0, ready.output
    assert (
        "proletarian.job and proletarian.archived_job in database proletarian "
        f"(the URL names {url_database}) are ready"
    ) in flat(ready.stdout)
    absent = ["--job-table", "cli_absent.job", "--archived-job-table", "cli_absent.archived_job"]
    missing = run("schema", "check", "-d", mysql_backend.url, *absent)
    assert missing.exit_code == 6
    line = one_line(missing.stderr)
    assert f"in database cli_absent (the URL names {url_database})" in line


# One custom table with the other's default ----------------------------------------------------

UNSET_TABLES = {"PROLETARIAN_JOB_TABLE": None, "PROLETARIAN_ARCHIVED_JOB_TABLE": None}


@pytest.mark.parametrize("command", WITH_BOTH_TABLES)
@pytest.mark.parametrize(
    ("given", "missing"),
    [
        (["--job-table", "app.job"], "--archived-job-table"),
        (["--archived-job-table", "app.archived_job"], "--job-table"),
    ],
)
def test_a_custom_table_without_its_pair_is_refused(command, given, missing):
    result = run(*command, *given, "-d", UNREACHABLE, env=UNSET_TABLES)
    assert result.exit_code == 2, result.output
    line = one_line(result.stderr)
    assert f"{' '.join(given)} needs {missing} too" in line


def test_a_custom_table_from_the_environment_needs_its_pair_too():
    result = run("stats", "-d", UNREACHABLE, env={"PROLETARIAN_ARCHIVED_JOB_TABLE": None})
    assert result.exit_code == 2
    assert f"--job-table {JOB} needs --archived-job-table too" in one_line(result.stderr)


def test_tables_given_in_pairs_are_not_refused(db):
    both = ["--job-table", JOB, "--archived-job-table", ARCHIVE]
    assert run("stats", "--json", "-d", db.url, *both, env=UNSET_TABLES).exit_code == 0
    defaults = run("stats", "--json", "-d", db.url, env=UNSET_TABLES)
    assert defaults.exit_code == 0, defaults.output


# A worker whose tables are outside its connection's database ----------------------------------


def _start_and_stop(backend, caplog, **tables):
    """Start and stop a worker on `backend`; the `tables_elsewhere` events it logged."""
    source = backend.pool(2)
    worker = create_queue_worker(source, lambda t, p: None, polling_interval_ms=10, **tables)
    with caplog.at_level(logging.INFO, logger="proletarian_di"):
        try:
            worker.start()
            worker.stop()
        finally:
            source.close()
    return [
        (r.levelno, r.proletarian_data)
        for r in caplog.records
        if getattr(r, "proletarian_event", None) == "tables_elsewhere"
    ]


def test_a_mysql_worker_says_its_tables_are_in_another_database(mysql_backend, caplog):
    mysql_backend.reset()
    url_database = parse_mysql_url(mysql_backend.url)["database"]  # "test" by default
    [(level, data)] = _start_and_stop(mysql_backend, caplog)
    assert level == logging.INFO
    assert data["job_table"] == "proletarian.job"
    assert data["archived_job_table"] == "proletarian.archived_job"
    assert data["database"] == url_database


def test_no_tables_elsewhere_event_when_they_are_at_home(backend, caplog):
    names = {"job_table": "cli_plain_job", "archived_job_table": "cli_plain_archived_job"}
    backend.install(*names.values())
    assert _start_and_stop(backend, caplog, **names) == []
    if backend.name == "postgresql":
        assert _start_and_stop(backend, caplog) == []


def test_enqueue_into_a_missing_table_exits_6_naming_it(db):
    result = run("enqueue", "email", "--database-url", db.url, "--job-table", "cli_test.no_such")
    assert result.exit_code == 6, result.output
    line = one_line(result.stderr)
    assert "schema missing" in line and "cli_test.no_such" in line and "schema install" in line

"""`proletarian-di` commands through typer's CliRunner, against the real databases."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pytest
from cli_fixtures.cli_db import ENV, TABLES, CliDB
from typer.testing import CliRunner

from proletarian_di import process_next_job
from proletarian_di.cli import app

runner = CliRunner()


def run(*args: str, env: dict[str, str] | None = None):
    """Invoke the CLI on the CLI tests' own tables (named by environment variables)."""
    return runner.invoke(app, list(args), env={**ENV, **(env or {})})


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
    for command in (
        "demo",
        "worker",
        "schema",
        "enqueue",
        "stats",
        "retry-failed",
        "purge-archive",
    ):
        assert command in result.output
    wide = {"COLUMNS": "200"}
    stats_help = run("stats", "--help", env=wide).output
    assert "PROLETARIAN_DATABASE_URL" in stats_help
    assert "PROLETARIAN_JOB_TABLE" in stats_help
    assert "PROLETARIAN_PATH" in run("worker", "--help", env=wide).output


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
    assert (rows["a"]["succeeded"], rows["a"]["failed"]) == (2, 1)
    assert (rows["a"]["succeeded_last_hour"], rows["a"]["failed_last_hour"]) == (2, 1)
    assert (rows["b"]["due"], rows["b"]["scheduled"]) == (1, 1)
    assert rows["b"]["oldest_due_seconds"] >= 0
    table = run("stats", "-d", db.url, env={"COLUMNS": "200"})
    assert table.exit_code == 0
    assert "Due now" in table.stdout and "Succeeded" in table.stdout


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

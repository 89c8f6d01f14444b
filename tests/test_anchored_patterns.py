"""Validating patterns match the whole text, in ASCII: a table name with a trailing newline,
or a duration in other digits, is refused with a clear error, never read as something else."""

from __future__ import annotations

from datetime import timedelta

import pytest
from cli_fixtures.cli_db import CliDB
from test_cli import one_line, run

from proletarian_di import create_queue_worker, enqueue
from proletarian_di._store.dialects.postgresql import Wake, read_wake_payload
from proletarian_di._store.tables import check_table_name
from proletarian_di.admin import Tables
from proletarian_di.contrib.cli._app import CLIError, parse_duration
from proletarian_di.errors import ConfigurationError

TRAILING = ["proletarian.job\n", "job\n", "proletarian.job\r\n", "job\x00", "job\u2028"]
NOT_ASCII = ["prolétarian.job", "job\u0661", "\uff4aob", "job²"]


@pytest.mark.parametrize("name", TRAILING + NOT_ASCII)
def test_check_table_name_refuses_anything_after_or_beyond_ascii(name):
    with pytest.raises(ConfigurationError, match="plain identifier"):
        check_table_name(name)


@pytest.mark.parametrize("name", ["job", "proletarian.job", "_x.y_1"])
def test_plain_names_still_pass(name):
    assert check_table_name(name) == name


def test_enqueue_and_the_worker_refuse_a_table_name_with_a_newline(backend, pool):
    conn = backend.connect()
    try:
        with pytest.raises(ConfigurationError, match="job_table must be a plain identifier"):
            enqueue(conn, "t", {}, job_table="proletarian.job\n")
    finally:
        conn.rollback()
        conn.close()
    with pytest.raises(ConfigurationError, match="plain identifier"):
        create_queue_worker(pool, lambda t, p: None, job_table="proletarian.job\n")
    with pytest.raises(ConfigurationError, match="plain identifier"):
        Tables("proletarian.job\n", "proletarian.archived_job")


def test_the_cli_refuses_a_table_name_with_a_newline(backend):
    db = CliDB(backend)
    result = run(
        "stats",
        "--job-table",
        "cli_test.cli_job\n",
        "--archived-job-table",
        "cli_test.cli_archived_job",
        "-d",
        db.url,
    )
    assert result.exit_code == 2, result.output
    assert "plain identifier" in one_line(result.stderr)


@pytest.mark.parametrize(
    "text",
    ["\u0669\u0660", "\u0669\u0660s", "\uff11\uff10m", "1\u0660s", "²", "90s x", "90s\nx", "⁹s"],
)
def test_durations_take_ascii_digits_only(text):
    with pytest.raises(CLIError, match="is not a duration"):
        parse_duration(text, "--in")


@pytest.mark.parametrize(("text", "expected"), [("90", 90), (" 90s ", 90), ("1.5m", 90)])
def test_ascii_durations_still_parse(text, expected):
    assert parse_duration(text, "--in") == timedelta(seconds=expected)


def test_the_cli_refuses_other_digits_in_a_duration():
    result = run(
        "purge-archive", "--older-than", "\u0669\u0660d", "-d", "postgresql://u@127.0.0.1:1/x"
    )
    assert result.exit_code == 2
    assert "is not a duration" in one_line(result.stderr)


def test_a_wake_payload_takes_ascii_digits_only():
    assert read_wake_payload("mail@12.5#3", "mail") == Wake(12.5, 3)
    assert read_wake_payload("mail@١٢", "mail") is None
    assert read_wake_payload("mail#٣", "mail") is None

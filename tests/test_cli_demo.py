"""`proletarian-di demo` end to end, on the test PostgreSQL, with a small number of jobs."""

from __future__ import annotations

from typer.testing import CliRunner

from proletarian_di.cli import app
from proletarian_di.contrib import demo as demo_system


def test_demo_runs_to_the_end_and_exits_0(pg, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    pg.will_create("demo")
    count = 120
    result = CliRunner().invoke(
        app, ["demo", "--jobs", str(count), "--database-url", pg.url], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    expected = demo_system.expected_outcomes(count)
    assert expected == {"succeeded": 119, "failed": 1, "retried": 5}
    assert pg.jobs() == []
    statuses = pg.query(
        "SELECT status, COUNT(*), SUM(attempts - 1) FROM proletarian.archived_job GROUP BY status"
    )
    by_status = {status: (int(n), int(extra)) for status, n, extra in statuses}
    assert by_status["success"][0] == expected["succeeded"]
    assert by_status["failure"][0] == expected["failed"]
    assert sum(extra for _, extra in by_status.values()) == expected["retried"]
    # The handlers' effects committed with their jobs; the permanent failures are recorded.
    assert pg.query(
        "SELECT email_status, COUNT(*) FROM demo.account GROUP BY email_status "
        "ORDER BY email_status"
    ) == [("failed", 1), ("pending", 30), ("sent", 89)]
    assert pg.query("SELECT COUNT(*) FROM demo.report")[0][0] == 30
    assert "Summary" in result.stdout and "Failure archive" in result.stdout
    total_row = next(line for line in result.stdout.splitlines() if "│ all" in line)
    assert [cell.strip() for cell in total_row.split("│")[2:5]] == ["119", "1", "5"]
    assert "MailboxDoesNotExist: 550 no such" in result.stdout


def test_demo_refuses_a_mysql_url():
    result = CliRunner().invoke(app, ["demo", "-d", "mysql://root@127.0.0.1/test"])
    assert result.exit_code == 2
    assert "PostgreSQL" in result.stderr

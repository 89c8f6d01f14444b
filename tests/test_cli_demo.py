"""`proletarian-di demo` end to end, on the test PostgreSQL, with a small number of jobs."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import tempfile

import pytest
from typer.testing import CliRunner

from proletarian_di.cli import app
from proletarian_di.contrib import demo as demo_system

from backends import wait_until


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


@pytest.mark.db
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_demo_told_to_stop_stops_its_throwaway_server_and_deletes_its_data(signum):
    """The embedded server runs in a session of its own, out of reach of a signal to the
    demo's process group: the demo itself must stop it, whatever signal ends it. (Its
    temporary folder is a short one: the server's socket path has a length limit.)"""
    with tempfile.TemporaryDirectory(prefix="pd-demo-") as folder:
        _stop_the_demo(pathlib.Path(folder), signum)


def _stop_the_demo(tmp_path: pathlib.Path, signum: int) -> None:
    demo = subprocess.Popen(
        [sys.executable, "-m", "proletarian_di.contrib.cli", "demo", "--jobs", "1000000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp_path), "PYTHONUNBUFFERED": "1", "COLUMNS": "200"},
        # As a terminal starts it: under nohup, say, SIGHUP is ignored, and the demo then
        # leaves it ignored, as it should.
        preexec_fn=_default_signals,
    )
    try:
        assert demo.stdout is not None
        seen = []
        for line in demo.stdout:
            seen.append(line)
            if "started a throwaway PostgreSQL server" in line:
                break
        assert "started a throwaway PostgreSQL server" in seen[-1], "".join(seen)
        [data] = list(tmp_path.glob("proletarian-pg-*/pgdata"))
        server = int((data / "postmaster.pid").read_text().split()[0])
        demo.send_signal(signum)
        rest, _ = demo.communicate(timeout=60)
    finally:
        demo.kill()
    assert demo.returncode == 130, "".join(seen) + rest
    assert "interrupted" in rest
    assert list(tmp_path.glob("proletarian-pg-*")) == []
    wait_until(lambda: not _alive(server), description="the server to stop")


def _default_signals() -> None:
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True

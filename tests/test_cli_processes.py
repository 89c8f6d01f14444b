"""`proletarian-di worker --processes N`: a supervisor of N real worker processes, on both
databases: drains, restarts, crash loops, one metrics port and one health port for all."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cli_fixtures.cli_db import ARCHIVE, ENV, JOB, CliDB
from test_cli_worker import FIXTURES, WorkerProcess
from typer.testing import CliRunner

from proletarian_di.cli import app
from proletarian_di.contrib.cli import supervisor

TWO = ("--processes", "2")
runner = CliRunner()


@pytest.fixture
def db(backend):
    return CliDB(backend)


@contextlib.contextmanager
def supervisor_process(db: CliDB, marks: Path, *args: str) -> Iterator[WorkerProcess]:
    """`proletarian-di worker workerapp:Container --processes 2 ARGS...`, hard-stopped (two
    signals) if a test leaves it running."""
    worker = WorkerProcess(db, marks, args=(*TWO, *args))
    try:
        yield worker
    finally:
        if worker.proc.poll() is None:
            worker.signal(signal.SIGTERM)
            time.sleep(0.3)
            worker.signal(signal.SIGTERM)
            try:
                worker.proc.wait(15)
            except subprocess.TimeoutExpired:
                worker.proc.kill()


def child_pids(worker: WorkerProcess) -> list[int]:
    """The pids the supervisor started first, in the order of their process numbers."""
    found = re.search(r"supervising 2 worker processes \(pids (\d+), (\d+)\)", worker.output)
    assert found, worker.output
    return [int(found[1]), int(found[2])]


def runners(marks: Path) -> set[int]:
    """The pids that started a job, from the marks the handler writes."""
    return {int(text) for p in marks.glob("*.started") if (text := p.read_text())}


def listed_pids(db: CliDB) -> list[int]:
    """The pids `proletarian-di workers` lists for the CLI tables."""
    tables = ["--job-table", JOB, "--archived-job-table", ARCHIVE]
    result = runner.invoke(app, ["workers", "--json", "--database-url", db.url, *tables])
    assert result.exit_code == 0, result.output
    return sorted(w["pid"] for w in json.loads(result.stdout) if w["state"] == "running")


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("0", "must be at least 1 (or 'auto'), got 0"),
        ("-3", "must be at least 1 (or 'auto'), got -3"),
        ("lots", "must be a positive integer or 'auto', got 'lots'"),
    ],
)
def test_a_bad_processes_value_is_a_usage_error_naming_the_option(value, why):
    result = runner.invoke(
        app,
        ["worker", "workerapp:Container", "--path", str(FIXTURES), "--processes", value],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 2, result.output
    assert "'--processes'" in result.output and why in result.output


def test_auto_is_one_process_per_usable_cpu():
    assert supervisor.parse_processes("auto") == len(os.sched_getaffinity(0))
    assert supervisor.parse_processes(" 3 ") == 3


@pytest.mark.parametrize(
    ("codes", "code"),
    [([0, 0], 0), ([0, 7], 7), ([7, 1, 0], 1), ([1, 3], 3), ([3, 130], 130), ([], 0)],
)
def test_the_supervisor_exits_with_the_worst_of_its_childrens_codes(codes, code):
    assert supervisor.worst(codes) == code


def test_a_start_error_in_the_children_is_the_supervisors_exit_code_without_restarts():
    result = runner.invoke(
        app, ["worker", "no_such_app:Container", "--path", str(FIXTURES), *TWO], env=ENV
    )
    assert result.exit_code == 3, result.output
    assert "at start; a restart cannot cure that" in result.stderr
    assert "restarting it" not in result.stderr


def test_a_child_that_keeps_dying_is_a_crash_loop_the_supervisor_reports_and_exits_1(
    monkeypatch,
):
    monkeypatch.setattr(supervisor, "RESTART_DELAY_S", 0.05)
    monkeypatch.setattr(supervisor, "CRASH_LOOP_DEATHS", 3)
    started = time.monotonic()
    result = runner.invoke(
        app, ["worker", "workerapp:exits_at_start", "--path", str(FIXTURES), *TWO], env=ENV
    )
    assert result.exit_code == 1, result.output
    [looping] = re.findall(
        r"worker process (\d) is in a crash loop: it died 3 times", result.stderr
    )
    delays = re.findall(
        rf"worker process {looping} \(pid \d+\) exited with code 1 unexpectedly; "
        r"restarting it in ([\d.]+) s",
        result.stderr,
    )
    assert delays == ["0.05", "0.1"], result.stderr
    assert "not restarting it: draining the others" in result.stderr
    assert time.monotonic() - started < 20


def test_sigterm_drains_every_child_and_loses_nothing(db, tmp_path):
    db.enqueue(*[("sleep", {"n": n, "seconds": 0.5}) for n in range(20)])
    with supervisor_process(db, tmp_path) as worker:
        worker.wait_for(lambda: len(runners(tmp_path)) == 2, "both processes to run a job")
        worker.signal(signal.SIGTERM)
        assert worker.finish() == 0, worker.output
    assert "SIGTERM received: draining every worker process" in worker.output
    assert "every worker process has stopped (exit codes 0, 0): exiting 0" in worker.output
    assert worker.output.count("stopped cleanly") == 2, worker.output
    assert runners(tmp_path) == set(child_pids(worker))
    archived = sorted(p["n"] for p in db.payloads(ARCHIVE))
    assert {int(p.name.split(".")[0]) for p in tmp_path.glob("*.started")} <= set(archived)
    assert {row[1] for row in db.archived()} == {"success"}
    assert sorted(archived + [p["n"] for p in db.payloads(JOB)]) == list(range(20))


def test_a_killed_child_is_restarted_and_its_held_job_runs_again_once(db, tmp_path):
    db.enqueue(("hang_first", {"n": 1}))
    with supervisor_process(db, tmp_path) as worker:
        worker.wait_for(lambda: runners(tmp_path), "the job to start")
        [holder] = runners(tmp_path)
        assert holder in child_pids(worker)
        os.kill(holder, signal.SIGKILL)
        worker.wait_for(lambda: db.archived(), "the job to run again")
        worker.wait_for(lambda: "restarted (pid" in worker.output, "the restart")
        assert f"(pid {holder}) was killed by SIGKILL unexpectedly; restarting it in 0.5 s" in (
            worker.output
        )
        # The killed run's transaction was rolled back: its attempt left no trace.
        assert db.archived() == [("hang_first", "success", 1)]
        assert db.jobs() == []
        restarted = re.search(r"worker process \d restarted \(pid (\d+)\)", worker.output)
        assert restarted, worker.output
        worker.wait_for(lambda: int(restarted[1]) in listed_pids(db), "the new one to register")
        worker.signal(signal.SIGTERM)
        assert worker.finish() == 0, worker.output
        assert worker.output.count("stopped cleanly") == 2, worker.output


def test_a_second_signal_hard_stops_every_child_and_the_job_runs_again_later(db, tmp_path):
    db.enqueue(("hang_first", {"n": 1}))
    with supervisor_process(db, tmp_path) as worker:
        worker.wait_for(lambda: runners(tmp_path), "the job to start")
        worker.signal(signal.SIGTERM)
        worker.wait_for(lambda: "draining every worker process" in worker.output, "the drain")
        worker.signal(signal.SIGINT)
        assert worker.finish(timeout=30) == 128 + signal.SIGINT, worker.output
        assert "second SIGINT: passed to every worker process" in worker.output
        # Each child ends by the second signal (130), by its drain if it was idle (0), or,
        # on a slow machine, by the supervisor's SIGTERM to a straggler (143).
        codes = re.search(r"\(exit codes (\d+), (\d+)\): exiting 130", worker.output)
        assert codes, worker.output
        assert set(codes.groups()) <= {"0", "130", "143"}, worker.output
        for pid in child_pids(worker):
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
    # The abandoned transaction was rolled back: the job waits, unarchived, for another run.
    assert db.archived() == []
    assert db.jobs() == [("hang_first", 0, "default")]


def test_one_metrics_port_sums_every_child_and_workers_lists_each(db, tmp_path):
    with supervisor_process(db, tmp_path, "--metrics-port", "0") as worker:
        worker.wait_for(lambda: len(listed_pids(db)) == 2, "both processes to register")
        assert listed_pids(db) == sorted(child_pids(worker))
        db.enqueue(*[("sleep", {"n": n, "seconds": 0.2}) for n in range(16)])
        worker.wait_for(lambda: len(db.archived()) == 16, "every job to run")
        assert runners(tmp_path) == set(child_pids(worker)), "both processes ran jobs"
        port = re.search(r"metrics at http://127\.0\.0\.1:(\d+)/metrics", worker.output)
        assert port, worker.output
        scraped = httpx.get(f"http://127.0.0.1:{port[1]}/metrics", timeout=10).text
        succeeded = re.findall(
            r'^proletarian_jobs_total\{job_type="sleep",outcome="succeeded",queue="default"\} '
            r"([\d.]+)$",
            scraped,
            re.M,
        )
        assert [float(n) for n in succeeded] == [16.0], scraped
        assert "proletarian_database_up 1.0" in scraped
        assert 'proletarian_queue_jobs{queue="default",state="queued"} 0.0' in scraped
        worker.signal(signal.SIGTERM)
        assert worker.finish() == 0, worker.output


def test_health_is_ready_only_while_every_child_is(db, tmp_path):
    with supervisor_process(db, tmp_path, "--health-port", "0") as worker:
        worker.wait_for(lambda: "health checks at" in worker.output, "the health server")
        found = re.search(r"health checks at (http://\S+)/livez", worker.output)
        assert found, worker.output
        url = found[1]
        worker.wait_for(
            lambda: httpx.get(f"{url}/readyz", timeout=10).status_code == 200, "readiness"
        )
        ready = httpx.get(f"{url}/readyz", timeout=10).json()
        names = sorted(w["queue_worker_id"] for w in ready["workers"])
        first, second = child_pids(worker)
        assert [re.sub(r".* in ", "", n) for n in names] == [
            f"worker process 1 (pid {first})",
            f"worker process 2 (pid {second})",
        ]
        os.kill(second, signal.SIGKILL)
        time.sleep(0.05)
        down = httpx.get(f"{url}/readyz", timeout=10)
        assert down.status_code == 503
        assert any("worker process 2" in p for w in down.json()["workers"] for p in w["problems"])
        assert httpx.get(f"{url}/livez", timeout=10).status_code == 200, "restarting, not dead"
        worker.wait_for(
            lambda: httpx.get(f"{url}/readyz", timeout=10).status_code == 200, "readiness again"
        )
        worker.signal(signal.SIGTERM)
        assert worker.finish() == 0, worker.output


def alive(pid: int) -> bool:
    """Whether the process runs (a zombie that no one has reaped yet does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def test_the_children_of_a_killed_supervisor_drain_and_exit(db, tmp_path):
    db.enqueue(*[("sleep", {"n": n, "seconds": 0.5}) for n in range(20)])
    with supervisor_process(db, tmp_path) as worker:
        worker.wait_for(lambda: len(runners(tmp_path)) == 2, "both processes to run a job")
        worker.proc.kill()
        worker.proc.wait(10)
        deadline = time.monotonic() + 20
        while any(alive(pid) for pid in child_pids(worker)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(alive(pid) for pid in child_pids(worker)), worker.output
    assert worker.output.count("stopped cleanly") == 2, worker.output
    archived = sorted(p["n"] for p in db.payloads(ARCHIVE))
    assert {int(p.name.split(".")[0]) for p in tmp_path.glob("*.started")} <= set(archived)
    assert sorted(archived + [p["n"] for p in db.payloads(JOB)]) == list(range(20))

"""`proletarian-di worker`: bad targets in-process, signals and exit codes in real processes."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from cli_fixtures.cli_db import ARCHIVE, ENV, JOB, CliDB
from typer.testing import CliRunner

from proletarian_di.cli import app

FIXTURES = Path(__file__).parent / "cli_fixtures"
runner = CliRunner()


def run_worker(target: str, db=None):
    env = {**ENV, "TEST_DATABASE_URL": db.url if db else ""}
    return runner.invoke(app, ["worker", target, "--path", str(FIXTURES)], env=env)


@pytest.fixture
def db(backend):
    return CliDB(backend)


# Bad targets: one line naming the problem, each with its own exit code ------------------


def one_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def test_module_not_importable_exits_3_and_names_it():
    result = run_worker("no_such_app.containers:Container")
    assert result.exit_code == 3
    assert "'no_such_app.containers'" in one_line(result)


def test_module_raising_on_import_exits_3_with_the_cause():
    result = run_worker("brokenapp:Container")
    assert result.exit_code == 3
    line = one_line(result)
    assert "'brokenapp'" in line and "ZeroDivisionError" in line and "brokenapp.py" in line


def test_missing_attribute_exits_4():
    result = run_worker("workerapp:Nope")
    assert result.exit_code == 4
    assert "no attribute 'Nope'" in one_line(result)


@pytest.mark.parametrize("target", ["workerapp:NOT_A_TARGET", "workerapp:needs_arguments"])
def test_target_that_cannot_run_exits_4(target):
    result = run_worker(target)
    assert result.exit_code == 4
    assert target in one_line(result)


def test_target_without_module_attribute_separator_is_a_usage_error():
    result = run_worker("workerapp")
    assert result.exit_code == 2
    assert "module:attribute" in one_line(result)


def test_unreachable_database_exits_5_masked():
    result = run_worker("workerapp:unreachable")
    assert result.exit_code == 5
    line = one_line(result)
    assert "unreachable" in line and "s3cret" not in line


def test_missing_schema_exits_6(db):
    result = run_worker("workerapp:missing_schema", db)
    assert result.exit_code == 6
    assert "nosuch.job" in one_line(result)


def test_container_without_workers_exits_4(pg):
    result = run_worker("workerapp:no_workers", CliDB(pg))
    assert result.exit_code == 4
    assert "no QueueWorker" in one_line(result)


def test_queue_worker_target_drains_on_sigterm_and_exits_0(db):
    # The last job signals the process itself: the signal lands mid-job, deterministically.
    db.enqueue(("noop", {"n": 1}), ("noop", {"n": 2}), ("sigterm_me", {"n": 3}))
    result = run_worker("workerapp:plain_worker", db)
    assert result.exit_code == 0, result.output
    assert f"(queue 'default' of {JOB} / {ARCHIVE}, " in result.stderr
    assert "SIGTERM received" in result.stderr
    assert "3 succeeded" in result.stderr
    assert db.jobs() == []
    assert sorted(row[:2] for row in db.archived()) == [
        ("noop", "success"),
        ("noop", "success"),
        ("sigterm_me", "success"),
    ]


def test_the_start_up_line_names_the_periodic_scheduler_the_container_runs(db):
    pytest.importorskip("cronsim")
    db.enqueue(("sigterm_me", {"n": 1}))
    result = run_worker("workerapp:with_scheduler", db)
    assert result.exit_code == 0, result.output
    [line] = [line for line in result.stderr.splitlines() if ": running " in line]
    assert line.endswith(" threads), with the periodic scheduler (2 schedules)"), line


def test_the_start_up_line_names_no_scheduler_where_none_runs(db):
    db.enqueue(("sigterm_me", {"n": 1}))
    result = run_worker("workerapp:plain_worker", db)
    assert result.exit_code == 0, result.output
    assert "scheduler" not in result.stderr


def test_a_stop_that_abandons_a_job_exits_7_and_the_job_runs_again(db):
    db.enqueue(("sigterm_me", {"n": 1, "seconds": 1.5}))
    result = run_worker("workerapp:impatient_worker", db)
    assert result.exit_code == 7, result.output
    assert "stopped: 1 abandoned (they run again)" in result.stderr
    assert "stopped cleanly" not in result.stderr
    assert db.jobs() == [("sigterm_me", 0, "default")], "back in the queue, no retry spent"
    assert db.archived() == []


def test_a_worker_whose_thread_dies_exits_1_naming_it(db):
    result = run_worker("workerapp:dying_worker", db)
    assert result.exit_code == 1, result.output
    assert "a worker thread died of KeyboardInterrupt: the clock broke" in result.stderr


# Real processes: signals and exit codes --------------------------------------------------


class WorkerProcess:
    """`proletarian-di worker workerapp:Container` in a subprocess, stderr collected."""

    def __init__(
        self, db, marks: Path, target: str = "workerapp:Container", args: tuple[str, ...] = ()
    ) -> None:
        script = Path(sys.executable).with_name("proletarian-di")
        command = [str(script)] if script.exists() else [sys.executable, "-m", "proletarian_di.cli"]
        env = {**db.env(), "CLI_TEST_MARKS": str(marks), "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [*command, "worker", target, "--path", str(FIXTURES), *args],
            env=env,
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    def wait_for(self, condition, what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if self.proc.poll() is not None:
                pytest.fail(f"worker exited ({self.proc.returncode}) before {what}:\n{self.output}")
            if time.monotonic() > deadline:
                self.proc.kill()
                pytest.fail(f"gave up waiting for {what}:\n{self.output}")
            time.sleep(0.02)

    def signal(self, sig: int = signal.SIGTERM) -> None:
        self.proc.send_signal(sig)

    def finish(self, timeout: float = 60) -> int:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            pytest.fail(f"worker did not exit:\n{self.output}")
        self._reader.join(5)
        return code

    @property
    def output(self) -> str:
        return "".join(self.lines)


def started(marks: Path) -> set[int]:
    return {int(p.name.split(".")[0]) for p in marks.glob("*.started")}


def test_sigterm_mid_run_drains_archives_every_started_job_and_exits_0(db, tmp_path):
    db.enqueue(*[("sleep", {"n": n, "seconds": 0.3}) for n in range(8)])
    worker = WorkerProcess(db, tmp_path)
    worker.wait_for(lambda: started(tmp_path), "a job to start")
    worker.signal(signal.SIGTERM)
    assert worker.finish() == 0, worker.output
    assert "stopped cleanly" in worker.output
    archived_ns = sorted(p["n"] for p in db.payloads(ARCHIVE))
    waiting = db.payloads(JOB)
    assert started(tmp_path) <= set(archived_ns)
    assert {row[1] for row in db.archived()} == {"success"}
    assert sorted(archived_ns + [p["n"] for p in waiting]) == list(range(8))


def test_second_signal_exits_at_once_and_the_job_runs_again_later(db, tmp_path):
    db.enqueue(("sleep", {"n": 1, "seconds": 120}))
    worker = WorkerProcess(db, tmp_path)
    worker.wait_for(lambda: started(tmp_path), "the job to start")
    worker.signal(signal.SIGTERM)
    worker.wait_for(lambda: "draining" in worker.output, "the first signal to be handled")
    worker.signal(signal.SIGINT)
    assert worker.finish(timeout=30) == 128 + signal.SIGINT
    assert "second SIGINT" in worker.output
    # The abandoned transaction was rolled back: the job waits, unarchived, for another run.
    assert db.archived() == []
    assert db.jobs() == [("sleep", 0, "default")]


def test_real_process_imports_from_cwd_and_reports_a_bad_target_in_one_line(tmp_path):
    (tmp_path / "cwdapp.py").write_text("TARGET = 'not runnable'\n")
    result = subprocess.run(
        [sys.executable, "-m", "proletarian_di.cli", "worker", "cwdapp:TARGET"],
        cwd=tmp_path,
        env={**os.environ},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 4, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "cwdapp:TARGET is str" in lines[0]


def test_metrics_and_health_ports_serve_on_localhost_while_the_worker_runs(db, tmp_path):
    db.enqueue(("sleep", {"n": 1, "seconds": 0}), ("sleep", {"n": 2, "seconds": 0}))
    worker = WorkerProcess(db, tmp_path, args=("--metrics-port", "0", "--health-port", "0"))
    worker.wait_for(lambda: "health checks at" in worker.output, "the servers to start")
    worker.wait_for(lambda: len(db.archived()) == 2, "both jobs to run")
    metrics = re.search(r"metrics at http://127\.0\.0\.1:(\d+)/metrics", worker.output)
    health = re.search(r"health checks at http://127\.0\.0\.1:(\d+)/livez", worker.output)
    assert metrics and health, worker.output
    scraped = httpx.get(f"http://127.0.0.1:{metrics[1]}/metrics").text
    assert 'proletarian_jobs_total{job_type="sleep",outcome="succeeded",queue="default"}' in scraped
    assert "proletarian_database_up 1.0" in scraped
    assert httpx.get(f"http://127.0.0.1:{health[1]}/livez").status_code == 200
    ready = httpx.get(f"http://127.0.0.1:{health[1]}/readyz")
    assert ready.status_code == 200 and ready.json()["ready"] is True
    with socket.socket() as other:  # not listening on the machine's other addresses
        assert other.connect_ex((_outward_address(), int(health[1]))) != 0
    worker.signal(signal.SIGTERM)
    assert worker.finish() == 0, worker.output


def _outward_address() -> str:
    """This machine's address on its default route (or a non-loopback stand-in)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
            return probe.getsockname()[0]
        except OSError:
            return "127.0.0.2"


def test_metrics_port_in_use_is_a_clear_error(db, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        worker = WorkerProcess(db, tmp_path, args=("--metrics-port", str(port)))
        code = worker.finish()
    assert code == 2, worker.output
    assert f"cannot serve metrics on 127.0.0.1:{port}" in worker.output


class ProxiedDB:
    """The CLI tables' database, reached by the worker process through a `TCPProxy`."""

    def __init__(self, db: CliDB, url: str) -> None:
        self.db, self.url = db, url

    def env(self) -> dict[str, str]:
        return {**self.db.env(), "TEST_DATABASE_URL": self.url}


def test_a_scrape_while_the_database_hangs_says_it_is_down_in_time(db, tmp_path):
    from faults import TCPProxy, upstream_of, url_via

    with TCPProxy(upstream_of(db.backend)) as proxy:
        worker = WorkerProcess(
            ProxiedDB(db, url_via(db.backend, proxy)),
            tmp_path,
            args=("--metrics-port", "0", "--health-port", "0"),
        )
        try:
            worker.wait_for(lambda: "health checks at" in worker.output, "the servers to start")
            metrics = re.search(r"metrics at (http://\S+/metrics)", worker.output)
            health = re.search(r"health checks at (http://\S+)/livez", worker.output)
            assert metrics and health, worker.output
            assert "proletarian_database_up 1.0" in httpx.get(metrics[1], timeout=10).text
            proxy.stall()
            try:
                # Within Prometheus's default scrape timeout (10 s), not when the database is back.
                scraped = httpx.get(metrics[1], timeout=10)
                assert scraped.status_code == 200
                assert "proletarian_database_up 0.0" in scraped.text
                live = httpx.get(f"{health[1]}/livez", timeout=10)
                assert live.status_code == 200 and live.json()["ready"] is None
                assert httpx.get(f"{health[1]}/readyz", timeout=10).status_code == 503
            finally:
                proxy.flow()
            worker.wait_for(
                lambda: "proletarian_database_up 1.0" in httpx.get(metrics[1], timeout=10).text,
                "the database to be up again",
            )
            worker.signal(signal.SIGTERM)
            assert worker.finish() == 0, worker.output
        finally:
            if worker.proc.poll() is None:
                worker.proc.kill()

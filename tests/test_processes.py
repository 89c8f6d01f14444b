"""Several processes, crashes and signals: no job lost, none run twice without cause."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from proletarian_di import enqueue_many, process_next_job

from backends import enqueue_committed, wait_until

SCRIPT = str(Path(__file__).with_name("worker_process.py"))


@pytest.fixture
def runs(backend):
    backend.execute("DROP TABLE IF EXISTS proletarian.runs")
    backend.execute("CREATE TABLE proletarian.runs (job_id VARCHAR(40))")
    yield lambda: Counter(row[0] for row in backend.query("SELECT job_id FROM proletarian.runs"))
    backend.execute("DROP TABLE proletarian.runs")


def spawn(backend, *args):
    return subprocess.Popen(
        [sys.executable, SCRIPT, *args],
        env=backend.env(),
        cwd=str(Path(__file__).parent),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_processes_share_a_queue_without_running_a_job_twice(backend, runs):
    conn = backend.connect()
    ids = enqueue_many(conn, [("n", i) for i in range(300)])
    conn.commit()
    conn.close()
    procs = [spawn(backend, "drain"), spawn(backend, "drain")]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    counts = runs()
    assert sorted(counts) == sorted(str(i) for i in ids)
    assert set(counts.values()) == {1}, "no job ran twice"
    assert len(backend.archived()) == 300 and backend.jobs() == []


def test_sigkill_mid_job_loses_nothing(backend, pool, runs):
    (job_id,) = enqueue_committed(backend, ("crashy", {"n": 1}))
    proc = spawn(backend, "hang")
    try:
        assert proc.stdout.readline().strip() == "started"
        assert backend.jobs() == [("crashy", 0, "default")]
    finally:
        proc.kill()
        proc.wait(10)
    # The database rolls the dead worker's transaction back; the job runs again.
    wait_until(lambda: process_next_job(pool, lambda t, p: None), timeout=30)
    assert backend.archived() == [("crashy", "success", 1)]
    assert runs() == Counter({str(job_id): 1})


@pytest.mark.parametrize(
    ("variant", "returncode", "output"),
    [("default", -signal.SIGTERM, ""), ("chained", 3, "previous handler called")],
)
def test_shutdown_hook_drains_prints_a_summary_and_chains(
    backend, runs, variant, returncode, output
):
    enqueue_committed(backend, ("slow", None))
    proc = spawn(backend, "hook", variant)
    assert proc.stdout.readline().strip() == "started"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == returncode, err
    assert "stopped on SIGTERM: 1 succeeded, 0 failed, 0 retried, 0 abandoned" in err
    assert output in out and "not stopped" not in out
    assert backend.archived() == [("slow", "success", 1)], (backend.jobs(), runs(), err)


def test_a_signal_during_start_stops_the_worker_once_it_has_started(backend):
    proc = spawn(backend, "hook-start")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGTERM, err
    assert "stopped on SIGTERM: 0 succeeded, 0 failed, 0 retried, 0 abandoned" in err

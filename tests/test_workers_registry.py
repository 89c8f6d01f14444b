"""The live workers' registry, on both databases: a started worker is listed with its threads
and the jobs they run, it leaves at stop(), a killed process's row turns stale and is pruned,
a registry that cannot be written never stops the jobs, and the dashboard's Processes page
and the `workers` command show it all."""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import uuid
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from cli_fixtures.cli_db import ARCHIVE as CLI_ARCHIVE
from cli_fixtures.cli_db import JOB as CLI_JOB
from cli_fixtures.cli_db import CliDB
from test_cli_worker import WorkerProcess, started
from typer.testing import CliRunner

from proletarian_di import admin, create_queue_worker, process_next_job
from proletarian_di._engine import registry as _registry
from proletarian_di.cli import app as cli_app
from proletarian_di.contrib.dashboard import dashboard
from proletarian_di.errors import ConfigurationError, SchemaError
from proletarian_di.schema import workers_table

from backends import Backend, Events, connection, enqueue_committed, wait_until

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")

QUICK_BEAT_S = 0.05


@pytest.fixture(autouse=True)
def quick_beats(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers beat every 50 ms here, so that a test waits for a beat briefly."""
    monkeypatch.setattr(_registry, "BEAT_S", QUICK_BEAT_S)


def workers(backend: Backend, **options: Any) -> list[admin.WorkerInfo]:
    with connection(backend) as conn:
        return admin.list_workers(conn, **options)


def cli_workers(backend: Backend) -> list[admin.WorkerInfo]:
    """The workers of the CLI tests' tables."""
    return workers(backend, tables=admin.Tables(CLI_JOB, CLI_ARCHIVE))


def beats_after(backend: Backend, worker_id: str, seen: Any) -> admin.WorkerInfo | None:
    """The worker's row once a beat has refreshed it after `seen`, else None."""
    found = [w for w in workers(backend) if w.worker_id == worker_id]
    return found[0] if found and found[0].last_seen > seen else None


def test_a_started_worker_is_listed_with_its_threads_and_leaves_at_stop(backend, pool):
    worker = create_queue_worker(
        pool, lambda t, p: None, queue="mail", worker_threads=3, queue_worker_id="mailer"
    )
    worker.start()
    try:
        [info] = workers(backend)  # start() wrote the row
        assert info.worker_id == worker.worker_id
        assert (info.queue_worker_id, info.queues, info.state) == ("mailer", ("mail",), "running")
        assert (info.host, info.pid) == (socket.gethostname(), os.getpid())
        assert info.worker_threads == 3
        assert sorted(t.name for t in info.threads) == ["mailer-0", "mailer-1", "mailer-2"]
        info = wait_until(lambda: beats_after(backend, worker.worker_id, info.last_seen))
        assert sorted(t.name for t in info.threads) == ["mailer-0", "mailer-1", "mailer-2"]
        assert info.busy == 0 and info.running_job_ids == ()
        assert info.started_at <= info.last_seen
        assert workers(backend, queue="other") == []
    finally:
        assert worker.stop() is True
    assert workers(backend) == []


@pytest.mark.parametrize("lease_ms", [None, 30_000], ids=["held", "leased"])
def test_a_busy_thread_shows_its_job_and_a_growing_duration(backend, pool, gate, lease_ms):
    [job_id] = enqueue_committed(backend, ("slow_report", {"n": 1}))
    worker = create_queue_worker(
        pool, gate, worker_threads=2, queue_worker_id="reports", lease_ms=lease_ms
    )
    worker.start()
    try:
        assert gate.started.wait(30)

        def running() -> admin.WorkerInfo | None:
            found = workers(backend)
            return found[0] if found and found[0].busy else None

        first = wait_until(running, description="a beat shows the job")
        assert first.running_job_ids == (job_id,)
        [busy] = [t for t in first.threads if t.job_id is not None]
        assert (busy.activity, busy.job_type, busy.attempt) == ("running", "slow_report", 1)
        assert [t.job_id for t in first.threads if t is not busy] == [None]
        later = wait_until(lambda: beats_after(backend, worker.worker_id, first.last_seen))
        [still] = [t for t in later.threads if t.job_id == job_id]
        assert still.activity == "running" and still.duration > busy.duration
        gate.release.set()
        idle = wait_until(lambda: (w := workers(backend)) and not w[0].busy and w[0])
        assert idle.running_job_ids == ()
    finally:
        gate.release.set()
        worker.stop()
    assert backend.archived() == [("slow_report", "success", 1)]


def test_process_next_job_does_not_register(backend, pool):
    enqueue_committed(backend, ("one", None))
    assert process_next_job(pool, lambda t, p: None) is True
    assert workers(backend) == []


def dead_row(backend: Backend, seen_ago_s: float, worker_id: str = "gone-host:4242:00") -> None:
    """A row as a worker process killed `seen_ago_s` seconds ago leaves it."""
    table = workers_table(backend.job_table)
    ago = (
        f"UTC_TIMESTAMP(6) - INTERVAL {seen_ago_s} SECOND"
        if backend.name == "mysql"
        else f"statement_timestamp() - interval '{seen_ago_s} seconds'"
    )
    activity = (
        '[{"thread":"w-0","activity":"running","for_s":12.5,'
        f'"job_id":"{uuid.uuid4()}","job_type":"import","attempt":2}},'
        '{"thread":"w-1","activity":"idle","for_s":3}]'
    )
    backend.execute(
        f"INSERT INTO {table} (worker_id, queue, queue_worker_id, host, pid, threads, state, "
        f"started_at, seen_at, activity) VALUES (%s, 'default', 'w', 'gone-host', 4242, 2, "
        f"'running', {ago}, {ago}, %s)",
        (worker_id, activity),
    )


def test_a_row_left_by_a_dead_process_turns_stale_then_is_pruned(backend, pool):
    dead_row(backend, 1, "recent")
    dead_row(backend, 60, "gone")
    by_id = {w.worker_id: w for w in workers(backend)}
    assert by_id["recent"].state == "running"
    gone = by_id["gone"]
    assert gone.state == "stale" and gone.seen_ago >= timedelta(seconds=60)
    assert gone.busy == 1 and gone.threads[0].job_type == "import"
    assert gone.threads[0].since == gone.last_seen - timedelta(seconds=12.5)
    assert gone.as_dict()["threads"][0]["attempt"] == 2
    assert workers(backend, stale_after=timedelta(minutes=5))[0].state == "running"
    with connection(backend) as conn:
        assert admin.prune_workers(conn, older_than=timedelta(seconds=30)) == 1
        conn.commit()
    assert [w.worker_id for w in workers(backend)] == ["recent"]


def test_a_worker_prunes_rows_long_dead_when_it_starts(backend, pool):
    dead_row(backend, _registry.PRUNE_AFTER_S + 60, "long-gone")
    dead_row(backend, 60, "just-gone")
    with create_queue_worker(pool, lambda t, p: None) as worker:
        wait_until(lambda: worker.worker_id in {w.worker_id for w in workers(backend)})
        assert {w.worker_id for w in workers(backend)} == {worker.worker_id, "just-gone"}


SIGKILLED = textwrap.dedent(
    """
    import threading
    from proletarian_di import create_queue_worker
    from proletarian_di._engine import registry
    from backends import backend_from_env

    registry.BEAT_S = 0.05
    def handler(job_type, payload):
        print("started", flush=True)
        threading.Event().wait()
    create_queue_worker(backend_from_env().pool(2), handler, queue_worker_id="doomed").start()
    threading.Event().wait()
    """
)


def test_a_sigkilled_worker_process_is_shown_stale(backend):
    [job_id] = enqueue_committed(backend, ("doomed", None))
    process = subprocess.Popen(
        [sys.executable, "-c", SIGKILLED],
        env=backend.env(),
        cwd=str(Path(__file__).parent),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "started"
        alive = wait_until(lambda: (w := workers(backend)) and w[0].busy and w[0])
        assert (alive.pid, alive.state) == (process.pid, "running")
        assert alive.running_job_ids == (job_id,)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(30)
    # Its row stays, no longer refreshed: stale once a bound of beats has passed.
    quick = {"stale_after": timedelta(seconds=1)}
    [dead] = wait_until(lambda: (w := workers(backend, **quick)) and w[0].state == "stale" and w)
    assert dead.pid == process.pid and dead.running_job_ids == (job_id,)
    page = TestClient(dashboard(backend.connect)).get("/processes")
    assert "doomed" in page.text


def test_a_failing_heartbeat_is_logged_and_the_jobs_go_on(backend, pool):
    """The registry's table dropped (a schema from before it, say): the worker starts, logs
    the failure once, runs its jobs, and registers once the table is back."""
    events = Events()
    table = workers_table(backend.job_table)
    backend.execute(f"DROP TABLE {table}")
    try:
        with create_queue_worker(pool, lambda t, p: None, log=events) as worker:
            wait_until(lambda: events.named("registry_error"))
            enqueue_committed(backend, ("still_runs", None))
            wait_until(lambda: backend.archived(), description="the job runs")
            assert backend.archived() == [("still_runs", "success", 1)]
            with connection(backend) as conn, pytest.raises(SchemaError, match="upgrade"):
                admin.list_workers(conn)
            backend.install()
            wait_until(lambda: events.named("registry_restored"))
            assert [w.worker_id for w in workers(backend)] == [worker.worker_id]
        # Once per reason: a beat that meets the schema half made again (the install racing
        # it on a slow machine) may log that too, but nothing is logged twice in a row.
        error, *others = events.named("registry_error")
        assert error["queue_worker_id"] == "proletarian[default]" and error["table"] == table
        assert f"there is no {table} table" in error["reason"]
        reasons = [e["reason"] for e in (error, *others)]
        assert all(a != b for a, b in itertools.pairwise(reasons))
        assert not any("there is no" in e["reason"] for e in others)
    finally:
        backend.install()


def test_the_registry_logs_a_second_outage_after_it_recovered_from_a_first(backend, pool):
    """The registry's table dropped, put back, dropped again: each outage is logged, and each
    recovery, in that order; the first outage's log does not silence the second."""
    events = Events()
    table = workers_table(backend.job_table)
    try:
        with create_queue_worker(pool, lambda t, p: None, log=events) as worker:
            for outage in (1, 2):
                backend.execute(f"DROP TABLE {table}")
                wait_until(
                    lambda n=outage: len(events.named("registry_error")) >= n,
                    description=f"outage {outage} logged",
                )
                backend.install()
                wait_until(
                    lambda n=outage: len(events.named("registry_restored")) >= n,
                    description=f"recovery {outage} logged",
                )
            assert [w.worker_id for w in workers(backend)] == [worker.worker_id]
        logged = [(name, data) for name, data in events.events if name.startswith("registry_")]
        runs = [name for name, _ in itertools.groupby(name for name, _ in logged)]
        assert runs == ["registry_error", "registry_restored"] * 2
        reasons = [data.get("reason") for _, data in logged]
        assert all(a != b for a, b in itertools.pairwise(reasons)), "logged twice in a row"
        assert sum(f"there is no {table} table" in (reason or "") for reason in reasons) == 2
    finally:
        backend.install()


def test_list_workers_rejects_bad_bounds(backend):
    with connection(backend) as conn:
        with pytest.raises(ConfigurationError, match="stale_after"):
            admin.list_workers(conn, stale_after=5)  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError, match="older_than"):
            admin.prune_workers(conn, older_than=timedelta(0))


def test_the_processes_page_shows_the_workers_and_their_jobs(backend, pool, gate):
    [job_id] = enqueue_committed(backend, ("render_<pdf>", None), queue="docs")
    worker = create_queue_worker(pool, gate, queue="docs", worker_threads=2)
    worker.start()
    try:
        assert gate.started.wait(30)
        wait_until(lambda: (w := workers(backend)) and w[0].busy)
        dead_row(backend, 120, "gone-host:4242:00")
        client = TestClient(dashboard(pool))
        page = client.get("/processes")
        assert page.status_code == 200
        assert 'href="/processes" aria-current="page"' in page.text
        assert "proletarian[docs]" in page.text and f"{os.getpid()}" in page.text
        assert f'href="/jobs/{job_id}"' in page.text
        assert "render_&lt;pdf&gt;" in page.text and "<pdf>" not in page.text
        assert "1 / 2" in page.text
        assert "state-stale" in page.text and "gone-host" in page.text
        assert 'href="/processes"' in client.get("/").text
    finally:
        gate.release.set()
        worker.stop()


def test_the_processes_page_says_when_nothing_runs_or_the_table_is_missing(backend, pool):
    page = TestClient(dashboard(pool)).get("/processes")
    assert page.status_code == 200 and "No worker is connected" in page.text
    guarded = TestClient(dashboard(pool, actions=True, auth=lambda r: r.headers.get("x-user")))
    assert guarded.get("/processes").status_code == 401
    with create_queue_worker(pool, lambda t, p: None):
        page = guarded.get("/processes", headers={"x-user": "ops"})
    assert page.status_code == 200 and "proletarian[default]" in page.text
    assert 'method="post"' not in page.text, "the page changes nothing, even with actions on"
    elsewhere = admin.Tables("proletarian.nothing_here", "proletarian.nothing_here_done")
    page = TestClient(dashboard(pool, tables=elsewhere)).get("/processes")
    assert page.status_code == 200
    assert "No workers to show" in page.text and "nothing_here_workers" in page.text


def test_the_workers_command_lists_them(backend):
    dead_row(backend, 60, "gone-host:4242:00")
    runner = CliRunner()
    url = ["--database-url", backend.url]
    result = runner.invoke(cli_app, ["workers", *url])
    assert result.exit_code == 0, result.output
    assert "gone-host" in result.output and "stale" in result.output and "import" in result.output
    result = runner.invoke(cli_app, ["workers", "--json", *url])
    assert result.exit_code == 0, result.output
    assert '"pid": 4242' in result.output


def test_the_cli_worker_registers_and_leaves_when_signalled(backend, tmp_path):
    """`proletarian-di worker` runs QueueWorkers: its process is listed while it runs, and
    gone from the list once SIGTERM has drained it."""
    db = CliDB(backend)
    db.enqueue(("sleep", {"n": 1, "seconds": 0.5}))
    worker = WorkerProcess(db, tmp_path)
    try:
        worker.wait_for(lambda: started(tmp_path), "the job to start")
        [listed] = cli_workers(backend)
        assert (listed.pid, listed.queues, listed.state) == (
            worker.proc.pid,
            ("default",),
            "running",
        )
    finally:
        worker.signal(signal.SIGTERM)
        assert worker.finish() == 0, worker.output
    assert cli_workers(backend) == []


# Rows another process wrote: any JSON, read without raising ---------------------------------

JOB_ID = "5f0c8f7e-0000-4000-8000-000000000001"
ESCAPES = "\x1b]0;retitled\x07\x1b[2J"
ENTRY = '{"thread":"w-0","activity":"idle","for_s":%s}'
HOSTILE = {
    # worker_id: (activity JSON, how many threads it shows)
    "huge-for": ('[{"thread":"w-0","activity":"running","for_s":1e12}]', 0),
    "nan-for": (f"[{ENTRY % 'NaN'}]", 0),
    "infinite-for": (f"[{ENTRY % 'Infinity'},{ENTRY % '-Infinity'},{ENTRY % '1e400'}]", 0),
    "number-strings": ("[" + ENTRY % '"Infinity"' + "," + ENTRY % '"NaN"' + "]", 0),
    "odd-for": (f"[{ENTRY % 'null'},{ENTRY % 'true'},{ENTRY % -5},{ENTRY % '{}'}]", 0),
    "no-list": ('{"thread":"w-0","activity":"idle","for_s":1}', 0),
    "null": ("null", 0),
    "a-string": ('"threads"', 0),
    "not-json": ("not json [", 0),
    "empty": ("", 0),
    "too-deep": ("[" * 100_000 + "]" * 100_000, 0),
    "odd-entries": ('[1, "two", null, [3], {"thread": {"a": 1}, "activity": [], "for_s": 1}]', 0),
    "odd-fields": (
        '[{"thread":"w-0","activity":"running","for_s":1,"job_id":12345,"job_type":["t"],'
        '"attempt":"2","progress":"50%","max_running":1e12},'
        '{"thread":"w-1","activity":"running","for_s":2,"job_id":"not a uuid","job_type":{},'
        '"attempt":1e308,"progress":NaN,"max_running":100000000000000000000},'
        '{"thread":"w-2","activity":"running","for_s":2,"job_id":{"id":1},"attempt":-1,'
        '"progress":[1,2],"max_running":"3"}]',
        3,
    ),
    "escapes": (
        '[{"thread":"\\u001b]0;retitled\\u0007","activity":"\\u001b[2J","for_s":2,'
        f'"job_id":"{JOB_ID}","job_type":"\\u001b[2J","attempt":2,"max_running":4}}]',
        1,
    ),
}


def hostile_rows(backend: Backend, queue: str = "default") -> None:
    """The rows of `HOSTILE`, live (seen now), as a process might write them by hand; the
    state of "escapes" retitles and clears a terminal that obeys it."""
    table = workers_table(backend.job_table)
    now = "UTC_TIMESTAMP(6)" if backend.name == "mysql" else "statement_timestamp()"
    for worker_id, (activity, _) in HOSTILE.items():
        state = "\x1b]0;x\x07\x1b[2J" if worker_id == "escapes" else "running"
        backend.execute(
            f"INSERT INTO {table} (worker_id, queue, queue_worker_id, host, pid, threads, state, "
            f"started_at, seen_at, activity) VALUES (%s, %s, %s, %s, 4242, 3, %s, {now}, "
            f"{now}, %s)",
            (worker_id, queue, f"w-{worker_id}", f"host-{worker_id}", state, activity),
        )


def test_hostile_rows_are_read_without_raising(backend):
    """Huge, infinite and NaN durations, strings for numbers, lists for strings, JSON that is
    not a list or not JSON: each row is listed, with the threads it describes readably."""
    hostile_rows(backend)
    found = {w.worker_id: w for w in workers(backend)}
    [(count,)] = backend.query(f"SELECT COUNT(*) FROM {workers_table(backend.job_table)}")
    assert sorted(found) == sorted(HOSTILE) and len(found) == count
    for worker_id, (_, threads) in HOSTILE.items():
        assert len(found[worker_id].threads) == threads, worker_id
    odd = found["odd-fields"]
    assert [t.name for t in odd.threads] == ["w-0", "w-1", "w-2"]
    for thread in odd.threads:
        assert (thread.job_id, thread.job_type, thread.attempt, thread.progress) == (None,) * 4
    assert odd.max_running is None and odd.busy == 0
    assert odd.threads[1].since == odd.last_seen - timedelta(seconds=2)
    [shown] = found["escapes"].threads
    assert (shown.activity, shown.job_type, shown.attempt) == ("\x1b[2J", "\x1b[2J", 2)
    assert str(shown.job_id) == JOB_ID and found["escapes"].max_running == 4


def test_hostile_rows_reach_every_reader_without_raising(backend, pool):
    """The CLI's `workers` (text and JSON) and `jobs explain`, the dashboard's processes and
    waiting job pages: each answers, and no control character reaches the terminal."""
    [job_id] = enqueue_committed(backend, ("waiting", None))
    hostile_rows(backend)
    [(count,)] = backend.query(f"SELECT COUNT(*) FROM {workers_table(backend.job_table)}")
    runner = CliRunner()
    url = ["--database-url", backend.url]
    text = runner.invoke(cli_app, ["workers", *url], env={"COLUMNS": "200"})
    assert text.exit_code == 0, text.output
    assert "\x1b" not in text.output and "\x07" not in text.output
    assert text.output.count("pid 4242") == count
    assert "\\x1b]0;x\\x07\\x1b[2J" in text.output, "the state, escaped"
    assert "\\x1b]0;retitled\\x07  \\x1b[2J" in text.output, "the thread and its activity"
    listed = runner.invoke(cli_app, ["workers", "--json", *url])
    assert listed.exit_code == 0, listed.output
    by_id = {w["worker_id"]: w for w in json.loads(listed.stdout)}
    assert {k: len(w["threads"]) for k, w in by_id.items()} == {
        k: threads for k, (_, threads) in HOSTILE.items()
    }
    explained = runner.invoke(cli_app, ["jobs", "explain", str(job_id), *url])
    assert explained.exit_code == 0, explained.output
    [(polling,)] = backend.query(
        f"SELECT COUNT(*) FROM {workers_table(backend.job_table)} WHERE state = 'running'"
    )
    assert "\x1b" not in explained.output
    assert f"{polling} live workers poll" in flat(explained.output)
    client = TestClient(dashboard(pool))
    processes = client.get("/processes")
    assert processes.status_code == 200
    assert f"{count} workers" in processes.text and "host-huge-for" in processes.text
    assert client.get(f"/jobs/{job_id}").status_code == 200


def test_a_running_jobs_progress_is_shown_only_when_it_is_one(backend, pool, gate):
    """Progress another row claims for a running job (NaN, out of range, a string, a list)
    is not shown as the job's: `admin.get_job`, `jobs show` and the job's page say none."""
    [job_id] = enqueue_committed(backend, ("long", None))
    worker = create_queue_worker(pool, gate)
    worker.start()
    try:
        assert gate.started.wait(30)
        table = workers_table(backend.job_table)
        now = "UTC_TIMESTAMP(6)" if backend.name == "mysql" else "statement_timestamp()"
        for n, progress in enumerate(("NaN", "1e308", "-1", '"50%"', "[1, 2]", "true")):
            activity = (
                f'[{{"thread":"w-0","activity":"running","for_s":1,"job_id":"{job_id}",'
                f'"job_type":"long","attempt":1,"progress":{progress}}}]'
            )
            backend.execute(
                f"INSERT INTO {table} (worker_id, queue, queue_worker_id, host, pid, threads, "
                f"state, started_at, seen_at, activity) VALUES (%s, 'default', 'w', "
                f"'a-host', 4242, 1, 'running', {now}, {now}, %s)",
                (f"liar-{n}", activity),
            )
        with connection(backend) as conn:
            job = admin.get_job(conn, job_id)
        assert job is not None and job.state == "running" and job.progress is None
        shown = CliRunner().invoke(cli_app, ["jobs", "show", str(job_id), "-d", backend.url])
        assert shown.exit_code == 0 and "progress" not in shown.output, shown.output
        page = TestClient(dashboard(pool)).get(f"/jobs/{job_id}")
        assert page.status_code == 200 and "Progress" not in page.text
    finally:
        gate.release.set()
        worker.stop()


def flat(text: str) -> str:
    return " ".join(text.split())

"""`python -m bench --scenario django`: two Django task backends side by side on PostgreSQL.

Ours (`proletarian_di.contrib.django.ProletarianBackend`, `manage.py proletarian_worker
--threads 4`) and django-tasks-db (`django_tasks_db.DatabaseBackend`, `manage.py db_worker`).
db_worker has no threads or concurrency option: one process runs one task at a time, so
"4 workers" is 4 db_worker processes (`--interval 0.1`, like our 100 ms polling,
`--no-startup-delay`). Each backend has a schema of its own (`bench_django_ours`,
`bench_django_db`, via search_path), dropped and created again before every measurement.

Throughput: enqueue N no-op tasks (one `enqueue()` each, autocommit), then time the
workers from their start until every task is SUCCESSFUL. The kill: enqueue a task that
sleeps, wait until it is RUNNING, SIGKILL the worker, tell the task to return at once, start
a fresh worker and see whether the task runs again.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
from rich.console import Console
from rich.table import Table

PROJECT = Path(__file__).with_name("django_project")
BACKENDS = {"ours": "proletarian-di", "db": "django-tasks-db"}
WORKERS = 4
SLEEP_SECONDS = 30.0
AFTER_RESTART = 10.0  # how long the fresh worker gets to run the killed task again
DEADLINE = 300.0

console = Console(stderr=True, highlight=False)


class Client:
    """bench/django_project/client.py in a subprocess, on one backend's settings."""

    def __init__(self, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(PROJECT / "client.py")],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._read()

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"django client exited ({self.process.wait()})")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return answer

    def ask(self, *words: object) -> dict[str, Any]:
        """Send one command, return its answer."""
        assert self.process.stdin is not None
        self.process.stdin.write(" ".join(map(str, words)) + "\n")
        self.process.stdin.flush()
        return self._read()

    def close(self) -> None:
        """Close stdin and wait for the client to exit."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)


def environment(url: str, backend: str) -> dict[str, str]:
    """The environment of the Django processes for `backend`."""
    env = dict(os.environ, BENCH_DJANGO_BACKEND=backend, BENCH_DJANGO_URL=url)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT), env.get("PYTHONPATH")]))
    env["DJANGO_SETTINGS_MODULE"] = "benchdj.settings"
    return env


def manage(env: dict[str, str], *args: str) -> list[str]:
    """The command line of `manage.py args`."""
    return [sys.executable, str(PROJECT / "manage.py"), *args]


def reset(url: str, backend: str) -> dict[str, str]:
    """Drop and create `backend`'s schema, install its tables; its environment."""
    schema = f"bench_django_{backend}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        conn.execute(f"CREATE SCHEMA {schema}")
    env = environment(url, backend)
    install = ("proletarian_install",) if backend == "ours" else ("migrate", "-v", "0")
    subprocess.run(manage(env, *install), env=env, check=True, stdout=subprocess.DEVNULL)
    return env


def start_workers(env: dict[str, str], backend: str) -> list[subprocess.Popen[bytes]]:
    """Our worker with 4 threads, or 4 db_worker processes."""
    if backend == "ours":
        commands = [manage(env, "proletarian_worker", "--threads", str(WORKERS))]
    else:
        worker = ("db_worker", "--interval", "0.1", "--no-startup-delay", "--no-reload")
        commands = [manage(env, *worker) for _ in range(WORKERS)]
    return [
        subprocess.Popen(c, env=env, stdout=subprocess.DEVNULL, start_new_session=True)
        for c in commands
    ]


def stop(workers: list[subprocess.Popen[bytes]], sig: int = signal.SIGTERM) -> None:
    """Signal the workers (only these processes) and wait for them."""
    for worker in workers:
        if worker.poll() is None:
            worker.send_signal(sig)
    for worker in workers:
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


@contextlib.contextmanager
def running(env: dict[str, str], backend: str) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Workers for the block, stopped after it whatever happens."""
    workers = start_workers(env, backend)
    try:
        yield workers
    finally:
        stop(workers)


def throughput(url: str, backend: str, jobs: int) -> tuple[float, float]:
    """(enqueue jobs/s, drain jobs/s) for `jobs` no-op tasks on `backend`."""
    env = reset(url, backend)
    client = Client(env)
    try:
        enqueue_seconds = client.ask("enqueue", jobs)["seconds"]
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("ANALYZE")
        started = time.perf_counter()
        with running(env, backend):
            while client.ask("successful")["count"] < jobs:
                if time.perf_counter() - started > DEADLINE:
                    raise RuntimeError(f"{backend}: not all {jobs} tasks done in {DEADLINE} s")
                time.sleep(0.02)
            elapsed = time.perf_counter() - started
    finally:
        client.close()
    return jobs / enqueue_seconds, jobs / elapsed


def wait_status(client: Client, task_id: str, wanted: str, timeout: float) -> str:
    """Poll the task's status until it is `wanted` or `timeout` passes; the last status."""
    deadline = time.monotonic() + timeout
    status = client.ask("status", task_id)["status"]
    while status != wanted and time.monotonic() < deadline:
        time.sleep(0.1)
        status = client.ask("status", task_id)["status"]
    return status


def kill(url: str, backend: str) -> tuple[str, int]:
    """SIGKILL a worker mid-task, start a fresh one: (the task's status then, its starts)."""
    env = reset(url, backend)
    client = Client(env)
    try:
        with tempfile.TemporaryDirectory() as folder:
            task_id = client.ask("sleeper", folder, SLEEP_SECONDS)["id"]
            workers = start_workers(env, backend)
            try:
                status = wait_status(client, task_id, "RUNNING", 30)
                if status != "RUNNING":
                    raise RuntimeError(f"{backend}: the task never ran (status {status})")
            finally:
                stop(workers, signal.SIGKILL)
            Path(folder, "short").touch()  # a second run returns at once
            console.print(f"  {BACKENDS[backend]}: worker killed mid-task, fresh worker")
            with running(env, backend):
                status = wait_status(client, task_id, "SUCCESSFUL", AFTER_RESTART)
            starts = len(Path(folder, "starts").read_text().split())
    finally:
        client.close()
    return status, starts


def main(url: str, jobs: int, machine: str) -> int:
    """Both measurements for both backends; the two tables on stdout."""
    rates: dict[str, tuple[float, float]] = {}
    outcomes: dict[str, tuple[str, int]] = {}
    errors: list[str] = []
    for backend, name in BACKENDS.items():
        console.print(f"[bold]{name}[/]: {jobs:,} no-op tasks")
        try:
            rates[backend] = throughput(url, backend, jobs)
            console.print(f"  enqueue {rates[backend][0]:,.0f}/s, run {rates[backend][1]:,.0f}/s")
        except Exception as exc:
            errors.append(f"{name} throughput: {type(exc).__name__}: {exc}")
        try:
            outcomes[backend] = kill(url, backend)
        except Exception as exc:
            errors.append(f"{name} kill: {type(exc).__name__}: {exc}")
    out = Console(highlight=False, width=None if sys.stdout.isatty() else 200)
    rate_table = Table(
        title=f"Django tasks on PostgreSQL — {jobs:,} no-op tasks, jobs/s", title_justify="left"
    )
    rate_table.add_column("measurement", no_wrap=True)
    for name in BACKENDS.values():
        rate_table.add_column(name, justify="right")
    for index, label in enumerate(
        ("enqueue, one task.enqueue() each (autocommit)", f"run them all, {WORKERS} workers")
    ):
        cells = [f"{rates[b][index]:,.0f}" if b in rates else "—" for b in BACKENDS]
        rate_table.add_row(label, *cells)
    out.print(rate_table)
    kill_table = Table(
        title=(
            f"Worker SIGKILLed while the task runs, then a fresh worker for up to "
            f"{AFTER_RESTART:.0f} s"
        ),
        title_justify="left",
    )
    for column in ("backend", "status after the kill and restart", "ran again"):
        kill_table.add_column(column)
    for backend, name in BACKENDS.items():
        if backend in outcomes:
            status, starts = outcomes[backend]
            kill_table.add_row(name, status, "yes" if starts > 1 else "no")
        else:
            kill_table.add_row(name, "—", "—")
    out.print(kill_table)
    out.print(f"machine: {machine}")
    out.print(
        f"Workers: ours `proletarian_worker --threads {WORKERS}` (one process); django-tasks-db "
        f"has no concurrency option, so {WORKERS} `db_worker --interval 0.1` processes. "
        "Run times count from the workers' start (Django start-up included) to the last "
        "task SUCCESSFUL."
    )
    for error in errors:
        out.print(f"[red]error:[/] {error}")
    return 1 if errors else 0

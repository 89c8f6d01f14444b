"""The Django tasks backend and `manage.py proletarian_worker`, on both databases.

Django's settings are process-wide, so the test project (tests/django_project) runs in
subprocesses: `client.py` enqueues and reads results, `manage.py` runs the workers.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from proletarian_di import admin

from backends import Backend, as_uuid, committed, wait_until

django = pytest.importorskip("django")
try:  # Django 6's own tasks framework, else the backport
    import django.tasks
except ImportError:
    pytest.importorskip("django_tasks")

PROJECT = Path(__file__).resolve().parent / "django_project"
RESULTS = "proletarian.job_results"
_installed: set[str] = set()


def env(backend: Backend, **extra: str) -> dict[str, str]:
    return {
        **backend.env(),
        "DJANGO_SETTINGS_MODULE": "djdemo.settings",
        "PYTHONPATH": "",
        **extra,
    }


def manage(backend: Backend, *args: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=PROJECT,
        env=env(backend, **extra_env),
        capture_output=True,
        text=True,
        timeout=60,
    )


def client(backend: Backend, *steps: dict[str, Any]) -> list[Any]:
    """Run steps in the Django project (see client.py); their answers."""
    done = subprocess.run(
        [sys.executable, "client.py", json.dumps(steps)],
        cwd=PROJECT,
        env=env(backend),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    answers: list[Any] = json.loads(done.stdout)
    return answers


class Worker:
    """`manage.py proletarian_worker` in a subprocess, its output in a file."""

    def __init__(self, backend: Backend, log: Path, *args: str, **extra_env: str) -> None:
        self.log = log
        self.process = subprocess.Popen(
            [
                sys.executable,
                "manage.py",
                "proletarian_worker",
                "--polling-interval-ms",
                "20",
                *args,
            ],
            cwd=PROJECT,
            env=env(backend, **extra_env),
            stdout=subprocess.DEVNULL,
            stderr=log.open("w"),
        )

    def output(self) -> str:
        return self.log.read_text()

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(30)


@pytest.fixture
def django_db(backend: Backend) -> Backend:
    """The backend with the results table installed (by `manage.py proletarian_install`)."""
    if backend.name not in _installed:
        done = manage(backend, "proletarian_install")
        assert done.returncode == 0, done.stderr
        assert "proletarian.job_results" in done.stdout
        _installed.add(backend.name)
    backend.execute(f"DELETE FROM {RESULTS}")
    return backend


@pytest.fixture
def workers(django_db: Backend, tmp_path: Path) -> Iterator[list[Worker]]:
    started: list[Worker] = []
    yield started
    for worker in started:
        if worker.process.poll() is None:
            worker.stop(signal.SIGKILL)


def finished(db: Backend, count: int) -> bool:
    return len(db.query(f"SELECT job_id FROM {RESULTS}")) >= count


def test_atomic_blocks_and_results(
    django_db: Backend, workers: list[Worker], tmp_path: Path
) -> None:
    rolled_back, committed, autocommitted, failing, too_big = client(
        django_db,
        {"do": "enqueue", "task": "add", "args": [2, 3], "atomic": "rollback"},
        {"do": "enqueue", "task": "add", "args": [4, 5], "atomic": "commit"},
        {"do": "enqueue", "task": "add", "args": [1, 1]},
        {"do": "enqueue", "task": "fail", "args": ["boom"]},
        {"do": "enqueue", "task": "big", "args": [2000]},
    )
    waiting = {
        str(as_uuid(row[0])) for row in django_db.query("SELECT job_id FROM proletarian.job")
    }
    assert rolled_back not in waiting
    assert waiting == {committed, autocommitted, failing, too_big}
    [ready] = client(django_db, {"do": "result", "id": committed})
    assert (ready["status"], ready["finished"], ready["args"]) == ("READY", False, [4, 5])

    signals = tmp_path / "signals.jsonl"
    workers.append(
        Worker(
            django_db, tmp_path / "worker.log", "--queue", "default", DJDEMO_SIGNALS=str(signals)
        )
    )
    wait_until(lambda: finished(django_db, 4), description="four results written")
    ok, auto, failed, big = client(
        django_db,
        *({"do": "result", "id": i} for i in (committed, autocommitted, failing, too_big)),
    )
    assert (ok["status"], ok["return_value"], ok["task"]) == ("SUCCESSFUL", 9, "djdemo.tasks.add")
    assert (auto["status"], auto["return_value"]) == ("SUCCESSFUL", 2)
    assert failed["status"] == "FAILED"
    [(path, trace)] = failed["errors"]
    assert path == "builtins.ValueError" and "ValueError: boom" in trace
    assert big["status"] == "FAILED"
    assert big["errors"][0][0].endswith("ResultTooLarge")
    assert django_db.query("SELECT job_id FROM proletarian.job") == []
    assert workers[0].stop() == 0
    assert "stopped cleanly: 2 succeeded, 2 failed" in workers[0].output()
    # task_started, then task_finished with the outcome (failures sent inside the except).
    sent = [json.loads(line) for line in signals.read_text().splitlines()]
    by_id = {i: [s for s in sent if s["id"] == i] for i in (committed, failing, too_big)}
    started, done = by_id[committed]
    assert (started["signal"], started["status"]) == ("started", "RUNNING")
    assert (done["signal"], done["status"], done["return_value"]) == ("finished", "SUCCESSFUL", 9)
    for i, error in ((failing, "builtins.ValueError"), (too_big, "ResultTooLarge")):
        [_, done] = by_id[i]
        assert (done["signal"], done["status"], done["in_except"]) == ("finished", "FAILED", True)
        assert done["errors"][0].endswith(error)


def test_queue_priority_and_run_after(
    django_db: Backend, workers: list[Worker], tmp_path: Path
) -> None:
    notes = str(tmp_path / "notes.txt")
    low, high, mid, later = client(
        django_db,
        {"do": "enqueue", "task": "note", "args": [notes, "low"], "using": {"priority": -10}},
        {"do": "enqueue", "task": "note", "args": [notes, "high"], "using": {"priority": 100}},
        {"do": "enqueue", "task": "note", "args": [notes, "mid"]},
        {"do": "enqueue", "task": "note", "args": [notes, "later"], "using": {"run_after_s": 3600}},
    )
    rows = {
        str(as_uuid(job_id)): (queue, priority, process_at)
        for job_id, queue, priority, process_at in django_db.query(
            "SELECT job_id, queue, priority, process_at FROM proletarian.job"
        )
    }
    assert {rows[i][:2] for i in (low, high, mid)} == {("notes", -10), ("notes", 100), ("notes", 0)}
    process_at = rows[later][2]
    process_at = process_at if process_at.tzinfo else process_at.replace(tzinfo=timezone.utc)
    assert process_at > datetime.now(timezone.utc) + timedelta(minutes=50)

    workers.append(Worker(django_db, tmp_path / "worker.log", "--queue", "notes"))
    wait_until(lambda: finished(django_db, 3), description="three notes written")
    assert Path(notes).read_text().split() == ["high", "mid", "low"]
    done, deferred = client(
        django_db, {"do": "result", "id": high, "task": "note"}, {"do": "result", "id": later}
    )
    assert (done["status"], done["queue"], done["priority"]) == ("SUCCESSFUL", "notes", 100)
    assert (deferred["status"], deferred["queue"]) == ("READY", "notes")
    assert workers[0].stop() == 0


def test_killed_worker_runs_the_task_again(
    django_db: Backend, workers: list[Worker], tmp_path: Path
) -> None:
    starts = tmp_path / "starts"
    [held] = client(django_db, {"do": "enqueue", "task": "hold", "args": [str(tmp_path)]})
    first = Worker(django_db, tmp_path / "first.log")
    workers.append(first)
    wait_until(lambda: starts.exists() and len(starts.read_text().split()) == 1)
    [running] = client(django_db, {"do": "result", "id": held})
    assert running["status"] == "RUNNING"
    assert first.stop(signal.SIGKILL) == -signal.SIGKILL

    second = Worker(django_db, tmp_path / "second.log")
    workers.append(second)
    wait_until(lambda: len(starts.read_text().split()) == 2, description="the task ran again")
    (tmp_path / "release").touch()
    wait_until(lambda: finished(django_db, 1), description="the task finished")
    [result] = client(django_db, {"do": "result", "id": held})
    assert (result["status"], result["return_value"]) == ("SUCCESSFUL", 2)
    pids = starts.read_text().split()
    assert pids == [str(first.process.pid), str(second.process.pid)]
    assert second.stop() == 0


def test_sigterm_drains_and_exits_0(
    django_db: Backend, workers: list[Worker], tmp_path: Path
) -> None:
    starts = tmp_path / "starts"
    [held] = client(django_db, {"do": "enqueue", "task": "hold", "args": [str(tmp_path)]})
    worker = Worker(django_db, tmp_path / "worker.log")
    workers.append(worker)
    wait_until(lambda: starts.exists(), description="the task started")
    worker.process.send_signal(signal.SIGTERM)
    wait_until(lambda: "draining" in worker.output(), description="the worker drains")
    assert worker.process.poll() is None  # still running the task
    (tmp_path / "release").touch()
    assert worker.process.wait(30) == 0
    assert "stopped cleanly: 1 succeeded" in worker.output()
    [result] = client(django_db, {"do": "result", "id": held})
    assert (result["status"], result["return_value"]) == ("SUCCESSFUL", 1)


def archived(db: Backend, status: str) -> int:
    rows = db.query("SELECT job_id FROM proletarian.archived_job WHERE status = %s", (status,))
    return len(rows)


def test_results_follow_retry_and_cancel(
    django_db: Backend, workers: list[Worker], tmp_path: Path
) -> None:
    """An operator's retry (the dashboard's Retry) of failed tasks, then a cancel or another
    run: the result is the job's current state, never the failure before the retry."""
    failing, flaky, twice = client(
        django_db,
        {"do": "enqueue", "task": "fail", "args": ["boom"]},
        {"do": "enqueue", "task": "flaky", "args": [str(tmp_path)]},
        {"do": "enqueue", "task": "fail", "args": ["twice"]},
    )
    first = Worker(django_db, tmp_path / "first.log")
    workers.append(first)
    wait_until(lambda: archived(django_db, "failure") == 3, description="three failures")
    assert first.stop() == 0
    assert committed(django_db, admin.retry_jobs, [failing, flaky, twice]) == 3
    for waiting in client(django_db, *({"do": "result", "id": i} for i in (failing, flaky))):
        assert (waiting["status"], waiting["errors"], waiting["finished"]) == ("READY", [], False)

    assert committed(django_db, admin.cancel_jobs, [failing]) == 1
    [cancelled] = client(django_db, {"do": "result", "id": failing})
    assert (cancelled["status"], cancelled["finished"]) == ("FAILED", True)
    [(path, _)] = cancelled["errors"]
    assert path == "proletarian_di.contrib.django.backend.TaskCancelled"

    (tmp_path / "ok").touch()
    second = Worker(django_db, tmp_path / "second.log")
    workers.append(second)
    wait_until(lambda: archived(django_db, "success") == 1, description="flaky succeeded")
    wait_until(lambda: archived(django_db, "failure") == 1, description="twice failed again")
    assert second.stop() == 0
    succeeded, failed_again = client(
        django_db, {"do": "result", "id": flaky}, {"do": "result", "id": twice}
    )
    assert (succeeded["status"], succeeded["return_value"]) == ("SUCCESSFUL", "ok")
    assert (succeeded["errors"], failed_again["status"]) == ([], "FAILED")
    [(path, trace)] = failed_again["errors"]
    assert path == "builtins.ValueError" and "ValueError: twice" in trace

    # A failure whose results row was not written (its failed_job_fn lost the transaction)
    # leaves the row of the run before the retry: it must not be taken for this one's.
    mysql = django_db.name == "mysql"
    key = uuid.UUID(twice).bytes if mysql else uuid.UUID(twice)
    stale = "finished_at - INTERVAL 1 DAY" if mysql else "finished_at - INTERVAL '1 day'"
    django_db.execute(f"UPDATE {RESULTS} SET finished_at = {stale} WHERE job_id = %s", (key,))
    [archive_only] = client(django_db, {"do": "result", "id": twice})
    assert archive_only["status"] == "FAILED"
    [(path, text)] = archive_only["errors"]
    assert path == "proletarian_di.contrib.django.backend.JobFailed" and "twice" in text


def test_enqueue_in_a_failed_transaction(django_db: Backend) -> None:
    """A caught IntegrityError inside atomic: PostgreSQL aborts the transaction (MySQL does
    not), and Django marks it for rollback when the error left an inner atomic block without
    a savepoint. Enqueueing then is `TransactionAborted`, not a driver error or a lost job;
    after a savepoint it works."""
    django_db.execute("DROP TABLE IF EXISTS proletarian.dj_unique")
    django_db.execute("CREATE TABLE proletarian.dj_unique (k INTEGER PRIMARY KEY)")
    django_db.execute("INSERT INTO proletarian.dj_unique (k) VALUES (1)")
    caught, marked, savepoint = client(
        django_db,
        {"do": "enqueue_after_error", "how": "caught"},
        {"do": "enqueue_after_error", "how": "marked"},
        {"do": "enqueue_after_error", "how": "savepoint"},
    )
    aborted = "proletarian_di.errors.TransactionAborted"
    for error, reason in ((caught, "a statement in it failed"), (marked, "an atomic block")):
        if error is caught and django_db.name == "mysql":
            continue  # MySQL goes on after a duplicate key: the job commits
        assert isinstance(error, list), f"enqueued {error} in a transaction that rolls back"
        path, message = error
        assert path == aborted and reason in message, message
        assert "cannot enqueue djdemo.tasks.add" in message and "nothing was written" in message
    waiting = {
        str(as_uuid(row[0])) for row in django_db.query("SELECT job_id FROM proletarian.job")
    }
    assert waiting == ({savepoint, caught} if django_db.name == "mysql" else {savepoint})


def test_unknown_result_id(django_db: Backend) -> None:
    done = subprocess.run(
        [sys.executable, "client.py", json.dumps([{"do": "result", "id": "not-a-job"}])],
        cwd=PROJECT,
        env=env(django_db),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "TaskResultDoesNotExist" in done.stderr


PROLETARIAN = "proletarian_di.contrib.django.ProletarianBackend"
FRAMEWORK = "django.tasks" if django.VERSION >= (6,) else "django_tasks"
DUMMY = f"{FRAMEWORK}.backends.dummy.DummyBackend"


@pytest.mark.parametrize(
    ("args", "tasks", "expected"),
    [
        (["--backend", "nope"], None, "no TASKS backend 'nope'; configured: 'default'"),
        (
            ["--backend", "nope"],
            {"default": {"BACKEND": PROLETARIAN}, "mail": {"BACKEND": PROLETARIAN}},
            "no TASKS backend 'nope'; configured: 'default', 'mail'",
        ),
        (["--queue", "nowhere"], None, "queue(s) 'nowhere' not in TASKS['default']['QUEUES']"),
        (
            ["--backend", "other"],
            {"default": {"BACKEND": PROLETARIAN}, "other": {"BACKEND": DUMMY}},
            f"TASKS['other'] is {DUMMY}, not proletarian_di.contrib.django.ProletarianBackend; "
            "proletarian backends: 'default'",
        ),
        ([], "null", "TASKS['default'] is "),  # no TASKS setting: Django's default backend
        (
            [],
            {"default": {"BACKEND": "djdemo.nowhere.Backend"}},
            "TASKS['default'] cannot be loaded: Could not find backend 'djdemo.nowhere.Backend'",
        ),
        (
            [],
            {"default": {"BACKEND": PROLETARIAN, "OPTIONS": {"DATABSE": "default"}}},
            "TASKS['default'] cannot be loaded: TASKS['default']['OPTIONS']: unknown option(s) "
            "DATABSE",
        ),
        (
            [],
            {"default": {"BACKEND": PROLETARIAN, "OPTIONS": {"DATABASE": "replica"}}},
            "TASKS['default']['OPTIONS']['DATABASE'] is 'replica', which is not in DATABASES "
            "('default')",
        ),
        (["--threads", "0"], None, "argument --threads: must be at least 1, got 0"),
        (["--threads", "x"], None, "argument --threads: must be an integer, got 'x'"),
        (["--polling-interval-ms", "-1"], None, "--polling-interval-ms: must be at least 0"),
    ],
    ids=[
        "unknown-backend",
        "unknown-backend-of-two",
        "unknown-queue",
        "not-proletarian",
        "no-TASKS-setting",
        "backend-class-not-found",
        "unknown-option",
        "unknown-database",
        "zero-threads",
        "threads-not-a-number",
        "negative-polling-interval",
    ],
)
def test_bad_worker_options_are_one_line_errors(
    django_db: Backend, args: list[str], tasks: Any, expected: str
) -> None:
    """Each bad option or setting of `proletarian_worker` is one line naming it, no
    traceback; the same for `proletarian_install --backend`."""
    extra = {}
    if tasks is not None:
        extra["DJDEMO_TASKS"] = tasks if isinstance(tasks, str) else json.dumps(tasks)
    done = manage(django_db, "proletarian_worker", *args, **extra)
    assert done.returncode != 0
    assert expected in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    if "--backend" in args:
        install = manage(django_db, "proletarian_install", *args, **extra)
        assert install.returncode != 0 and expected in install.stderr, install.stderr
        assert "Traceback" not in install.stderr


def test_worker_on_a_database_that_does_not_answer(django_db: Backend) -> None:
    """A database that refuses the connection: one line with the driver's reason."""
    for command in ("proletarian_worker", "proletarian_install"):
        done = manage(django_db, command, DJDEMO_DATABASE_PORT="9")
        assert done.returncode != 0
        assert "cannot connect to database 'default':" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def test_the_tasks_framework_in_use() -> None:
    """Django 6 runs on its own `django.tasks`; older Django on the `django_tasks` backport."""
    from proletarian_di.contrib.django import _compat

    expected = "django.tasks.base" if django.VERSION >= (6,) else "django_tasks.base"
    assert _compat.Task.__module__ == expected

"""The archive's retention per outcome: `admin.prune_archive` and `proletarian-di archive
prune`, in batches that each commit, on both databases."""

from __future__ import annotations

import contextlib
import threading
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from cli_fixtures.cli_db import ARCHIVE, JOB, TABLES, CliDB
from faults import running, wait_for
from test_cli import run

from proletarian_di import (
    ConfigurationError,
    RetrySpec,
    admin,
    create_queue_worker,
    process_next_job,
)

from backends import as_uuid, committed

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=timezone.utc)
TABLE_OPTIONS = admin.Tables(JOB, ARCHIVE)


@pytest.fixture
def db(backend: Any) -> CliDB:
    return CliDB(backend)


def archived_at(db: CliDB, outcomes: dict[str, list[timedelta]]) -> dict[str, list[Any]]:
    """Run a job per age of each outcome ("success", "failure", "cancelled"), then date its
    archived row that long before NOW; the ids by outcome, oldest first."""
    ids: dict[str, list[Any]] = {}
    for status, ages in outcomes.items():
        for age in ages:
            (job_id,) = db.enqueue((status, None))
            if status == "cancelled":
                committed(db.backend, admin.cancel_jobs, [job_id], tables=TABLE_OPTIONS)
            else:
                _run_one(db, fails=status == "failure")
            key = job_id.bytes if db.name == "mysql" else job_id
            when = (NOW - age).replace(tzinfo=None) if db.name == "mysql" else NOW - age
            db.backend.execute(
                f"UPDATE {ARCHIVE} SET finished_at = %s WHERE job_id = %s", (when, key)
            )
            ids.setdefault(status, []).append(job_id)
    return ids


def _run_one(db: CliDB, fails: bool) -> None:
    def handler(job_type: str, payload: Any) -> None:
        if fails:
            raise RuntimeError("boom")

    no_retry = {"retry_strategy_fn": lambda job, exc: RetrySpec(0, [])}
    assert process_next_job(db.backend.connect, handler, **no_retry, **TABLES) is not None


def remaining(db: CliDB) -> dict[str, set[Any]]:
    rows = db.backend.query(f"SELECT job_id, status FROM {ARCHIVE}")
    found: dict[str, set[Any]] = {}
    for job_id, status in rows:
        found.setdefault(status, set()).add(as_uuid(job_id))
    return found


def prune(db: CliDB, **options: Any) -> list[admin.Pruned]:
    steps = []
    with contextlib.closing(db.backend.connect()) as conn:
        for step in admin.prune_archive(conn, now=NOW, tables=TABLE_OPTIONS, **options):
            conn.commit()
            steps.append(step)
    return steps


def test_each_outcome_keeps_its_own_retention(db):
    day = timedelta(days=1)
    ids = archived_at(
        db,
        {
            "success": [2 * day, 12 * timedelta(hours=1)],
            "failure": [40 * day, 3 * day],
            "cancelled": [100 * day],
        },
    )
    steps = prune(db, keep_succeeded=day, keep_failed=30 * day)
    assert [(s.state, s.jobs) for s in steps] == [("succeeded", 1), ("failed", 1)]
    assert remaining(db) == {
        "success": {ids["success"][1]},
        "failure": {ids["failure"][1]},
        "cancelled": {ids["cancelled"][0]},
    }


def test_batches_delete_oldest_first_and_each_commits(db):
    ids = archived_at(db, {"success": [timedelta(days=d) for d in (9, 8, 7, 6, 5)]})
    seen = []
    with contextlib.closing(db.backend.connect()) as conn:
        for step in admin.prune_archive(
            conn,
            keep_succeeded=timedelta(days=5, hours=12),
            batch_size=2,
            now=NOW,
            tables=TABLE_OPTIONS,
        ):
            conn.commit()
            seen.append((step.jobs, set(remaining(db).get("success", ()))))
    assert [jobs for jobs, _ in seen] == [2, 2]
    assert seen[0][1] == set(ids["success"][2:])
    assert seen[1][1] == {ids["success"][4]}


def test_batches_go_on_past_the_last_finish_time_and_its_ties(db):
    """A batch starts at the last one's finish time (not past the rows it deleted): jobs
    finished at the same moment across a batch's end all go, and the other outcome's,
    interleaved, all stay."""
    same, later = timedelta(days=10), timedelta(days=9)
    ids = archived_at(db, {"success": [same] * 5 + [later] * 2, "failure": [same, later, same]})
    steps = prune(db, keep_succeeded=timedelta(days=1), batch_size=2)
    assert [(s.state, s.jobs) for s in steps] == [("succeeded", 2)] * 3 + [("succeeded", 1)]
    assert remaining(db) == {"failure": set(ids["failure"])}


def test_a_pruned_jobs_attempts_go_with_it(db):
    (job_id,) = archived_at(db, {"failure": [timedelta(days=40)]})["failure"]
    key = job_id.bytes if db.name == "mysql" else job_id
    count = f"SELECT COUNT(*) FROM {JOB}_attempt WHERE job_id = %s"
    assert db.backend.query(count, (key,))[0][0] == 1
    prune(db, keep_failed=timedelta(days=30))
    assert db.backend.query(count, (key,))[0][0] == 0


def test_a_dry_run_counts_and_deletes_nothing(db):
    archived_at(db, {"success": [timedelta(days=3)], "failure": [timedelta(days=3)]})
    steps = prune(db, keep_succeeded=timedelta(days=1), keep_failed=timedelta(days=1), dry_run=True)
    assert [(s.state, s.jobs, s.before) for s in steps] == [
        ("succeeded", 1, NOW - timedelta(days=1)),
        ("failed", 1, NOW - timedelta(days=1)),
    ]
    assert {status: len(found) for status, found in remaining(db).items()} == {
        "success": 1,
        "failure": 1,
    }


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({}, "needs a retention"),
        ({"keep_failed": timedelta(days=-1)}, "keep_failed must be a timedelta >= 0"),
        ({"keep_succeeded": 3600}, "keep_succeeded must be a timedelta"),
        ({"keep_succeeded": timedelta(1), "batch_size": 0}, "batch_size"),
    ],
)
def test_bad_options_are_refused_by_name(db, options, named):
    with (
        contextlib.closing(db.backend.connect()) as conn,
        pytest.raises(ConfigurationError, match=named),
    ):
        admin.prune_archive(conn, tables=TABLE_OPTIONS, **options)


def test_a_batch_open_does_not_hold_up_a_worker_archiving(db):
    """A prune's uncommitted batch locks only the rows it deletes: a worker archives the
    job it runs meanwhile without waiting on it."""
    archived_at(db, {"success": [timedelta(days=3)] * 3})
    (job_id,) = db.enqueue(("fresh", None))
    done = threading.Event()
    with contextlib.closing(db.backend.connect()) as conn:
        steps = admin.prune_archive(
            conn, keep_succeeded=timedelta(days=1), now=NOW, tables=TABLE_OPTIONS
        )
        assert next(steps).jobs == 3  # deleted, not committed: its locks are held
        pool = db.backend.pool(2)
        try:
            worker = create_queue_worker(
                pool, lambda t, p: done.set(), polling_interval_ms=20, **TABLES
            )
            with running(worker):
                wait_for(
                    lambda: any(
                        as_uuid(r[0]) == job_id
                        for r in db.backend.query(
                            f"SELECT job_id FROM {ARCHIVE} WHERE status = 'success'"
                        )
                    ),
                    timeout=10,
                    what="the worker's job archived while the prune's batch is open",
                )
        finally:
            pool.close()
        conn.commit()
    assert done.is_set()


def test_the_cli_prunes_per_outcome_and_says_what(db):
    archived_at(
        db, {"success": [timedelta(days=2)], "failure": [timedelta(days=2), timedelta(days=40)]}
    )
    result = run("archive", "prune", "--keep-succeeded", "1d", "--keep-failed", "30d", "-d", db.url)
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "deleted 1 succeeded job that finished before" in text
    assert "deleted 1 failed job that finished before" in text
    assert "kept every cancelled job (no --keep-cancelled)" in text
    assert {status: len(found) for status, found in remaining(db).items()} == {"failure": 1}


def test_the_cli_needs_a_retention_and_a_good_duration(db):
    none = run("archive", "prune", "-d", db.url)
    assert none.exit_code == 2
    assert "give a retention" in none.stderr
    bad = run("archive", "prune", "--keep-failed", "soon", "-d", db.url)
    assert bad.exit_code == 2
    assert "--keep-failed" in bad.stderr

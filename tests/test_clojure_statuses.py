"""Jobs a Clojure worker archived, read as the Python rows they mean, on both databases.

Proletarian archives with `(str status)` of a keyword, ":success" and ":failure"; every
reader of the archive (the admin API, the counts and hourly sums, the CLI, the dashboard,
the workflows' parents, retries) takes them for "success" and "failure". The rows are those
the real Proletarian's worker archived (tests/proletarian_oracle.py: `written_by_proletarian`,
one JVM call per database), written back as they were; the retries run on a Proletarian
worker again (one more JVM call per database).
"""

from __future__ import annotations

import warnings
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from proletarian_oracle import (
    ARCHIVED_QUEUE,
    PROLETARIAN_DEFAULT_QUEUE,
    Written,
    jdbc_url,
    oracle,
    work,
    written_by_proletarian,
)
from test_hourly_outcomes import hour_of, sum_up_all, sums
from typer.testing import CliRunner

from proletarian_di import admin, enqueue, process_next_job
from proletarian_di._store import dependencies
from proletarian_di._store.dialects import dialect_of
from proletarian_di.cli import app
from proletarian_di.serializers import TransitSerializer

from backends import Backend, connection

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

pytestmark = pytest.mark.xdist_group("clojure")
"""With the other tests of the oracle: its rows are written once per database."""

ARCHIVED = ("ok-1", "ok-2", "fail-1", "fail-2")
"""The jobs Proletarian's worker archived: two as ":success", two as ":failure"."""
CLOJURE = {"serializer": TransitSerializer(), "job_type_style": "keyword"}


@pytest.fixture
def proletarian(backend: Backend) -> Written:
    """The rows Proletarian wrote on this database; both tables empty."""
    return written_by_proletarian(backend)


def by_tag(proletarian: Written, tags: tuple[str, ...] = ARCHIVED) -> dict[Any, str]:
    return {proletarian.ids[tag]: tag for tag in tags}


def test_proletarian_archives_with_its_own_spellings(proletarian: Written) -> None:
    statuses = {tag: proletarian.archived[job_id][7] for job_id, tag in by_tag(proletarian).items()}
    assert statuses == {
        "ok-1": ":success",
        "ok-2": ":success",
        "fail-1": ":failure",
        "fail-2": ":failure",
    }


def test_jobs_read_and_list_in_their_states(backend: Backend, proletarian: Written) -> None:
    proletarian.restore(backend, *ARCHIVED)
    tags = by_tag(proletarian)
    with connection(backend) as conn:
        every = admin.list_jobs(conn)
        failed = admin.list_jobs(conn, state="failed")
        succeeded = admin.list_jobs(conn, state="succeeded", queue=ARCHIVED_QUEUE)
        one = admin.get_job(conn, proletarian.ids["fail-2"], serializer=TransitSerializer())
        ok = admin.get_job(conn, proletarian.ids["ok-1"])

    assert {tags[job.job_id]: job.state for job in every} == {
        "ok-1": "succeeded",
        "ok-2": "succeeded",
        "fail-1": "failed",
        "fail-2": "failed",
    }
    assert sorted(tags[job.job_id] for job in failed) == ["fail-1", "fail-2"]
    assert sorted(tags[job.job_id] for job in succeeded) == ["ok-1", "ok-2"]
    assert one is not None and (one.state, one.attempts, one.payload) == ("failed", 2, {"n": 4})
    assert ok is not None and [attempt.number for attempt in ok.history] == [1]


def test_the_counts_take_them_for_successes_and_failures(
    backend: Backend, proletarian: Written
) -> None:
    proletarian.restore(backend, *ARCHIVED)
    failures = {proletarian.ids["fail-1"], proletarian.ids["fail-2"]}
    with connection(backend) as conn:
        [stats] = admin.queue_stats(conn)
        [view] = admin.overview(conn)
        [bucket] = admin.throughput(conn, hours=1, buckets=1)
        minutes = admin.last_hour(conn, [ARCHIVED_QUEUE])[ARCHIVED_QUEUE]
        recent = admin.recent_failures(conn)
        groups = admin.failure_groups(conn)
        retried = admin.retry_failed(conn, dry_run=True)
        discarded = admin.discard_failed(conn, queue=ARCHIVED_QUEUE, dry_run=True)
        kept = {"now": datetime.now(timezone.utc) + timedelta(hours=1), "dry_run": True}
        pruned = list(admin.prune_archive(conn, keep_succeeded=timedelta(0), **kept))
        purged = admin.purge_archive(conn, older_than=timedelta(0), status="failure", **kept)

    assert (stats.queue, stats.succeeded_last_hour, stats.failed_last_hour) == (
        ARCHIVED_QUEUE,
        2,
        2,
    )
    assert (stats.succeeded_last_day, stats.failed_last_day) == (2, 2)
    assert (view.succeeded_last_day, view.failed_last_day) == (2, 2)
    assert (bucket.succeeded, bucket.failed) == (2, 2)
    assert (sum(m.succeeded for m in minutes), sum(m.failed for m in minutes)) == (2, 2)
    assert {row[0] for row in recent} == failures
    assert sum(group.count for group in groups.groups) == 2
    assert (retried, discarded, purged) == (2, 2, 2)
    assert [(step.state, step.jobs) for step in pruned] == [("succeeded", 2)]


def test_the_hourly_sums_count_them(backend: Backend, proletarian: Written) -> None:
    now = datetime.now(timezone.utc)
    three = hour_of(now) - timedelta(hours=3)
    at = three + timedelta(minutes=30)
    proletarian.restore(
        backend, *ARCHIVED, finished_at=at.replace(tzinfo=None) if backend.name == "mysql" else at
    )

    sum_up_all(backend, now)

    assert sums(backend)[(three, ARCHIVED_QUEUE)] == (2, 2, 4)
    with connection(backend) as conn:
        [view] = admin.overview(conn, now=now)
        recounted = admin.recount_hours(conn, now=now)
    assert (view.succeeded_last_day, view.failed_last_day) == (2, 2)
    assert recounted.changed == []


def test_the_cli_shows_them_in_their_states(backend: Backend, proletarian: Written) -> None:
    proletarian.restore(backend, *ARCHIVED)
    env = {
        "DATABASE_URL": None,
        "PROLETARIAN_JOB_TABLE": backend.job_table,
        "PROLETARIAN_ARCHIVED_JOB_TABLE": backend.archived_job_table,
    }

    def cli(*args: str) -> str:
        result = CliRunner().invoke(app, [*args, "-d", backend.url], env=env)
        assert result.exit_code == 0, result.output
        return result.stdout

    shown = cli("jobs", "show", str(proletarian.ids["fail-1"]))
    listed = cli("jobs", "list", "--state", "failed")
    stats = cli("stats")

    assert "state failed" in " ".join(shown.split()) and ":failure" not in shown
    assert str(proletarian.ids["fail-2"]) in listed and str(proletarian.ids["ok-1"]) not in listed
    [row] = [line for line in stats.splitlines() if ARCHIVED_QUEUE in line]
    assert row.split()[-4:] == ["2", "2", "2", "2"]


def test_the_dashboard_shows_them_in_their_states(backend: Backend, proletarian: Written) -> None:
    from proletarian_di.contrib.dashboard import dashboard

    proletarian.restore(backend, *ARCHIVED)
    client = TestClient(dashboard(backend.connect))

    failed = client.get("/failed").text
    page = client.get(f"/jobs/{proletarian.ids['fail-1']}").text

    assert str(proletarian.ids["fail-2"]) in failed and str(proletarian.ids["ok-2"]) not in failed
    assert "failed" in page and ":failure" not in page


def test_a_dependent_of_a_job_proletarian_archived_follows_its_outcome(
    backend: Backend, proletarian: Written
) -> None:
    """A parent that ended on the Clojure side, before the dependent was enqueued: its
    success lets the job run at once, its failure cancels it."""
    proletarian.restore(backend, "ok-1", "fail-1")
    with connection(backend) as conn:
        after_success = enqueue(conn, "report", None, depends_on=[proletarian.ids["ok-1"]])
        after_failure = enqueue(conn, "report", None, depends_on=[proletarian.ids["fail-1"]])
        conn.commit()
        runs = admin.get_job(conn, after_success)
        cancelled = admin.get_job(conn, after_failure)
    assert runs is not None and runs.state == "queued"
    assert runs.parent_states == ((proletarian.ids["ok-1"], "succeeded"),)
    assert cancelled is not None
    assert (cancelled.state, cancelled.parent_states) == (
        "cancelled",
        ((proletarian.ids["fail-1"], "failed"),),
    )


def test_a_clojure_failure_retried_runs_again_on_either_side_and_releases_its_dependent(
    backend: Backend, pool: Any, proletarian: Written
) -> None:
    """Both failures go back into the queue; a Python worker runs one and Proletarian's
    worker the other, and both read as succeeded. A Python job that waited on a job
    Proletarian's worker then archives is released by a Python worker's sweep."""
    fail_1, fail_2, parent = proletarian.restore(backend, "fail-1", "fail-2", "charge")
    with connection(backend) as conn:
        child = enqueue(conn, "report", None, queue="python", depends_on=[parent])
        assert admin.retry_failed(conn, queue=ARCHIVED_QUEUE) == 2
        conn.commit()
    ran: list[tuple[str, Any]] = []
    python = process_next_job(
        pool, lambda t, p: ran.append((t, p)), queue=ARCHIVED_QUEUE, **CLOJURE
    )  # type: ignore[arg-type]

    with jdbc_url(backend.url) as url:
        records = oracle().run(
            work(backend, url, ARCHIVED_QUEUE), work(backend, url, PROLETARIAN_DEFAULT_QUEUE)
        )
    with connection(backend) as conn:
        tables = admin.Tables(backend.job_table, backend.archived_job_table)
        dependencies.sweep(conn, dialect_of(conn, tables), datetime.now(timezone.utc))
        conn.commit()
        states = {job_id: admin.get_job(conn, job_id) for job_id in (fail_1, fail_2, child)}

    assert python is True and len(ran) == 1
    [clojure_ran] = [r for r in records if r["kind"] == "job" and r["queue"] == ARCHIVED_QUEUE]
    assert {clojure_ran["job_type"], ":" + ran[0][0]} == {":app.jobs/flaky", ":app.jobs/retried"}
    assert clojure_ran["attempts"] == 1
    assert {job_id: info.state for job_id, info in states.items() if info} == {
        fail_1: "succeeded",
        fail_2: "succeeded",
        child: "queued",
    }
    assert sorted(
        row[0] for row in backend.query(f"SELECT status FROM {backend.archived_job_table}")
    ) == [
        ":success",
        ":success",
        "success",
    ]

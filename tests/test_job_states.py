"""A job's state comes from what the job is, never from who else holds its row: on both
databases, blocked jobs stay blocked (and counted as blocked, not scheduled) while other
transactions lock them, a locked row that is not due is not running, and a blocked job's
page says what it waits for instead of its placeholder due time."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any

from starlette.testclient import TestClient
from typer.testing import CliRunner

from proletarian_di import admin, enqueue, enqueue_many, process_next_job
from proletarian_di.cli import app
from proletarian_di.contrib.dashboard import dashboard

from backends import Backend, connection, enqueue_committed, lock_view_settled


@contextlib.contextmanager
def locked_by_another(backend: Backend, job_ids: Sequence[uuid.UUID]) -> Iterator[None]:
    """The rows of these jobs locked `FOR UPDATE` by another open transaction, as a worker's
    release sweep, an enqueue's check of its parents or an action lock them: one at a time,
    by primary key (a scan would lock every row it reads on MySQL)."""
    conn = backend.connect()
    try:
        with contextlib.closing(conn.cursor()) as cursor:
            for job_id in job_ids:
                key = job_id if backend.name == "postgresql" else job_id.bytes
                sql = f"SELECT job_id FROM {backend.job_table} WHERE job_id = %s FOR UPDATE"
                cursor.execute(sql, (key,))
                assert len(cursor.fetchall()) == 1
        lock_view_settled(backend)  # MySQL's view of row locks lags 100 ms behind
        yield
    finally:
        conn.rollback()
        conn.close()


def blocked_in_database(backend: Backend) -> int:
    [(count,)] = backend.query(
        f"SELECT COUNT(*) FROM {backend.job_table} WHERE process_at > '9999-12-31'"
    )
    return int(count)


def read_states(backend: Backend, job_ids: Sequence[uuid.UUID]) -> dict[str, Any]:
    with connection(backend) as conn:
        found = {
            "get_job": [admin.get_job(conn, job_id).state for job_id in job_ids],  # type: ignore[union-attr]
            "blocked": len(admin.list_jobs(conn, state="blocked")),
            "running": len(admin.list_jobs(conn, state="running")),
            "page": len(admin.list_jobs_page(conn, state="blocked").jobs),
            "overview": {
                q.queue: (q.blocked, q.scheduled, q.running) for q in admin.overview(conn)
            },
            "stats": {
                s.queue: (s.blocked, s.scheduled, s.running) for s in admin.queue_stats(conn)
            },
        }
        conn.rollback()
    return found


def test_blocked_jobs_stay_blocked_while_another_transaction_locks_them(
    backend: Backend, pool: Any
) -> None:
    [parent] = enqueue_committed(backend, ("parent", None), process_in=timedelta(hours=1))
    with connection(backend) as conn:
        children = enqueue_many(conn, [("child", i) for i in range(12)], depends_on=[parent])
        conn.commit()
    assert blocked_in_database(backend) == 12
    with locked_by_another(backend, children):
        found = read_states(backend, children)
    assert found["get_job"] == ["blocked"] * 12
    assert (found["blocked"], found["page"], found["running"]) == (12, 12, 0)
    assert found["overview"] == {"default": (12, 1, 0)}, "the parent is the one scheduled"
    assert found["stats"] == {"default": (12, 1, 0)}
    client = TestClient(dashboard(pool))
    page = client.get("/jobs", params={"state": "blocked"}).text
    assert page.count('data-state="blocked"') == 12
    overview = client.get("/").text
    assert '<td class="n" data-count="blocked">12</td>' in overview
    assert '<td class="n" data-count="scheduled">1</td>' in overview


def test_a_locked_row_that_is_not_due_is_not_running(backend: Backend) -> None:
    """A worker claims only due rows: a scheduled job someone else locks is scheduled."""
    [later] = enqueue_committed(backend, ("later", None), process_in=timedelta(hours=1))
    [due] = enqueue_committed(backend, ("now", None))
    with locked_by_another(backend, [later]), connection(backend) as conn:
        assert admin.get_job(conn, later).state == "scheduled"  # type: ignore[union-attr]
        assert [j.job_id for j in admin.list_jobs(conn, state="running")] == []
        [queue] = admin.overview(conn)
        assert (queue.scheduled, queue.queued, queue.running) == (1, 1, 0)
        conn.rollback()
    with locked_by_another(backend, [due]), connection(backend) as conn:
        running = [j.job_id for j in admin.list_jobs(conn, state="running")]
        [queue] = admin.overview(conn)
        [stats] = admin.queue_stats(conn)
        conn.rollback()
    assert running == [due]
    assert queue.running == stats.running == len(running)


def test_a_blocked_job_says_what_it_waits_for_not_a_placeholder_time(
    backend: Backend, pool: Any
) -> None:
    parents = enqueue_committed(backend, ("p", 1), ("p", 2), ("p", 3))
    with connection(backend) as conn:
        [child] = enqueue_many(conn, [("child", None)], depends_on=parents)
        conn.commit()
    assert process_next_job(backend.connect, lambda t, p: None) is True
    [(ended,)] = backend.query(f"SELECT COUNT(*) FROM {backend.archived_job_table}")
    [(waiting,)] = backend.query(
        f"SELECT COUNT(*) FROM {backend.job_table} WHERE process_at < '9999-12-31'"
    )
    assert (ended, waiting) == (1, 2)
    with connection(backend) as conn:
        job = admin.get_job(conn, child)
        why = admin.explain_job(conn, child)
    assert job is not None and why is not None
    assert job.waits_for == "after 2 of its 3 parents succeed"
    assert job.never_due and job.as_dict()["process_at"] is None
    assert sorted(state for _, state in job.parent_states) == ["succeeded", "waiting", "waiting"]
    assert why.reasons[0].startswith("waiting on dependencies: runs after 2 of its 3 parents")
    page = TestClient(dashboard(pool)).get(f"/jobs/{child}").text
    assert "after 2 of its 3 parents succeed" in page
    assert "9999" not in page
    shown = CliRunner().invoke(app, ["jobs", "show", str(child), "-d", backend.url])
    assert shown.exit_code == 0, shown.output
    assert "due after 2 of its 3 parents succeed" in " ".join(shown.stdout.split())
    assert "9999" not in shown.stdout
    listed = CliRunner().invoke(app, ["jobs", "show", str(child), "--json", "-d", backend.url])
    assert "9999" not in listed.stdout


def test_a_dependent_of_a_cancelled_parent_is_told_so(backend: Backend, pool: Any) -> None:
    """An operator's cancel, with no worker watching, writes nothing in the parent's rows:
    what the child is told comes from where the parent is now."""
    [parent] = enqueue_committed(backend, ("p", None))
    with connection(backend) as conn:
        child = enqueue(conn, "child", None, depends_on=[parent])
        conn.commit()
    with connection(backend) as conn:
        assert admin.cancel_jobs(conn, [parent]) == 1
        conn.commit()
    [(status,)] = backend.query(f"SELECT status FROM {backend.archived_job_table}")
    assert status == "cancelled"
    with connection(backend) as conn:
        why = admin.explain_job(conn, child)
        job = admin.get_job(conn, child)
    assert why is not None and job is not None
    told = f"never: job {parent}, which it depends on, was cancelled; it is to be cancelled"
    assert why.reasons == [
        f"waiting on dependencies: {told}",
        "no live worker polls queue 'default'",
    ]
    assert job.waits_for == told
    assert job.parent_states == ((parent, "cancelled"),)
    with connection(backend) as conn:
        assert admin.cancel_jobs(conn, [child]) == 1
        conn.commit()
    page = TestClient(dashboard(pool)).get(f"/jobs/{child}").text
    assert "never: it was cancelled while it waited on other jobs" in page
    assert "9999" not in page

"""Failed jobs at a glance, on both databases: discarding a failure removes only it; failures
grouped by their error; exact counts and bulk actions by ids or filters, in batches."""

from __future__ import annotations

import contextlib
import uuid
from datetime import datetime, timezone
from typing import Any

import pytest
from test_dashboard import make_jobs

from proletarian_di import RetrySpec, admin, enqueue_many, process_next_job
from proletarian_di.errors import ConfigurationError
from proletarian_di.testing import run_due_jobs

from backends import Backend, connection, enqueue_committed


def test_discard_removes_only_that_failed_job(backend: Backend, pool: object) -> None:
    jobs = make_jobs(backend, pool)
    with connection(backend) as conn:
        assert admin.discard_failed(conn, [jobs.queued, jobs.sent]) == 0
        assert admin.discard_failed(conn, [jobs.failed]) == 1
        conn.commit()
    with connection(backend) as conn:
        assert admin.get_job(conn, jobs.failed) is None
        for kept in (jobs.sent, jobs.queued, jobs.scheduled):
            assert admin.get_job(conn, kept) is not None


def test_discard_needs_ids_or_a_filter(backend: Backend, pool: object) -> None:
    with connection(backend) as conn, pytest.raises(ConfigurationError, match="needs job ids"):
        admin.discard_failed(conn)


# Failures grouped by error, and bulk actions on them ------------------------------------------

TIMEOUT = "TimeoutError: gave up after 30 s"
MISSING = "KeyError: 'customer'"


def flaky(job_type: str, payload: Any) -> None:
    if payload["kind"] == "timeout":
        raise TimeoutError(f"gave up after 30 s\n(attempt for {payload['n']})")
    raise KeyError("customer")


def failures(backend: Backend, pool: Any, kind: str, count: int, queue: str) -> list[uuid.UUID]:
    """`count` jobs of this queue that failed for good with this kind of error."""
    with contextlib.closing(backend.connect()) as conn:
        ids = enqueue_many(
            conn, [("sync", {"kind": kind, "n": n}) for n in range(count)], queue=queue
        )
        conn.commit()
    assert run_due_jobs(pool, flaky, queue=queue) == count
    return list(ids)


@pytest.fixture
def failed(backend: Backend, pool: Any) -> dict[str, list[uuid.UUID]]:
    return {
        "timeouts": failures(backend, pool, "timeout", 7, "mail"),
        "missing_mail": failures(backend, pool, "missing", 3, "mail"),
        "missing_pay": failures(backend, pool, "missing", 2, "pay"),
    }


def counts(groups: admin.ErrorGroups) -> list[tuple[str | None, int]]:
    return [(group.error, group.count) for group in groups.groups]


def test_failures_group_by_their_errors_first_line(backend, failed):
    with connection(backend) as conn:
        every = admin.failure_groups(conn)
        mail = admin.failure_groups(conn, queue="mail")
        bounded = admin.failure_groups(conn, max_examined=4)
        group = admin.list_jobs(conn, state="failed", error=MISSING)
    assert counts(every) == [(TIMEOUT, 7), (MISSING, 5)]
    assert every.examined == 12 and not every.partial
    assert counts(mail) == [(TIMEOUT, 7), (MISSING, 3)]
    assert bounded.examined == 4 and bounded.partial
    newest = max(job.finished_at for job in group if job.finished_at)
    assert {group.error: group.newest for group in every.groups}[MISSING] == newest
    assert {job.error_headline for job in group} == {MISSING} and len(group) == 5
    assert "Traceback" in (group[0].error or "")


def test_the_error_filter_counts_lists_and_acts_on_exactly_its_group(backend, failed):
    with connection(backend) as conn:
        page = admin.list_jobs_page(conn, state="failed", error=MISSING)
        assert {job.job_id for job in page.jobs} == {
            *failed["missing_mail"],
            *failed["missing_pay"],
        }
        assert admin.retry_jobs(conn, error=MISSING, dry_run=True) == 5
        assert admin.discard_failed(conn, queue="mail", error=MISSING, dry_run=True) == 3
        assert admin.discard_failed(conn, queue="mail", error=MISSING) == 3
        assert admin.retry_jobs(conn, error=TIMEOUT) == 7
        conn.commit()
    with connection(backend) as conn:
        assert counts(admin.failure_groups(conn)) == [(MISSING, 2)]
        assert len(admin.list_jobs(conn, state="queued", error=TIMEOUT)) == 7


def test_in_batches_commits_batch_by_batch_and_leaves_out_newer_failures(backend, pool, failed):
    with connection(backend) as conn:
        until = datetime.now(timezone.utc)
    later = failures(backend, pool, "timeout", 2, "mail")
    moved, seen_between = [], []
    with connection(backend) as conn:
        steps = admin.in_batches(conn, admin.retry_jobs, error=TIMEOUT, until=until, batch_size=3)
        assert admin.retry_jobs(conn, error=TIMEOUT, until=until, dry_run=True) == 7
        for count in steps:
            conn.commit()
            moved.append(count)
            with connection(backend) as other:
                seen_between.append(len(admin.list_jobs(other, state="queued")))
    assert moved == [3, 3, 1]
    assert seen_between[:3] == [3, 6, 7]
    with connection(backend) as conn:
        still = {job.job_id for job in admin.list_jobs(conn, state="failed", error=TIMEOUT)}
    assert still == set(later)


def test_in_batches_discards_and_cancels_and_passes_a_running_job_over(backend, pool, failed):
    with connection(backend) as conn:
        assert sum(admin.in_batches(conn, admin.discard_failed, queue="pay", batch_size=1)) == 2
        conn.commit()
    waiting = enqueue_committed(backend, *[("later", {"n": n}) for n in range(5)], queue="w")
    with connection(backend) as conn:
        steps = admin.in_batches(
            conn, admin.cancel_jobs, failed["timeouts"] + waiting, batch_size=2
        )
        assert sum(steps) == 5
        conn.commit()
        assert {job.state for job in admin.list_jobs(conn, queue="w")} == {"cancelled"}
        assert admin.failure_groups(conn, queue="pay").groups == []


def test_cancel_by_state_and_by_last_error(backend, pool):
    retry_later = {"retry_strategy_fn": lambda job, exc: RetrySpec(retries=3, delays=[3_600_000])}
    enqueue_committed(backend, ("sync", {"kind": "missing", "n": 1}), queue="r")
    assert process_next_job(pool, flaky, queue="r", **retry_later) is False
    enqueue_committed(backend, ("sync", {"kind": "missing", "n": 2}), queue="r")
    with connection(backend) as conn:
        assert admin.cancel_jobs(conn, queue="r", state="retrying", dry_run=True) == 1
        assert admin.cancel_jobs(conn, queue="r", state="queued", dry_run=True) == 1
        assert admin.cancel_jobs(conn, error=MISSING) == 1
        conn.commit()
        [retried] = admin.list_jobs(conn, queue="r", state="cancelled")
    assert retried.attempts == 1 and retried.error_headline == MISSING


@pytest.mark.parametrize(
    ("call", "problem"),
    [
        (lambda c: admin.retry_jobs(c, error="two\nlines"), "error must be an error's first line"),
        (lambda c: admin.discard_failed(c, error="x" * 201), "error must be"),
        (lambda c: admin.list_jobs_page(c, error=""), "error must be"),
        (lambda c: admin.cancel_jobs(c, state="running"), "state must be queued, scheduled or"),
        (lambda c: admin.cancel_jobs(c, state="failed"), "state must be queued"),
        (lambda c: admin.in_batches(c, admin.delete_archived), "in_batches runs retry_jobs"),
        (lambda c: admin.in_batches(c, admin.discard_failed), "needs job ids or a filter"),
        (lambda c: admin.in_batches(c, admin.retry_jobs, batch_size=0), "batch_size must be"),
        (lambda c: admin.failure_groups(c, max_examined=0), "max_examined must be"),
    ],
)
def test_bad_bulk_input_is_refused_by_name(backend, call, problem):
    with connection(backend) as conn, pytest.raises(ConfigurationError, match=problem):
        call(conn)

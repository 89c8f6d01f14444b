"""Failed jobs at a glance, on both databases: discarding a failure removes only it."""

from __future__ import annotations

import pytest
from test_dashboard import make_jobs

from proletarian_di import admin
from proletarian_di.errors import ConfigurationError

from backends import Backend, connection


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

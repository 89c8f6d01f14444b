"""Failures by cause, on both databases: each error's first line with its message's variable
parts (numbers, ids, UUIDs, URLs, e-mail addresses, quoted values) taken out, the exact
first lines under each cause, counted as the archive has them, and a cause retried or
discarded whole after its counted confirmation."""

from __future__ import annotations

import contextlib
import html
import json
import re
import uuid
import warnings
from typing import Any

import markupsafe
import pytest
from test_dashboard import confirm, header_user, job_state, token
from test_dashboard_bounds import forms

from proletarian_di import admin, enqueue_many
from proletarian_di.contrib.dashboard import dashboard
from proletarian_di.errors import ConfigurationError
from proletarian_di.testing import run_due_jobs

from backends import Backend, Events, connection

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")

ORDER = "0b7c1f5e-9d2a-4c3b-8e1f-2a3b4c5d6e7f"
REFUSED = "ConnectionError: refused <email> after <n> tries"
NOT_FOUND = "LookupError: order '…' (<uuid>) not found at <url>"


def refuse(job_type: str, payload: Any) -> None:
    n = payload["n"]
    if payload["kind"] == "refused":
        raise ConnectionError(f"refused user{n % 3}@example.com after {n % 3 + 1} tries")
    raise LookupError(f"order 'A-{n}' ({ORDER}) not found at https://shop.example.com/o/{n}")


def failed(backend: Backend, pool: Any, kind: str, count: int) -> list[uuid.UUID]:
    with contextlib.closing(backend.connect()) as conn:
        ids = enqueue_many(conn, [("sync", {"kind": kind, "n": n}) for n in range(count)])
        conn.commit()
    assert run_due_jobs(pool, refuse) == count
    return list(ids)


def archived_headlines(backend: Backend) -> dict[str, int]:
    """Each failure's first line and how many, counted from the archive's rows."""
    counts: dict[str, int] = {}
    with connection(backend) as conn:
        for job in admin.list_jobs(conn, state="failed", limit=1000):
            assert job.error_headline is not None
            counts[job.error_headline] = counts.get(job.error_headline, 0) + 1
    return counts


@pytest.fixture
def client(pool: Any, events: Events) -> TestClient:
    site = dashboard(pool, actions=True, auth=header_user, log=events)
    return TestClient(site, headers={"X-User": "alice"})


@pytest.fixture
def events() -> Events:
    return Events()


def test_a_cause_is_the_first_line_without_its_variable_parts():
    cause = admin.error_cause
    assert cause("ConnectionError: refused ada@example.com after 3 tries") == REFUSED
    assert cause(f"LookupError: order 'A-7' ({ORDER}) not found at https://x.io/o/7?a=1") == (
        NOT_FOUND
    )
    assert cause("KeyError: 'customer'") == "KeyError: '…'"
    assert (
        cause('RuntimeError: can\'t reach "db-3" in 2.5 s')
        == 'RuntimeError: can\'t reach "…" in <n> s'
    )
    assert cause("OSError: blob deadbeef42 gone") == "OSError: blob <hex> gone"
    assert cause("Http2Error: stream 7 reset") == "Http2Error: stream <n> reset"  # the type kept
    assert cause("no type 12 here") == "no type <n> here"
    assert cause("ZeroDivisionError: division by zero") == "ZeroDivisionError: division by zero"
    assert cause(None) is None


def test_failures_by_cause_hold_their_exact_first_lines_as_the_archive_counts_them(
    backend, pool, client
):
    failed(backend, pool, "refused", 6)
    failed(backend, pool, "missing", 2)
    headlines = archived_headlines(backend)
    with connection(backend) as conn:
        found = admin.failure_causes(conn)
    assert [(c.cause, c.count) for c in found.causes] == [(REFUSED, 6), (NOT_FOUND, 2)]
    for cause in found.causes:
        exact = {group.error: group.count for group in cause.errors}
        assert exact == {h: n for h, n in headlines.items() if admin.error_cause(h) == cause.cause}
        assert sum(exact.values()) == cause.count
    assert len(found.causes[0].errors) == 3 and not found.partial

    page = client.get("/failed/errors")
    assert page.status_code == 200
    bodies = re.findall(r'<tbody class="cause" data-cause="([^"]*)">(.*?)</tbody>', page.text, re.S)
    assert [html.unescape(cause) for cause, _ in bodies] == [REFUSED, NOT_FOUND]
    first = bodies[0][1]
    assert re.search(r'data-count="cause">6<', first)
    shown = {
        html.unescape(error): int(count)
        for error, count in re.findall(
            r'<tr data-error="([^"]*)">.*?data-count="failures">(\d+)<', first, re.S
        )
    }
    assert shown == {h: n for h, n in headlines.items() if admin.error_cause(h) == REFUSED}


def test_retrying_a_cause_retries_its_failures_only_after_its_count(backend, pool, client, events):
    refused = failed(backend, pool, "refused", 6)
    missing = failed(backend, pool, "missing", 2)
    page = client.get("/failed/errors")
    [cause_form] = [
        f
        for f in forms(page.text, "/retry")
        if "errors" in f and admin.error_cause(json.loads(f["errors"])[0]) == REFUSED
    ]
    assert set(json.loads(cause_form["errors"])) == {
        h for h in archived_headlines(backend) if admin.error_cause(h) == REFUSED
    }
    asked = client.post("/retry", data=cause_form)
    assert asked.status_code == 200
    question = f"Retry 6 failed jobs with the cause “{REFUSED}” (3 errors)?"
    assert html.escape(question, quote=False) in asked.text
    assert {job_state(backend, i) for i in refused} == {"failed"}  # nothing changed yet
    done = confirm(client, asked)
    assert done.status_code == 200 and "6 jobs back in the queue" in done.text
    assert {job_state(backend, i) for i in refused} == {"queued"}
    assert {job_state(backend, i) for i in missing} == {"failed"}
    [logged] = events.named("dashboard_action")
    assert (logged["count"], logged["confirmed"], len(logged["error"])) == (6, 6, 3)

    discard = client.post(
        "/discard",
        data={
            "csrf_token": token(client.get("/failed")),
            "errors": json.dumps(list(archived_headlines(backend))),
        },
    )
    assert f"Discard 2 failed jobs with the cause “{markupsafe.escape(NOT_FOUND)}”" in discard.text
    assert "2 jobs discarded" in confirm(client, discard).text
    with connection(backend) as conn:
        assert admin.get_job(conn, missing[0]) is None


def test_an_errors_list_is_checked(backend, pool, client):
    failed(backend, pool, "missing", 1)
    page = client.get("/failed")
    for bad in ("[]", "not json", '["a", 1]', json.dumps(["x"] * 1001), '{"a": 1}'):
        answer = client.post("/retry", data={"csrf_token": token(page), "errors": bad})
        assert answer.status_code == 400, bad
    both = {"csrf_token": token(page), "errors": '["a"]', "error": "a"}
    assert client.post("/retry", data=both).status_code == 400
    with connection(backend) as conn, pytest.raises(ConfigurationError, match="1 to 1000"):
        admin.retry_jobs(conn, error=[])
    with connection(backend) as conn:
        assert admin.retry_jobs(conn, error=["KeyError: 'x'", "KeyError: 'y'"], dry_run=True) == 0

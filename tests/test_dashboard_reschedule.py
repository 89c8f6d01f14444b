"""The dashboard's "every job of this filter", "run now" and "reschedule at" on both
databases: what the confirmation counts is what the database holds, and after it each
job's state and due time are read back from the database; a bad time is refused with its
reason; read-only, unauthenticated and forged posts change nothing."""

from __future__ import annotations

import html
import re
import uuid
import warnings
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import test_dashboard_failures as failed_tests
from test_dashboard import confirm, header_user, send, token
from test_dashboard_bounds import forms

from proletarian_di import admin, process_next_job
from proletarian_di.contrib.dashboard import dashboard

from backends import Backend, connection, enqueue_committed

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")

client = failed_tests.client
events = failed_tests.events


def failures(backend: Backend, pool: Any, queue: str, n: int) -> list[uuid.UUID]:
    ids = enqueue_committed(
        backend, *[("sync", {"to": f"bounce-{i}"}) for i in range(n)], queue=queue
    )
    while process_next_job(pool, send, queue=queue) is not None:
        pass
    return ids


def due(backend: Backend, job_id: uuid.UUID) -> tuple[str, datetime]:
    with connection(backend) as conn:
        job = admin.get_job(conn, job_id)
    assert job is not None
    return job.state, job.process_at


def question(page: Any) -> str:
    match = re.search(r'<h1 class="question">(.*?)</h1>', page.text, re.S)
    assert match, page.text
    return html.unescape(match.group(1))


def test_every_failed_job_of_the_filter_not_only_the_page(backend, pool, client, events):
    ids = failures(backend, pool, "crm", 3)
    [other] = failures(backend, pool, "mail", 1)
    page = client.get("/failed", params={"queue": "crm", "limit": "2"})
    assert len(re.findall(r'<tr data-job-id="', page.text)) == 2  # a page of 2, of 3
    [form] = [f for f in forms(page.text, "/retry") if f.get("selected")]
    assert form["queue"] == "crm"
    assert 'name="all"' in page.text and "or every job of queue crm" in page.text
    asked = client.post("/retry", data={**form, "all": "1"})
    assert question(asked) == (
        "Retry 3 failed jobs of queue crm (every one of this filter, not only this page)?"
    )
    assert [due(backend, i)[0] for i in ids] == ["failed"] * 3
    assert confirm(client, asked).status_code == 200
    assert [due(backend, i)[0] for i in ids] == ["queued"] * 3
    assert due(backend, other)[0] == "failed"
    [logged] = events.named("dashboard_action")
    assert (logged["all"], logged["confirmed"], logged["count"]) == (True, 3, 3)


def test_ticked_jobs_alone_when_every_job_is_not_asked(backend, pool, client):
    ids = failures(backend, pool, "crm", 3)
    page = client.get("/failed", params={"queue": "crm"})
    [form] = [f for f in forms(page.text, "/retry") if f.get("selected")]
    asked = client.post("/retry", data={**form, "job_id": [str(ids[0]), str(ids[1])]})
    assert question(asked) == "Retry 2 failed jobs (of the 2 selected)?"
    assert confirm(client, asked).status_code == 200
    assert [due(backend, i)[0] for i in ids] == ["queued", "queued", "failed"]


def test_retry_at_a_time_makes_failed_jobs_due_then(backend, pool, client):
    ids = failures(backend, pool, "crm", 2)
    at = (datetime.now(timezone.utc) + timedelta(days=2)).replace(second=0, microsecond=0)
    page = client.get("/failed/errors", params={"queue": "crm"})
    [form] = [f for f in forms(page.text, "/retry") if f.get("all")]
    local = at.strftime("%Y-%m-%dT%H:%M")
    asked = client.post("/retry", data={**form, "at": local})
    when = f"{at:%Y-%m-%d %H:%M:%S} UTC"
    assert question(asked) == (
        "Retry 2 failed jobs of queue crm (every one of this filter, not only this page), "
        f"due at {when}?"
    )
    assert f"due at {when}, with fresh attempts" in asked.text
    assert confirm(client, asked).status_code == 200
    assert [due(backend, i) for i in ids] == [("scheduled", at)] * 2


def test_run_now_and_reschedule_waiting_jobs(backend, pool, client, events):
    later = enqueue_committed(
        backend, ("report", {}), ("report", {}), queue="rep", process_in=timedelta(days=1)
    )
    [queued] = enqueue_committed(backend, ("mail", {}), queue="rep")
    # One job's page: "Run now", done at once.
    page = client.get(f"/jobs/{later[0]}")
    [form] = forms(page.text, "/reschedule")
    assert "Run now" in page.text
    done = client.post("/reschedule", data=form, follow_redirects=False)
    assert done.status_code == 303
    state, at = due(backend, later[0])
    assert state == "queued" and abs(at - datetime.now(timezone.utc)) < timedelta(seconds=5)
    assert "Run now" not in client.get(f"/jobs/{later[0]}").text  # due already
    # Every scheduled job of the queue, at a time, counted and confirmed.
    page = client.get("/jobs", params={"queue": "rep", "state": "scheduled"})
    [form] = [f for f in forms(page.text, "/retry") if f.get("selected")]
    assert form["state"] == "scheduled"
    at = (datetime.now(timezone.utc) + timedelta(hours=3)).replace(microsecond=0)
    asked = client.post("/reschedule", data={**form, "all": "1", "at": at.isoformat()})
    assert question(asked) == (
        "Make 1 scheduled job of queue rep (every one of this filter, not only this page) "
        f"due at {at:%Y-%m-%d %H:%M:%S} UTC?"
    )
    assert confirm(client, asked).status_code == 200
    assert due(backend, later[1]) == ("scheduled", at)
    assert due(backend, queued)[0] == "queued"
    assert [e["action"] for e in events.named("dashboard_action")] == ["reschedule"] * 2


@pytest.mark.parametrize(
    ("at", "said"),
    [
        ("tomorrow", "is not a date and time: give one as 2026-05-01T09:30 (UTC)"),
        ("2026-13-01T00:00", "is not a date and time"),
        ("1999-01-01T00:00", "is out of range: give a time between"),
        ("2999-01-01T00:00", "is out of range: give a time between"),
    ],
)
def test_a_bad_time_is_refused_with_its_reason(backend, pool, client, at, said):
    ids = failures(backend, pool, "crm", 1)
    page = client.get("/failed")
    [form] = [f for f in forms(page.text, "/retry") if f.get("selected")]
    refused = client.post("/retry", data={**form, "job_id": str(ids[0]), "at": at})
    assert refused.status_code == 400 and said in refused.text
    assert due(backend, ids[0])[0] == "failed"


def test_a_time_is_refused_where_it_means_nothing(backend, pool, client):
    ids = failures(backend, pool, "crm", 1)
    page = client.get("/failed")
    [form] = [f for f in forms(page.text, "/retry") if f.get("selected")]
    at = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
    refused = client.post("/discard", data={**form, "job_id": str(ids[0]), "at": at})
    assert refused.status_code == 400
    assert "a time to be due at is for retry and reschedule, not discard" in refused.text
    refused = client.post("/reschedule", data={**form, "state": "failed", "all": "1"})
    assert refused.status_code == 400 and "not failed" in refused.text
    refused = client.post("/reschedule", data={**form, "all": "1"})
    assert refused.status_code == 400
    assert "reschedule_jobs needs job ids or a filter" in refused.text
    assert due(backend, ids[0])[0] == "failed"


def test_reschedule_is_refused_read_only_unauthenticated_or_forged(backend, pool, client):
    [later] = enqueue_committed(backend, ("r", {}), queue="q", process_in=timedelta(days=1))
    data = {"job_id": str(later)}
    assert TestClient(dashboard(pool)).post("/reschedule", data=data).status_code == 403
    anonymous = TestClient(dashboard(pool, actions=True, auth=header_user))
    assert anonymous.post("/reschedule", data=data).status_code == 401
    assert client.post("/reschedule", data=data).status_code == 403  # no CSRF token
    page = client.get(f"/jobs/{later}")
    forged = {**data, "csrf_token": token(page)}
    other = client.post("/reschedule", data=forged, headers={"Origin": "https://evil.example"})
    assert other.status_code == 403
    assert due(backend, later)[0] == "scheduled"

"""The web dashboard over HTTP, on both databases: its pages with real data, filters and pages,
the read-only mode, authentication, CSRF, the actions' effects in the database and their log,
and the `proletarian-di dashboard` command."""

from __future__ import annotations

import base64
import contextlib
import html
import json
import logging
import os
import re
import socket
import subprocess
import sys
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount
from test_cli import flat
from typer.testing import CliRunner

from proletarian_di import PeriodicJob, RetrySpec, admin, create_scheduler, process_next_job
from proletarian_di.cli import app as cli_app
from proletarian_di.contrib.dashboard import basic_auth, dashboard
from proletarian_di.errors import ConfigurationError

from backends import Backend, Events, committed, connection, enqueue_committed, wait_until
from servers import free_port

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")

CSRF = re.compile(r'name="csrf_token" value="([0-9a-f]+)"')


def header_user(request: Any) -> str | None:
    """An auth hook for the tests: the user an `X-User` header names."""
    return request.headers.get("x-user")


def send(job_type: str, payload: Any) -> None:
    if payload.get("to", "").startswith("bounce"):
        raise ConnectionError(f"SMTP server refused {payload['to']}: <b>550</b>")


@dataclass
class Jobs:
    """A realistic set of jobs: one succeeded, one failed, one queued (mail), one scheduled
    (reports)."""

    sent: uuid.UUID
    failed: uuid.UUID
    queued: uuid.UUID
    scheduled: uuid.UUID


def make_jobs(backend: Backend, pool: Any) -> Jobs:
    """Enqueue and run the jobs of `Jobs`, in that order."""
    [sent] = enqueue_committed(backend, ("send_email", {"to": "ada@example.com"}), queue="mail")
    assert process_next_job(pool, send, queue="mail") is True
    [failed] = enqueue_committed(
        backend, ("send_email", {"to": "bounce@example.com", "token": "s3cr3t"}), queue="mail"
    )
    assert process_next_job(pool, send, queue="mail") is False
    [queued] = enqueue_committed(backend, ("send_email", {"to": "<i>grace</i>"}), queue="mail")
    [scheduled] = enqueue_committed(
        backend,
        ("monthly_report", {"month": "2024-05"}),
        queue="reports",
        process_in=timedelta(days=1),
    )
    return Jobs(sent, failed, queued, scheduled)


def job_state(backend: Backend, job_id: uuid.UUID) -> str:
    with connection(backend) as conn:
        job = admin.get_job(conn, job_id)
    assert job is not None
    return job.state


def chart_of(page: str) -> str:
    """The overview's throughput chart."""
    match = re.search(r'<figure class="chart">.*?</figure>', page, re.S)
    assert match, page
    return match.group()


def token(page: httpx.Response) -> str:
    match = CSRF.search(page.text)
    assert match, page.text
    return match.group(1)


def confirm(client: TestClient, page: httpx.Response, **options: Any) -> httpx.Response:
    """Send the confirmation form the page shows, as a browser does (every field as it is)."""
    match = re.search(
        r'<form class="confirm" method="post" action="([^"]+)">(.*?)</form>', page.text, re.S
    )
    assert match, page.text
    fields: dict[str, list[str]] = {}
    for name, value in re.findall(
        r'<input type="hidden" name="([^"]+)" value="([^"]*)">', match.group(2)
    ):
        fields.setdefault(name, []).append(html.unescape(value))
    return client.post(match.group(1), data=fields, **options)


@pytest.fixture
def jobs(backend: Backend, pool: Any) -> Jobs:
    return make_jobs(backend, pool)


@pytest.fixture
def reader(pool: Any) -> TestClient:
    """A client of a read-only dashboard, anyone allowed."""
    return TestClient(dashboard(pool))


@pytest.fixture
def events() -> Events:
    return Events()


@pytest.fixture
def admin_client(pool: Any, events: Events) -> TestClient:
    """A client of a dashboard with actions, signed in as alice."""
    site = dashboard(pool, actions=True, auth=header_user, log=events)
    return TestClient(site, headers={"X-User": "alice"})


# Pages -----------------------------------------------------------------------------------------


def test_every_page_shows_the_databases_jobs(backend, pool, jobs, reader):
    create_scheduler(
        pool, [PeriodicJob("nightly-report", "0 3 * * *", "monthly_report")]
    ).register()
    overview = reader.get("/")
    assert overview.status_code == 200
    row = re.search(r'<tr data-queue="mail">.*?</tr>', overview.text, re.S)
    assert row, overview.text
    counts = dict(re.findall(r'data-count="(\w+)">(?:<a[^>]*>)?(\d+)', row.group()))
    assert counts == {
        "queued": "1",
        "scheduled": "0",
        "blocked": "0",
        "running": "0",
        "retrying": "0",
        "succeeded": "1",
        "failed": "1",
    }
    assert 'data-queue="reports"' in overview.text
    assert "1 succeeded and 1 failed jobs in the last 24 hours" in overview.text
    chart = chart_of(overview.text)
    assert chart.count('class="ok"') == 1 and chart.count('class="fail"') == 1
    # the last hour's sparkline of mail: its one success and one failure
    assert row.group().count('<path class="ok"') == 1
    assert row.group().count('<path class="fail"') == 1

    listing = reader.get("/jobs")
    assert listing.status_code == 200
    for job_id in (jobs.sent, jobs.failed, jobs.queued, jobs.scheduled):
        assert f'data-job-id="{job_id}"' in listing.text

    failed = reader.get("/failed")
    assert failed.status_code == 200
    assert re.findall(r'data-job-id="([^"]+)"', failed.text) == [str(jobs.failed)]

    detail = reader.get(f"/jobs/{jobs.failed}")
    assert detail.status_code == 200
    assert "bounce@example.com" in detail.text
    assert "ConnectionError: SMTP server refused bounce@example.com" in detail.text
    assert "Traceback (most recent call last)" in detail.text
    assert "<dt>Attempts</dt><dd>1</dd>" in detail.text

    schedules = reader.get("/schedules")
    assert schedules.status_code == 200
    assert "nightly-report" in schedules.text and "0 3 * * *" in schedules.text
    assert "03:00:00 UTC" in schedules.text

    assert reader.get("/static/dashboard.js").headers["content-type"].startswith("text/javascript")
    assert reader.get("/static/favicon.svg").headers["content-type"] == "image/svg+xml"


def test_the_chart_adds_the_queues_up_hour_by_hour(backend, pool, jobs, reader):
    enqueue_committed(backend, ("monthly_report", {"month": "2024-04"}), queue="reports")
    assert process_next_job(pool, send, queue="reports") is True
    overview = reader.get("/").text
    assert "2 succeeded and 1 failed jobs in the last 24 hours" in overview
    titles = re.findall(r"<title>(.*?)</title>", chart_of(overview))
    assert len(titles) == 24
    assert titles[-1].endswith("UTC: 2 succeeded, 1 failed"), titles[-1]
    assert all(title.endswith(": 0 succeeded, 0 failed") for title in titles[:-1])


def test_an_empty_database_has_an_empty_chart(pool, reader):
    overview = reader.get("/")
    assert overview.status_code == 200
    assert "0 succeeded and 0 failed jobs in the last 24 hours" in overview.text
    assert "<title>" not in chart_of(overview.text) and "24 h ago</span>" in overview.text


def test_the_chart_has_a_scale_of_round_numbers_and_a_tick_at_every_hour(backend, pool, reader):
    enqueue_committed(backend, *[("t", {"to": f"a{n}@example.com"}) for n in range(7)])
    while process_next_job(pool, send) is not None:
        pass
    chart = chart_of(reader.get("/").text)
    scale = re.findall(r'<text class="scale"[^>]*>([^<]*)</text>', chart)
    assert scale == ["0", "2", "4", "6", "8"]  # 7 jobs this hour: steps of 2 up to 8
    hours = re.findall(r'<text class="hour"[^>]*>(\d\d:00)</text>', chart)
    assert len(hours) == 8 and len(set(hours)) == 8  # every third hour of 24 labelled
    assert chart.count('class="tick"') == 24
    assert "jobs per hour, hours in UTC" in chart


def test_the_job_page_tells_every_attempt(backend, pool, reader):
    [job_id] = enqueue_committed(backend, ("send_email", {"to": "bounce@example.com"}))
    later = {"retry_strategy_fn": lambda job, exc: RetrySpec(retries=1, delays=[0])}
    assert process_next_job(pool, send, **later) is False
    store_payload = {"to": "ada@example.com"}
    with connection(backend) as conn:
        conn.cursor().execute(
            f"UPDATE {backend.job_table} SET payload = %s",
            (json.dumps(store_payload),),
        )
        conn.commit()
    assert process_next_job(pool, send, **later) is True
    page = reader.get(f"/jobs/{job_id}").text
    rows = re.findall(r'<tr data-attempt="(\d)">(.*?)</tr>', page, re.S)
    assert [number for number, _ in rows] == ["1", "2"]
    first, second = (row for _, row in rows)
    assert "<summary>ConnectionError: SMTP server refused bounce@example.com: &lt;b&gt;550" in first
    assert "Traceback (most recent call last)" in first
    assert "state-succeeded" in second and "<details>" not in second
    for row in (first, second):
        assert re.search(r"<td>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC</td>", row), row
        assert re.search(r'<td class="n">\d+ ms</td>|<td class="n">[\d.]+ s</td>', row), row
        assert f"<code>{socket.gethostname()}:" in row and " proletarian[default]</code>" in row
    waiting = enqueue_committed(backend, ("send_email", {"to": "x@example.com"}))[0]
    assert "No attempt has finished yet." in reader.get(f"/jobs/{waiting}").text


def test_the_job_page_says_why_a_waiting_job_is_not_running(backend, pool, jobs, reader):
    committed(backend, admin.pause_queue, "mail")
    [odd] = enqueue_committed(backend, ("x", None), queue="<b>q</b>")

    def reasons(job_id: uuid.UUID) -> list[str] | None:
        page = reader.get(f"/jobs/{job_id}")
        assert page.status_code == 200
        why = re.search(r'<section class="why"[^>]*>(.*?)</section>', page.text, re.S)
        return None if why is None else re.findall(r"<li>(.*?)</li>", why.group(1))

    queued = reasons(jobs.queued)
    assert queued is not None and len(queued) == 2
    assert re.fullmatch(
        r"its queue &#39;mail&#39; is paused \(since [\d-]+ [\d:]+ UTC\); resume it to run it",
        queued[0],
    )
    assert queued[1] == "no live worker polls queue &#39;mail&#39;"
    scheduled = reasons(jobs.scheduled)
    assert scheduled is not None and scheduled[0].startswith("scheduled until ")
    assert reasons(odd) == ["no live worker polls queue &#39;&lt;b&gt;q&lt;/b&gt;&#39;"]
    assert reasons(jobs.sent) is None and reasons(jobs.failed) is None


def test_the_timings_page_shows_wait_and_run_per_queue_type_and_hour(backend, pool, reader):
    enqueue_committed(backend, ("send_email", {"to": "a@example.com"}), queue="mail")
    enqueue_committed(backend, ("monthly_report", {}), queue="reports")
    assert process_next_job(pool, send, queue="mail") is True
    assert process_next_job(pool, lambda t, p: None, queue="reports") is True
    page = reader.get("/timings")
    assert page.status_code == 200
    groups = dict(re.findall(r'<tbody data-timing="([^"]+)">(.*?)</tbody>', page.text, re.S))
    assert sorted(groups) == ["mail/send_email", "reports/monthly_report"]
    mail = groups["mail/send_email"]
    assert re.search(r'<tr class="whole">.*?<td class="n">1</td>', mail, re.S)
    assert mail.count('<tr class="hour"') == 1
    assert len(re.findall(r'<td class="n">(?:\d+ ms|[\d.]+ s)</td>', mail)) == 12
    enqueue_committed(backend, ("send_email", {"to": "b@example.com"}), queue="mail")
    assert process_next_job(pool, send, queue="mail") is True
    again = reader.get("/timings").text
    assert (
        re.search(r'<tbody data-timing="mail/send_email">(.*?)</tbody>', again, re.S).group(1)
        == mail
    ), "the page reads the archive once a minute at most"
    only = reader.get("/timings", params={"queue": "reports"}).text
    assert 'data-timing="reports/monthly_report"' in only and "mail/send_email" not in only
    none = reader.get("/timings", params={"job_type": "nothing"}).text
    assert "No job of this kind finished in the last 24 hours" in none


def test_html_in_payloads_and_errors_is_escaped(jobs, reader):
    listing = reader.get("/jobs").text
    assert "<i>grace</i>" not in listing and "&lt;i&gt;grace&lt;/i&gt;" in listing
    detail = reader.get(f"/jobs/{jobs.failed}").text
    assert "<b>550</b>" not in detail and "&lt;b&gt;550&lt;/b&gt;" in detail


def test_filters_narrow_the_list(jobs, reader):
    def listed(**params: str) -> set[str]:
        page = reader.get("/jobs", params=params)
        assert page.status_code == 200, page.text
        return set(re.findall(r'data-job-id="([^"]+)"', page.text))

    assert listed(queue="reports") == {str(jobs.scheduled)}
    assert listed(job_type="send_email") == {str(jobs.sent), str(jobs.failed), str(jobs.queued)}
    assert listed(state="queued") == {str(jobs.queued)}
    assert listed(queue="mail", state="succeeded") == {str(jobs.sent)}
    assert listed(queue="nowhere") == set()
    assert listed(queue="mail", state="", job_type="") == listed(queue="mail")


def test_pages_are_keyset_pages_carrying_the_filters(backend, pool, reader):
    ids = enqueue_committed(backend, *[("ping", {"n": n}) for n in range(5)], queue="pings")
    enqueue_committed(backend, ("other", {}), queue="elsewhere")
    seen: list[str] = []
    page = reader.get("/jobs", params={"queue": "pings", "limit": "2"})
    while True:
        assert page.status_code == 200
        seen += re.findall(r'data-job-id="([^"]+)"', page.text)
        older = re.search(r'<a rel="next" href="([^"]+)"', page.text)
        if older is None:
            break
        link = older.group(1).replace("&amp;", "&")
        assert "queue=pings" in link and "limit=2" in link and "before=" in link
        page = reader.get(link)
    assert seen == [str(job_id) for job_id in reversed(ids)]


def test_an_id_jumps_to_its_job_and_bad_values_are_400(jobs, reader):
    jump = reader.get("/jobs", params={"id": f" {jobs.queued} "}, follow_redirects=False)
    assert jump.status_code == 303 and jump.headers["location"] == f"/jobs/{jobs.queued}"
    missing = reader.get(f"/jobs/{uuid.uuid4()}")
    assert missing.status_code == 404 and "no job" in missing.text
    for path, params, named in [
        ("/jobs/not-a-uuid", {}, "job id &#39;not-a-uuid&#39; is not a UUID"),
        ("/jobs", {"id": "nope"}, "job id &#39;nope&#39; is not a UUID"),
        ("/jobs", {"state": "lost"}, "unknown state &#39;lost&#39;"),
        ("/jobs", {"limit": "0"}, "limit &#39;0&#39; is not a number"),
        ("/failed", {"limit": "many"}, "limit &#39;many&#39; is not a number"),
        ("/jobs", {"before": "yesterday"}, "before must be a JobInfo or its cursor"),
    ]:
        page = reader.get(path, params=params)
        assert page.status_code == 400, (path, params, page.text)
        assert named in page.text
    assert reader.get("/nowhere").status_code == 404


def test_redact_hides_payload_fields_in_the_list_and_the_detail(pool, jobs):
    def redact(job_type: str, payload: Any) -> Any:
        return {**payload, "token": "***"} if "token" in payload else payload

    client = TestClient(dashboard(pool, redact=redact))
    for path in ("/jobs", "/failed", f"/jobs/{jobs.failed}"):
        page = client.get(path)
        assert "s3cr3t" not in page.text and "***" in page.text, path
    broken = TestClient(dashboard(pool, redact=lambda job_type, payload: 1 / 0))
    page = broken.get(f"/jobs/{jobs.failed}")
    assert page.status_code == 200 and "s3cr3t" not in page.text
    assert "hidden: the redact hook failed" in page.text


def test_a_missing_periodic_table_is_a_message_not_an_error(pool):
    elsewhere = admin.Tables("proletarian.nothing_here", "proletarian.nothing_here_archive")
    page = TestClient(dashboard(pool, tables=elsewhere)).get("/schedules")
    assert page.status_code == 200
    assert "No schedules to show" in page.text and "nothing_here_periodic" in page.text


def test_the_dashboard_mounts_under_a_prefix(backend, pool, jobs, events):
    site = dashboard(pool, actions=True, auth=header_user, log=events)
    client = TestClient(Starlette(routes=[Mount("/ops/jobs", site)]), headers={"X-User": "bo"})
    page = client.get("/ops/jobs/failed")
    assert page.status_code == 200
    assert f'href="/ops/jobs/jobs/{jobs.failed}"' in page.text
    assert 'href="/ops/jobs/static/dashboard.css"' in page.text
    assert 'action="/ops/jobs/retry"' in page.text
    assert client.cookies.get("proletarian_dashboard_csrf")
    done = client.post(
        "/ops/jobs/retry",
        data={"csrf_token": token(page), "job_id": str(jobs.failed), "next": "/failed"},
        follow_redirects=False,
    )
    assert done.status_code == 303 and done.headers["location"] == "/ops/jobs/failed"
    assert "1 job back in the queue" in client.get(done.headers["location"]).text
    assert job_state(backend, jobs.failed) == "queued"


# Security ----------------------------------------------------------------------------------------


def test_read_only_shows_no_action_and_refuses_forged_posts(backend, jobs, reader):
    for path in ("/", "/jobs", "/failed", f"/jobs/{jobs.failed}", f"/jobs/{jobs.queued}"):
        page = reader.get(path)
        assert 'method="post"' not in page.text and "read-only" in page.text, path
    forged = {"job_id": str(jobs.failed), "queue": "mail", "csrf_token": "0" * 64}
    for path in ("/retry", "/cancel", "/pause", "/resume"):
        refused = reader.post(path, data=forged)
        assert refused.status_code == 403, path
        assert "read-only" in refused.text
    assert job_state(backend, jobs.failed) == "failed"
    assert job_state(backend, jobs.queued) == "queued"
    assert committed(backend, admin.paused_queues) == {}


def test_actions_need_an_auth_hook(pool):
    with pytest.raises(ConfigurationError, match="actions need an authenticated user"):
        dashboard(pool, actions=True)
    with pytest.raises(ConfigurationError, match="refresh_s"):
        dashboard(pool, refresh_s=-1)


def test_without_a_user_pages_and_actions_are_401(backend, pool, jobs):
    site = dashboard(pool, actions=True, auth=basic_auth("admin", "pässword"))
    stranger = TestClient(site)
    page = stranger.get("/")
    assert page.status_code == 401
    assert page.headers["www-authenticate"].startswith('Basic realm="proletarian-di dashboard"')
    assert stranger.post("/retry", data={"job_id": str(jobs.failed)}).status_code == 401
    wrong = "Basic " + base64.b64encode(b"admin:password").decode()
    assert stranger.get("/", headers={"Authorization": wrong}).status_code == 401
    assert stranger.get("/", headers={"Authorization": "Basic !!"}).status_code == 401
    right = "Basic " + base64.b64encode("admin:pässword".encode()).decode()
    page = stranger.get("/", headers={"Authorization": right})
    assert page.status_code == 200 and "actions on · admin" in page.text
    assert job_state(backend, jobs.failed) == "failed"

    nobody = TestClient(dashboard(pool, auth=lambda request: None))
    assert nobody.get("/jobs").status_code == 401


def test_posts_without_a_valid_csrf_token_or_from_another_site_are_403(backend, jobs, admin_client):
    good = token(admin_client.get("/failed"))
    fields = {"job_id": str(jobs.failed)}
    assert admin_client.post("/retry", data=fields).status_code == 403
    assert admin_client.post("/retry", data={**fields, "csrf_token": "f" * 64}).status_code == 403
    as_bob = admin_client.post(
        "/retry", data={**fields, "csrf_token": good}, headers={"X-User": "bob"}
    )
    assert as_bob.status_code == 403
    other_site = {"Origin": "https://evil.example"}
    refused = admin_client.post("/retry", data={**fields, "csrf_token": good}, headers=other_site)
    assert refused.status_code == 403 and "another site" in refused.text
    cross = admin_client.post(
        "/retry", data={**fields, "csrf_token": good}, headers={"Sec-Fetch-Site": "cross-site"}
    )
    assert cross.status_code == 403
    without_cookie = TestClient(admin_client.app, headers={"X-User": "alice"})
    assert without_cookie.post("/retry", data={**fields, "csrf_token": good}).status_code == 403
    assert job_state(backend, jobs.failed) == "failed"
    same_site = {"Origin": "http://testserver", "Sec-Fetch-Site": "same-origin"}
    done = admin_client.post("/retry", data={**fields, "csrf_token": good}, headers=same_site)
    assert done.status_code == 200
    assert job_state(backend, jobs.failed) == "queued"


def test_processes_sharing_a_csrf_secret_accept_each_others_forms(backend, pool):
    def site(secret: str | None) -> TestClient:
        app = dashboard(pool, actions=True, auth=header_user, csrf_secret=secret)
        return TestClient(app, headers={"X-User": "alice"})

    enqueue_committed(backend, ("send_email", {}), queue="mail")
    first, second, stranger = site("one secret, shared"), site("one secret, shared"), site(None)
    form = {"csrf_token": token(first.get("/")), "queue": "mail"}
    for other in (second, stranger):
        other.cookies.update(first.cookies)
    assert second.post("/pause", data=form).status_code == 200
    assert stranger.post("/resume", data=form).status_code == 403
    assert set(committed(backend, admin.paused_queues)) == {"mail"}
    with pytest.raises(ConfigurationError, match="csrf_secret"):
        dashboard(pool, csrf_secret="short")


# Actions -----------------------------------------------------------------------------------------


def test_retrying_a_failed_job_puts_it_back_and_logs_who(backend, jobs, admin_client, events):
    page = admin_client.get(f"/jobs/{jobs.failed}")
    assert 'action="/retry"' in page.text and 'action="/cancel"' not in page.text
    done = admin_client.post(
        "/retry",
        data={
            "csrf_token": token(page),
            "job_id": str(jobs.failed),
            "next": f"/jobs/{jobs.failed}",
        },
        follow_redirects=False,
    )
    assert done.status_code == 303 and done.headers["location"] == f"/jobs/{jobs.failed}"
    assert job_state(backend, jobs.failed) == "queued"
    assert events.named("dashboard_action") == [
        {
            "user": "alice",
            "action": "retry",
            "job_ids": [str(jobs.failed)],
            "queue": None,
            "job_type": None,
            "count": 1,
        }
    ]
    shown = admin_client.get(done.headers["location"])
    assert '<p class="flash" role="status">1 job back in the queue</p>' in shown.text
    assert "flash" not in admin_client.get("/").text.split("<main>")[1]


def test_retry_and_cancel_by_filter(backend, pool, jobs, admin_client, events):
    enqueue_committed(
        backend, ("sync", {"to": "bounce-1"}), ("sync", {"to": "bounce-2"}), queue="crm"
    )
    while process_next_job(pool, send, queue="crm") is not None:
        pass
    later = enqueue_committed(backend, ("sync", {}), ("sync", {}), queue="crm")
    page = admin_client.get("/failed", params={"queue": "crm"})
    assert "Retry every failed job of queue crm" in page.text
    assert "Cancel the waiting jobs of queue crm" in page.text
    form = {"csrf_token": token(page), "queue": "crm", "next": "/failed?queue=crm"}
    asked = admin_client.post("/cancel", data=form)
    assert "Cancel 2 waiting jobs of queue crm?" in asked.text
    assert [job_state(backend, job_id) for job_id in later] == ["queued", "queued"]
    assert confirm(admin_client, asked).status_code == 200
    assert [job_state(backend, job_id) for job_id in later] == ["cancelled", "cancelled"]
    asked = admin_client.post("/retry", data=form)
    assert "Retry 2 failed jobs of queue crm?" in asked.text
    assert confirm(admin_client, asked).status_code == 200
    with connection(backend) as conn:
        assert len(admin.list_jobs(conn, queue="crm", state="queued")) == 2
    assert job_state(backend, jobs.failed) == "failed"
    assert [(e["action"], e["queue"], e["count"]) for e in events.named("dashboard_action")] == [
        ("cancel", "crm", 2),
        ("retry", "crm", 2),
    ]
    refused = admin_client.post("/cancel", data={"csrf_token": form["csrf_token"]})
    assert refused.status_code == 400 and "cancel_jobs needs job ids or a filter" in refused.text


def test_cancelling_one_waiting_job(backend, jobs, admin_client):
    page = admin_client.get("/jobs", params={"queue": "reports"})
    assert f'name="job_id" value="{jobs.scheduled}"' in page.text
    done = admin_client.post(
        "/cancel", data={"csrf_token": token(page), "job_id": str(jobs.scheduled)}
    )
    assert done.status_code == 200 and "1 job cancelled" in done.text
    assert job_state(backend, jobs.scheduled) == "cancelled"
    assert job_state(backend, jobs.queued) == "queued"


def test_pausing_and_resuming_a_queue(backend, jobs, admin_client, events):
    page = admin_client.get("/")
    assert 'action="/pause"' in page.text
    form = {"csrf_token": token(page), "queue": "mail"}
    paused = admin_client.post("/pause", data=form)
    assert paused.status_code == 200 and "queue mail paused" in paused.text
    assert 'action="/resume"' in paused.text
    assert set(committed(backend, admin.paused_queues)) == {"mail"}
    assert "queue mail was paused already" in admin_client.post("/pause", data=form).text
    assert "queue mail resumed" in admin_client.post("/resume", data=form).text
    assert committed(backend, admin.paused_queues) == {}
    assert [(e["action"], e["count"]) for e in events.named("dashboard_action")] == [
        ("pause", 1),
        ("pause", 0),
        ("resume", 1),
    ]
    no_queue = admin_client.post("/pause", data={"csrf_token": form["csrf_token"]})
    assert no_queue.status_code == 400 and "pause needs a queue" in no_queue.text


def test_actions_go_to_the_default_log_and_never_redirect_elsewhere(pool, jobs, caplog):
    client = TestClient(dashboard(pool, actions=True, auth=header_user), headers={"X-User": "eve"})
    form = {"csrf_token": token(client.get("/")), "queue": "mail"}
    with caplog.at_level(logging.INFO, logger="proletarian_di.dashboard"):
        for target in ("//evil.example/", "https://evil.example/", "/\\evil.example"):
            done = client.post("/pause", data={**form, "next": target}, follow_redirects=False)
            assert done.headers["location"] == "/"
    [first, *_] = [r.getMessage() for r in caplog.records if r.name == "proletarian_di.dashboard"]
    assert first == "dashboard_action user='eve' action='pause' queue='mail' count=1"


# The command -------------------------------------------------------------------------------------


def test_the_command_refuses_actions_without_a_password():
    env = {"PROLETARIAN_DASHBOARD_PASSWORD": None, "DATABASE_URL": None}
    url = "postgresql://ops:hunter22@127.0.0.1:1/app"
    result = CliRunner().invoke(cli_app, ["dashboard", "--enable-actions", "-d", url], env=env)
    assert result.exit_code == 2
    assert "--enable-actions needs a password: set PROLETARIAN_DASHBOARD_PASSWORD" in result.output
    assert "hunter22" not in result.output


def listening(port: int) -> set[str]:
    """The local addresses (hex, as /proc/net/tcp* write them) listening on `port`."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            for line in list(lines)[1:]:
                local, state = line.split()[1], line.split()[3]
                address, _, at = local.partition(":")
                if state == "0A" and int(at, 16) == port:
                    found.add(address)
    return found


@contextlib.contextmanager
def served(*args: str, env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    command = [sys.executable, "-m", "proletarian_di.contrib.cli", "dashboard", *args]
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        yield process
    finally:
        process.terminate()
        process.wait(timeout=10)


def answer(url: str, **options: Any) -> Callable[[], httpx.Response | None]:
    def get() -> httpx.Response | None:
        try:
            return httpx.get(url, timeout=2, **options)
        except httpx.TransportError:
            return None

    return get


def test_the_command_serves_on_127_0_0_1_behind_the_password(backend, jobs):
    port = free_port()
    env = {**os.environ, "PROLETARIAN_DASHBOARD_PASSWORD": "open sesame"}
    env.pop("DATABASE_URL", None)
    args = ("--database-url", backend.url, "--port", str(port), "--enable-actions")
    with served(*args, "--user", "ops", env=env) as process:
        first = wait_until(answer(f"http://127.0.0.1:{port}/"), timeout=30, interval=0.1)
        assert first.status_code == 401
        assert listening(port) == {"0100007F"}
        page = httpx.get(f"http://127.0.0.1:{port}/", auth=("ops", "open sesame"))
        assert page.status_code == 200 and 'data-queue="mail"' in page.text
        assert "actions on · ops" in page.text
        process.terminate()
        output = process.communicate(timeout=10)[0]
    assert f"http://127.0.0.1:{port}/ (actions enabled, basic auth as ops)" in flat(output)
    assert "open sesame" not in output

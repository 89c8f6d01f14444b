"""The dashboard's pages for an incident in Chromium, on both databases: a viewer's pages
(every page, no action control, a refused POST and its audit entry); the processes page's
reasons why idle threads are idle; the timings' charts and the charts' slots that lead to
their jobs; a workflow's graph, its boxes' states and lines as the database has them, its
text readable on its boxes, each box a link to its job. Each page opened here has no
console error, passes the accessibility checks of dashboard_a11y.js and is no wider than
the screen, light on a wide screen and dark at 390 px; what it shows is checked against
the database."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright
from starlette.applications import Starlette
from starlette.routing import Mount
from test_admin_workflows import boom, diamond, ok
from test_dashboard import job_state, make_jobs

from proletarian_di import admin, process_next_job
from proletarian_di.contrib.dashboard import basic_auth, dashboard

from backends import Backend, Events, as_uuid, committed, connection, enqueue_committed

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.screenshots import CHROMIUM, PASSWORD, USER, VIEWPORT, serve  # noqa: E402

pytestmark = pytest.mark.db

CHECKS = (Path(__file__).parent / "dashboard_a11y.js").read_text()


@dataclass
class Site:
    """A server with the dashboard twice, both with actions: under /viewer for `USER` as a
    viewer, under /admin for `USER` as an operator; `events` is their audit log."""

    backend: Backend
    pool: Any
    url: str
    events: Events


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module", params=["postgresql", "mysql"])
def served(request: pytest.FixtureRequest) -> Iterator[Site]:
    backend: Backend = request.getfixturevalue(f"{request.param}_backend")
    pool = backend.pool(4)
    events = Events()
    boards = {
        role: dashboard(
            pool,
            actions=True,
            auth=basic_auth(USER, PASSWORD, role=role),
            log=events,
            refresh_s=0,
        )
        for role in ("viewer", "operator")
    }
    app = Starlette(
        routes=[Mount("/viewer", boards["viewer"]), Mount("/admin", boards["operator"])]
    )
    try:
        with serve(app) as url:
            yield Site(backend, pool, url, events)
    finally:
        pool.close()


@pytest.fixture
def site(served: Site) -> Site:
    served.backend.reset()
    served.events.events.clear()
    return served


@dataclass
class Opened:
    page: Page
    errors: list[str]

    def open(self, url: str) -> None:
        """Go to `url`, and check that the page has no console error and passes the
        accessibility audit."""
        self.page.goto(url)
        expect(self.page.locator("main h1")).to_be_visible()
        found = self.page.evaluate(f"() => {{ {CHECKS}; return a11y.audit(); }}")
        problems = {check: listed for check, listed in found.items() if listed}
        wide = self.page.evaluate("document.documentElement.scrollWidth > innerWidth")
        if wide:
            problems["layout"] = ["the page is wider than the screen"]
        if self.errors:
            problems["console"] = list(self.errors)
        assert not problems, (url, json.dumps(problems, indent=1, ensure_ascii=False))


PHONE = {"width": 390, "height": 844}


@pytest.fixture(params=["light", "dark-390"])
def opened(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Opened]:
    """A page that checks each page it opens: light on a wide screen, or dark on a phone."""
    dark = request.param == "dark-390"
    context = browser.new_context(
        http_credentials={"username": USER, "password": PASSWORD},
        viewport=PHONE if dark else VIEWPORT,  # type: ignore[arg-type]
        color_scheme="dark" if dark else "light",
    )
    context.set_default_timeout(10_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        yield Opened(page, errors)
    finally:
        with contextlib.suppress(Exception):
            context.close()


def test_a_viewer_sees_every_page_changes_nothing_and_is_audited(
    site: Site, opened: Opened
) -> None:
    jobs = make_jobs(site.backend, site.pool)
    page = opened.page
    paths = ["/", "/queue?name=mail", "/jobs", "/failed", "/failed/errors"]
    paths += [f"/jobs/{jobs.failed}", f"/jobs/{jobs.queued}", "/processes", "/timings"]
    for path in paths:
        opened.open(f"{site.url}/viewer{path}")
        expect(page.locator(".mode")).to_have_text(f"read-only · {USER} (viewer)")
        expect(page.locator('form[method="post"]')).to_have_count(0)
        expect(page.get_by_role("button", name="Retry")).to_have_count(0)
    opened.open(f"{site.url}/viewer/jobs")
    for job_id in (jobs.sent, jobs.failed, jobs.queued, jobs.scheduled):
        expect(page.locator(f'tr[data-job-id="{job_id}"]')).to_have_count(1)
    # the operator's page of the same job has the control the viewer's lacks
    opened.open(f"{site.url}/admin/jobs/{jobs.failed}")
    expect(page.get_by_role("button", name="Retry")).to_have_count(1)

    opened.open(f"{site.url}/viewer/jobs/{jobs.failed}")
    answer = page.evaluate(
        """async (jobId) => {
            const body = new URLSearchParams({job_id: jobId, queue: "mail"});
            const retry = await fetch("/viewer/retry", {method: "POST", body});
            const pause = await fetch("/viewer/pause", {method: "POST", body});
            return [retry.status, pause.status, await retry.text()];
        }""",
        str(jobs.failed),
    )
    assert answer[:2] == [403, 403]
    assert f"refused: {USER} is a viewer, who sees every page and changes nothing" in answer[2]
    assert job_state(site.backend, jobs.failed) == "failed"
    assert committed(site.backend, admin.paused_queues) == {}
    assert site.events.named("dashboard_action") == []
    assert site.events.named("dashboard_action_refused") == [
        {"user": USER, "role": "viewer", "action": "retry"},
        {"user": USER, "role": "viewer", "action": "pause"},
    ]


def test_the_processes_page_says_why_idle_threads_are_idle(site: Site, opened: Opened) -> None:
    from test_dashboard_processes import idle_row

    backend = site.backend
    idle_row(backend, "w-empty", "empty")
    idle_row(backend, "w-paused", "paused")
    idle_row(backend, "w-due", "due")
    committed(backend, admin.pause_queue, "paused")
    enqueue_committed(backend, ("x", None), queue="due")
    page = opened.page
    opened.open(f"{site.url}/admin/processes")
    with connection(backend) as conn:
        reasons = admin.idle_reasons(conn, ["empty", "paused", "due"])
        assert admin.queue_overview(conn, "due").queued == 1
        assert admin.queue_overview(conn, "empty").queued == 0
    assert reasons["due"] is None
    for worker, queue, text in (
        ("w-empty", "empty", "no due job"),
        ("w-paused", "paused", "queue paused"),
    ):
        threads = page.locator(f'tr[data-worker-id="{worker}"] + tr.threads')
        badges = threads.locator("[data-idle]")
        expect(badges).to_have_count(2)
        expect(badges.first).to_have_text(text)
        why = reasons[queue]
        assert why is not None
        expect(badges.first).to_have_attribute("data-idle", why.kind)
        expect(badges.first).to_have_attribute("title", why.reason)
    expect(page.locator('tr[data-worker-id="w-due"] + tr.threads [data-idle]')).to_have_count(0)


def test_the_time_charts_and_their_slots_lead_to_their_jobs(site: Site, opened: Opened) -> None:
    from test_dashboard_time import archived, finished_in

    backend = site.backend
    now = datetime.now(timezone.utc)
    two_ago = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=2)
    ids = archived(
        backend,
        "mail",
        "success",
        [two_ago + timedelta(minutes=m) for m in (5, 25, 45)],
        job_type="send",
        waited=timedelta(seconds=3),
        ran=timedelta(seconds=1),
    )
    archived(backend, "crm", "failure", [two_ago + timedelta(minutes=10)], job_type="sync")
    page = opened.page
    opened.open(f"{site.url}/admin/timings")
    expect(page.locator("figure.chart:not(.lines) a.bar")).to_have_count(60)
    page.locator('tbody[data-timing="mail/send"]').get_by_role("link", name="charts").click()
    expect(page.locator("main h1")).to_be_visible()
    opened.open(page.url)  # the charts' page, checked too
    figures = page.locator("figure.chart.lines")
    expect(figures).to_have_count(4)
    day_wait = figures.nth(0)
    expect(day_wait.locator("figcaption")).to_have_text("Wait, by hour")
    slot = day_wait.locator("a.bar")
    expect(slot).to_have_count(1)
    expect(slot.locator("title")).to_have_text(
        f"{two_ago:%H:%M} to {two_ago + timedelta(hours=1):%H:%M} UTC: "
        "3 jobs, wait p50 3 s, p95 3 s"
    )
    slot.click()
    expect(page.locator("table.jobs tbody tr")).to_have_count(3)
    opened.open(page.url)
    shown = page.locator("table.jobs tbody tr").evaluate_all(
        "rows => rows.map(r => r.dataset.jobId)"
    )
    assert sorted(shown) == sorted(map(str, ids))
    assert finished_in(backend, two_ago, two_ago + timedelta(hours=1), "mail") == 3

    opened.open(f"{site.url}/admin/")
    hour = page.locator(
        f'figure.chart a.bar[href*="finished_since={two_ago:%Y-%m-%dT%H}%3A00%3A00Z"]'
    )
    expect(hour).to_have_count(1)
    hour.click()
    expect(page.locator("table.jobs tbody tr")).to_have_count(4)
    assert finished_in(backend, two_ago, two_ago + timedelta(hours=1)) == 4


BOX = """box => {
    const text = box.querySelector("text.state"), rect = box.querySelector("rect");
    const size = rect.getBoundingClientRect();
    return {id: box.dataset.jobId, state: text.textContent,
            contrast: a11y.contrast(a11y.rgba(getComputedStyle(text).fill),
                                    a11y.rgba(getComputedStyle(rect).fill)),
            drawn: size.width > 100 && size.height > 30};
}"""
"""A graph's box as the browser draws it: its job, the state it says, the contrast of
that text on the box, and whether the box has its size."""


def test_a_workflows_graph_shows_each_jobs_state_and_leads_to_its_page(
    site: Site, opened: Opened
) -> None:
    workflow_id, jobs = diamond(site.backend, "graph", "graph")
    assert process_next_job(site.pool, ok, queue="graph") is True
    failed_id, failing = diamond(site.backend, "failing", "failing")
    assert process_next_job(site.pool, boom, queue="failing") is False
    page = opened.page
    for shown_id, its_jobs in ((workflow_id, jobs), (failed_id, failing)):
        opened.open(f"{site.url}/viewer/workflows/{shown_id}")
        boxes = page.locator("figure.graph a.node")
        expect(boxes).to_have_count(4)
        drawn = boxes.evaluate_all(f"boxes => {{ {CHECKS}; return boxes.map({BOX}); }}")
        with connection(site.backend) as conn:
            truth = {str(j.job_id): admin.get_job(conn, j.job_id) for j in its_jobs}
        assert {box["id"]: box["state"] for box in drawn} == {
            job_id: info.state for job_id, info in truth.items() if info is not None
        }
        assert [box for box in drawn if box["contrast"] < 4.5 or not box["drawn"]] == []
        lines = page.locator("figure.graph path.edge").evaluate_all(
            "lines => lines.map(l => [l.dataset.parent, l.dataset.child])"
        )
        rows = site.backend.query(
            f"SELECT parent_id, job_id FROM {site.backend.job_table}_dependencies"
        )
        ids = {j.job_id for j in its_jobs}
        assert sorted(map(tuple, lines)) == sorted(
            (str(as_uuid(p)), str(as_uuid(c))) for p, c in rows if as_uuid(c) in ids
        )
        assert len(lines) == 4
    # The graph is wider than a phone: it scrolls in its own box, and a box is a link.
    box = page.locator(".graph .scroll")
    wider = box.evaluate("el => el.scrollWidth > el.clientWidth")
    assert wider == (page.viewport_size is not None and page.viewport_size["width"] < 800)
    last = str(failing[3].job_id)
    page.locator(f'a.node[data-job-id="{last}"]').click()
    expect(page.locator("main h1")).to_contain_text(last)

"""The web dashboard in a real browser (Playwright driving the system's Chromium), on both
databases: every page with real data, a filter, a retry from the page, the read-only mode,
the CSRF check, and the page updating itself when a job finishes. The screenshots go to the
run's temporary folder."""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright
from starlette.applications import Starlette
from starlette.routing import Mount
from test_dashboard import job_state, make_jobs, send

from proletarian_di import admin, process_next_job
from proletarian_di.contrib.dashboard import basic_auth, dashboard

from backends import Backend, Events, committed, connection, enqueue_committed

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.screenshots import CHROMIUM, PASSWORD, USER, VIEWPORT, busy_day, serve  # noqa: E402

pytestmark = pytest.mark.db

ACTION = re.compile("Retry|Cancel|Pause|Resume")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("screenshots")


@dataclass
class Site:
    """A server on a free 127.0.0.1 port with the dashboard twice: read-only under /view,
    with actions for `USER` under /admin."""

    backend: Backend
    pool: Any
    url: str
    events: Events


@pytest.fixture(scope="module", params=["postgresql", "mysql"])
def served(request: pytest.FixtureRequest) -> Iterator[Site]:
    with serving(request.getfixturevalue(f"{request.param}_backend")) as site:
        yield site


@contextlib.contextmanager
def serving(backend: Backend) -> Iterator[Site]:
    """The dashboard of `backend`'s tables, served (see `Site`)."""
    pool = backend.pool(4)
    events = Events()
    app = Starlette(
        routes=[
            Mount(
                "/admin",
                dashboard(
                    pool, actions=True, auth=basic_auth(USER, PASSWORD), log=events, refresh_s=0.5
                ),
            ),
            Mount("/view", dashboard(pool, refresh_s=0.5)),
        ]
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


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(
        http_credentials={"username": USER, "password": PASSWORD},
        viewport=VIEWPORT,
    )
    context.set_default_timeout(10_000)
    yield context.new_page()
    context.close()


# The tests -------------------------------------------------------------------------------------


def test_every_page_renders_with_real_data(site: Site, page: Page, screenshots: Path) -> None:
    failed = busy_day(site.backend, site.pool)
    name = site.backend.name
    page.goto(f"{site.url}/admin/")
    mail = page.locator('tr[data-queue="mail"]')
    expect(mail.locator('[data-count="queued"]')).to_have_text("4")
    expect(mail.locator('[data-count="failed"]')).to_have_text("3")
    expect(page.locator('tr[data-queue="webhooks"]')).to_contain_text("paused")
    expect(page.locator('tr[data-queue="billing"] [data-count="retrying"]')).to_have_text("1")
    expect(page.locator("figure.chart rect.ok")).not_to_have_count(0)
    page.screenshot(path=screenshots / f"{name}-dashboard-overview.png", full_page=True)

    page.get_by_role("link", name="Jobs", exact=True).click()
    expect(page.locator("table.jobs tbody tr")).to_have_count(50)
    expect(page.get_by_role("link", name="Older →")).to_be_visible()
    page.screenshot(path=screenshots / f"{name}-dashboard-jobs.png", full_page=True)

    page.get_by_role("link", name="Failed", exact=True).click()
    expect(page.locator("table.jobs tbody tr")).to_have_count(
        9
    )  # 3 mail, 5 billing, 1 of a workflow
    expect(page.get_by_role("button", name="Retry every failed job")).to_be_visible()
    page.screenshot(path=screenshots / f"{name}-dashboard-failed.png", full_page=True)

    page.locator(f'a[href$="/jobs/{failed}"]').click()
    expect(page.locator("h1")).to_contain_text(str(failed))
    expect(page.locator("pre.error")).to_contain_text("Declined: card_declined")
    expect(page.locator("pre.error")).to_contain_text("Traceback (most recent call last)")
    expect(page.locator("pre.payload")).to_contain_text('"customer": "cus_')
    page.screenshot(path=screenshots / f"{name}-dashboard-job.png", full_page=True)

    page.get_by_role("link", name="Schedules").click()
    expect(page.locator("table.schedules")).to_contain_text("nightly-digest")
    expect(page.locator("table.schedules")).to_contain_text("02:00:00 UTC")
    page.screenshot(path=screenshots / f"{name}-dashboard-schedules.png", full_page=True)


def test_a_filter_narrows_the_list(site: Site, page: Page) -> None:
    jobs = make_jobs(site.backend, site.pool)
    page.goto(f"{site.url}/view/jobs")
    expect(page.locator("table.jobs tbody tr")).to_have_count(4)
    page.get_by_label("Queue", exact=True).fill("reports")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator("table.jobs tbody tr")).to_have_count(1)
    expect(page.locator(f'tr[data-job-id="{jobs.scheduled}"]')).to_be_visible()
    page.locator("select[name=state]").select_option("succeeded")
    page.get_by_label("Queue", exact=True).fill("mail")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator("table.jobs tbody tr")).to_have_count(1)
    expect(page.locator(f'tr[data-job-id="{jobs.sent}"]')).to_be_visible()


def test_retrying_a_failed_job_from_the_page_puts_it_back(site: Site, page: Page) -> None:
    jobs = make_jobs(site.backend, site.pool)
    page.goto(f"{site.url}/admin/failed")
    page.locator(f'tr[data-job-id="{jobs.failed}"]').get_by_role("button", name="Retry").click()
    expect(page.locator(".flash")).to_have_text("1 job back in the queue")
    expect(page.locator("table.jobs tbody tr")).to_have_count(0)
    assert job_state(site.backend, jobs.failed) == "queued"
    [logged] = site.events.named("dashboard_action")
    assert (logged["user"], logged["action"], logged["count"]) == (USER, "retry", 1)


def test_selected_failures_are_retried_after_a_counted_confirmation(site: Site, page: Page) -> None:
    jobs = make_jobs(site.backend, site.pool)
    more = enqueue_committed(
        site.backend, ("send_email", {"to": "bounce2@example.com"}), queue="crm"
    )
    assert process_next_job(site.pool, send, queue="crm") is False
    [other] = enqueue_committed(
        site.backend, ("send_email", {"to": "bounce3@example.com"}), queue="crm"
    )
    assert process_next_job(site.pool, send, queue="crm") is False
    chosen = [jobs.failed, *more]
    page.goto(f"{site.url}/admin/failed")
    for job_id in chosen:
        page.get_by_label(f"select job {job_id}").check()
    page.wait_for_timeout(1_500)  # three refresh periods: a selection stops the refresh
    for job_id in chosen:
        expect(page.get_by_label(f"select job {job_id}")).to_be_checked()
    page.get_by_role("button", name="Retry selected…").click()
    expect(page.locator("h1.question")).to_have_text("Retry 2 failed jobs (of the 2 selected)?")
    assert [job_state(site.backend, i) for i in chosen] == ["failed", "failed"]
    page.get_by_role("button", name="Retry 2 jobs").click()
    expect(page.locator(".flash")).to_have_text("2 jobs back in the queue")
    assert [job_state(site.backend, i) for i in chosen] == ["queued", "queued"]
    assert job_state(site.backend, other) == "failed"

    page.goto(f"{site.url}/admin/failed/errors")
    group = page.locator("table.errors tbody tr[data-error]")
    expect(group).to_have_count(1)
    expect(group.locator('[data-count="failures"]')).to_have_text("1")
    cause = page.locator("table.errors tbody tr.cause")
    expect(cause.locator('[data-count="cause"]')).to_have_text("1")
    cause.get_by_role("button", name="Discard all…").click()
    expect(page.locator("h1.question")).to_contain_text("Discard 1 failed job with the cause")
    page.get_by_role("link", name="No, go back").click()
    expect(page).to_have_url(f"{site.url}/admin/failed/errors")
    assert job_state(site.backend, other) == "failed"


def test_read_only_shows_no_action_and_refuses_a_forged_post(site: Site, page: Page) -> None:
    jobs = make_jobs(site.backend, site.pool)
    for path in ("/view/", "/view/failed", f"/view/jobs/{jobs.failed}"):
        page.goto(site.url + path)
        expect(page.locator(".mode")).to_have_text("read-only")
        expect(page.locator("main")).to_be_visible()
        expect(page.locator('form[method="post"]')).to_have_count(0)
        expect(page.get_by_role("button", name=ACTION)).to_have_count(0)
    status = page.evaluate(
        """async (jobId) => {
            const body = new URLSearchParams({job_id: jobId, csrf_token: "forged"});
            return (await fetch("/view/retry", {method: "POST", body})).status;
        }""",
        str(jobs.failed),
    )
    assert status == 403
    assert job_state(site.backend, jobs.failed) == "failed"


def test_a_post_without_the_csrf_token_is_refused(site: Site, page: Page) -> None:
    jobs = make_jobs(site.backend, site.pool)
    page.goto(f"{site.url}/admin/failed")
    expect(page.locator(f'tr[data-job-id="{jobs.failed}"]')).to_be_visible()
    with page.expect_navigation() as navigation:
        page.evaluate(
            """(jobId) => {
                const row = document.querySelector(`tr[data-job-id="${jobId}"]`);
                const form = row.querySelector('form[action$="/retry"]');
                form.querySelector('input[name="csrf_token"]').remove();
                form.requestSubmit();
            }""",
            str(jobs.failed),
        )
    response = navigation.value
    assert response is not None and response.status == 403
    expect(page.locator(".problem")).to_contain_text("CSRF token is missing or wrong")
    assert job_state(site.backend, jobs.failed) == "failed"
    assert site.events.named("dashboard_action") == []


def test_the_page_updates_itself_when_a_job_finishes(site: Site, page: Page) -> None:
    make_jobs(site.backend, site.pool)
    page.goto(f"{site.url}/view/")
    mail = page.locator('tr[data-queue="mail"]')
    expect(mail.locator('[data-count="succeeded"]')).to_have_text("1")
    page.evaluate("window.stillTheSamePage = true")
    assert process_next_job(site.pool, send, queue="mail") is True
    expect(mail.locator('[data-count="succeeded"]')).to_have_text("2", timeout=15_000)
    expect(mail.locator('[data-count="queued"]')).to_have_text("0")
    assert page.evaluate("window.stillTheSamePage") is True


def row_of(page: Page, queue: str) -> Any:
    """The overview's row of exactly this queue, by its data-queue as the page holds it: a
    locator found again at each use, so the page's refresh (which swaps its rows) between
    finding the row and clicking in it does not lose it."""
    found = page.evaluate(
        """(queue) => [...document.querySelectorAll("tr[data-queue]")]
            .filter((r) => r.dataset.queue === queue).length""",
        queue,
    )
    assert found == 1, (queue, found)
    return page.locator(f"tr[data-queue={_css_string(queue)}]")


def _css_string(value: str) -> str:
    """`value` as a CSS string, its quotes, backslashes and control characters escaped."""
    escaped = (c if c.isprintable() and c not in '"\\' else f"\\{ord(c):x} " for c in value)
    return '"' + "".join(escaped) + '"'


def test_the_page_acts_on_the_queue_it_shows_spaces_and_line_breaks_included(
    site: Site, page: Page
) -> None:
    backend = site.backend
    names = ["billing", "billing ", "reports", "reports ", "two\r\nlines", "two\nlines"]
    ids = {name: enqueue_committed(backend, ("x", {"q": name}), queue=name)[0] for name in names}

    def states() -> dict[str, str]:
        with connection(backend) as conn:
            return {name: admin.get_job(conn, ids[name]).state for name in names}  # type: ignore[union-attr]

    page.goto(f"{site.url}/admin/")
    row_of(page, "billing ").get_by_role("button", name="Pause").click()
    expect(page.locator(".flash")).to_have_text("queue billing  paused")
    assert set(committed(backend, admin.paused_queues)) == {"billing "}

    row_of(page, "two\r\nlines").get_by_role("button", name="Pause").click()
    expect(page.locator(".flash")).to_contain_text("paused")
    assert set(committed(backend, admin.paused_queues)) == {"billing ", "two\r\nlines"}

    row_of(page, "reports ").get_by_role("rowheader").get_by_role("link").click()
    expect(page.locator("table.jobs tbody tr")).to_have_count(1)
    expect(page.locator(f'tr[data-job-id="{ids["reports "]}"]')).to_be_visible()
    expect(page.get_by_label("Queue", exact=True)).to_have_value("reports ")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator(f'tr[data-job-id="{ids["reports "]}"]')).to_be_visible()
    page.get_by_role("button", name="Cancel every waiting job of queue reports").click()
    expect(page.locator("h1.question")).to_have_text("Cancel 1 waiting job of queue reports ?")
    page.get_by_role("button", name="Cancel 1 job").click()
    expect(page.locator(".flash")).to_have_text("1 job cancelled")
    assert states()["reports "] == "cancelled" and states()["reports"] == "queued"

    page.goto(f"{site.url}/admin/")
    lf_job = ids["two\nlines"]
    row_of(page, "two\nlines").get_by_role("rowheader").get_by_role("link").click()
    expect(page.locator("table.jobs tbody tr")).to_have_count(1)
    expect(page.locator(f'tr[data-job-id="{lf_job}"]')).to_be_visible()
    # the text box cannot hold the LF: the form's exact field brings it back
    page.get_by_role("button", name="Filter").click()
    expect(page.locator("table.jobs tbody tr")).to_have_count(1)
    expect(page.locator(f'tr[data-job-id="{lf_job}"]')).to_be_visible()
    page.get_by_role("button", name=re.compile("Cancel every waiting job of queue two")).click()
    page.get_by_role("button", name="Cancel 1 job").click()
    expect(page.locator(".flash")).to_have_text("1 job cancelled")
    assert states() == {
        "billing": "queued",
        "billing ": "queued",
        "reports": "queued",
        "reports ": "cancelled",
        "two\r\nlines": "queued",
        "two\nlines": "cancelled",
    }
    [*_, last] = site.events.named("dashboard_action")
    assert (last["action"], last["queue"], last["count"]) == ("cancel", "two\nlines", 1)


def test_blocked_jobs_show_as_blocked_with_what_they_wait_for(site: Site, page: Page) -> None:
    """Twelve jobs wait on three parents, one of which has succeeded, while another
    transaction locks them all (as a worker's release sweep does): the overview counts them
    blocked, the filter lists all twelve, and a job's page says what it waits for."""
    from test_job_states import blocked_in_database, locked_by_another

    from proletarian_di import enqueue_many

    backend = site.backend
    parents = enqueue_committed(backend, ("p", 1), ("p", 2), ("p", 3))
    with connection(backend) as conn:
        children = enqueue_many(conn, [("child", i) for i in range(12)], depends_on=parents)
        conn.commit()
    assert process_next_job(site.pool, lambda t, p: None) is True
    assert blocked_in_database(backend) == 12
    with locked_by_another(backend, children):
        page.goto(f"{site.url}/view/")
        row = page.locator('tr[data-queue="default"]')
        expect(row.locator('[data-count="blocked"]')).to_have_text("12")
        expect(row.locator('[data-count="scheduled"]')).to_have_text("0")
        expect(row.locator('[data-count="running"]')).to_have_text("0")
        page.goto(f"{site.url}/view/jobs?state=blocked")
        expect(page.locator('table.jobs tbody tr[data-state="blocked"]')).to_have_count(12)
        page.goto(f"{site.url}/view/jobs/{children[0]}")
        fields = page.locator("dl.fields")
        expect(fields).to_contain_text("after 2 of its 3 parents succeed")
        expect(fields).not_to_contain_text("9999")
        expect(page.locator("dd.graph .state-succeeded")).to_have_count(1)
        expect(page.locator("dd.graph .state-waiting")).to_have_count(2)

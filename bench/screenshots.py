"""`python -m bench.screenshots`: a PNG of every dashboard page, for the docs.

It starts an embedded PostgreSQL, fills it with a day of jobs (`busy_day`), serves the
dashboard with actions on 127.0.0.1, and has Chromium (Playwright) write each page of
`SCREENS` to docs/images/ in each of `LOOKS`: 1,400 px and 390 px wide, light and dark
(`dashboard-overview-1400-light.png`, `dashboard-overview-390-dark.png`, ...), made
smaller with pngquant and optipng where they are installed. The browser tests go through
the same `SCREENS` (tests/test_dashboard_a11y.py), so a page added here is screenshotted
and checked.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import uvicorn

from proletarian_di import (
    PeriodicJob,
    RetrySpec,
    Workflow,
    admin,
    create_queue_worker,
    create_scheduler,
    enqueue,
    process_next_job,
)
from proletarian_di.testing import PostgresQueueDatabase, QueueDatabase, run_due_jobs

IMAGES = Path(__file__).resolve().parent.parent / "docs" / "images"
CHROMIUM = "/usr/bin/chromium"
USER, PASSWORD = "ops", "correct horse"
VIEWPORT = {"width": 1280, "height": 800}


@dataclass(frozen=True)
class Screen:
    """A page of the dashboard: its images' name in docs/images/, its path under the
    dashboard (`{job}` is a failed job's id), the button to press or the link to follow
    there first when the page is what a form or a link leads to, and whether a viewer sees
    it (read-only) rather than an operator."""

    image: str
    path: str
    press: str | None = None
    follow: str | None = None
    viewer: bool = False

    def url(self, site: str, job: uuid.UUID) -> str:
        """Where the page is, on the site at `site` that serves the operator's dashboard
        under /admin and the viewer's under /viewer (`boards`)."""
        return site + ("/viewer" if self.viewer else "/admin") + self.path.format(job=job)


SCREENS = (
    Screen("dashboard-overview", "/"),
    Screen("dashboard-queue", "/queue?name=billing"),
    Screen("dashboard-jobs", "/jobs"),
    Screen("dashboard-job", "/jobs/{job}"),
    Screen("dashboard-failed", "/failed"),
    Screen("dashboard-errors", "/failed/errors"),
    Screen("dashboard-confirm", "/failed", press="Retry every failed job…"),
    Screen("dashboard-workflows", "/workflows"),
    Screen("dashboard-workflow", "/workflows", follow="month-end"),
    Screen("dashboard-search", "/search?q=cus_003"),
    Screen("dashboard-timings", "/timings"),
    Screen("dashboard-timing-charts", "/timings?queue=billing&job_type=charge_card"),
    Screen("dashboard-schedules", "/schedules"),
    Screen("dashboard-processes", "/processes"),
    Screen("dashboard-health", "/health"),
    Screen("dashboard-viewer", "/failed", viewer=True),
)


@dataclass(frozen=True)
class Look:
    """A way the pages are seen: the window's width, and the system's colour scheme. An
    image is named `<screen>-<width>-<scheme>.png`."""

    width: int
    scheme: str

    @property
    def suffix(self) -> str:
        return f"-{self.width}-{self.scheme}"


LOOKS = tuple(Look(width, scheme) for width in (1400, 390) for scheme in ("light", "dark"))
HEIGHTS = {1400: 900, 390: 844}
"""The window's height at each width (a desktop's, a phone's)."""
MAX_HEIGHT = 3000
"""The most pixels of a page an image shows, from its top: a long list is cut there, to
keep docs/images small."""


# A day of traffic ------------------------------------------------------------------------------


class Declined(Exception):
    """A card payment refused, as the demo's charges are one in seven."""


def work(job_type: str, payload: Any) -> None:
    """The demo's handler: some charges are declined, some emails bounce."""
    if job_type == "charge_card" and payload["amount_cents"] % 7 == 0:
        raise Declined(f"card_declined: insufficient funds ({payload['customer']})")
    if job_type == "send_email" and payload["to"].startswith("bounce"):
        raise ConnectionError(f"SMTP 550: mailbox {payload['to']} unavailable")
    if job_type == "parse_feed" and payload["feed"] == "catalog":
        raise ValueError(f"line {payload['line']}: price is not a number")


def quiet(event: str, data: dict[str, Any]) -> None:
    """A worker log that keeps the expected failures out of the output."""


def enqueue_committed(db: QueueDatabase, *jobs: tuple[str, Any], **options: Any) -> None:
    """Enqueue jobs on a connection of their own, and commit."""
    with contextlib.closing(db.connect()) as conn:
        for job_type, payload in jobs:
            enqueue(conn, job_type, payload, **options)
        conn.commit()


def busy_day(db: QueueDatabase, pool: Any) -> uuid.UUID:
    """Jobs of four queues run over the last day, failures among them, and some waiting:
    queued, scheduled, retrying, in a paused queue; one cancelled; two periodic schedules.
    Returns a failed charge's id."""
    mail = [f"{'bounce' if n % 23 == 0 else 'user'}{n}@example.com" for n in range(1, 90)]
    enqueue_committed(db, *[("send_email", {"to": to}) for to in mail], queue="mail")
    enqueue_committed(
        db,
        *[
            ("charge_card", {"customer": f"cus_{n:04d}", "amount_cents": 1900 + n * 10})
            for n in range(40)
        ],
        queue="billing",
    )
    for queue in ("mail", "billing"):
        run_due_jobs(pool, work, queue=queue, log=quiet)
    spread_over_the_day(db)
    enqueue_committed(
        db, *[("send_email", {"to": f"new{n}@example.com"}) for n in range(4)], queue="mail"
    )
    enqueue_committed(
        db,
        ("monthly_report", {"month": "2024-05"}),
        ("monthly_report", {"month": "2024-06"}),
        queue="reports",
        process_in=timedelta(hours=6),
    )
    enqueue_committed(
        db, ("charge_card", {"customer": "cus_0700", "amount_cents": 700}), queue="billing"
    )
    enqueue_committed(db, ("monthly_report", {"month": "2024-04"}), queue="reports")
    with contextlib.closing(db.connect()) as conn:
        admin.cancel_jobs(conn, queue="reports", state="queued")
        conn.commit()
    retry_later = RetrySpec(retries=3, delays=[600_000])
    retried = process_next_job(
        pool, work, queue="billing", retry_strategy_fn=lambda *_: retry_later, log=quiet
    )
    assert retried is False, "the declined charge was to fail, and wait for its retry"
    enqueue_committed(
        db,
        *[("deliver_webhook", {"url": f"https://hooks.example.com/{n}"}) for n in range(3)],
        queue="webhooks",
    )
    with contextlib.closing(db.connect()) as conn:
        admin.pause_queue(conn, "webhooks")
        conn.commit()
    create_scheduler(
        pool,
        [
            PeriodicJob("nightly-digest", "0 2 * * *", "send_digest", queue="mail"),
            PeriodicJob("monthly-report", "0 6 1 * *", "monthly_report", queue="reports"),
        ],
    ).register()
    workflows(db, pool)
    with contextlib.closing(db.connect()) as conn:
        [failed] = admin.list_jobs(conn, queue="billing", state="failed", limit=1)
        conn.rollback()
    return failed.job_id


def workflows(db: QueueDatabase, pool: Any) -> None:
    """Two workflows: "month-end" under way (its first jobs done, the next ones queued, the
    last ones blocked) and "import-catalog", whose parse failed, its dependents cancelled."""
    month = Workflow("month-end")
    extract = month.add("extract_ledger", {"month": "2024-06"}, queue="etl")
    parts = [
        month.add(f"transform_{part}", {"month": "2024-06"}, after=[extract], queue="etl")
        for part in ("orders", "refunds", "payouts")
    ]
    month.add("archive_raw_files", {"month": "2024-06"}, after=[extract], queue="etl")
    load = month.add("load_warehouse", {"month": "2024-06"}, after=parts, queue="etl")
    month.add("build_report", {"month": "2024-06"}, after=[load], queue="etl")
    month.add("notify_finance", {"to": "finance@example.com"}, after=[load], queue="etl")
    catalog = Workflow("import-catalog")
    fetch = catalog.add("fetch_feed", {"feed": "catalog"}, queue="catalog")
    parse = catalog.add(
        "parse_feed", {"feed": "catalog", "line": 812}, after=[fetch], queue="catalog"
    )
    catalog.add("update_prices", {"feed": "catalog"}, after=[parse], queue="catalog")
    catalog.add("reindex_search", {"feed": "catalog"}, after=[parse], queue="catalog")
    with contextlib.closing(db.connect()) as conn:
        month.enqueue(conn)
        catalog.enqueue(conn)
        conn.commit()
    for _ in range(3):  # the extract, then two of its transforms
        process_next_job(pool, work, queue="etl", log=quiet)
    run_due_jobs(pool, work, queue="catalog", log=quiet)


def spread_over_the_day(db: QueueDatabase) -> None:
    """Move the archived jobs' times back over the last 24 hours, busier lately."""
    rows = db.query(f"SELECT job_id FROM {db.archived_job_table} ORDER BY job_id")
    now = datetime.now(timezone.utc)
    for n, (key,) in enumerate(rows):
        finished = now - timedelta(minutes=5 + 1380 * ((n * 0.618) % 1) ** 1.5)
        started = finished - timedelta(milliseconds=40 + (n * 37) % 900)
        enqueued = started - timedelta(milliseconds=3 + (n * 53) % 2000)
        times = (finished, started, enqueued, enqueued)
        if db.name == "mysql":
            times = tuple(t.replace(tzinfo=None) for t in times)
        db.execute(
            f"UPDATE {db.archived_job_table} SET finished_at = %s, started_at = %s, "
            "enqueued_at = %s, process_at = %s WHERE job_id = %s",
            (*times, key),
        )


# Serving and shooting --------------------------------------------------------------------------


@contextlib.contextmanager
def serve(app: Any) -> Iterator[str]:
    """`app` served by uvicorn on a free 127.0.0.1 port, in a thread; yields its URL."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, name="dashboard-server", daemon=True)
    thread.start()
    _wait(lambda: server.started, "the dashboard server started")
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@contextlib.contextmanager
def idle_workers(db: QueueDatabase, pool: Any) -> Iterator[None]:
    """Two running workers for the processes page, on queues where they find nothing to
    run (webhooks, paused; reports, whose jobs are scheduled for later), so that what the
    other pages show stays as `busy_day` left it."""
    with contextlib.ExitStack() as stack:
        for queue in ("webhooks", "reports"):
            stack.enter_context(
                create_queue_worker(pool, work, queue=queue, worker_threads=2, log=quiet)
            )

        def settled() -> bool:
            with contextlib.closing(db.connect()) as conn:
                workers = admin.list_workers(conn)
                conn.rollback()
            threads = [t.activity for w in workers for t in w.threads]
            return len(workers) == 2 and "connecting" not in threads

        _wait(settled, "the workers registered, their threads past connecting", timeout=90)
        yield


def _wait(predicate: Callable[[], Any], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout:g} s: {what}")
        time.sleep(0.02)


def boards(pool: Any, **options: Any) -> Any:
    """The app the screens are taken from: the dashboard with actions under /admin for
    `USER` as an operator, and under /viewer for `USER` as a viewer (read-only)."""
    from starlette.applications import Starlette
    from starlette.routing import Mount

    from proletarian_di.contrib.dashboard import basic_auth, dashboard

    return Starlette(
        routes=[
            Mount(
                f"/{path}",
                dashboard(
                    pool, actions=True, auth=basic_auth(USER, PASSWORD, role=role), **options
                ),
            )
            for path, role in (("admin", "operator"), ("viewer", "viewer"))
        ]
    )


def open_screen(page: Any, screen: Screen, site: str, job: uuid.UUID) -> None:
    """Go to the screen's page in the Playwright `page` (on the site of `boards`), pressing
    its button or following its link if it has one."""
    page.goto(screen.url(site, job))
    if screen.press:
        page.get_by_role("button", name=screen.press).click()
        page.wait_for_load_state()
    if screen.follow:
        page.get_by_role("link", name=screen.follow, exact=True).click()
        page.wait_for_load_state()


def shoot(
    base: str,
    job: uuid.UUID,
    folder: Path,
    screens: tuple[Screen, ...],
    looks: tuple[Look, ...] = LOOKS,
) -> list[Path]:
    """Write a PNG of each screen of the site at `base` (`boards`) to `folder`, in each
    look: the whole page, down to `MAX_HEIGHT`."""
    from playwright.sync_api import sync_playwright

    written = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM)
        for look in looks:
            context = browser.new_context(
                http_credentials={"username": USER, "password": PASSWORD},
                viewport={"width": look.width, "height": HEIGHTS[look.width]},
                color_scheme=look.scheme,  # type: ignore[arg-type]
            )
            page = context.new_page()
            for screen in screens:
                open_screen(page, screen, base, job)
                path = folder / f"{screen.image}{look.suffix}.png"
                tall = page.evaluate("document.documentElement.scrollHeight")
                clip = {"x": 0, "y": 0, "width": look.width, "height": min(tall, MAX_HEIGHT)}
                page.screenshot(path=path, full_page=True, clip=clip)
                written.append(path)
            context.close()
        browser.close()
    return written


def optimise(paths: list[Path]) -> None:
    """Make the PNGs smaller, where pngquant (256 colours, which the pages' flat colours
    keep) and optipng are installed (`apt-get install pngquant optipng`)."""
    if shutil.which("pngquant"):
        subprocess.run(
            ["pngquant", "--force", "--ext", ".png", "--skip-if-larger", "256", *map(str, paths)],
            check=False,
        )
    if shutil.which("optipng"):
        subprocess.run(["optipng", "-quiet", "-o2", *map(str, paths)], check=True)


def main(argv: list[str] | None = None) -> None:
    from proletarian_di.embedded import embedded_postgres

    parser = argparse.ArgumentParser(prog="python -m bench.screenshots", description=__doc__)
    parser.add_argument("--out", type=Path, default=IMAGES, help="folder (docs/images)")
    parser.add_argument("only", nargs="*", help="screens to write (all by default)")
    args = parser.parse_args(argv)
    screens = tuple(s for s in SCREENS if not args.only or s.image in args.only)
    if args.out == IMAGES and not args.only:
        for old in IMAGES.glob("dashboard-*.png"):
            old.unlink()
    with embedded_postgres() as url:
        db = PostgresQueueDatabase(url)
        db.install()
        pool = db.pool(8)
        try:
            job = busy_day(db, pool)
            with serve(boards(pool)) as base, idle_workers(db, pool):
                written = shoot(base, job, args.out, screens)
            optimise(written)
            for path in written:
                print(path)
        finally:
            pool.close()


if __name__ == "__main__":
    main()

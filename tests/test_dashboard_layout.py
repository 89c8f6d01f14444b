"""The dashboard on a phone and in dark mode, in Chromium, on both databases with a day of
jobs: at 390 px wide no page is wider than the screen (the header wraps, a table scrolls in
its own box), every link of the navigation is on the screen, a short job id stays on one
line; the system's dark setting turns the page dark, and its text keeps WCAG AA contrast
there. The screenshots go to the run's temporary folder."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_dashboard_browser as browser_tests
from playwright.sync_api import Browser, Page, expect

from bench.screenshots import PASSWORD, USER, busy_day

pytestmark = pytest.mark.db

browser = browser_tests.browser
served = browser_tests.served
screenshots = browser_tests.screenshots

PHONE = {"width": 390, "height": 844}
CHECKS = (Path(__file__).parent / "dashboard_a11y.js").read_text()
PAGES = {
    "overview": "/",
    "job": "/jobs/{job}",
    "failed": "/failed",
    "errors": "/failed/errors",
    "jobs": "/jobs",
    "queue": "/queue?name=billing",
    "workflows": "/workflows",
}


@pytest.fixture(scope="module")
def demo(served: browser_tests.Site) -> tuple[browser_tests.Site, uuid.UUID]:
    served.backend.reset()
    return served, busy_day(served.backend, served.pool)


def phone(browser: Browser, scheme: str) -> Iterator[Page]:
    context = browser.new_context(
        http_credentials={"username": USER, "password": PASSWORD},
        viewport=PHONE,
        color_scheme=scheme,  # type: ignore[arg-type]
    )
    context.set_default_timeout(10_000)
    yield context.new_page()
    context.close()


@pytest.fixture(params=["light", "dark"])
def scheme(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def page(browser: Browser, scheme: str) -> Iterator[Page]:
    yield from phone(browser, scheme)


def shown(page: Page, demo: tuple[browser_tests.Site, uuid.UUID], name: str) -> None:
    site, job = demo
    page.goto(f"{site.url}/admin" + PAGES[name].format(job=job))
    expect(page.locator("main h1")).to_be_visible()


@pytest.mark.parametrize("name", PAGES)
def test_a_page_fits_a_phone(
    demo: tuple[browser_tests.Site, uuid.UUID],
    page: Page,
    scheme: str,
    name: str,
    screenshots: Path,
) -> None:
    site, _ = demo
    shown(page, demo, name)
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"{name} is {width} px wide"
    # Every link of the navigation, and the search box, on the screen.
    boxes = every(
        page,
        "header nav a, header input[name=q]",
        "els => els.map(e => { const b = e.getBoundingClientRect();"
        " return [e.textContent || e.name, b.left, b.right, b.width]; })",
    )
    labels = {b[0] for b in boxes}
    assert {"Overview", "Jobs", "Failed", "Workflows", "Processes", "q"} <= labels, labels
    off = [b for b in boxes if b[1] < 0 or b[2] > PHONE["width"] or b[3] < 1]
    assert off == [], off
    # A table wider than the screen scrolls in its own box, which stays within the page.
    tables = every(
        page,
        "main table",
        "els => els.map(t => { const box = t.closest('.scroll');"
        " return [t.className, box !== null, box ? box.getBoundingClientRect().right : null]; })",
    )
    assert tables, f"{name} shows a table"
    assert [t for t in tables if not t[1] and t[0] != "threads"] == []
    assert all(t[2] is None or t[2] <= PHONE["width"] for t in tables), tables
    # A shortened id link on a line of its own.
    lines = every(page, "td.id a", "els => els.map(a => a.getClientRects().length)")
    assert all(n == 1 for n in lines), lines
    page.screenshot(
        path=screenshots / f"{site.backend.name}-{name}-390-{scheme}.png", full_page=True
    )


def every(page: Page, selector: str, function: str) -> Any:
    """`function` of the elements `selector` finds, in one evaluation: the page refreshes
    its <main> every half second, which would detach elements found beforehand."""
    return page.evaluate(f"({function})([...document.querySelectorAll({selector!r})])")


def background(page: Page, selector: str) -> Any:
    return page.eval_on_selector(selector, "e => getComputedStyle(e).backgroundColor")


def test_dark_mode_turns_the_page_dark(
    demo: tuple[browser_tests.Site, uuid.UUID], browser: Browser
) -> None:
    colours = {}
    for scheme in ("light", "dark"):
        for page in phone(browser, scheme):
            shown(page, demo, "failed")
            colours[scheme] = [
                background(page, s) for s in ("html", "table.jobs", ".state-failed", "thead th")
            ]
    assert colours["light"][0] == "rgb(245, 247, 249)"
    assert colours["dark"][0] == "rgb(18, 22, 27)"
    assert all(
        light != dark for light, dark in zip(colours["light"], colours["dark"], strict=True)
    ), colours


@pytest.mark.parametrize("name", PAGES)
def test_dark_mode_keeps_the_text_legible(
    demo: tuple[browser_tests.Site, uuid.UUID], browser: Browser, name: str
) -> None:
    for page in phone(browser, "dark"):
        shown(page, demo, name)
        assert page.evaluate("matchMedia('(prefers-color-scheme: dark)').matches")
        assert background(page, "html") == "rgb(18, 22, 27)"
        found = page.evaluate(f"() => {{ {CHECKS}; return a11y.audit(); }}")
        assert found["contrast"] == [], found["contrast"]

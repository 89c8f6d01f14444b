"""The dashboard's accessibility basics in Chromium, for every page of
`bench.screenshots.SCREENS` (the pages the docs show) with a day of jobs: no console error,
a name for every form control, a text alternative for every image, a lang, a title, one h1
and no skipped heading level, text contrast of WCAG AA, and a keyboard that reaches the
navigation and the search box with a visible focus.

On PostgreSQL only: the pages' markup is the same on both databases, and
test_dashboard_browser renders every page from MySQL's tables too."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_dashboard_browser as browser_tests
from playwright.sync_api import Page, expect

from backends import Backend, Events
from bench.screenshots import SCREENS, Screen, boards, busy_day, open_screen, serve

pytestmark = pytest.mark.db

browser = browser_tests.browser
page = browser_tests.page


@pytest.fixture(scope="module")
def served(postgresql_backend: Backend) -> Iterator[browser_tests.Site]:
    """The dashboards the screenshots are taken from (`boards`): an operator's, a viewer's."""
    pool = postgresql_backend.pool(4)
    try:
        with serve(boards(pool, refresh_s=0.5)) as url:
            yield browser_tests.Site(postgresql_backend, pool, url, Events())
    finally:
        pool.close()


CHECKS = (Path(__file__).parent / "dashboard_a11y.js").read_text()


def run(page: Page, call: str) -> Any:
    """Evaluate `call` in the page, with the checks of dashboard_a11y.js (`a11y.*`) defined."""
    return page.evaluate(f"() => {{ {CHECKS}; return {call}; }}")


@pytest.fixture(scope="module")
def demo(served: browser_tests.Site) -> tuple[browser_tests.Site, uuid.UUID]:
    """The module's server, with a day of jobs (the docs' screenshots show the same)."""
    served.backend.reset()
    return served, busy_day(served.backend, served.pool)


@pytest.fixture
def opened(demo: tuple[browser_tests.Site, uuid.UUID], page: Page) -> Iterator[Any]:
    """Opens a screen with actions on, noting the console's errors on the way."""
    site, job = demo
    errors: list[str] = []
    page.on(
        "console",
        lambda m: errors.append(f"{m.text} ({m.location['url']})") if m.type == "error" else None,
    )
    page.on("pageerror", lambda e: errors.append(str(e)))

    def open_it(screen: Screen) -> list[str]:
        open_screen(page, screen, site.url, job)
        expect(page.locator("main h1")).to_be_visible()
        return errors

    yield open_it


@pytest.mark.parametrize("screen", SCREENS, ids=lambda s: s.image)
def test_the_page_meets_the_accessibility_basics(opened: Any, page: Page, screen: Screen) -> None:
    errors = opened(screen)
    found = run(page, "a11y.audit()")
    problems = {check: listed for check, listed in found.items() if listed}
    if errors:
        problems["console"] = errors
    assert not problems, json.dumps(problems, indent=1, ensure_ascii=False)


def test_the_error_page_meets_the_accessibility_basics(opened: Any, page: Page) -> None:
    missing = Screen("not-found", f"/jobs/{uuid.uuid4()}")
    errors = opened(missing)
    expect(page.locator(".problem")).to_contain_text("no job")
    found = run(page, "a11y.audit()")
    assert {check: listed for check, listed in found.items() if listed} == {}
    assert [e for e in errors if f"({page.url})" not in e] == []  # but its own 404


@pytest.mark.parametrize("screen", SCREENS, ids=lambda s: s.image)
def test_the_keyboard_reaches_the_navigation_with_a_visible_focus(
    opened: Any, page: Page, screen: Screen
) -> None:
    opened(screen)
    targets = run(page, "a11y.targets()")
    assert len(targets) >= 5, targets
    resting = run(page, "[...document.querySelectorAll('[data-target]')].map(a11y.ring)")
    reached: dict[int, dict[str, Any]] = {}
    for _ in range(3 * len(targets)):
        page.keyboard.press("Tab")
        ring = run(page, "a11y.ring(document.activeElement)")
        if ring["target"] is not None:
            reached[int(ring["target"])] = ring
        if len(reached) == len(targets):
            break
    assert [targets[n] for n in range(len(targets)) if n not in reached] == []
    unmarked = [
        targets[n]
        for n, ring in reached.items()
        if (ring["outline"], ring["shadow"]) == (resting[n]["outline"], resting[n]["shadow"])
        or (ring["contrast"] is None and ring["shadow"] == "none")
        or (ring["contrast"] is not None and ring["contrast"] < 3)
    ]
    assert unmarked == [], [reached[targets.index(t)] for t in unmarked]


BAD_PAGE = """<!doctype html><html><head></head><body style="background: #fff">
<h1>One</h1><h3>Skipped a level</h3><h1>Two</h1>
<input name="q"><select><option>x</option></select><button></button>
<img src="data:,"><svg role="img" width="10" height="10"></svg>
<p style="color: #aaa">Light grey</p>
<div style="opacity: 0.5"><p style="color: #666">Faded</p></div>
<header><a href="#" style="outline: none">Unmarked</a></header>
</body></html>"""


def test_the_checks_find_what_they_look_for(browser: Any) -> None:
    """The audit and the focus check on a page that fails each of them."""
    page = browser.new_page()
    try:
        page.set_content(BAD_PAGE)
        found = run(page, "a11y.audit()")
        assert len(found["unnamed"]) == 3, found
        assert [p.split(" ")[0] for p in found["images"]] == ["img", "svg"], found
        assert found["document"] == ["no lang on <html>", "no title", "2 h1 elements"]
        assert found["headings"] == ["h3 “Skipped a level” after h1"]
        assert [p.split(":")[0] for p in found["contrast"]] == [
            "p “Light grey”",
            "p “Faded”",
        ], found
        page.keyboard.press("Tab")
        page.keyboard.press("Tab")
        page.keyboard.press("Tab")
        page.keyboard.press("Tab")
        ring = run(page, "a11y.ring(document.activeElement)")
        assert page.evaluate("document.activeElement.textContent") == "Unmarked"
        assert (ring["outline"].split(" ")[0], ring["shadow"]) == ("none", "none")
    finally:
        page.close()

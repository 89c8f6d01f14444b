"""The dashboard's schedules page: each schedule's state and recent runs as its row holds
them, and run now, disable and enable only where actions are on, refused without a CSRF
token, each logged as every action is."""

from __future__ import annotations

import html
import json
import warnings
from typing import Any

import pytest
from test_dashboard import header_user, token
from test_periodic_controls import at, row

from proletarian_di import PeriodicJob, create_scheduler
from proletarian_di.contrib.dashboard import dashboard
from proletarian_di.testing import FakeClock

from backends import Backend, Events

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")


@pytest.fixture
def recorded(backend: Backend, pool: Any) -> Any:
    """A schedule that has enqueued one tick."""
    backend.execute(f"DELETE FROM {backend.job_table}_periodic")
    job = PeriodicJob("nightly", "* * * * *", "report")
    create_scheduler(pool, [job], clock=FakeClock(at("2026-05-01 10:00:30"))).register()
    scheduler = create_scheduler(pool, [job], clock=FakeClock(at("2026-05-01 10:01:01")))
    [tick] = scheduler.register()  # catches up the 10:01 tick
    assert tick.job_id is not None
    return tick.job_id


def test_the_page_shows_state_and_recent_runs_and_no_buttons_when_read_only(
    backend: Backend, pool: Any, recorded: Any
) -> None:
    page = TestClient(dashboard(pool)).get("/schedules")
    assert page.status_code == 200
    assert json.loads(row(backend, "nightly")[3])[0]["job_id"] == str(recorded)
    assert f'href="/jobs/{recorded}"' in page.text, "the run links to its job's page"
    assert "enabled" in page.text
    assert 'action="/schedules/act"' not in page.text
    refused = TestClient(dashboard(pool)).post(
        "/schedules/act", data={"schedule": "nightly", "action": "disable"}
    )
    assert refused.status_code == 403 and row(backend, "nightly")[1] is None


def test_run_now_disable_and_enable_with_csrf_and_a_log(
    backend: Backend, pool: Any, recorded: Any
) -> None:
    events = Events()
    client = TestClient(
        dashboard(pool, actions=True, auth=header_user, log=events), headers={"X-User": "alice"}
    )
    page = client.get("/schedules")
    assert 'action="/schedules/act"' in page.text and "Run now" in page.text
    form = {"csrf_token": token(page), "schedule": "nightly", "next": "/schedules"}
    forged = client.post("/schedules/act", data={**form, "csrf_token": "0" * 64, "action": "run"})
    assert forged.status_code == 403 and row(backend, "nightly")[2] is None
    disabled = client.post("/schedules/act", data={**form, "action": "disable"})
    assert disabled.status_code == 200 and "schedule nightly disabled" in html.unescape(
        disabled.text
    )
    assert row(backend, "nightly")[1] is not None
    assert "disabled since" in disabled.text and "Enable" in disabled.text
    ran = client.post("/schedules/act", data={**form, "action": "run"})
    assert "schedule nightly run requested" in html.unescape(ran.text)
    assert row(backend, "nightly")[2] is not None and "run requested" in ran.text
    enabled = client.post("/schedules/act", data={**form, "action": "enable"})
    assert "schedule nightly enabled" in html.unescape(enabled.text)
    assert row(backend, "nightly")[1] is None
    unknown = client.post("/schedules/act", data={**form, "schedule": "nope", "action": "run"})
    assert unknown.status_code == 404
    assert [(e["action"], e["schedule"], e["count"]) for e in events.named("dashboard_action")] == [
        ("schedule_disable", "nightly", 1),
        ("schedule_run", "nightly", 1),
        ("schedule_enable", "nightly", 1),
    ]

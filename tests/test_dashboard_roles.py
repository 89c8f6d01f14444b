"""The dashboard's roles, on both databases: an auth hook that returns an `Identity` with the
role "viewer" signs in a user who sees every page without an action control and whose every
action is refused (403, a clear message, nothing changed in the database, the attempt in the
audit log); an "operator", or a plain name as before, acts and is logged."""

from __future__ import annotations

import base64
import re
import warnings
from typing import Any

import pytest
from test_dashboard import Jobs, job_state, make_jobs, token

from proletarian_di import admin
from proletarian_di.contrib.dashboard import ROLES, Identity, basic_auth, dashboard

from backends import Backend, Events, committed

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")

ACTIONS = ("/retry", "/cancel", "/discard", "/reschedule", "/pause", "/resume", "/schedules/act")
"""Every route that changes data."""


def identity(request: Any) -> Identity | str | None:
    """The user of the `X-User` header, with the role of `X-Role` (none: a plain name)."""
    user, role = request.headers.get("x-user"), request.headers.get("x-role")
    if not user:
        return None
    return user if role is None else Identity(user, role)


@pytest.fixture
def jobs(backend: Backend, pool: Any) -> Jobs:
    return make_jobs(backend, pool)


@pytest.fixture
def events() -> Events:
    return Events()


@pytest.fixture
def app(pool: Any, events: Events) -> Any:
    return dashboard(pool, actions=True, auth=identity, log=events)


def client(app: Any, user: str, role: str | None) -> TestClient:
    headers = {"X-User": user} if role is None else {"X-User": user, "X-Role": role}
    return TestClient(app, headers=headers)


def pages(jobs: Jobs) -> list[str]:
    return [
        "/",
        "/queue?name=mail",
        "/jobs",
        "/failed",
        "/failed/errors",
        f"/jobs/{jobs.failed}",
        f"/jobs/{jobs.queued}",
        "/schedules",
        "/processes",
        "/timings",
    ]


def test_a_viewer_sees_every_page_and_no_action_control(backend, jobs, app):
    viewer, operator = client(app, "vera", "viewer"), client(app, "otto", "operator")
    for path in pages(jobs):
        seen = viewer.get(path)
        assert seen.status_code == 200, (path, seen.text)
        assert 'method="post"' not in seen.text, path
        assert "read-only · vera (viewer)" in seen.text, path
        acting = operator.get(path)
        assert acting.status_code == 200 and "actions on · otto" in acting.text, path
    # the operator's pages do carry the controls the viewer's lack
    assert 'action="/retry"' in operator.get(f"/jobs/{jobs.failed}").text
    assert 'action="/pause"' in operator.get("/").text
    # and the viewer reads the same jobs
    listed = re.findall(r'data-job-id="([^"]+)"', viewer.get("/jobs").text)
    with_actions = re.findall(r'data-job-id="([^"]+)"', operator.get("/jobs").text)
    assert listed == with_actions and str(jobs.failed) in listed


def test_every_action_of_a_viewer_is_refused_and_logged(backend, jobs, app, events):
    viewer = client(app, "vera", "viewer")
    csrf = token(client(app, "vera", None).get("/failed"))  # a token of the same name
    forms = {
        "job_id": str(jobs.failed),
        "queue": "mail",
        "schedule": "nightly",
        "action": "run",
        "csrf_token": csrf,
    }
    for path in ACTIONS:
        refused = viewer.post(path, data=forms)
        assert refused.status_code == 403, path
        assert "refused: vera is a viewer, who sees every page and changes nothing" in (
            refused.text
        ), path
    assert job_state(backend, jobs.failed) == "failed"
    assert job_state(backend, jobs.queued) == "queued"
    assert committed(backend, admin.paused_queues) == {}
    assert events.named("dashboard_action") == []
    assert events.named("dashboard_action_refused") == [
        {"user": "vera", "role": "viewer", "action": path.strip("/")} for path in ACTIONS
    ]


def test_a_viewer_from_another_site_is_refused_as_any_stranger(backend, jobs, app, events):
    viewer = client(app, "vera", "viewer")
    refused = viewer.post(
        "/retry", data={"job_id": str(jobs.failed)}, headers={"Origin": "https://evil.example"}
    )
    assert refused.status_code == 403 and "another site" in refused.text
    assert events.named("dashboard_action_refused") == []
    assert job_state(backend, jobs.failed) == "failed"


@pytest.mark.parametrize("role", ["operator", None])
def test_an_operator_or_a_plain_name_acts_and_is_logged(backend, jobs, app, events, role):
    operator = client(app, "otto", role)
    page = operator.get(f"/jobs/{jobs.failed}")
    done = operator.post(
        "/retry",
        data={"csrf_token": token(page), "job_id": str(jobs.failed)},
        follow_redirects=False,
    )
    assert done.status_code == 303
    assert job_state(backend, jobs.failed) == "queued"
    [logged] = events.named("dashboard_action")
    assert (logged["user"], logged["action"], logged["count"]) == ("otto", "retry", 1)
    assert events.named("dashboard_action_refused") == []


def test_a_read_only_dashboard_stays_read_only_for_an_operator(backend, jobs, pool):
    site = TestClient(
        dashboard(pool, auth=lambda request: Identity("otto", "operator")),
    )
    page = site.get(f"/jobs/{jobs.failed}")
    assert 'method="post"' not in page.text and "read-only" in page.text
    refused = site.post("/retry", data={"job_id": str(jobs.failed)})
    assert refused.status_code == 403 and "actions are not enabled" in refused.text
    assert job_state(backend, jobs.failed) == "failed"


def test_basic_auth_signs_in_with_a_role(backend, jobs, pool):
    app = dashboard(pool, actions=True, auth=basic_auth("vera", "secret!", role="viewer"))
    viewer = TestClient(app, headers={"Authorization": basic("vera", "secret!")})
    assert "read-only · vera (viewer)" in viewer.get("/").text
    assert viewer.post("/pause", data={"queue": "mail"}).status_code == 403
    assert committed(backend, admin.paused_queues) == {}
    wrong = TestClient(app, headers={"Authorization": basic("vera", "wrong")})
    assert wrong.get("/").status_code == 401


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_an_identity_is_checked_and_a_hook_returning_anything_else_is_a_500(pool):
    assert ROLES == ("viewer", "operator")
    assert Identity("ann").role == "operator"
    with pytest.raises(ValueError, match="role must be one of viewer, operator"):
        Identity("ann", "admin")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs a user name"):
        Identity("")
    with pytest.raises(ValueError, match="role"):
        basic_auth("ann", "pw", role="root")  # type: ignore[arg-type]
    tuple_hook = TestClient(
        dashboard(pool, auth=lambda request: ("ann", "viewer")), raise_server_exceptions=False
    )
    page = tuple_hook.get("/")
    assert page.status_code == 500 and "ann" not in page.text

"""The schedules page's actions: run now, disable, enable (`admin.request_run`,
`disable_schedule`, `enable_schedule`), allowed, checked and logged as every action is."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from ... import admin
from ...errors import SchemaError

CHANGES: dict[str, tuple[Callable[..., bool], str, str]] = {
    "run": (admin.request_run, "run requested", "had a run requested already"),
    "disable": (admin.disable_schedule, "disabled", "was disabled already"),
    "enable": (admin.enable_schedule, "enabled", "was enabled already"),
}
"""Each action: the admin function, and what the message says when it changed something
and when it did not."""


async def act(dashboard: Any, request: Request, value: Callable[..., str | None]) -> Response:
    """Run the action the form names on its schedule: 403 as every action when actions are
    off, unauthenticated or without the CSRF token; 404 for an unknown schedule. `value`
    reads a form field as the dashboard's own forms send it."""
    user, form = await dashboard.actor(request)
    name, action = value(form, "schedule"), value(form, "action")
    if name is None or action not in CHANGES:
        raise HTTPException(400, f"a schedule action needs a schedule and one of {list(CHANGES)}")
    change, done, unchanged = CHANGES[action]
    try:
        changed = await dashboard.write(lambda conn: change(conn, name, tables=dashboard.tables))
    except LookupError as exc:
        raise HTTPException(404, str(exc)) from None
    except SchemaError as exc:
        raise HTTPException(409, str(exc)) from None
    said = f"schedule {name} {done if changed else unchanged}"
    selection = {"schedule": name}
    return dashboard.done(request, form, user, f"schedule_{action}", selection, int(changed), said)

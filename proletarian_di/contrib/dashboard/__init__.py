"""A web dashboard for the queues, as a mountable ASGI (Starlette) app:

    app.mount("/jobs", dashboard(pool))

Server-rendered pages on the admin API: queues, jobs, one job, failures, schedules. It is
read-only unless `actions=True`, which needs an `auth` hook naming the user; every action
is logged with that user and its forms carry a CSRF token. `proletarian-di dashboard`
serves it on a database URL. Needs the `dashboard` extra.
"""

from ._app import dashboard
from ._security import basic_auth

__all__ = ["basic_auth", "dashboard"]

"""A web dashboard for the queues, as a mountable ASGI (Starlette) app:

    app.mount("/jobs", dashboard(pool))

Server-rendered pages on the admin API: queues, jobs, one job, failures, schedules. It is
read-only unless `actions=True`, which needs an `auth` hook naming the user (a name, or an
`Identity` with a role: a "viewer" sees every page and changes nothing, an "operator" acts);
every action, and every attempt a viewer makes, is logged with that user, and the forms carry
a CSRF token. `proletarian-di dashboard`
serves it on a database URL. Needs the `dashboard` extra.
"""

from ._app import dashboard
from ._security import ROLES, Auth, Identity, Role, basic_auth

__all__ = ["ROLES", "Auth", "Identity", "Role", "basic_auth", "dashboard"]

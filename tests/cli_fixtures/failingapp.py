"""An application whose setup fails on its own database URL, quoting (parts of) the password.

FAILING_APP_URL is the URL (or FAILING_APP_PASSWORD a bare password); FAILING_APP_PARSER
picks what fails on it (psycopg's conninfo parser, urllib, or the app's own message);
FAILING_APP_AT_IMPORT=1 fails at import, else `target()` or the container's resource fails.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit

from dependency_injector import containers, providers


def open_database() -> Any:
    """What a user's factory does with its URL: parse it, and fail, as its parser says."""
    url = os.environ.get("FAILING_APP_URL", "")
    parser = os.environ.get("FAILING_APP_PARSER", "psycopg")
    if parser == "psycopg":
        from psycopg.conninfo import conninfo_to_dict

        conninfo_to_dict(url)
    elif parser == "urllib":
        parts = urlsplit(url)
        raise ValueError(f"cannot log in as {parts.username!r} with {parts.password!r}")
    elif parser == "password":
        password = os.environ["FAILING_APP_PASSWORD"]
        raise PermissionError(f"password authentication failed: {password!r} ({password})")
    raise RuntimeError(f"cannot use {url} ({url!r})")


if os.environ.get("FAILING_APP_AT_IMPORT") == "1":
    open_database()


def target() -> Any:
    """A target function whose call fails."""
    return open_database()


def container() -> containers.DynamicContainer:
    """A container whose resource fails when the worker starts it."""
    built = containers.DynamicContainer()
    built.database = providers.Resource(open_database)
    return built


HARDCODED = "postgresql://appuser:Hard%zzCoded9@db.internal:5432/appdb"


def hardcoded_target() -> Any:
    """A target that fails quoting a URL written in its code (no variable to learn it from)."""
    raise KeyError(HARDCODED)


def hardcoded_container() -> containers.DynamicContainer:
    """A container whose resource fails quoting a URL written in its code."""
    built = containers.DynamicContainer()
    built.database = providers.Resource(hardcoded_target)
    return built

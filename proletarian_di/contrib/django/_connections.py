"""Django's database settings as proletarian-di connections: the driver connection under
Django's own (for enqueue) and a pool built from the same settings (for workers)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import connections

SUPPORTED = (
    "PostgreSQL through Django's postgresql backend on psycopg 3, or MySQL/MariaDB through "
    "Django's mysql backend with PyMySQL installed as MySQLdb (pymysql.install_as_MySQLdb())"
)


def driver_connection(using: str) -> Any:
    """The open psycopg 3 or PyMySQL connection under Django's connection `using`."""
    wrapper = connections[using]
    wrapper.ensure_connection()
    raw = wrapper.connection
    module = type(raw).__module__
    if module.startswith(("psycopg.", "pymysql.")) or module in ("psycopg", "pymysql"):
        return raw
    if module.startswith("MySQLdb"):
        raise ImproperlyConfigured(
            f"database {using!r} uses mysqlclient (MySQLdb), which proletarian-di does not "
            "support: install PyMySQL and call pymysql.install_as_MySQLdb() at the top of "
            "settings.py, so that Django's mysql backend runs on PyMySQL"
        )
    raise ImproperlyConfigured(
        f"database {using!r} ({wrapper.vendor}, driver {module}) is not supported; "
        f"supported: {SUPPORTED}"
    )


def data_source(using: str, size: int = 4) -> Any:
    """A pool on the database of Django's `using` entry, for workers (caller closes it)."""
    wrapper = connections[using]
    params = dict(wrapper.get_connection_params())
    if wrapper.vendor == "postgresql":
        from psycopg.conninfo import make_conninfo
        from psycopg_pool import ConnectionPool

        for django_only in ("cursor_factory", "prepare_threshold", "context"):
            params.pop(django_only, None)
        conninfo = make_conninfo("", **{k: v for k, v in params.items() if v is not None})
        return ConnectionPool(conninfo, min_size=1, max_size=size, open=True)
    if wrapper.vendor == "mysql":
        from ...mysql import MySQLDataSource

        # Django's converters and FOUND_ROWS flag are its own: workers use PyMySQL's.
        for django_only in ("conv", "client_flag"):
            params.pop(django_only, None)
        return MySQLDataSource(max_connections=size, **params)
    raise ImproperlyConfigured(
        f"database {using!r} ({wrapper.vendor}) is not supported; supported: {SUPPORTED}"
    )

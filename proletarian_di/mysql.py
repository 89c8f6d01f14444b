"""A pooled PyMySQL data source (DBUtils `PooledDB`) for workers and enqueuers."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote, urlsplit

DEFAULT_OPTIONS: dict[str, Any] = {
    "charset": "utf8mb4",
    "autocommit": False,
    "connect_timeout": 10,
}


def parse_mysql_url(url: str) -> dict[str, Any]:
    """`mysql://user:password@host:port/database` as PyMySQL connect options."""
    parts = urlsplit(url)
    if parts.scheme not in ("mysql", "mysql+pymysql", "mariadb"):
        raise ValueError(f"not a MySQL URL (mysql://user:password@host:port/db): {mask(url)}")
    options: dict[str, Any] = {"host": parts.hostname or "127.0.0.1", "port": parts.port or 3306}
    if parts.username:
        options["user"] = unquote(parts.username)
    if parts.password:
        options["password"] = unquote(parts.password)
    if parts.path.strip("/"):
        options["database"] = unquote(parts.path.strip("/"))
    return options


def mask(url: str) -> str:
    """The URL with its password replaced by `***`, for logs and messages."""
    parts = urlsplit(url)
    if not parts.password:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


class MySQLDataSource:
    """PyMySQL connections from a DBUtils pool; `connection()` lends one for a block.

    Dead connections are replaced when lent (DBUtils pings them), and a
    connection comes back rolled back, so nothing leaks between borrowers.
    Use it as a worker's `data_source` and to get connections for `enqueue`.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        max_connections: int = 10,
        min_cached: int = 0,
        **connect_options: Any,
    ) -> None:
        import pymysql
        from dbutils.pooled_db import PooledDB

        options = {**DEFAULT_OPTIONS, **(parse_mysql_url(url) if url else {}), **connect_options}
        self.description = f"mysql://{options.get('user', '')}@{options.get('host')}:" + str(
            options.get("port", 3306)
        ) + f"/{options.get('database', '')}"
        self._pool = PooledDB(
            pymysql,
            mincached=min_cached,
            maxconnections=max_connections,
            blocking=True,
            ping=1,
            **options,
        )

    def __repr__(self) -> str:
        return f"<MySQLDataSource {self.description}>"

    @contextlib.contextmanager
    def connection(self) -> Iterator[Any]:
        """Lend a pooled connection for the block; it returns to the pool rolled back."""
        conn = self._pool.connection(shareable=False)
        try:
            yield conn
        finally:
            conn.close()

    def close(self) -> None:
        """Close every pooled connection."""
        self._pool.close()

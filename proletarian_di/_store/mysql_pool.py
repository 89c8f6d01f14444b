"""A pooled PyMySQL data source (DBUtils `PooledDB`) for workers and enqueuers (public as
`proletarian_di.mysql.MySQLDataSource`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any

from .dialects import unwrap_connection
from .dialects.mysql import DISCONNECT_CODES, restore_session, rolled_back, session_state
from .secrets import parse_mysql_url

DEFAULT_OPTIONS: dict[str, Any] = {
    "charset": "utf8mb4",
    "autocommit": False,
    "connect_timeout": 10,
}

_LENT_AS = "_proletarian_session"  # the session state a pooled connection is restored to


def _connection_lost(error: BaseException) -> bool:
    """Whether DBUtils should replace the connection: only for a lost connection.

    DBUtils' default treats every OperationalError as fatal, so a lock wait
    timeout or a deadlock inside a job would silently swap the connection
    under the job's transaction and release its row lock.
    """
    code = error.args[0] if error.args else None
    if not isinstance(code, int) or code == 0:
        return True
    return 2000 <= code < 3000 or code in DISCONNECT_CODES


class MySQLDataSource:
    """PyMySQL connections from a DBUtils pool; `connection()` lends one for a block.

    Dead connections are replaced when lent (DBUtils pings them), and a
    connection comes back rolled back, with its session settings (SQL mode,
    time zone, isolation, character sets, default database, ...) as they were
    when first lent, so nothing leaks between borrowers. Use it as a worker's
    `data_source` and to get connections for `enqueue`.
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
        self._options = options
        self.description = (
            f"mysql://{options.get('user', '')}@{options.get('host')}:"
            + str(options.get("port", 3306))
            + f"/{options.get('database', '')}"
        )
        self._pool = PooledDB(
            pymysql,
            mincached=min_cached,
            maxconnections=max_connections,
            blocking=True,
            ping=1,
            reset=False,  # `connection()` rolls back already, outside the pool's lock
            isfatal=_connection_lost,
            **options,
        )

    def __repr__(self) -> str:
        return f"<MySQLDataSource {self.description}>"

    def connection(self) -> AbstractContextManager[Any]:
        """Lend a pooled PyMySQL connection for the block; it returns to the pool rolled back.

        The block gets the PyMySQL connection itself, not DBUtils' wrapper, so a
        lost connection raises instead of being replaced in the middle of a
        transaction; DBUtils replaces it when it is next lent.
        """
        return self._lend(check_session=True)

    def _worker_connection(self) -> AbstractContextManager[Any]:
        """`connection()` for a worker's own statements, which change no session setting:
        it comes back rolled back, without the round trip that checks its settings (a lease
        mode worker borrows a connection twice a job)."""
        return self._lend(check_session=False)

    @contextlib.contextmanager
    def _lend(self, check_session: bool) -> Iterator[Any]:
        pooled = self._pool.connection(shareable=False)
        conn = unwrap_connection(pooled)
        lent = None
        try:
            if check_session:
                lent = getattr(conn, _LENT_AS, None)
                if lent is None:
                    lent = session_state(conn)
                    setattr(conn, _LENT_AS, lent)
            yield conn
        finally:
            if not check_session:
                rolled_back(conn)
            elif lent is not None:
                restore_session(conn, lent)
            pooled.close()

    def connect(self) -> Any:
        """A new PyMySQL connection with the same options, outside the pool (caller closes it)."""
        import pymysql

        return pymysql.connect(**self._options)

    def close(self) -> None:
        """Close every pooled connection."""
        self._pool.close()

"""Database URLs: which database one names (refusing a malformed one), and a connection to it."""

from __future__ import annotations

import os
import traceback
from typing import Any

from ..errors import DatabaseURLError
from .secrets import (
    libpq_url,
    malformed,
    mask,
    parse_mysql_url,
    postgres_problem,
    split_url,
    without_quoted_data,
)

POSTGRES_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg")
MYSQL_SCHEMES = ("mysql", "mysql+pymysql", "mariadb")
CONNECT_TIMEOUT = 10


def url_dialect(url: str) -> str:
    """'postgresql' or 'mysql' for a usable database URL, else `DatabaseURLError`.

    A malformed URL is refused here, before a driver parses it and echoes it in its errors.
    """
    parts = split_url(url)
    scheme = parts.scheme.lower() if parts else ""
    if scheme in POSTGRES_SCHEMES:
        problem = postgres_problem(libpq_url(url))
        if problem:
            raise DatabaseURLError(malformed("database URL", url, problem))
        return "postgresql"
    if scheme in MYSQL_SCHEMES:
        parse_mysql_url(url)
        return "mysql"
    raise DatabaseURLError(
        f"unsupported database URL {mask(url)!r}: use postgresql://user:password@host/db "
        "or mysql://user:password@host/db"
    )


def conninfo_refusal(exc: BaseException) -> str | None:
    """Why psycopg refused to parse a URL or conninfo, when `exc` is that refusal (or was
    raised from it): libpq's reason, one line, without the data it quotes (a password); else
    None. An application's own `psycopg.connect` or pool raises it before any connection."""
    try:
        import psycopg
    except ImportError:
        return None
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        frames = traceback.extract_tb(current.__traceback__)
        if any(frame.filename.endswith(_PSYCOPG_CONNINFO) for frame in frames):
            if isinstance(current, UnicodeError):
                return "a percent-encoded sequence is not UTF-8"
            if isinstance(current, psycopg.ProgrammingError):
                return without_quoted_data(" ".join(str(current).split()))
        current = current.__cause__ or current.__context__
    return None


_PSYCOPG_CONNINFO = os.path.join("psycopg", "conninfo.py")


def connect(url: str, timeout: int = CONNECT_TIMEOUT) -> Any:
    """A new connection (psycopg 3 or PyMySQL) for a database URL, not in autocommit."""
    if url_dialect(url) == "postgresql":
        import psycopg

        return psycopg.connect(libpq_url(url), connect_timeout=timeout)
    import pymysql

    return pymysql.connect(
        **parse_mysql_url(url), charset="utf8mb4", autocommit=False, connect_timeout=timeout
    )


def connect_postgres(conninfo: str, timeout: int = CONNECT_TIMEOUT) -> Any:
    """A new psycopg connection for a postgresql:// URL (as `connect`) or a libpq conninfo
    string."""
    if "://" in conninfo:
        return connect(conninfo, timeout)
    import psycopg

    return psycopg.connect(conninfo, connect_timeout=timeout)


# The server's own refusals of a connection, or its end: it could not be used, not that a
# statement failed (PyMySQL raises OperationalError for most of a server's errors).
_MYSQL_REFUSALS = frozenset(
    {1040, 1044, 1045, 1049, 1053, 1077, 1078, 1079, 1129, 1130, 1152, 1203, 1927, 3032, 4031}
)
_POSTGRES_REFUSALS = ("08", "28", "53300", "57P01", "57P02", "57P03")


def is_unreachable(exc: BaseException) -> bool:
    """True for errors that mean the database server cannot be reached or refused us; not
    for an error the server answered a statement with (a duplicate column, a lock timeout)."""
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    try:
        import psycopg

        if isinstance(exc, psycopg.OperationalError):
            state = exc.sqlstate
            return state is None or state.startswith(_POSTGRES_REFUSALS)
    except ImportError:
        pass
    try:
        import pymysql

        if isinstance(exc, pymysql.err.OperationalError):
            code = exc.args[0] if exc.args else None
            return not isinstance(code, int) or 2000 <= code < 3000 or code in _MYSQL_REFUSALS
    except ImportError:
        pass
    return False

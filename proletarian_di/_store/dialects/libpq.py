"""Simple queries sent straight through psycopg's libpq layer: the worker's hot path.

A cursor converts the query, keeps prepared-statement counts and builds result
sets: more client CPU than the rest of a no-op job. The worker's two statements
per job (values already inlined, statements already prepared) need none of it,
so they go to `PGconn.send_query` and are read back with psycopg's own waiting
and type loaders. Where a psycopg release lacks those parts, a cursor does it.
"""

from __future__ import annotations

import sys
from typing import Any

from psycopg import Connection, errors, pq
from psycopg.adapt import Transformer
from psycopg.rows import tuple_row

try:
    from psycopg.generators import execute as _fetch_results

    _direct = all(
        callable(getattr(owner, name, None))
        for owner, name in ((errors, "error_from_result"), (Connection, "wait"))
    )
except ImportError:  # pragma: no cover - a psycopg without the generator
    _direct = False

_OK = (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK)


def direct() -> bool:
    """Whether `run_then` can be used (`run` works either way)."""
    return _direct


def run(conn: Any, text: str) -> list[tuple[Any, ...]]:
    """Run `text`, one or more statements without parameters, in one round trip.

    Returns the rows of the last statement; raises psycopg's error for the
    first statement that failed (the server skips the rest).
    """
    if not _direct:
        return _run_with_cursor(conn, text)
    rows = run_then(conn, text, sys.maxsize)
    assert rows is not None
    return rows


def run_then(conn: Any, text: str, first: int) -> list[tuple[Any, ...]] | None:
    """Run `text` in one round trip, as `run` does, where its first `first` statements must
    succeed (their error is raised) and the rest may fail: None then, no error.

    Only where `direct()`.
    """
    return run_probed(conn, text, first)[1]


def run_probed(
    conn: Any, text: str, first: int, probe: int | None = None
) -> tuple[Any, list[tuple[Any, ...]] | None]:
    """`run_then`, and the first value of statement number `probe` (0-based, one of the
    first `first`; None: none read): a read sent along in the same round trip."""
    with conn.lock:
        pgconn = conn.pgconn
        encoding = conn.info.encoding
        pgconn.send_query(text.encode(encoding))
        results = conn.wait(_fetch_results(pgconn))
    for index, result in enumerate(results):
        if result.status not in _OK:
            if index < first:
                raise errors.error_from_result(result, encoding=encoding)
            return _first_value(conn, results[probe]) if probe is not None else None, None
    value = None if probe is None else _first_value(conn, results[probe])
    return value, _rows(conn, results[-1])


def _rows(conn: Any, result: Any) -> list[tuple[Any, ...]]:
    if not result.ntuples:
        return []
    loader = Transformer(conn)
    loader.set_pgresult(result)
    rows: list[tuple[Any, ...]] = loader.load_rows(0, result.ntuples, tuple)
    return rows


def _first_value(conn: Any, result: Any) -> Any:
    rows = _rows(conn, result)
    return rows[0][0] if rows else None


def _run_with_cursor(conn: Any, text: str) -> list[tuple[Any, ...]]:
    with conn.cursor(row_factory=tuple_row) as cursor:
        cursor.execute(text, prepare=False)
        while cursor.nextset():
            pass
        return cursor.fetchall() if cursor.description else []

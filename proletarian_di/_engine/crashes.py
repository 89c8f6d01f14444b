"""Crash loops in the held-transaction mode (`max_crashes`): a job whose process dies while
running it is rolled back, so nothing in its row says it ran. Each claim is therefore
counted in a table of its own, on a connection of its own, committed before the handler
runs; claims that no finished attempt accounts for are runs whose process died.

Opt-in, because it costs a round trip per job. Lease mode needs none of it: it counts an
attempt when it claims the job.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import Any

from .._store.dialects import Dialect
from .._store.tables import claims_table


class ClaimCounter:
    """Counts one worker's claims of each job on one autocommit connection, opened with
    `connect` (outside the worker's pool, which its threads may all hold) and shared by
    its threads."""

    def __init__(self, connect: Callable[[], Any], job_table: str) -> None:
        self.connect, self.table = connect, claims_table(job_table)
        self._lock = threading.Lock()
        self._conn: Any = None

    def count(self, dialect: Dialect, job_id: Any) -> int:
        """Count this claim of the job and commit it: its claims so far, this one included.
        A connection that failed is opened anew once."""
        with self._lock:
            for tries_left in (1, 0):
                try:
                    return dialect.count_claim(self._connection(dialect), self.table, job_id)
                except Exception:
                    self._close()
                    if not tries_left:
                        raise
        raise AssertionError("unreachable")  # pragma: no cover

    def forget(self, conn: Any, dialect: Dialect, job_ids: Sequence[Any]) -> None:
        """In the jobs' own transaction: they left the queue, their counts go too."""
        dialect.forget_claims(conn, self.table, job_ids)

    def _connection(self, dialect: Dialect) -> Any:
        if self._conn is None:
            conn = self.connect()
            dialect.set_autocommit(conn)
            self._conn = conn
        return self._conn

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def close(self) -> None:
        with self._lock:
            self._close()

"""Paused queues: a row per queue in `<job table>_paused`, and how workers notice it.

A worker reads whether its queue is paused when a claim has found jobs and its last answer
is older than a polling interval, in the claim's transaction, on one of its threads; every
thread goes by that answer. So pausing adds no statement per job, and none at all to an idle
worker. A paused queue's jobs are released (rolled back) as they were claimed, unrun. On
PostgreSQL, pausing and resuming also notify the workers (on commit), so they re-read at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from .._common.checks import check_queue
from .._store.dialects import Dialect, Session
from .._store.tables import paused_table

STATE_CHANNEL = "proletarian_di_state"
"""The PostgreSQL channel on which pausing or resuming a queue names it."""
MIN_PAUSE_READ_S = 0.1
"""The shortest time between two reads of a worker (with `polling_interval_ms=0` too)."""
LISTENING_PAUSE_READ_S = 5.0
"""Between reads of a worker told of every change (a PostgreSQL listener): a fallback."""


def pause(conn: Any, dialect: Dialect, queue: str, now: datetime) -> bool:
    """Mark `queue` paused, in the caller's transaction; False if it already was."""
    table = paused_table(dialect.job_table)
    if is_paused(conn, dialect, check_queue(queue)):
        return False
    dialect.execute(
        conn,
        f"INSERT INTO {table} (queue, paused_at) VALUES (%s, %s) {dialect.unless_exists('queue')}",
        (queue, dialect.encode_time(now)),
    )
    _announce(conn, dialect, queue)
    return True


def resume(conn: Any, dialect: Dialect, queue: str) -> bool:
    """Take `queue` off the paused list, in the caller's transaction; False if it was not on it."""
    table = paused_table(dialect.job_table)
    sql = f"DELETE FROM {table} WHERE queue = %s"
    if not dialect.execute_count(conn, sql, (check_queue(queue),)):
        return False
    _announce(conn, dialect, queue)
    return True


def is_paused(conn: Any, dialect: Dialect, queue: str) -> bool:
    sql = f"SELECT 1 FROM {paused_table(dialect.job_table)} WHERE queue = %s"
    return dialect.fetchone(conn, sql, (queue,)) is not None


def paused_queues(conn: Any, dialect: Dialect) -> dict[str, datetime]:
    """Every paused queue, with when it was paused."""
    rows = dialect.fetchall(
        conn, f"SELECT queue, paused_at FROM {paused_table(dialect.job_table)} ORDER BY queue"
    )
    return {queue: dialect.decode_time(at) for queue, at in rows}


def _announce(conn: Any, dialect: Dialect, queue: str) -> None:
    """Tell listening workers, once the caller commits, that the queue's state changed."""
    dialect.announce(conn, STATE_CHANNEL, queue)


class PauseWatch:
    """Whether one worker's queue is paused, read at most once per `every_s` for all its
    threads (0: whenever asked, as `process_next_job` does)."""

    def __init__(
        self, queue: str, every_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.queue, self.every_s, self.clock = queue, every_s, clock
        self.paused = False
        self._next_read = 0.0
        self._reading = threading.Lock()

    def known_paused(self) -> bool:
        """Paused, by an answer younger than `every_s`: no need to claim at all."""
        return self.paused and self.clock() < self._next_read

    def check(self, session: Session) -> bool:
        """Whether the queue is paused, read on the session's connection, in its transaction,
        when the last read is older than `every_s` and no other thread is reading; else the
        last answer."""
        if self.clock() < self._next_read or not self._reading.acquire(blocking=False):
            return self.paused
        try:
            self.paused = is_paused(session.conn, session.dialect, self.queue)
            self._next_read = self.clock() + self.every_s
        finally:
            self._reading.release()
        return self.paused

    def changed(self) -> None:
        """The queue was paused or resumed (a notification said so): read it at the next claim."""
        self._next_read = 0.0

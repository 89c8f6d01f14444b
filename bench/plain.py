"""The baseline: minimal hand-written psycopg / PyMySQL loops running the queue's SQL.

Each job is one transaction, as in the core: BEGIN; SELECT … FOR UPDATE SKIP
LOCKED LIMIT 1; archive + delete; COMMIT. Nothing else: no pool, no logging,
no options, just the driver. This is the practical limit of the model in Python.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from proletarian_di.job_ids import uuid7

from .db import ARCHIVED_JOB_TABLE, COLUMNS, JOB_TABLE, QUEUE, Database

# The seeds' claim (no lower bound), in the claim index's order: priority, then process_at.
PG_CLAIM = (
    f"SELECT {COLUMNS} FROM {JOB_TABLE} WHERE queue = %s AND process_at <= %s "
    "ORDER BY -priority, process_at LIMIT 1 FOR UPDATE SKIP LOCKED"
)
MYSQL_CLAIM = PG_CLAIM.replace("-priority", "priority_rank")
ARCHIVE_SELECT = (
    f"INSERT INTO {ARCHIVED_JOB_TABLE} ({COLUMNS}, status, finished_at) "
    "SELECT job_id, queue, job_type, payload, %s, enqueued_at, process_at, %s, %s "
)
PG_ARCHIVE = (
    f"WITH done AS (DELETE FROM {JOB_TABLE} WHERE job_id = %s RETURNING *) "
    + ARCHIVE_SELECT
    + "FROM done"
)
MYSQL_ARCHIVE = ARCHIVE_SELECT + f"FROM {JOB_TABLE} WHERE job_id = %s"
MYSQL_DELETE = f"DELETE FROM {JOB_TABLE} WHERE job_id = %s"
# Every value a parameter: PyMySQL batches executemany into multi-row INSERTs only then.
INSERT = f"INSERT INTO {JOB_TABLE} ({COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s)"
PG_INSERT_MANY = (
    f"INSERT INTO {JOB_TABLE} ({COLUMNS}) "
    "SELECT u.job_id, %s, u.job_type, u.payload, 0, %s, %s "
    "FROM unnest(%s::uuid[], %s::text[], %s::text[]) AS u(job_id, job_type, payload)"
)


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def naive_utc_now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def connect(db: Database) -> Any:
    """A connection ready for one-job transactions (READ COMMITTED on MySQL, as the core)."""
    conn = db.connect()
    if db.name == "mysql":
        with conn.cursor() as cur:
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
    return conn


def run_one(db: Database, conn: Any, handler: Callable[[str, Any], Any]) -> bool:
    """Claim, run and archive one due job in one transaction; False when none is due."""
    if db.name == "mysql":
        with conn.cursor() as cur:
            cur.execute(MYSQL_CLAIM, (QUEUE, naive_utc_now()))
            row = cur.fetchone()
            if row is None:
                conn.rollback()
                return False
            handler(row[2], json.loads(row[3]))
            cur.execute(MYSQL_ARCHIVE, (row[4] + 1, "success", naive_utc_now(), row[0]))
            cur.execute(MYSQL_DELETE, (row[0],))
        conn.commit()
        return True
    row = conn.execute(PG_CLAIM, (QUEUE, utc_now())).fetchone()
    if row is None:
        conn.rollback()
        return False
    handler(row[2], json.loads(row[3]))
    conn.execute(PG_ARCHIVE, (row[0], row[4] + 1, "success", utc_now()))
    conn.commit()
    return True


def noop(job_type: str, payload: Any) -> None:
    """The benchmark's job: does nothing, so only the queue's cost is measured."""


class PlainWorker:
    """`threads` plain loops, each on its own connection, polling every `interval` seconds."""

    def __init__(
        self,
        db: Database,
        threads: int,
        interval: float,
        handler: Callable[[str, Any], Any] = noop,
    ) -> None:
        self.db, self.interval, self.handler = db, interval, handler
        self.counts = [0] * threads
        self.errors: list[BaseException] = []
        self.stopping = threading.Event()
        self.conns = [connect(db) for _ in range(threads)]
        self.threads = [
            threading.Thread(target=self._loop, args=(n,), daemon=True) for n in range(threads)
        ]

    def start(self) -> PlainWorker:
        for thread in self.threads:
            thread.start()
        return self

    def done(self) -> int:
        return sum(self.counts)

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(10)
        for conn in self.conns:
            with contextlib.suppress(Exception):
                conn.close()

    def _loop(self, n: int) -> None:
        conn = self.conns[n]
        try:
            while not self.stopping.is_set():
                if run_one(self.db, conn, self.handler):
                    self.counts[n] += 1
                else:
                    self.stopping.wait(self.interval)
        except BaseException as exc:
            self.errors.append(exc)


def enqueue_one(db: Database, conn: Any, payload: Any) -> None:
    """INSERT one job (id, JSON payload) as a hand-written enqueue would."""
    if db.name == "mysql":
        now = naive_utc_now()
        with conn.cursor() as cur:
            cur.execute(INSERT, (uuid7().bytes, QUEUE, "noop", json.dumps(payload), 0, now, now))
    else:
        now = utc_now()
        conn.execute(INSERT, (uuid7(), QUEUE, "noop", json.dumps(payload), 0, now, now))


def enqueue_bulk(db: Database, conn: Any, payloads: list[Any]) -> None:
    """One INSERT … SELECT FROM unnest(…) on PostgreSQL; executemany on MySQL."""
    if db.name == "mysql":
        now = naive_utc_now()
        rows = [(uuid7().bytes, QUEUE, "noop", json.dumps(p), 0, now, now) for p in payloads]
        with conn.cursor() as cur:
            cur.executemany(INSERT, rows)
        return
    now = utc_now()
    ids = [uuid7() for _ in payloads]
    texts = [json.dumps(p) for p in payloads]
    conn.execute(PG_INSERT_MANY, (QUEUE, now, now, ids, ["noop"] * len(ids), texts))


CHANNEL = "proletarian_bench"


class ListeningWorker(PlainWorker):
    """One plain PostgreSQL loop that sleeps on LISTEN instead of polling (latency baseline)."""

    def __init__(
        self, db: Database, interval: float, handler: Callable[[str, Any], Any] = noop
    ) -> None:
        super().__init__(db, 1, interval, handler)
        self.listener = db.connect()
        self.listener.autocommit = True
        self.listener.execute(f"LISTEN {CHANNEL}")
        self.conns.append(self.listener)

    def _loop(self, n: int) -> None:
        conn = self.conns[n]
        try:
            while not self.stopping.is_set():
                if run_one(self.db, conn, self.handler):
                    self.counts[n] += 1
                    continue
                for _ in self.listener.notifies(timeout=self.interval, stop_after=1):
                    break
        except BaseException as exc:
            self.errors.append(exc)

"""Draining through a failover: a Patroni cluster (`bench/patroni.py`) switches over, then
loses its primary to SIGKILL, while a worker drains and an application enqueues.

For synchronous and for asynchronous replication in turn, on a new cluster each:

- a backlog of jobs is enqueued (`enqueue_many`), and a 4-thread worker drains it through a
  pool on the cluster's multi-host URL (`target_session_attrs=read-write`);
- an enqueuer commits one job per transaction, `--failover-rate` a second, through the same
  URL, reconnecting when its connection breaks; a job whose COMMIT raised is *in doubt*;
- after 10 s of steady draining, a switchover; 10 s after throughput is back, a SIGKILL to
  the leader's Patroni and postmaster (its machine lost); 10 s more; then the enqueuer stops
  and the worker drains the rest.

Printed per event: seconds with no job succeeding, seconds until the worker's rate was back
to half of what it was before. Per cluster: jobs *lost* (a committed enqueue, or its
archived outcome, gone), jobs *run twice* (the handler ran more than once: at-least-once,
as a COMMIT lost with its connection allows) and jobs archived twice (never).
"""

from __future__ import annotations

import bisect
import contextlib
import json
import shutil
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from rich.console import Console
from rich.table import Table

from proletarian_di import create_queue_worker, enqueue, enqueue_many
from proletarian_di.testing import PostgresQueueDatabase

from . import patroni

console = Console(highlight=False, width=120)
THREADS, STEADY_S, BACKLOG = 4, 10.0, 100_000


@dataclass
class Ledger:
    """What the application was told, and what the handler saw."""

    acked: set[int] = field(default_factory=set)
    in_doubt: set[int] = field(default_factory=set)
    runs: Counter[int] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def handler(self, job_type: str, payload: Any) -> None:
        with self.lock:
            self.runs[payload["n"]] += 1


class Enqueuer(threading.Thread):
    """One job per transaction, `rate` a second, reconnecting through the URL."""

    def __init__(self, url: str, ledger: Ledger, first: int, rate: float) -> None:
        super().__init__(daemon=True)
        self.url, self.ledger, self.next, self.pause = url, ledger, first, 1 / rate
        self.stopping = threading.Event()
        self.failures: list[float] = []

    def outage(self, event: float) -> float:
        """Seconds from `event` until the last enqueue that failed in the minute after it."""
        failed = [at for at in self.failures if event <= at <= event + 60]
        return max(failed) - event if failed else 0.0

    def run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        while not self.stopping.wait(self.pause):
            n, self.next, committing = self.next, self.next + 1, False
            try:
                if conn is None:
                    conn = psycopg.connect(self.url)
                enqueue(conn, "failover", {"n": n})
                committing = True
                conn.commit()
            except psycopg.Error:
                self.failures.append(time.monotonic())
                if committing:  # the COMMIT may or may not have been applied
                    self.ledger.in_doubt.add(n)
                _close(conn)
                conn = None
            else:
                self.ledger.acked.add(n)
        _close(conn)


def _close(conn: psycopg.Connection[Any] | None) -> None:
    if conn is not None:
        with contextlib.suppress(psycopg.Error):
            conn.close()


class Progress(threading.Thread):
    """The worker's succeeded count, sampled every 50 ms."""

    def __init__(self, worker: Any) -> None:
        super().__init__(daemon=True)
        self.worker, self.samples = worker, [(time.monotonic(), 0)]
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(0.05):
            self.samples.append((time.monotonic(), self.worker.summary()["succeeded"]))

    def rate(self, start: float, end: float) -> float:
        """Jobs a second that succeeded between `start` and `end` (samples are in time order,
        so this is a search, not a scan: it runs while the worker is timed)."""
        samples = self.samples[:]
        first = bisect.bisect_left(samples, (start, -1))
        last = bisect.bisect_right(samples, (end, float("inf"))) - 1
        if last <= first:
            return 0.0
        return (samples[last][1] - samples[first][1]) / (end - start)

    def recovery(self, event: float, before: float) -> tuple[float, float | None]:
        """(longest gap with no success from the event on, seconds until the trailing 1 s
        rate is back to half of `before`)."""
        after = [(at, count) for at, count in self.samples if at >= event - 0.05]
        gap, last_change = 0.0, event
        for (at, count), (_, previous) in zip(after[1:], after, strict=False):
            if count != previous:
                gap, last_change = max(gap, at - last_change), at
        back = next(
            (
                at - event
                for at, _ in after
                if at >= event + 1 and self.rate(at - 1, at) >= before / 2
            ),
            None,
        )
        return gap, back

    def wait_until_back(self, event: float, before: float, limit_s: float = 120) -> None:
        while time.monotonic() - event < limit_s:
            if self.recovery(event, before)[1] is not None:
                return
            time.sleep(0.2)


def _settled(db: PostgresQueueDatabase) -> tuple[set[int], list[int], int]:
    """(archived n's, n's archived more than once, jobs still waiting) on the new primary."""
    rows = db.query("SELECT payload FROM proletarian.archived_job")
    archived = Counter(json.loads(p)["n"] if isinstance(p, str) else p["n"] for (p,) in rows)
    waiting = db.query("SELECT count(*) FROM proletarian.job")[0][0]
    return set(archived), [n for n, c in archived.items() if c > 1], int(waiting)


def one_cluster(synchronous: bool, rate: float) -> dict[str, Any]:
    """The whole story on a new cluster; the figures of its table row."""
    root = Path(tempfile.mkdtemp(prefix="proletarian-failover-"))
    ledger, events = Ledger(), {}
    try:
        with patroni.Cluster(root, synchronous=synchronous) as cluster:
            db = PostgresQueueDatabase(cluster.url)
            db.install()
            with contextlib.closing(db.connect()) as conn:
                enqueue_many(conn, [("failover", {"n": n}) for n in range(BACKLOG)])
                conn.commit()
            ledger.acked.update(range(BACKLOG))
            pool = db.pool(THREADS + 1)
            worker = create_queue_worker(
                pool, ledger.handler, worker_threads=THREADS, polling_interval_ms=50
            )
            enqueuer, progress = Enqueuer(cluster.url, ledger, BACKLOG, rate), Progress(worker)
            try:
                worker.start()
                enqueuer.start()
                progress.start()
                for name, act in (
                    ("switchover", cluster.switchover),
                    ("primary killed", cluster.kill_leader),
                ):
                    time.sleep(STEADY_S)
                    at = time.monotonic()
                    before = progress.rate(at - 5, at)
                    act()
                    writable = time.monotonic() - at
                    progress.wait_until_back(at, before)
                    gap, back = progress.recovery(at, before)
                    events[name] = (before, writable, gap, back, enqueuer.outage(at))
                time.sleep(STEADY_S)
                enqueuer.stopping.set()
                enqueuer.join()
                deadline = time.monotonic() + 300
                while (
                    db.query("SELECT count(*) FROM proletarian.job")[0][0]
                    and time.monotonic() < deadline
                ):
                    time.sleep(0.5)
            finally:
                progress.stopping.set()
                enqueuer.stopping.set()
                worker.stop()
                pool.close()
            archived, twice_archived, waiting = _settled(db)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {
        "events": events,
        "acked": len(ledger.acked),
        "in_doubt": len(ledger.in_doubt),
        "lost": len(ledger.acked - archived),
        "run_twice": sum(1 for count in ledger.runs.values() if count > 1),
        "archived_twice": len(twice_archived),
        "waiting": waiting,
    }


def main(rate: float) -> int:
    why = patroni.missing()
    if why:
        console.print(f"[red]the failover scenario needs a Patroni cluster: {why}[/]")
        return 1
    table = Table(title="Draining through a failover (Patroni, two PostgreSQL nodes)")
    for column in (
        "replication",
        "event",
        "jobs/s before",
        "s until a primary takes writes",
        "s with none done",
        "s until half rate back",
        "s enqueues failed",
    ):
        table.add_column(column)
    totals = Table(title="Every job, after the drain")
    for column in (
        "replication",
        "enqueued (acknowledged)",
        "in doubt",
        "lost",
        "run twice",
        "archived twice",
        "left waiting",
    ):
        totals.add_column(column)
    for synchronous in (True, False):
        label = "synchronous" if synchronous else "asynchronous"
        console.print(f"{label} replication: starting a cluster")
        found = one_cluster(synchronous, rate)
        for event, (before, writable, gap, back, outage) in found["events"].items():
            back_text = f"{back:.1f}" if back is not None else "not within 120 s"
            table.add_row(
                label,
                event,
                f"{before:,.0f}",
                f"{writable:.1f}",
                f"{gap:.1f}",
                back_text,
                f"{outage:.1f}",
            )
        totals.add_row(
            label,
            *(
                f"{found[k]:,}"
                for k in ("acked", "in_doubt", "lost", "run_twice", "archived_twice", "waiting")
            ),
        )
    console.print(table)
    console.print(totals)
    return 0

"""One measurement per function; each cleans the tables first and has a deadline."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import queue
import random
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from proletarian_di import enqueue, enqueue_many

try:
    from proletarian_di._engine.options import WorkerSettings
except ImportError:  # a revision before the layout, which --compare builds
    from proletarian_di._options import WorkerSettings  # type: ignore[no-redef]

from . import plain
from .cpu import Figure, metered
from .db import ARCHIVED_JOB_TABLE, JOB_TABLE, Database
from .workers import make_worker

ROOT = Path(__file__).resolve().parent.parent

Host = tuple[Sequence[str], str]
"""Where a worker process runs: the command that puts it there (`ip netns exec NS`), and
the database's URL as seen from there."""


class BenchError(RuntimeError):
    """A measurement that could not finish (timeout, lost jobs, crashed child)."""


POLL_S = 0.01
"""How often a drain looks at its worker's count: each look wakes the process, and on a
virtual machine a wake-up costs tens of microseconds of CPU, charged to the client."""


def deadline_for(jobs: int) -> float:
    """Seconds allowed for `jobs` jobs: generous, but bounded (>= 25 jobs/s)."""
    return 30.0 + jobs / 25


def prefill(db: Database, jobs: int, groups: int = 0) -> None:
    """Empty tables, then `jobs` due no-op jobs, then fresh statistics; with `groups`, the
    jobs spread over that many group keys, one after the other (`enqueue_many`)."""
    db.clean()
    with contextlib.closing(db.connect()) as conn:
        if groups:
            for group in range(groups):
                rows = [("noop", {"n": i}) for i in range(group, jobs, groups)]
                enqueue_many(conn, rows, group_key=f"tenant-{group}", job_table=JOB_TABLE)
        else:
            for start in range(0, jobs, 5_000):
                batch = [{"n": i} for i in range(start, min(jobs, start + 5_000))]
                plain.enqueue_bulk(db, conn, batch)
        conn.commit()
    db.analyze()


def enqueue_single(db: Database, impl: str, jobs: int) -> Figure:
    """Jobs/s enqueuing one job per transaction (enqueue + commit)."""
    db.clean()
    figure = Figure(0.0, jobs)
    with contextlib.closing(plain.connect(db)) as conn, metered(db, figure):
        started = time.perf_counter()
        for i in range(jobs):
            if impl == "ours":
                enqueue(conn, "noop", {"n": i}, job_table=JOB_TABLE)
            else:
                plain.enqueue_one(db, conn, {"n": i})
            conn.commit()
        figure.rate = jobs / (time.perf_counter() - started)
    check_count(db.waiting(), jobs, "enqueued")
    return figure


def enqueue_bulk(db: Database, impl: str, jobs: int) -> Figure:
    """Jobs/s enqueuing `jobs` jobs in one call and one transaction."""
    db.clean()
    items = [("noop", {"n": i}) for i in range(jobs)]
    figure = Figure(0.0, jobs)
    with contextlib.closing(db.connect()) as conn, metered(db, figure):
        started = time.perf_counter()
        if impl == "ours":
            enqueue_many(conn, items, job_table=JOB_TABLE)
        else:
            plain.enqueue_bulk(db, conn, [payload for _, payload in items])
        conn.commit()
        figure.rate = jobs / (time.perf_counter() - started)
    check_count(db.waiting(), jobs, "enqueued")
    return figure


def enqueue_workflow(db: Database, impl: str, jobs: int) -> Figure:
    """Jobs/s enqueuing a fan-in `Workflow` of `jobs` jobs (all but one waited on by the
    last) in one `Workflow.enqueue` and one transaction."""
    from proletarian_di import Workflow

    db.clean()
    wf = Workflow("fan-in")
    tables = {"job_table": JOB_TABLE, "archived_job_table": ARCHIVED_JOB_TABLE}
    parents = [wf.add("noop", {"n": i}, **tables) for i in range(jobs - 1)]
    wf.add("noop", {"n": -1}, after=parents, when="complete", **tables)
    figure = Figure(0.0, jobs)
    with contextlib.closing(db.connect()) as conn, metered(db, figure):
        started = time.perf_counter()
        wf.enqueue(conn)
        conn.commit()
        figure.rate = jobs / (time.perf_counter() - started)
    check_count(db.waiting(), jobs, "enqueued")
    return figure


def worker_option(name: str) -> bool:
    """Whether the proletarian-di under test has the worker option `name` (`--compare` runs
    this benchmark against older revisions)."""
    return name in {field.name for field in dataclasses.fields(WorkerSettings)}


def has_dependencies() -> bool:
    """Whether the proletarian-di under test has `enqueue(depends_on=...)`."""
    from proletarian_di import EnqueueOptions

    return "depends_on" in EnqueueOptions.__annotations__


def add_callback(db: Database) -> None:
    """One more job, which waits on every job in the table (a batch's callback)."""
    with contextlib.closing(db.connect()) as conn:
        with conn.cursor() as cursor:
            cursor.execute(f"SELECT job_id FROM {JOB_TABLE}")
            ids = [
                row[0] if isinstance(row[0], uuid.UUID) else uuid.UUID(bytes=bytes(row[0]))
                for row in cursor.fetchall()
            ]
        enqueue(
            conn,
            "noop",
            {"n": -1},
            depends_on=ids,
            job_table=JOB_TABLE,
            archived_job_table=ARCHIVED_JOB_TABLE,
        )
        conn.commit()


def add_blocked(db: Database, count: int) -> None:
    """`count` jobs waiting on one parent due in a day (beside a drain, which runs none)."""
    with contextlib.closing(db.connect()) as conn:
        tables = {"job_table": JOB_TABLE, "archived_job_table": ARCHIVED_JOB_TABLE}
        later = datetime.now(timezone.utc) + timedelta(days=1)
        parent = enqueue(conn, "noop", {"n": -2}, process_at=later, **tables)
        enqueue_many(conn, [("noop", {"n": -3})] * count, depends_on=[parent], **tables)
        conn.commit()


def release_fan_out(db: Database, impl: str, dependents: int) -> Figure:
    """Dependents/s released by one parent's end: `process_next_job` of a parent that
    `dependents` jobs wait on, one transaction (the parent's run, its archive and every
    release)."""
    from proletarian_di import process_next_job

    db.clean()
    with contextlib.closing(db.connect()) as conn:
        parent = enqueue(conn, "noop", {"n": -1}, job_table=JOB_TABLE)
        for start in range(0, dependents, 5_000):
            rows = [("noop", {"n": i}) for i in range(start, min(dependents, start + 5_000))]
            enqueue_many(
                conn,
                rows,
                depends_on=[parent],
                job_table=JOB_TABLE,
                archived_job_table=ARCHIVED_JOB_TABLE,
            )
        conn.commit()
    db.analyze()
    figure = Figure(0.0, dependents)
    with metered(db, figure):
        started = time.perf_counter()
        ran = process_next_job(
            db.connect,
            lambda job_type, payload: None,
            job_table=JOB_TABLE,
            archived_job_table=ARCHIVED_JOB_TABLE,
        )
        figure.rate = dependents / (time.perf_counter() - started)
    check_count(int(ran is True), 1, "parents run")
    check_count(db.waiting(), dependents, "dependents waiting")
    return figure


def drain(
    db: Database,
    impl: str,
    threads: int,
    jobs: int,
    interval: float,
    batch_size: int = 1,
    lease_ms: int | None = None,
    groups: int = 0,
    callback: bool = False,
    blocked: int = 0,
    **options: Any,
) -> Figure:
    """Jobs/s for one in-process worker with `threads` threads emptying `jobs` jobs (in lease
    mode with `lease_ms`; over `groups` group keys; with `callback`, one more job waiting on
    all of them; beside `blocked` jobs that wait on a parent due later; other worker `options`
    as given). The worker's start and stop are outside the CPU figures."""
    prefill(db, jobs, groups)
    if blocked:
        add_blocked(db, blocked)
    if callback:
        add_callback(db)
        jobs += 1
    if batch_size > 1:
        options["batch_size"] = batch_size
    if lease_ms is not None:
        options["lease_ms"] = lease_ms
    worker = make_worker(impl, db, threads, interval, **options)
    figure = Figure(0.0, jobs)
    try:
        limit = time.perf_counter() + deadline_for(jobs)
        with metered(db, figure):
            started = time.perf_counter()
            worker.start()
            while worker.done() < jobs:
                if time.perf_counter() > limit:
                    raise BenchError(f"drain timed out after {worker.done()}/{jobs} jobs")
                time.sleep(POLL_S)
            figure.rate = jobs / (time.perf_counter() - started)
    finally:
        worker.stop()
    check_count(db.waiting(), blocked + 1 if blocked else 0, "left in the job table")
    return figure


def drain_rate_limited(
    db: Database,
    impl: str,
    threads: int,
    jobs: int,
    interval: float,
    limit: int,
    period_ms: int = 1_000,
    lease_ms: int | None = None,
) -> Figure:
    """Starts a second of one in-process worker of `threads` threads emptying `jobs` jobs
    under `rate_limit=RateLimit(limit, period_ms)` (in lease mode with `lease_ms`).

    The limit's slots start free, so the first `limit` jobs start at once; the rate is
    that of the starts after them, from the first window's last start to the drain's last
    one (handler clock): at most `limit` a period, and ideally just under. CPU per job is
    over the whole drain, waits included. Needs a proletarian-di with `RateLimit` (see
    `worker_option`: `--compare` runs older revisions too)."""
    from proletarian_di import RateLimit  # a revision --compare builds may have none

    if jobs <= limit:
        raise BenchError(f"a rate-limited drain needs more than {limit} jobs, got {jobs}")
    prefill(db, jobs)
    starts: list[float] = []

    def handler(job_type: str, payload: Any) -> None:
        starts.append(time.perf_counter())  # one append: atomic under the GIL

    options: dict[str, Any] = {"rate_limit": RateLimit(limit, period_ms)}
    if lease_ms is not None:
        options["lease_ms"] = lease_ms
    worker = make_worker(impl, db, threads, interval, handler, **options)
    figure = Figure(0.0, jobs)
    try:
        deadline = time.perf_counter() + deadline_for(jobs) + jobs / limit * period_ms / 1000
        with metered(db, figure):
            worker.start()
            while worker.done() < jobs:
                if time.perf_counter() > deadline:
                    raise BenchError(f"drain timed out after {worker.done()}/{jobs} jobs")
                time.sleep(POLL_S)
    finally:
        worker.stop()
    check_count(db.waiting(), 0, "left in the job table")
    ordered = sorted(starts)
    if len(ordered) < jobs:
        raise BenchError(f"{len(ordered)} handler starts for {jobs} jobs")
    figure.rate = (jobs - limit) / (ordered[jobs - 1] - ordered[limit - 1])
    return figure


class Child:
    """A worker process (`python -m bench.child`) and its JSON replies."""

    def __init__(
        self,
        db: Database,
        impl: str,
        threads: int,
        interval: float,
        host: Host | None = None,
    ) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path[1:]])}
        prefix, url = host if host is not None else ((), db.url)
        self.proc = subprocess.Popen(
            [
                *prefix,
                sys.executable,
                "-m",
                "bench.child",
                f"--kind={db.name}",
                f"--url={url}",
                f"--impl={impl}",
                f"--threads={threads}",
                f"--interval-ms={round(interval * 1000)}",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=env,
        )
        self.replies: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with contextlib.suppress(ValueError):
                self.replies.put(json.loads(line))
        self.replies.put({"event": "exited"})

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def expect(self, event: str, timeout: float = 60) -> dict[str, Any]:
        try:
            reply = self.replies.get(timeout=timeout)
        except queue.Empty:
            raise BenchError(f"worker process sent no {event!r} within {timeout:.0f} s") from None
        if reply.get("event") != event:
            raise BenchError(f"worker process: expected {event!r}, got {reply}")
        return reply

    def ask(self, command: str, event: str, timeout: float = 30) -> dict[str, Any]:
        self.send(command)
        return self.expect(event, timeout)

    def close(self) -> dict[str, Any] | None:
        """Stop the worker; kill the process if it does not exit in time."""
        reply = None
        try:
            if self.proc.poll() is None:
                reply = self.ask("stop", "stopped", timeout=20)
            self.proc.wait(10)
        except (BenchError, OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait(10)
        return reply


def drain_processes(
    db: Database,
    impl: str,
    processes: int,
    threads: int,
    jobs: int,
    interval: float,
    hosts: Sequence[Host] = (),
) -> Figure:
    """Jobs/s for `processes` worker processes of `threads` threads each (on `hosts`, one
    each, where given); the client's CPU is the children's own, from their `go` to the last
    job."""
    prefill(db, jobs)
    places: list[Host | None] = [*hosts] if hosts else [None] * processes
    children = [Child(db, impl, threads, interval, host) for host in places[:processes]]
    figure = Figure(0.0, jobs)
    try:
        for child in children:
            child.expect("ready")
        limit = time.perf_counter() + deadline_for(jobs)
        with metered(db, figure):
            started = time.perf_counter()
            for child in children:
                child.send("go")
            begun = sum(child.expect("started")["cpu"] for child in children)
            while True:
                replies = [child.ask("rss", "rss") for child in children]
                if sum(reply["done"] for reply in replies) >= jobs:
                    break
                if time.perf_counter() > limit:
                    done = sum(reply["done"] for reply in replies)
                    raise BenchError(f"drain timed out after {done}/{jobs} jobs")
                time.sleep(0.01)
            figure.rate = jobs / (time.perf_counter() - started)
        figure.client = sum(reply["cpu"] for reply in replies) - begun
    finally:
        for child in children:
            child.close()
    check_count(db.waiting(), 0, "left in the job table")
    return figure


def latency(db: Database, impl: str, samples: int, interval: float) -> list[float]:
    """Milliseconds from the enqueue's commit to the handler's start, idle worker.

    Jobs are enqueued one at a time, each after the previous one ran and a
    random pause, so they arrive at a random point of the polling cycle.
    The plain loop on PostgreSQL listens (LISTEN/NOTIFY) rather than polls.
    """
    db.clean()
    begun: dict[int, float] = {}
    ran = [threading.Event() for _ in range(samples)]

    def handler(job_type: str, payload: Any) -> None:
        begun[payload["i"]] = time.perf_counter()
        ran[payload["i"]].set()

    listening = impl == "plain" and db.name == "postgresql"
    if listening:
        worker: Any = plain.ListeningWorker(db, interval, handler)
    else:
        worker = make_worker(impl, db, 1, interval, handler)
    waits: list[float] = []
    with contextlib.closing(plain.connect(db)) as conn:
        worker.start()
        try:
            time.sleep(interval * 2)
            for i in range(samples):
                time.sleep(random.uniform(0.5, 1.5) * interval)
                if impl == "ours":
                    enqueue(conn, "latency", {"i": i}, job_table=JOB_TABLE)
                else:
                    plain.enqueue_one(db, conn, {"i": i})
                    if listening:
                        conn.execute(f"NOTIFY {plain.CHANNEL}")
                conn.commit()
                committed = time.perf_counter()
                if not ran[i].wait(timeout=10 + 20 * interval):
                    raise BenchError(f"job {i} did not start within {10 + 20 * interval:.0f} s")
                waits.append(max(0.0, begun[i] - committed) * 1000)
        finally:
            worker.stop()
    return waits


def idle_queries(db: Database, impl: str, threads: int, interval: float, seconds: float) -> float:
    """Statements per second the server runs for an idle worker with `threads` threads, from
    its own counters (PostgreSQL: transactions of the database, which its statistics publish
    about once a second; MySQL: `Questions`), less the two reads of the counter."""
    db.clean()
    worker = make_worker(impl, db, threads, interval)
    with contextlib.closing(db.connect()) as conn:
        worker.start()
        try:
            time.sleep(max(2.0, interval * 5))  # started, and settled into idling
            before = _statements(db, conn)
            time.sleep(seconds)
            after = _statements(db, conn)
        finally:
            worker.stop()
    return max(0, after - before - 1) / seconds


def _statements(db: Database, conn: Any) -> int:
    if db.name == "postgresql":
        sql = (
            "SELECT xact_commit + xact_rollback FROM pg_stat_database "
            "WHERE datname = current_database()"
        )
    else:
        sql = "SHOW GLOBAL STATUS LIKE 'Questions'"
    with conn.cursor() as cursor:
        cursor.execute(sql)
        value = int(cursor.fetchone()[-1])
    conn.rollback()
    return value


def memory(db: Database, impl: str, jobs: int, threads: int, interval: float) -> tuple[int, int]:
    """A worker process's RSS (bytes) right after start and after running `jobs` jobs."""
    prefill(db, jobs)
    child = Child(db, impl, threads, interval)
    try:
        child.expect("ready")
        start_rss = child.ask("go", "started")["rss"]
        limit = time.perf_counter() + deadline_for(jobs)
        while True:
            reply = child.ask("rss", "rss")
            if reply["done"] >= jobs:
                break
            if time.perf_counter() > limit:
                raise BenchError(f"memory run timed out after {reply['done']}/{jobs} jobs")
            time.sleep(0.25)
        end_rss = child.ask("rss", "rss")["rss"]
    finally:
        child.close()
    return start_rss, end_rss


def check_count(actual: int, expected: int, what: str) -> None:
    if actual != expected:
        raise BenchError(f"{actual} jobs {what}, expected {expected}")

"""Soak test: push many jobs through several worker processes and count what happened.

    .venv/bin/python bench/soak.py                       # 100,000 jobs on PostgreSQL
    .venv/bin/python bench/soak.py --jobs 5000 --url mysql://root@127.0.0.1:3306/test

Workers run in `--processes` processes with `--threads` threads each; handlers fail
at random (`--failure-rate`) and are retried (3 retries). Jobs are enqueued in
batches while the workers run, with at most `--max-backlog` jobs waiting. The jobs
live in their own tables (proletarian_soak.*), emptied at the start.

Prints: jobs lost (must be 0), jobs run twice (the same attempt of a job run more
than once), p50/p99 latency from enqueue to finish, peak database connections of the
run, and throughput. Latency includes the time a job waits in the backlog, so under
saturation it is about max-backlog / throughput. Exits 1 if any job was lost or left unarchived.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import multiprocessing
import os
import random
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proletarian_di import RetrySpec, create_queue_worker, enqueue_many
from proletarian_di.mysql import MySQLDataSource, mask, parse_mysql_url
from proletarian_di.schema import install_schema

JOB = "proletarian_soak.job"
ARCHIVE = "proletarian_soak.archived_job"
APP = "proletarian-soak"
DEFAULT_URL = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")


def is_mysql(url: str) -> bool:
    return url.startswith(("mysql://", "mysql+pymysql://", "mariadb://"))


def connect(url: str) -> Any:
    """A plain connection for enqueueing and measuring, marked as part of the run."""
    if is_mysql(url):
        import pymysql

        options = {**parse_mysql_url(url), "database": "proletarian_soak"}
        return pymysql.connect(**options, autocommit=False, charset="utf8mb4")
    import psycopg

    return psycopg.connect(url, application_name=APP)


def admin_connect(url: str) -> Any:
    if is_mysql(url):
        import pymysql

        return pymysql.connect(**parse_mysql_url(url), autocommit=False)
    import psycopg

    return psycopg.connect(url)


def pool(url: str, size: int) -> Any:
    if is_mysql(url):
        options = {**parse_mysql_url(url), "database": "proletarian_soak"}
        return MySQLDataSource(max_connections=size, min_cached=size, **options)
    from psycopg_pool import ConnectionPool

    return ConnectionPool(
        url, min_size=size, max_size=size, kwargs={"application_name": APP}, open=True
    )


def query(conn: Any, sql: str) -> list[tuple[Any, ...]]:
    cursor = conn.cursor()
    cursor.execute(sql)
    rows = list(cursor.fetchall()) if cursor.description else []
    conn.commit()
    return rows


def worker_process(
    url: str, threads: int, failure_rate: float, out: str, stop: Any, ready: Any, seed: int
) -> None:
    """One worker process: run jobs until `stop` is set, then write its runs to `out`."""
    rng = random.Random(seed)
    runs: list[tuple[str, int]] = []
    events: collections.Counter[str] = collections.Counter()

    def handle(job: Any) -> None:
        runs.append((job.job_id.hex, job.attempts))
        if rng.random() < failure_rate:
            raise RuntimeError("random failure")

    def log(event: str, data: dict[str, Any]) -> None:
        if event in ("polling_error", "job_abandoned", "failed_job_fn_error", "log_error"):
            events[event] += 1

    source = pool(url, threads)
    worker = create_queue_worker(
        source,
        handle,
        handler_fn_mode="advanced",
        worker_threads=threads,
        polling_interval_ms=20,
        retry_strategy_fn=lambda job, exc: RetrySpec(retries=3, delays=[10, 50]),
        job_table=JOB,
        archived_job_table=ARCHIVE,
        log=log,
    )
    worker.start()
    ready.set()
    stop.wait()
    worker.stop()
    source.close()
    with open(out, "w") as f:
        f.write(f"# {dict(events)} {worker.summary()}\n")
        f.writelines(f"{job_id} {attempt}\n" for job_id, attempt in runs)


class ConnectionSampler(threading.Thread):
    """Samples the number of this run's database connections; keeps the peak."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.peak, self.done = url, 0, threading.Event()
        if is_mysql(url):
            self.sql = (
                "SELECT COUNT(*) FROM information_schema.processlist WHERE db = 'proletarian_soak'"
            )
        else:
            self.sql = f"SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = '{APP}'"

    def run(self) -> None:
        with contextlib.closing(admin_connect(self.url)) as conn:
            while not self.done.wait(0.1):
                self.peak = max(self.peak, int(query(conn, self.sql)[0][0]))


def percentile(sorted_values: list[float], p: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(p / 100 * len(sorted_values)) - 1))
    return sorted_values[index]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--failure-rate", type=float, default=0.05)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--max-backlog", type=int, default=2_000)
    parser.add_argument("--timeout", type=float, default=1_800, help="seconds to wait for all")
    parser.add_argument("--url", default=DEFAULT_URL)
    args = parser.parse_args()
    url = args.url
    mysql = is_mysql(url)

    run_lock = admin_connect(url)
    lock_sql = (
        "SELECT GET_LOCK('proletarian_soak', 0)" if mysql else "SELECT pg_try_advisory_lock(4242)"
    )
    if not query(run_lock, lock_sql)[0][0]:
        print("another soak run is using proletarian_soak.*; wait for it to finish")
        return 2
    with contextlib.closing(admin_connect(url)) as conn:
        install_schema(conn, JOB, ARCHIVE)
        query(conn, f"DELETE FROM {JOB}")
        query(conn, f"DELETE FROM {ARCHIVE}")

    print(
        f"soak: {args.jobs} jobs, {args.processes} processes x {args.threads} threads, "
        f"failure rate {args.failure_rate:.0%} (3 retries), on {mask(url)}",
        flush=True,
    )
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    outdir = Path(os.environ.get("TMPDIR", "/tmp")) / f"proletarian-soak-{uuid.uuid4().hex[:8]}"
    outdir.mkdir()
    processes, readies = [], []
    for n in range(args.processes):
        ready = context.Event()
        process = context.Process(
            target=worker_process,
            args=(url, args.threads, args.failure_rate, str(outdir / f"{n}.runs"), stop, ready, n),
        )
        process.start()
        processes.append(process)
        readies.append(ready)
    for ready in readies:
        ready.wait(60)
    sampler = ConnectionSampler(url)
    sampler.start()

    enqueued: set[str] = set()
    started = time.monotonic()
    deadline = started + args.timeout
    with contextlib.closing(connect(url)) as conn:
        while len(enqueued) < args.jobs and time.monotonic() < deadline:
            if int(query(conn, f"SELECT COUNT(*) FROM {JOB}")[0][0]) > args.max_backlog:
                time.sleep(0.05)
                continue
            count = min(args.batch, args.jobs - len(enqueued))
            base = len(enqueued)
            ids = enqueue_many(
                conn, [("soak", {"seq": base + i}) for i in range(count)], job_table=JOB
            )
            conn.commit()
            enqueued.update(job_id.hex for job_id in ids)
        enqueue_seconds = time.monotonic() - started
        while time.monotonic() < deadline:
            archived_count = int(query(conn, f"SELECT COUNT(*) FROM {ARCHIVE}")[0][0])
            if archived_count >= len(enqueued):
                break
            time.sleep(0.2)
        elapsed = time.monotonic() - started
        id_sql = "LOWER(HEX(job_id))" if mysql else "job_id"
        archived = {
            (value if isinstance(value, str) else value.hex): (status, attempts)
            for value, status, attempts in query(
                conn, f"SELECT {id_sql}, status, attempts FROM {ARCHIVE}"
            )
        }
        waiting = int(query(conn, f"SELECT COUNT(*) FROM {JOB}")[0][0])
        latency_sql = (
            f"SELECT TIMESTAMPDIFF(MICROSECOND, enqueued_at, finished_at) / 1000 FROM {ARCHIVE}"
            if mysql
            else f"SELECT EXTRACT(EPOCH FROM finished_at - enqueued_at) * 1000 FROM {ARCHIVE}"
        )
        latencies = sorted(float(row[0]) for row in query(conn, latency_sql))

    stop.set()
    for process in processes:
        process.join(120)
    sampler.done.set()
    sampler.join(5)

    runs: collections.Counter[tuple[str, int]] = collections.Counter()
    notes = []
    for path in sorted(outdir.glob("*.runs")):
        with open(path) as f:
            notes.append(f.readline().strip())
            for line in f:
                job_id, attempt = line.split()
                runs[(job_id, int(attempt))] += 1
        path.unlink()
    outdir.rmdir()

    run_lock.close()
    lost = len(enqueued - set(archived))
    run_twice = len({job_id for (job_id, _), n in runs.items() if n > 1})
    statuses = collections.Counter(status for status, _ in archived.values())
    retried = sum(1 for _, attempts in archived.values() if attempts > 1)
    print(f"jobs enqueued:        {len(enqueued)} (in {enqueue_seconds:.1f} s)")
    print(f"jobs archived:        {len(archived)} {dict(statuses)}; still waiting: {waiting}")
    print(f"jobs lost:            {lost}")
    print(f"jobs run twice:       {run_twice} (same attempt of a job run more than once)")
    print(f"handler runs:         {sum(runs.values())} ({retried} jobs needed a retry)")
    print(
        f"latency enqueue->end: p50 {percentile(latencies, 50):.1f} ms, "
        f"p99 {percentile(latencies, 99):.1f} ms, max {latencies[-1] if latencies else 0:.1f} ms"
    )
    print(
        f"peak DB connections:  {sampler.peak} "
        f"(expected {args.processes * args.threads} worker + 1 enqueuer)"
    )
    print(f"throughput:           {len(archived) / elapsed:.0f} jobs/s ({elapsed:.1f} s in all)")
    for note in notes:
        print(f"worker process:       {note.lstrip('# ')}")
    return 1 if lost or waiting or len(enqueued) < args.jobs else 0


if __name__ == "__main__":
    sys.exit(main())

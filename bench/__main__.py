"""`python -m bench`: proletarian-di against a plain driver loop, on PostgreSQL and MariaDB.

Prints one table of medians over several runs; see bench/README.md.
"""

from __future__ import annotations

import _thread
import argparse
import contextlib
import functools
import os
import platform
import statistics
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from proletarian_di.embedded import postgres_url
from proletarian_di.testing import mysql_unreachable_reason

from . import (
    big,
    bulk,
    compare,
    dashboard,
    django_tasks,
    horizon,
    indexes,
    measure,
    peers,
    pgbench,
)
from .cpu import Figure
from .db import Database, MySQL, Postgres

DEFAULT_MYSQL_URL = "mysql://root@127.0.0.1:3306/test"
DRAIN_THREADS = (1, 4, 8)
BATCH_SIZE = 10
LEASE_MS = 30_000  # lease mode: claim and outcome in two transactions, a heartbeat between
MAX_RUNNING = 4  # as many running slots as threads: the cap's own cost, never its waiting
RATE_LIMIT, RATE_PERIOD_MS = 500, 1_000  # rate_limit: far below a 4-thread drain's pace
RATE_ROWS = ("drain_rated", "rated_lease")
BLOCKED = 1_000  # drain_beside_blocked: jobs waiting on a parent due later, beside the drain
FAN_IN = 1_000  # drain_fan_in: the parents of one callback (`depends_on`)
FAN_OUT = 10_000  # fan_out: the dependents one parent's end releases
WORKFLOW_JOBS = 10_000  # workflow_enqueue: a fan-in Workflow of this many jobs
FAIR_GROUPS = 10  # fair=True: the jobs spread over this many group keys
FAIR_RATE_LIMIT = 1_000  # by group key, a second: far above a fair drain's pace per key
PROCESS_COUNTS, PROCESS_THREADS = (1, 2, 4), 4
"""drain_NxT rows: N worker processes of T threads each, beside pgbench at N times T clients."""
DRAIN_INTERVAL = 0.01
LATENCY_INTERVAL = 0.1
MEMORY_THREADS = 4
IDLE_THREADS = 8
IMPLS = ("ours", "plain")
SLOW_PEER_JOBS = 3_000  # procrastinate runs about 200 jobs/s: its drains take fewer jobs

console = Console(stderr=True, highlight=False)


class Results:
    """Values per (database, row, column), with the errors met on the way."""

    def __init__(self) -> None:
        self.values: dict[tuple[str, str, str], list[float]] = defaultdict(list)
        self.errors: list[str] = []

    def record(
        self, db: Database, row: str, column: str, fn: Callable[..., Any], *args: Any
    ) -> Any:
        """Run `fn(*args)`, keep its number, and note (not raise) its failure."""
        started = time.perf_counter()
        try:
            value = fn(*args)
        except measure.BenchError as exc:
            self.errors.append(f"{db.label} {row} {column}: {exc}")
            console.print(f"  [red]{row} {column}: {exc}[/]")
            return None
        except Exception as exc:
            self.errors.append(f"{db.label} {row} {column}: {type(exc).__name__}: {exc}")
            console.print(f"  [red]{row} {column}: {type(exc).__name__}: {exc}[/]")
            return None
        cpu = ""
        if isinstance(value, Figure):
            for side in ("client", "server"):
                per_job = value.per_job(getattr(value, side))
                if per_job is not None:
                    self.values[(db.name, row, f"{column}/{side}")].append(per_job)
                    cpu += f" {side} {per_job:,.0f}"
            value = value.rate
            cpu = f"  µs/job:{cpu}" if cpu else ""
        if isinstance(value, (int, float)):
            self.values[(db.name, row, column)].append(float(value))
            console.print(
                f"  {row:<14} {column:<7} {fmt(row, value):>9}{cpu}  "
                f"({time.perf_counter() - started:.1f} s)"
            )
        return value

    def median(self, db: Database, row: str, column: str) -> float | None:
        values = self.values.get((db.name, row, column))
        return statistics.median(values) if values else None


def fmt(row: str, value: float | None) -> str:
    if value is None:
        return "—"
    if row.startswith("latency"):
        return f"{value:.1f}"
    if row.startswith("rss"):
        return f"{value / 2**20:.1f}"
    return f"{value:,.0f}"


def peer_run(db: Database, args: argparse.Namespace, results: Results) -> None:
    """The peers' bulk enqueue and drains on PostgreSQL (their defaults, their tables)."""
    for peer in args.peers:
        results.record(db, "enqueue_bulk", peer, peers.enqueue_bulk, db, peer, args.bulk)
        jobs = min(args.jobs, SLOW_PEER_JOBS) if peer == "procrastinate" else args.jobs
        for threads in DRAIN_THREADS:
            results.record(db, f"drain_{threads}", peer, peers.drain, db, peer, threads, jobs)
        peers.clean(db, peer)


def throughput_run(db: Database, args: argparse.Namespace, results: Results, run: int) -> None:
    """One run of every throughput measurement on `db`, both contenders."""
    impls = IMPLS if run % 2 == 0 else IMPLS[::-1]
    has_pgbench = db.name == "postgresql" and pgbench.executable() is not None
    if db.name == "postgresql":
        peer_run(db, args, results)
    for impl in impls:
        results.record(db, "enqueue_1", impl, measure.enqueue_single, db, impl, args.enqueue_jobs)
    if has_pgbench:
        results.record(db, "enqueue_1", "pgbench", pgbench.enqueue_single, db, args.enqueue_jobs)
    for impl in impls:
        results.record(db, "enqueue_bulk", impl, measure.enqueue_bulk, db, impl, args.bulk)
    for threads in DRAIN_THREADS:
        row = f"drain_{threads}"
        for impl in impls:
            results.record(
                db,
                row,
                impl,
                measure.drain,
                db,
                impl,
                threads,
                args.jobs,
                DRAIN_INTERVAL,
            )
        if has_pgbench:
            results.record(db, row, "pgbench", pgbench.drain, db, threads, args.jobs)
    results.record(
        db,
        "drain_batch",
        "ours",
        measure.drain,
        db,
        "ours",
        4,
        args.jobs,
        DRAIN_INTERVAL,
        BATCH_SIZE,
    )
    results.record(
        db,
        "drain_lease",
        "ours",
        measure.drain,
        db,
        "ours",
        4,
        args.jobs,
        DRAIN_INTERVAL,
        1,
        LEASE_MS,
    )
    results.record(
        db,
        "drain_capped",
        "ours",
        functools.partial(measure.drain, max_running=MAX_RUNNING),
        db,
        "ours",
        4,
        args.jobs,
        DRAIN_INTERVAL,
    )
    if measure.worker_option("fair"):
        results.record(
            db,
            "drain_fair",
            "ours",
            functools.partial(measure.drain, fair=True, groups=FAIR_GROUPS),
            db,
            "ours",
            4,
            args.jobs,
            DRAIN_INTERVAL,
        )
    if measure.worker_option("rate_limit") and measure.worker_option("fair"):
        from proletarian_di import RateLimit  # a revision --compare builds may have none

        results.record(
            db,
            "fair_rated",
            "ours",
            functools.partial(
                measure.drain,
                fair=True,
                groups=FAIR_GROUPS,
                rate_limit=RateLimit(FAIR_RATE_LIMIT, 1_000, by="group_key"),
            ),
            db,
            "ours",
            4,
            args.jobs,
            DRAIN_INTERVAL,
        )
    if measure.has_dependencies():
        results.record(
            db, "workflow_enqueue", "ours", measure.enqueue_workflow, db, "ours", WORKFLOW_JOBS
        )
        results.record(
            db,
            "drain_fan_in",
            "ours",
            functools.partial(measure.drain, callback=True),
            db,
            "ours",
            4,
            FAN_IN,
            DRAIN_INTERVAL,
        )
        results.record(
            db,
            "drain_beside_blocked",
            "ours",
            functools.partial(measure.drain, blocked=BLOCKED),
            db,
            "ours",
            4,
            args.jobs,
            DRAIN_INTERVAL,
        )
    if measure.has_dependencies():
        results.record(db, "fan_out", "ours", measure.release_fan_out, db, "ours", FAN_OUT)
    if measure.worker_option("rate_limit"):
        for row, lease_ms in zip(RATE_ROWS, (None, LEASE_MS), strict=True):
            results.record(
                db,
                row,
                "ours",
                functools.partial(measure.drain_rate_limited, lease_ms=lease_ms),
                db,
                "ours",
                4,
                args.rate_jobs,
                DRAIN_INTERVAL,
                RATE_LIMIT,
                RATE_PERIOD_MS,
            )
    if measure.worker_option("share_cpu"):
        results.record(
            db,
            "drain_unshared",
            "ours",
            functools.partial(measure.drain, share_cpu=False),
            db,
            "ours",
            4,
            args.jobs,
            DRAIN_INTERVAL,
        )
    for processes in PROCESS_COUNTS:
        row = f"drain_{processes}x{PROCESS_THREADS}"
        for impl in impls:
            results.record(
                db,
                row,
                impl,
                measure.drain_processes,
                db,
                impl,
                processes,
                PROCESS_THREADS,
                args.jobs,
                DRAIN_INTERVAL,
            )
        if has_pgbench:
            clients = processes * PROCESS_THREADS
            results.record(db, row, "pgbench", pgbench.drain, db, clients, args.jobs)


def latency_and_memory(db: Database, args: argparse.Namespace, results: Results) -> None:
    for impl in IMPLS:
        waits = results.record(
            db,
            "latency_raw",
            impl,
            measure.latency,
            db,
            impl,
            args.latency_samples,
            LATENCY_INTERVAL,
        )
        if waits:
            results.values[(db.name, "latency_p50", impl)].append(percentile(waits, 50))
            results.values[(db.name, "latency_p99", impl)].append(percentile(waits, 99))
            console.print(
                f"  latency        {impl:<7} p50 {percentile(waits, 50):.1f} ms, "
                f"p99 {percentile(waits, 99):.1f} ms"
            )
    for impl in IMPLS:
        results.record(
            db,
            "idle_queries",
            impl,
            measure.idle_queries,
            db,
            impl,
            IDLE_THREADS,
            LATENCY_INTERVAL,
            args.idle_seconds,
        )
    for impl in IMPLS:
        sizes = results.record(
            db,
            "rss_raw",
            impl,
            measure.memory,
            db,
            impl,
            args.memory_jobs,
            MEMORY_THREADS,
            DRAIN_INTERVAL,
        )
        if sizes:
            results.values[(db.name, "rss_start", impl)].append(sizes[0])
            results.values[(db.name, "rss_end", impl)].append(sizes[1])
            console.print(
                f"  memory         {impl:<7} {sizes[0] / 2**20:.1f} MB -> {sizes[1] / 2**20:.1f} MB"
            )
    db.clean()


def warm_up(db: Database) -> None:
    """Unrecorded small runs, so the first figure does not pay for cold caches."""
    for impl in IMPLS:
        measure.enqueue_single(db, impl, 100)
        measure.drain(db, impl, 2, 200, DRAIN_INTERVAL)


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * len(ordered) + 0.5) - 1))
    return ordered[index]


def rows(args: argparse.Namespace) -> list[tuple[str, str]]:
    return [
        ("enqueue_1", "enqueue, 1 job per transaction"),
        ("enqueue_bulk", f"enqueue_many, {args.bulk:,} in one call"),
        *[(f"drain_{t}", f"drain, {t} thread{'s' if t > 1 else ''}") for t in DRAIN_THREADS],
        ("drain_batch", f"drain, 4 threads, batch_size={BATCH_SIZE} (opt-in)"),
        ("drain_lease", f"drain, 4 threads, lease mode (lease_ms={LEASE_MS:,}, opt-in)"),
        ("drain_capped", f"drain, 4 threads, max_running={MAX_RUNNING} (opt-in)"),
        ("drain_fair", f"drain, 4 threads, fair=True over {FAIR_GROUPS} group keys (opt-in)"),
        (
            "fair_rated",
            f"the same, rate_limit {FAIR_RATE_LIMIT}/s by group key, never reached (opt-in)",
        ),
        ("workflow_enqueue", f"Workflow.enqueue, a fan-in of {WORKFLOW_JOBS:,} jobs"),
        ("drain_fan_in", f"drain of {FAN_IN:,} jobs and a callback waiting on them all, 4 threads"),
        ("drain_beside_blocked", f"drain, 4 threads, beside {BLOCKED:,} blocked jobs"),
        ("fan_out", f"one parent's end releasing {FAN_OUT:,} dependents: dependents/s"),
        ("drain_rated", f"drain of {args.rate_jobs:,}, 4 threads, {rate_limit()} (opt-in)"),
        ("rated_lease", f"drain of {args.rate_jobs:,}, 4 threads, {rate_limit()}, lease mode"),
        ("drain_unshared", "drain, 4 threads, share_cpu=False"),
        *(
            (
                f"drain_{n}x{PROCESS_THREADS}",
                f"drain, {n} process{'es' * (n > 1)} \N{MULTIPLICATION SIGN} "
                f"{PROCESS_THREADS} threads (pgbench: {n * PROCESS_THREADS} clients)",
            )
            for n in PROCESS_COUNTS
        ),
        ("latency_p50", f"pickup latency p50 (ms), polling {LATENCY_INTERVAL * 1000:.0f} ms"),
        ("latency_p99", "pickup latency p99 (ms)"),
        (
            "idle_queries",
            f"idle worker, {IDLE_THREADS} threads: statements/s (polling "
            f"{LATENCY_INTERVAL * 1000:.0f} ms)",
        ),
        ("rss_start", f"worker RSS at start (MB), {MEMORY_THREADS} threads"),
        ("rss_end", f"worker RSS after {args.memory_jobs:,} jobs (MB)"),
    ]


def rate_limit() -> str:
    period = "s" if RATE_PERIOD_MS == 1000 else f"{RATE_PERIOD_MS:,} ms"
    return f"rate_limit {RATE_LIMIT:,}/{period}"


def against_limit(dbs: list[Database], results: Results) -> str | None:
    """The rate-limited rows against their limit, or None where they did not run."""
    per_s = RATE_LIMIT * 1000 / RATE_PERIOD_MS
    parts = []
    for db in dbs:
        figures = [results.median(db, row, "ours") for row in RATE_ROWS]
        if any(figure is not None for figure in figures):
            held, lease = (f"{f / per_s:.2f}" if f is not None else "—" for f in figures)
            parts.append(f"{db.label} {held} (lease mode {lease})")
    if not parts:
        return None
    return (
        f"{rate_limit()} rows: handler starts a second after the first {RATE_LIMIT:,} (the "
        "limit's slots start free), against the limit (ideal: just under 1.00): "
        + ", ".join(parts)
        + "."
    )


def table(dbs: list[Database], args: argparse.Namespace, results: Results) -> Table:
    title = (
        f"proletarian-di benchmark — medians of {args.runs} run{'s' if args.runs > 1 else ''}, "
        f"{args.jobs:,} no-op jobs per drain; jobs/s unless stated"
    )
    out = Table(title=title, title_justify="left")
    out.add_column("measurement", no_wrap=True)
    for db in dbs:
        driver = "psycopg" if db.name == "postgresql" else "PyMySQL"
        out.add_column(f"{db.label}\nproletarian-di", justify="right", no_wrap=True)
        out.add_column(f"{db.label}\nplain {driver}", justify="right", no_wrap=True)
        out.add_column("ratio", justify="right")
        if db.name == "postgresql" and pgbench.executable():
            out.add_column(f"{db.label}\npgbench", justify="right")
        if db.name == "postgresql":
            for peer in args.peers:
                out.add_column(f"{db.label}\n{peer}", justify="right")
    for key, label in rows(args):
        cells = [label]
        for db in dbs:
            ours = results.median(db, key, "ours")
            base = results.median(db, key, "plain")
            ratio = f"{ours / base:.2f}" if ours is not None and base else "—"
            cells += [fmt(key, ours), fmt(key, base), ratio]
            if db.name == "postgresql" and pgbench.executable():
                cells.append(fmt(key, results.median(db, key, "pgbench")))
            if db.name == "postgresql":
                for peer in args.peers:
                    # pgqueuer's drains claim batches of 10 by default: the batch row's peer.
                    source = "drain_4" if key == "drain_batch" and peer == "pgqueuer" else key
                    cells.append(fmt(key, results.median(db, source, peer)))
        out.add_row(*cells)
    return out


CPU_COLUMNS = ("ours", "plain", "pgbench")


def cpu_table(dbs: list[Database], args: argparse.Namespace, results: Results) -> Table:
    """Client and server CPU per job, where they were measured (rows of jobs, not latency)."""
    out = Table(
        title="CPU per job (µs), client / server: medians; the client is the Python process "
        "(pgbench's own process for pgbench), the server its processes",
        title_justify="left",
    )
    out.add_column("measurement", no_wrap=True)
    shown: list[tuple[Database, str]] = []
    for db in dbs:
        for column in CPU_COLUMNS:
            if any(key[0] == db.name and key[2] == f"{column}/client" for key in results.values):
                shown.append((db, column))
                name = "proletarian-di" if column == "ours" else column
                out.add_column(f"{db.label}\n{name}", justify="right", no_wrap=True)
    for key, label in rows(args):
        cells = [label]
        for db, column in shown:
            client = results.median(db, key, f"{column}/client")
            server = results.median(db, key, f"{column}/server")
            cells.append(f"{cpu(client)} / {cpu(server)}" if client is not None else "")
        if any(cells[1:]):
            out.add_row(*cells)
    return out


def cpu(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def machine(dbs: list[Database]) -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as file:
            for line in file:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    parts = [f"{os.cpu_count()} CPUs ({cpu})", f"Python {platform.python_version()}"]
    for db in dbs:
        try:
            parts.append(f"{db.label} {db.version()}")
        except Exception as exc:
            parts.append(f"{db.label} ? ({exc})")
    return ", ".join(parts)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Throughput, latency and memory of proletarian-di against a plain driver loop.",
    )
    parser.add_argument(
        "--database-url", help="PostgreSQL URL (default: $DATABASE_URL, else embedded)"
    )
    parser.add_argument(
        "--mysql-url",
        default=os.environ.get("MYSQL_URL", DEFAULT_MYSQL_URL),
        help=f"MySQL/MariaDB URL, skipped if unreachable (default {DEFAULT_MYSQL_URL}); '' skips",
    )
    parser.add_argument(
        "--quick", action="store_true", help="fewer jobs and runs (about 2 minutes)"
    )
    parser.add_argument("--runs", type=int, help="runs per throughput figure (default 3, quick 1)")
    parser.add_argument("--jobs", type=int, help="jobs per drain (default 20,000, quick 1,000)")
    parser.add_argument("--no-peers", action="store_true", help="skip pgqueuer and procrastinate")
    parser.add_argument(
        "--scenario",
        choices=(
            "throughput",
            "pinned-horizon",
            "django",
            "dashboard",
            "indexes",
            "big",
            "cut-off",
            "hosts",
            "failover",
            "bulk",
        ),
        default="throughput",
        help="throughput (the table of drains and enqueues), pinned-horizon (bench/horizon.py) "
        "django (our Django tasks backend against django-tasks-db, bench/django_tasks.py) or "
        "dashboard (the overview on 100,000 waiting and 1,000,000 archived jobs, "
        "bench/dashboard.py) or indexes (what the archive's finished_at index costs each "
        "job, bench/indexes.py) or big (the claim, stats, overview and prune at 10,000,000 "
        "archived and 1,000,000 waiting jobs, bench/big.py) or cut-off (a worker host cut off "
        "mid-job: seconds until its job runs again, bench/cutoff.py; root) or hosts (one and four "
        "worker hosts over links of 0, 1 and 5 ms added round trip, bench/hosts.py; root) or "
        "failover (draining through a Patroni switchover and a killed primary, "
        "bench/failover.py) or bulk (a confirmed bulk retry and discard of --failed failures "
        "among nine times as many successes, bench/bulk.py)",
    )
    parser.add_argument(
        "--compare",
        metavar="REF",
        help="run this checkout and revision REF (built in a venv of its own under .bench/) "
        "in turn, --runs times each, and print both side by side (bench/compare.py)",
    )
    parser.add_argument("--json", metavar="FILE", help=argparse.SUPPRESS)  # for --compare
    big_sizes = parser.add_argument_group("big scenario")
    big_sizes.add_argument("--waiting", type=int, default=1_000_000, help="waiting jobs")
    big_sizes.add_argument("--archived", type=int, default=10_000_000, help="archived jobs")
    big_sizes.add_argument(
        "--partitioned",
        action="store_true",
        help="PostgreSQL: the archive partitioned by outcome and day (bench/big.py)",
    )
    parser.add_argument(
        "--host-jobs", type=int, default=2_000, help="hosts: jobs per worker host and drain"
    )
    parser.add_argument(
        "--failover-rate",
        type=float,
        default=50.0,
        help="failover: jobs a second the application enqueues through the events",
    )
    parser.add_argument(
        "--failed", type=int, default=50_000, help="bulk: failed jobs to retry and discard"
    )
    parser.add_argument(
        "--cutoff-wait", type=float, default=90.0, help="cut-off: seconds to wait per case"
    )
    horizon.add_arguments(parser)
    args = parser.parse_args(argv)
    args.runs = max(1, args.runs or (1 if args.quick else 3))
    args.jobs = max(8, args.jobs or (1_000 if args.quick else 20_000))
    args.rate_jobs = (3 if args.quick else 5) * RATE_LIMIT  # 2 or 4 periods past the first
    args.enqueue_jobs = min(args.jobs, 500 if args.quick else 5_000)
    args.bulk = 20_000
    args.latency_samples = 30 if args.quick else 200
    args.memory_jobs = 3_000 if args.quick else 100_000
    args.idle_seconds = 3.0 if args.quick else 10.0
    args.django_jobs = 2_000 if args.quick else 10_000
    return args


def report(reason: str | None) -> bool:
    """True when a peer is available; otherwise say why it is left out."""
    if reason:
        console.print(f"[yellow]{reason}[/]")
    return reason is None


def watchdog(seconds: float) -> None:
    """Interrupt the main thread if the whole benchmark overruns (nothing may hang)."""

    def fire() -> None:
        console.print(f"[red]benchmark exceeded {seconds:.0f} s; interrupting[/]")
        _thread.interrupt_main()

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.scenario == "pinned-horizon":
        return pinned_horizon(args)
    if args.scenario == "django":
        return django(args)
    if args.scenario == "dashboard":
        return dashboard_overview(args)
    if args.scenario == "indexes":
        return archive_indexes(args)
    if args.scenario == "big":
        return big_tables(args)
    if args.scenario == "bulk":
        return bulk_actions(args)
    if args.scenario == "hosts":
        from . import hosts  # the tests' network lab: only for this scenario

        watchdog(3 * 3600)
        return hosts.main(args.host_jobs, args.runs, args.mysql_url != "")
    if args.scenario == "cut-off":
        from . import cutoff  # the tests' network lab: only for this scenario

        watchdog(3600)
        return cutoff.main(args.cutoff_wait)
    if args.scenario == "failover":
        from . import failover

        watchdog(1800)
        return failover.main(args.failover_rate)
    if args.compare:
        return compared(args)
    rated = (
        measure.deadline_for(args.rate_jobs) + args.rate_jobs / RATE_LIMIT * RATE_PERIOD_MS / 1000
    )
    per_run = 10 * measure.deadline_for(args.jobs) + len(RATE_ROWS) * rated
    watchdog(300 + 2 * args.runs * per_run + 4 * measure.deadline_for(args.memory_jobs))
    results = Results()
    started = time.perf_counter()
    with postgres_url(args.database_url) as url:
        dbs: list[Database] = [Postgres(url), *reachable_mysql(args)]
        args.peers = [] if args.no_peers else [p for p in peers.PEERS if report(peers.available(p))]
        for peer in args.peers:
            peers.install(dbs[0], peer)
        for db in dbs:
            db.recreate()  # this version's own schema, whatever an earlier run left
            warm_up(db)
        host = machine(dbs)
        console.print(f"machine: {host}")
        for run in range(args.runs):
            for db in dbs:
                console.print(f"[bold]run {run + 1}/{args.runs}: {db.label}[/]")
                throughput_run(db, args, results, run)
        for db in dbs:
            console.print(f"[bold]latency and memory: {db.label}[/]")
            latency_and_memory(db, args, results)
    out = Console(highlight=False, width=None if sys.stdout.isatty() else 200)
    out.print(table(dbs, args, results))
    out.print(cpu_table(dbs, args, results))
    out.print(f"machine: {host}")
    limited = against_limit(dbs, results)
    if limited:
        out.print(limited)
    out.print(
        "ratio = proletarian-di / plain loop (same SQL, same threads). Plain latency on "
        "PostgreSQL uses LISTEN/NOTIFY; elsewhere it polls like the worker. Peers run with "
        "their defaults; N threads = N pgqueuer QueueManagers (batches of 10, so its batch "
        "row repeats its 4-thread figure) or procrastinate concurrency=N. "
        f"Took {time.perf_counter() - started:.0f} s."
    )
    for error in results.errors:
        out.print(f"[red]error:[/] {error}")
    if args.json:
        compare.dump(args.json, results.values, results.errors, {db.name: db.label for db in dbs})
    return 1 if results.errors else 0


def compared(args: argparse.Namespace) -> int:
    """`--compare REF`: both revisions on the same servers, one run each in turn."""
    with postgres_url(args.database_url) as url:
        dbs: list[Database] = [Postgres(url), *reachable_mysql(args)]
        mysql_url = args.mysql_url if len(dbs) > 1 else ""
        options = ["--database-url", url, "--mysql-url", mysql_url, "--jobs", str(args.jobs)]
        options += ["--quick"] if args.quick else []
        options.append("--no-peers")  # the peers do not differ between the sides
        return compare.main(args.compare, options, args.runs, rows(args), machine(dbs), fmt)


def reachable_mysql(args: argparse.Namespace) -> list[Database]:
    """The MySQL/MariaDB of `--mysql-url`, or none (saying why) when it is unreachable."""
    if not args.mysql_url:
        return []
    reason = mysql_unreachable_reason(args.mysql_url)
    if reason:
        console.print(f"[yellow]MySQL/MariaDB skipped: {reason}[/]")
        return []
    return [MySQL(args.mysql_url)]


def pinned_horizon(args: argparse.Namespace) -> int:
    """The pinned-horizon scenario on PostgreSQL and, if reachable, MySQL/MariaDB."""
    phases = args.clean + args.hold + args.recover
    variants = len(args.variants.split(","))
    watchdog(120 + 2 * variants * (phases + 60))
    with contextlib.ExitStack() as stack:
        dbs: list[Database] = []
        if "postgresql" in args.on:
            dbs.append(Postgres(stack.enter_context(postgres_url(args.database_url))))
        if "mysql" in args.on:
            dbs += reachable_mysql(args)
        console.print(f"machine: {machine(dbs)}")
        return horizon.main(dbs, args)


def django(args: argparse.Namespace) -> int:
    """The django scenario on PostgreSQL: both Django task backends, throughput and a kill."""
    watchdog(900)
    with postgres_url(args.database_url) as url:
        host = machine([Postgres(url)])
        console.print(f"machine: {host}")
        return django_tasks.main(url, args.django_jobs, host)


def dashboard_overview(args: argparse.Namespace) -> int:
    """The dashboard scenario on PostgreSQL and, if reachable, MySQL/MariaDB."""
    watchdog(1800)
    with postgres_url(args.database_url) as url:
        dbs: list[Database] = [Postgres(url), *reachable_mysql(args)]
        return dashboard.main(dbs, machine(dbs))


def archive_indexes(args: argparse.Namespace) -> int:
    """The indexes scenario on PostgreSQL and, if reachable, MySQL/MariaDB."""
    watchdog(600 + 6 * args.runs * measure.deadline_for(args.jobs))
    with postgres_url(args.database_url) as url:
        dbs: list[Database] = [Postgres(url), *reachable_mysql(args)]
        return indexes.main(dbs, machine(dbs), args.jobs, args.runs)


def big_tables(args: argparse.Namespace) -> int:
    """The big scenario on PostgreSQL and, if reachable, MySQL/MariaDB."""
    watchdog(4 * 3600)
    with postgres_url(args.database_url) as url:
        dbs: list[Database] = [Postgres(url), *reachable_mysql(args)]
        return big.main(dbs, machine(dbs), args.waiting, args.archived, args.partitioned)


def bulk_actions(args: argparse.Namespace) -> int:
    """The bulk scenario on PostgreSQL and, if reachable, MySQL/MariaDB."""
    watchdog(3600)
    with postgres_url(args.database_url) as url:
        dbs: list[Database] = [Postgres(url), *reachable_mysql(args)]
        return bulk.main(dbs, machine(dbs), args.failed)


if __name__ == "__main__":
    sys.exit(main())

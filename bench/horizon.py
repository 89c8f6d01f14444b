"""`python -m bench --scenario pinned-horizon`: throughput while another transaction pins the
database's horizon (PostgreSQL's xmin, InnoDB's purge view), so the rows of archived jobs
cannot be cleaned up and every claim that walks over them gets slower.

A producer offers jobs at a fixed rate in transactions of 50; a 4-thread worker runs them.
Phases: clean, then an idle transaction holds the horizon, then it ends (recovery). Every
window prints jobs/s, the backlog and the database's dead-row figure.
"""

from __future__ import annotations

import argparse
import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table

from proletarian_di import enqueue, enqueue_many

from . import plain
from .db import ARCHIVED_JOB_TABLE, JOB_TABLE, Database
from .workers import make_worker

THREADS = 4
PRODUCER_BATCH = 50
POLLING_INTERVAL = 0.1
DEFAULT_RATES = {"postgresql": 1_500, "mysql": 700}
VARIANTS = {
    "ours": "proletarian-di, 1 job per transaction; producer: 50 enqueue calls per transaction",
    "plain": "plain driver loop, the seeds' SQL; producer: 50 plain INSERTs per transaction",
    "batch": "proletarian-di, batch_size=10; producer: enqueue_many of 50",
}

console = Console(stderr=True, highlight=False, width=120)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The scenario's options, on `python -m bench`'s parser."""
    group = parser.add_argument_group("pinned-horizon scenario")
    group.add_argument("--clean", type=float, default=40, help="seconds before the hold (40)")
    group.add_argument("--hold", type=float, default=120, help="seconds the horizon is held (120)")
    group.add_argument("--recover", type=float, default=30, help="seconds after the hold (30)")
    group.add_argument("--window", type=float, default=10, help="seconds per printed row (10)")
    group.add_argument(
        "--rate", type=int, help="offered jobs/s (default 1,500 on PostgreSQL, 700 on MySQL)"
    )
    group.add_argument(
        "--on",
        default="postgresql,mysql",
        help="comma-separated databases: postgresql, mysql (default both)",
    )
    group.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help=f"comma-separated, of {', '.join(VARIANTS)} (default all)",
    )


@dataclass
class Window:
    """One printed row: what happened in one window of the run."""

    phase: str
    end: float
    offered: float
    done: float
    backlog: int
    dead: int | None


@dataclass
class Run:
    """One variant's windows on one database."""

    db: Database
    variant: str
    rate: int
    windows: list[Window] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def held(self) -> list[Window]:
        return [w for w in self.windows if w.phase == "held"]


class Producer(threading.Thread):
    """Enqueues `rate` jobs/s in transactions of PRODUCER_BATCH, on schedule (it catches up
    after a slow commit rather than drifting)."""

    def __init__(self, db: Database, variant: str, rate: int) -> None:
        super().__init__(daemon=True, name="producer")
        self.db, self.variant, self.rate = db, variant, rate
        self.enqueued = 0
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        period = PRODUCER_BATCH / self.rate
        try:
            with contextlib.closing(plain.connect(self.db)) as conn:
                started = time.perf_counter()
                while not self.stopping.is_set():
                    self._batch(conn)
                    conn.commit()
                    self.enqueued += PRODUCER_BATCH
                    due = started + (self.enqueued / PRODUCER_BATCH) * period
                    self.stopping.wait(max(0.0, due - time.perf_counter()))
        except BaseException as exc:
            self.error = exc

    def _batch(self, conn: Any) -> None:
        payloads = [{"n": self.enqueued + i} for i in range(PRODUCER_BATCH)]
        if self.variant == "plain":
            for payload in payloads:
                plain.enqueue_one(self.db, conn, payload)
        elif self.variant == "batch":
            enqueue_many(conn, [("noop", p) for p in payloads], job_table=JOB_TABLE)
        else:
            for payload in payloads:
                enqueue(conn, "noop", payload, job_table=JOB_TABLE)

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)


class Holder:
    """An idle transaction that pins the horizon: PostgreSQL `BEGIN; SELECT txid_current()`,
    InnoDB a consistent snapshot and one read."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.conn: Any = None

    def hold(self) -> None:
        self.conn = self.db.connect()
        if self.db.name == "mysql":
            with self.conn.cursor() as cur:
                cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
                cur.execute(f"SELECT COUNT(*) FROM {ARCHIVED_JOB_TABLE}")
                cur.fetchall()
        else:
            self.conn.execute("SELECT txid_current()").fetchall()

    def release(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.rollback()
                self.conn.close()
            self.conn = None


def dead_rows(db: Database, conn: Any) -> int | None:
    """PostgreSQL: the job table's n_dead_tup. InnoDB: the history list length (undo
    records purge has not removed: the deleted rows it cannot clean up yet)."""
    try:
        if db.name == "mysql":
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT count FROM information_schema.innodb_metrics "
                    "WHERE name = 'trx_rseg_history_len'"
                )
                row = cur.fetchone()
            conn.rollback()
        else:
            row = conn.execute(
                "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = %s::regclass",
                (JOB_TABLE,),
            ).fetchone()
        return None if row is None else int(row[0])
    except Exception:
        return None


def run_variant(db: Database, variant: str, rate: int, args: argparse.Namespace) -> Run:
    """One run of the scenario: clean, held, recovery; a row per window."""
    db.clean()
    db.analyze()
    run = Run(db, variant, rate)
    options = {"batch_size": 10} if variant == "batch" else {}
    impl = "plain" if variant == "plain" else "ours"
    worker = make_worker(impl, db, THREADS, POLLING_INTERVAL, **options)
    producer = Producer(db, variant, rate)
    holder = Holder(db)
    phases = [("clean", args.clean), ("held", args.hold), ("recovery", args.recover)]
    monitor = plain.connect(db)
    if db.name == "postgresql":
        monitor.autocommit = True
    try:
        worker.start()
        producer.start()
        started = time.perf_counter()
        done, enqueued, ends = 0, 0, 0.0
        for phase, seconds in phases:
            if phase == "held":
                holder.hold()
            elif phase == "recovery":
                holder.release()
            phase_end = ends + seconds
            while ends < phase_end - 1e-6:
                step = min(args.window, phase_end - ends)
                ends += step
                time.sleep(max(0.0, started + ends - time.perf_counter()))
                now_done, now_enqueued = worker.done(), producer.enqueued
                window = Window(
                    phase,
                    ends,
                    (now_enqueued - enqueued) / step,
                    (now_done - done) / step,
                    now_enqueued - now_done,
                    dead_rows(db, monitor),
                )
                done, enqueued = now_done, now_enqueued
                run.windows.append(window)
                console.print(f"  {db.label} {variant:<5} {row_text(window)}")
                if producer.error is not None:
                    raise producer.error
    except Exception as exc:
        run.errors.append(f"{type(exc).__name__}: {exc}")
        console.print(f"  [red]{db.label} {variant}: {type(exc).__name__}: {exc}[/]")
    finally:
        holder.release()
        producer.stop()
        worker.stop()
        with contextlib.suppress(Exception):
            monitor.close()
    return run


def row_text(w: Window) -> str:
    dead = "—" if w.dead is None else f"{w.dead:,}"
    return (
        f"{w.phase:<8} {w.end:>5.0f} s  offered {w.offered:>6,.0f}/s  done {w.done:>6,.0f}/s  "
        f"backlog {w.backlog:>7,}  dead {dead:>8}"
    )


def table(runs: list[Run]) -> Table:
    """Every run side by side: a column per (database, variant), a row per window."""
    out = Table(
        title="pinned horizon — jobs/s done (backlog, dead rows) per window",
        title_justify="left",
    )
    out.add_column("phase", no_wrap=True)
    out.add_column("end", justify="right")
    for run in runs:
        out.add_column(f"{run.db.label}\n{run.variant}\n{run.rate:,}/s offered", justify="right")
    for i, first in enumerate(runs[0].windows if runs else []):
        cells = [first.phase, f"{first.end:.0f} s"]
        for run in runs:
            if i < len(run.windows):
                w = run.windows[i]
                dead = "—" if w.dead is None else f"{w.dead:,}"
                cells.append(f"{w.done:,.0f} ({w.backlog:,}, {dead})")
            else:
                cells.append("—")
        out.add_row(*cells)
    return out


def summary(run: Run) -> str:
    """The run against the targets: the slowest held window and the largest held backlog."""
    held = run.held()
    if not held:
        return f"{run.db.label} {run.variant}: no held window"
    worst = min(held, key=lambda w: w.done / max(w.offered, 1))
    backlog = max(w.backlog for w in held)
    return (
        f"{run.db.label} {run.variant}: while held, the slowest window ran {worst.done:,.0f}/s "
        f"({worst.done / max(worst.offered, 1):.0%} of the {worst.offered:,.0f}/s offered in "
        f"it); largest backlog {backlog:,} jobs"
    )


def main(dbs: list[Database], args: argparse.Namespace) -> int:
    """Run every variant on every database; print the table and a summary per run."""
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        known = ", ".join(VARIANTS)
        console.print(f"[red]unknown variant(s): {', '.join(unknown)}; choose from {known}[/]")
        return 2
    runs: list[Run] = []
    for db in dbs:
        db.recreate()
        rate = args.rate or DEFAULT_RATES[db.name]
        for variant in variants:
            console.print(f"[bold]{db.label}: {variant} — {VARIANTS[variant]}[/]")
            runs.append(run_variant(db, variant, rate, args))
    out = Console(highlight=False, width=200)
    out.print(table(runs))
    for run in runs:
        out.print(summary(run))
    out.print(
        f"{THREADS} worker threads, polling every {POLLING_INTERVAL * 1000:.0f} ms; producer "
        f"transactions of {PRODUCER_BATCH}. Dead rows: PostgreSQL n_dead_tup of the job table, "
        "InnoDB history list length."
    )
    errors = [f"{run.db.label} {run.variant}: {e}" for run in runs for e in run.errors]
    for error in errors:
        out.print(f"[red]error:[/] {error}")
    return 1 if errors else 0

"""The indexes scenario: what the archive's `finished_at` index costs each job.

The dashboard's time ranges (the overview's last day, the timings) read the archive through
its `(finished_at, queue, status)` index (`--scenario dashboard` times them without it).
This scenario drains the same no-op jobs (held mode, 4 threads) with that index, with a
BRIN index on `finished_at` alone (PostgreSQL: nearly free to keep on an append-only
table), and with none, in turn, and prints each one's client and server CPU per job: the
index's cost is the difference.
"""

from __future__ import annotations

import statistics
from typing import Any

from rich.console import Console
from rich.table import Table

from . import measure
from .db import ARCHIVED_JOB_TABLE, Database

console = Console(highlight=False)
THREADS = 4
_NAME = f"{ARCHIVED_JOB_TABLE.rpartition('.')[2]}_finished_at"
_SCHEMA = ARCHIVED_JOB_TABLE.rpartition(".")[0]


def variants(db: Database) -> dict[str, str | None]:
    """Each choice of index, by name: the statement that makes it (None: no index)."""
    table = ARCHIVED_JOB_TABLE
    choices: dict[str, str | None] = {
        "btree (finished_at, queue, status)": (
            f"CREATE INDEX {_NAME} ON {table} (finished_at, queue, status)"
        )
    }
    if db.name == "postgresql":
        choices["brin (finished_at)"] = f"CREATE INDEX {_NAME} ON {table} USING brin (finished_at)"
    choices["none"] = None
    return choices


def _drop(db: Database) -> None:
    if db.name == "postgresql":
        db.execute(f"DROP INDEX IF EXISTS {_SCHEMA}.{_NAME}")
    elif db.query(
        "SELECT 1 FROM information_schema.statistics WHERE table_schema = %s "
        "AND table_name = %s AND index_name = %s",
        (_SCHEMA, ARCHIVED_JOB_TABLE.rpartition(".")[2], _NAME),
    ):
        db.execute(f"DROP INDEX {_NAME} ON {ARCHIVED_JOB_TABLE}")


def main(dbs: list[Database], host: str, jobs: int, runs: int) -> int:
    """Drain `jobs` jobs `runs` times with each choice, in turn; print the medians."""
    console.print(f"machine: {host}")
    table = Table(title=f"archive index: held-mode drain, {THREADS} threads, {jobs:,} jobs")
    for column in ("database", "index", "jobs/s", "client µs/job", "server µs/job"):
        table.add_column(column, justify="left" if column in ("database", "index") else "right")
    for db in dbs:
        db.recreate()
        choices = variants(db)
        figures: dict[str, list[Any]] = {name: [] for name in choices}
        try:
            measure.drain(db, "ours", THREADS, min(jobs, 2_000), 0.01)  # warm
            for run in range(runs):
                for name, ddl in choices.items():
                    _drop(db)
                    if ddl is not None:
                        db.execute(ddl)
                    figure = measure.drain(db, "ours", THREADS, jobs, 0.01)
                    figures[name].append(figure)
                    console.print(
                        f"  {db.label} run {run + 1}/{runs} {name}: {figure.rate:,.0f} jobs/s, "
                        f"client {figure.per_job(figure.client) or 0:.0f} "
                        f"server {figure.per_job(figure.server) or 0:.0f} µs/job"
                    )
        finally:
            db.recreate()  # the schema's own index again
        for name, measured in figures.items():
            table.add_row(
                db.label,
                name,
                f"{statistics.median(f.rate for f in measured):,.0f}",
                _median(measured, "client"),
                _median(measured, "server"),
            )
    console.print(table)
    return 0


def _median(figures: list[Any], which: str) -> str:
    values = [f.per_job(getattr(f, which)) for f in figures]
    known = [v for v in values if v is not None]
    return f"{statistics.median(known):,.0f}" if known else "—"

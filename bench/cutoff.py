"""A worker host cut off mid-job: how long until its job runs again on a live worker.

Uses the tests' network lab (`tests/netlab.py`: root, Linux network namespaces): a database
host with its own PostgreSQL (the machine's binaries) or MariaDB, and a worker host joined
to it by a veth pair. The worker host (`tests/cut_off_worker.py`, one thread) starts a job
that blocks; its link goes down (no FIN, no RST); a live worker beside the database then
polls every 50 ms, and the time from the cut until the job starts there is printed:

- held mode, PostgreSQL: the worker's `keepalive_timeout_ms` (default 45 s), and without it;
- held mode, MariaDB: the server's `tcp_keepalive_*` set as docs/operations.md recommends,
  and the server's defaults;
- lease mode, both: `lease_ms=30000`.

A case that waits past `--cutoff-wait` seconds (default 90) is printed as "still locked",
with the bound the database host's own TCP settings give.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from rich.console import Console
from rich.table import Table

from proletarian_di import create_queue_worker, enqueue
from proletarian_di.testing import MySQLQueueDatabase, PostgresQueueDatabase, QueueDatabase

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path.insert(0, str(TESTS))

import cut_off_worker  # noqa: E402
from netlab import NetLab, Server, available  # noqa: E402

MARIADB_RECOMMENDED = {"tcp_keepalive_time": 15, "tcp_keepalive_interval": 10}
MARIADB_PROBES = 3
LEASE_MS = 30_000

console = Console()


def _local(server: Server) -> QueueDatabase:
    variant = PostgresQueueDatabase if server.kind == "postgresql" else MySQLQueueDatabase
    db = variant(server.local_url, connect_args=server.connect_args)
    db.install()
    return db


def _system_bound(lab: NetLab) -> str:
    """The keepalive bound of the database host's own TCP settings."""
    names = ("tcp_keepalive_time", "tcp_keepalive_intvl", "tcp_keepalive_probes")
    values = []
    for name in names:
        done = subprocess.run(
            ["ip", "netns", "exec", lab.db_namespace, "cat", f"/proc/sys/net/ipv4/{name}"],
            capture_output=True,
            text=True,
            check=True,
        )
        values.append(int(done.stdout))
    idle, interval, probes = values
    bound = idle + probes * interval
    return f"the host's keepalives: {idle} s + {probes} x {interval} s = {bound} s"


def _case(
    lab: NetLab, server: Server, db: QueueDatabase, wait_s: float, *child: str, **live: Any
) -> float | None:
    """Seconds from the cut until the job started on a live worker; None past `wait_s`."""
    db.clear()
    with contextlib.closing(db.connect()) as conn:
        enqueue(conn, "cut", "cut")
        conn.commit()
    host = lab.host(f"w{len(lab.hosts) + 1}")
    with TemporaryDirectory() as folder:
        events, release = Path(folder, "events"), Path(folder, "release")
        cut_off_worker.start(host, server.kind, server.url_from(host), events, release, *child)
        host.cut()
        cut_at = time.monotonic()
        started: list[float] = []
        pool = db.pool(2)
        worker = create_queue_worker(
            pool,
            lambda job_type, payload: started.append(time.monotonic()),
            polling_interval_ms=50,
            retry_strategy_fn=lambda job, exc: {"retries": 1, "delays": [0]},
            **live,
        )
        try:
            with worker:
                while not started and time.monotonic() - cut_at < wait_s:
                    time.sleep(0.05)
        finally:
            pool.close()
            host.kill()
    return started[0] - cut_at if started else None


def _mariadb_keepalives(db: QueueDatabase, recommended: bool) -> None:
    """The server's keepalives for new connections: the recommended ones, or its defaults."""
    values = {**MARIADB_RECOMMENDED, "tcp_keepalive_probes": MARIADB_PROBES}
    if not recommended:
        values = dict.fromkeys(values, 0)
    db.execute("SET GLOBAL " + ", ".join(f"{k} = {v}" for k, v in values.items()))


def main(wait_s: float) -> int:
    why = available()
    if why:
        console.print(f"[red]the cut-off scenario needs the network lab: {why}[/]")
        return 1
    table = Table(title="A worker host cut off mid-job: seconds until the job runs again")
    for column in ("database", "mode", "settings", "seconds"):
        table.add_column(column)

    def row(db_name: str, mode: str, settings: str, seconds: float | None, lab: NetLab) -> None:
        shown = f"{seconds:.1f}" if seconds is not None else f"still locked after {wait_s:.0f} s"
        if seconds is None:
            shown += f" ({_system_bound(lab)})"
        table.add_row(db_name, mode, settings, shown)
        console.print(f"{db_name}, {mode}, {settings}: {shown}")

    with NetLab() as lab, lab.postgres() as server:
        db = _local(server)
        for setting in ("45000", "0"):
            seconds = _case(lab, server, db, wait_s, f"--keepalive-timeout-ms={setting}")
            label = (
                "keepalive_timeout_ms=45000 (default)"
                if setting != "0"
                else "keepalive_timeout_ms=0 (off)"
            )
            row("PostgreSQL", "held", label, seconds, lab)
        seconds = _case(lab, server, db, wait_s, f"--lease-ms={LEASE_MS}", lease_ms=LEASE_MS)
        row("PostgreSQL", "lease", f"lease_ms={LEASE_MS}", seconds, lab)
    with NetLab() as lab, lab.mariadb() as server:
        db = _local(server)
        for recommended in (True, False):
            _mariadb_keepalives(db, recommended)
            seconds = _case(lab, server, db, wait_s)
            label = (
                "tcp_keepalive_time=15, _interval=10, _probes=3"
                if recommended
                else "server defaults"
            )
            row("MariaDB", "held", label, seconds, lab)
        seconds = _case(lab, server, db, wait_s, f"--lease-ms={LEASE_MS}", lease_ms=LEASE_MS)
        row("MariaDB", "lease", f"lease_ms={LEASE_MS}", seconds, lab)
    console.print(table)
    return 0

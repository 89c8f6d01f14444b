"""Worker hosts on links with a round trip: throughput of one and of four worker hosts, the
worker beside the plain loop, at three round-trip times.

Uses the tests' network lab (`tests/netlab.py`: root, Linux network namespaces): a database
host with its own PostgreSQL (the machine's binaries) or MariaDB, and four worker hosts,
each on a veth link of its own. This kernel has no `netem`, so the round trip is made by
a relay on the database host (`bench/relay.py`) that holds each chunk for half the added
time each way; the table gives the round trip measured through it (median of 200 `SELECT
1` from a worker host), not the one asked for. Each worker host runs one worker process of
4 threads (`python -m bench.child`); the jobs are no-ops, enqueued beforehand.
"""

from __future__ import annotations

import statistics
import subprocess
import sys

from rich.console import Console
from rich.table import Table

from .db import ARCHIVED_JOB_TABLE, Database, MySQL, Postgres
from .measure import ROOT, drain_processes

sys.path.insert(0, str(ROOT / "tests"))

from netlab import Host, NetLab, Server, available
from servers import binary

RELAY_PORT = 6432
ADDED_MS = (None, 0.0, 1.0, 5.0)
"""Round trip asked of the relay: none (the relay's own hop only), 1 ms, 5 ms; first, None:
straight to the server, no relay."""
THREADS = 4
console = Console()

_RTT = """
import sys, time, statistics
from proletarian_di.testing import QueueDatabase
conn = QueueDatabase.from_url(sys.argv[1]).connect()
cursor = conn.cursor()
times = []
for _ in range(200):
    started = time.perf_counter()
    cursor.execute("SELECT 1")
    cursor.fetchall()
    times.append(time.perf_counter() - started)
print(statistics.median(times) * 1000)
"""


def _relay(lab: NetLab, server: Server, added_ms: float) -> subprocess.Popen[str]:
    """A relay on the database host, in front of the server, adding `added_ms` a round trip."""
    port = 5432 if server.kind == "postgresql" else 3306
    relay = subprocess.Popen(
        [
            "ip", "netns", "exec", lab.db_namespace, sys.executable, "-m", "bench.relay",
            f"--listen=0.0.0.0:{RELAY_PORT}", f"--to=127.0.0.1:{port}",
            f"--delay-ms={added_ms / 2}",
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )  # fmt: skip
    assert relay.stdout is not None
    if relay.stdout.readline().strip() != "ready":
        raise RuntimeError("the relay did not start")
    return relay


def _through_relay(server: Server, host: Host) -> str:
    return server.url_from(host).replace(
        f":{5432 if server.kind == 'postgresql' else 3306}/", f":{RELAY_PORT}/"
    )


def _round_trip_ms(host: Host, url: str) -> float:
    done = subprocess.run(
        [*host.exec_prefix(), sys.executable, "-c", _RTT, url],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return float(done.stdout.strip())


def _local(server: Server) -> Database:
    db: Database = (
        Postgres(server.local_url) if server.kind == "postgresql" else MySQL(server.local_url)
    )
    db.connect_args.update(server.connect_args)
    if server.kind == "mysql":
        db.version()  # its label: MariaDB or MySQL
    db.install()
    return db


def _measure(lab: NetLab, server: Server, jobs: int, runs: int, table: Table) -> None:
    db = _local(server)
    hosts = [lab.host(f"w{n}") for n in range(1, 5)]
    for added in ADDED_MS:
        relay = None if added is None else _relay(lab, server, added)
        try:
            if relay is None:
                places = [(host.exec_prefix(), server.url_from(host)) for host in hosts]
            else:
                places = [(host.exec_prefix(), _through_relay(server, host)) for host in hosts]
            rtt = _round_trip_ms(hosts[0], places[0][1])
            for count in (1, 4):
                rates = {}
                for impl in ("ours", "plain"):
                    figures = [
                        drain_processes(
                            db, impl, count, THREADS, jobs * count, 0.01, places[:count]
                        ).rate
                        for _ in range(runs)
                    ]
                    rates[impl] = statistics.median(figures)
                ratio = rates["ours"] / rates["plain"]
                row = (
                    db.label or server.kind,
                    "direct" if added is None else f"relay +{added:g} ms",
                    f"{rtt:.2f} ms",
                    str(count),
                    f"{rates['ours']:,.0f}",
                    f"{rates['plain']:,.0f}",
                    f"{ratio:.2f}",
                )
                console.print(" | ".join(row))
                table.add_row(*row)
        finally:
            if relay is not None:
                relay.kill()
                relay.wait()
    _with_loss(db, server, hosts, jobs, table)


LOSS_PERCENT = 1


def _with_loss(db: Database, server: Server, hosts: list[Host], jobs: int, table: Table) -> None:
    """Four hosts losing `LOSS_PERCENT` % of their packets each way, straight to the server:
    every job archived once, none left (TCP retransmits; the drain checks both)."""
    if binary("nft") is None:
        console.print("[yellow]no packet loss row: nftables' nft is not installed[/]")
        return
    places = [(host.exec_prefix(), server.url_from(host)) for host in hosts]
    for host in hosts:
        host.lose(LOSS_PERCENT)
    try:
        rate = drain_processes(db, "ours", 4, THREADS, jobs * 4, 0.01, places).rate
    finally:
        for host in hosts:
            host.lose(0)
    archived = int(db.query(f"SELECT COUNT(*) FROM {ARCHIVED_JOB_TABLE}")[0][0])
    if archived != jobs * 4:
        raise RuntimeError(f"{LOSS_PERCENT}% loss: {archived} jobs archived of {jobs * 4}")
    row = (db.label, f"direct, {LOSS_PERCENT}% loss", "-", "4", f"{rate:,.0f}", "-", "-")
    console.print(" | ".join(row) + f" (all {archived} jobs archived once)")
    table.add_row(*row)


def main(jobs: int, runs: int, mysql: bool) -> int:
    why = available()
    if why:
        console.print(f"[red]the hosts scenario needs the network lab: {why}[/]")
        return 1
    table = Table(title=f"Worker hosts over a link: jobs/s ({THREADS} threads a host)")
    for column in ("database", "link", "round trip", "hosts", "worker", "plain loop", "ratio"):
        table.add_column(column, justify="right")
    with NetLab() as lab, lab.postgres() as server:
        _measure(lab, server, jobs, runs, table)
    if mysql:
        with NetLab() as lab, lab.mariadb() as server:
            _measure(lab, server, jobs, runs, table)
    console.print(table)
    return 0

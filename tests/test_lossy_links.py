"""Worker hosts on links that lose 1% of their packets each way (`netlab`, nftables): every
job runs once and is archived once, on both databases, in held and lease mode. TCP resends
what was lost; what this checks is that nothing above it (a timeout, a reconnect, a claim
made ahead in a commit's round trip) turns a late reply into a lost or a doubled job."""

from __future__ import annotations

import collections
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from backends import MySQLBackend, PostgresBackend, enqueue_committed, wait_until
from netlab import NetLab, available
from servers import binary

pytestmark = [pytest.mark.db, pytest.mark.xdist_group("netlab")]

_WHY_NOT = available() or (None if binary("nft") else "nftables' nft is not installed")
if _WHY_NOT and os.environ.get("PROLETARIAN_REQUIRE_NETNS"):
    raise RuntimeError(f"PROLETARIAN_REQUIRE_NETNS is set, but {_WHY_NOT}")
if _WHY_NOT:
    pytest.skip(f"no lossy links here: {_WHY_NOT}", allow_module_level=True)

JOBS = 300
HOSTS = 2

_WORKER = """
import os, sys, time
from proletarian_di import create_queue_worker
from proletarian_di.testing import QueueDatabase

runs, url, lease = sys.argv[1], sys.argv[2], sys.argv[3]

def handler(job_type, payload):
    fd = os.open(runs, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, f"{payload}\\n".encode())
    os.close(fd)

worker = create_queue_worker(
    QueueDatabase.from_url(url).pool(3),
    handler,
    worker_threads=2,
    polling_interval_ms=20,
    lease_ms=int(lease) or None,
)
with worker:
    open(runs + ".ready", "w").close()
    while True:
        time.sleep(1)
"""


@pytest.fixture(scope="module", params=["postgresql", "mysql"])
def lab(request: pytest.FixtureRequest) -> Iterator[tuple[NetLab, object]]:
    with NetLab() as net:
        server = net.postgres() if request.param == "postgresql" else net.mariadb()
        with server as running:
            yield net, running


@pytest.mark.parametrize("lease_ms", [0, 5_000], ids=["held", "lease"])
def test_every_job_runs_once_through_one_percent_loss(
    lab: tuple[NetLab, object], lease_ms: int, tmp_path: Path
) -> None:
    net, server = lab
    backend_type = PostgresBackend if server.kind == "postgresql" else MySQLBackend
    local = backend_type(server.local_url, connect_args=server.connect_args)
    local.install()
    local.reset()
    hosts = [net.host(f"l{len(net.hosts) + 1}") for _ in range(HOSTS)]
    runs = [tmp_path / f"runs-{host.name}" for host in hosts]
    try:
        for host, ran in zip(hosts, runs, strict=True):
            host.lose(1)
            host.popen(
                [sys.executable, "-c", _WORKER, str(ran), server.url_from(host), str(lease_ms)],
                cwd=Path(__file__).parent,
            )
        ready = [Path(f"{ran}.ready") for ran in runs]
        wait_until(lambda: all(r.exists() for r in ready), 60, 0.05, "both hosts' workers")
        enqueue_committed(local, *[("work", n) for n in range(JOBS)])
        wait_until(lambda: len(local.archived()) == JOBS, 120, 0.2, "every job archived")
    finally:
        for host in hosts:
            host.kill()
    every_run = collections.Counter(
        int(line) for ran in runs if ran.exists() for line in ran.read_text().split()
    )
    assert sorted(every_run) == list(range(JOBS))
    assert set(every_run.values()) == {1}
    assert local.jobs() == []
    assert {(status, attempts) for _, status, attempts in local.archived()} == {("success", 1)}
    assert all(ran.exists() for ran in runs)  # both hosts took part

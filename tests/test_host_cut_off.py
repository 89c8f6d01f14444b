"""A worker host cut off mid-job, on real links (`netlab`): the host's end of its link goes
down while its job runs, so the database hears nothing more from it (no FIN, no RST).

In the held-transaction mode the job's row stays locked until the server gives up on the
silent connection and rolls its transaction back. PostgreSQL: the worker sets the server's
keepalives for its own sessions (`keepalive_timeout_ms`, 45 s by default); MariaDB: the
server's global `tcp_keepalive_*` settings, which the operator sets. Either way the job
then runs on a live worker, and the cut-off worker's outcome, once its link is back, is
refused: the transaction it would commit is gone. In lease mode the lease bounds it, and
the late outcome is discarded (`lease_lost`). Without keepalives the row stays locked.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proletarian_di import create_queue_worker

import cut_off_worker
from backends import Backend, MySQLBackend, PostgresBackend, enqueue_committed, wait_until
from netlab import Host, NetLab, Server, available

pytestmark = [pytest.mark.db, pytest.mark.xdist_group("netlab")]

_WHY_NOT = available()
if _WHY_NOT and os.environ.get("PROLETARIAN_REQUIRE_NETNS"):
    raise RuntimeError(f"PROLETARIAN_REQUIRE_NETNS is set, but {_WHY_NOT}")
if _WHY_NOT:
    pytest.skip(f"no network lab here: {_WHY_NOT}", allow_module_level=True)

BOUND_MS = 3_000
"""The keepalive bound these tests give the server: short, to keep the suite fast."""
_MARIADB_KEEPALIVES = (
    "--tcp-keepalive-time=2",
    "--tcp-keepalive-interval=1",
    "--tcp-keepalive-probes=1",
)


class Lab:
    """A network lab with one database server and its queue tables."""

    def __init__(self, lab: NetLab, server: Server) -> None:
        self.lab, self.server = lab, server
        backend = PostgresBackend if server.kind == "postgresql" else MySQLBackend
        self.local: Backend = backend(server.local_url, connect_args=server.connect_args)
        self.local.install()

    def remote(self, host: Host) -> Backend:
        backend = PostgresBackend if self.server.kind == "postgresql" else MySQLBackend
        return backend(self.server.url_from(host))


@pytest.fixture(scope="module", params=["postgresql", "mysql"])
def lab(request: pytest.FixtureRequest) -> Iterator[Lab]:
    with NetLab() as net:
        if request.param == "postgresql":
            server = net.postgres()
        else:
            server = net.mariadb(*_MARIADB_KEEPALIVES)
        with server as running:
            yield Lab(net, running)


@pytest.fixture
def tmp_files(lab: Lab, tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """The events and release files of a test's cut-off worker, which ends with the test."""
    lab.local.reset()
    yield tmp_path / "events", tmp_path / "release"
    for host in lab.lab.hosts:
        host.kill()


def _lines(events: Path) -> list[str]:
    return events.read_text().splitlines() if events.exists() else []


def _start_cut_off_worker(lab: Lab, events: Path, release: Path, *options: str) -> Host:
    """A worker on a host of its own that has started the job "cut" and holds it."""
    host = lab.lab.host(f"w{len(lab.lab.hosts) + 1}")
    server = lab.server
    cut_off_worker.start(host, server.kind, server.url_from(host), events, release, *options)
    return host


@contextlib.contextmanager
def _live_worker(lab: Lab, ran: list[Any], **options: Any) -> Iterator[None]:
    """A worker beside the database, on its Unix socket."""
    pool = lab.local.pool(2)
    worker = create_queue_worker(
        pool, lambda job_type, payload: ran.append(payload), polling_interval_ms=50, **options
    )
    try:
        with worker:
            yield
    finally:
        pool.close()


def _archive(lab: Lab, job_id: Any) -> list[tuple[Any, ...]]:
    """(status, worker) of every archived row of the job."""
    key = job_id.bytes if lab.server.kind == "mysql" else job_id
    table = lab.local.archived_job_table
    return lab.local.query(f"SELECT status, worker FROM {table} WHERE job_id = %s", (key,))


def _late_outcome_refused(lab: Lab, host: Host, events: Path, release: Path, job_id: Any) -> None:
    """Bring the host back and let its handler end: its outcome must not archive the job a
    second time, nor put it back."""
    host.restore()
    release.touch()
    wait_until(lambda: "end cut" in _lines(events), 30, 0.05, "the cut-off handler's end")
    wait_until(
        lambda: [line for line in _lines(events) if line.startswith("event ")],
        60,
        0.1,
        "the cut-off worker to be told its outcome was not written",
    )
    archived = _archive(lab, job_id)
    assert len(archived) == 1
    assert archived[0][0] == "success"
    assert f":{os.getpid()} " in archived[0][1]  # the live worker's run, not the late one
    assert lab.local.jobs() == []


def test_a_held_job_runs_again_once_the_server_gives_up_on_the_silent_host(
    lab: Lab, tmp_files: tuple[Path, Path]
) -> None:
    events, release = tmp_files
    (job_id,) = enqueue_committed(lab.local, ("cut", "cut"))
    host = _start_cut_off_worker(lab, events, release, f"--keepalive-timeout-ms={BOUND_MS}")
    host.cut()
    cut_at = time.monotonic()
    ran: list[Any] = []
    with _live_worker(lab, ran):
        wait_until(lambda: ran, 60, 0.05, "the job to run on a live worker")
        waited = time.monotonic() - cut_at
    assert ran == ["cut"]
    assert waited >= BOUND_MS / 1000 / 2  # not before the server gave up on the host
    _late_outcome_refused(lab, host, events, release, job_id)
    assert "event polling_error" in _lines(events)


def test_without_keepalives_the_silent_host_keeps_its_job_locked(
    lab: Lab, tmp_files: tuple[Path, Path]
) -> None:
    """The control: with the system's keepalives (two hours before the first probe) the
    row is still locked at twice the bound the other tests see."""
    events, release = tmp_files
    with _global_keepalives(lab, default=True):
        (job_id,) = enqueue_committed(lab.local, ("cut", "cut"))
        host = _start_cut_off_worker(lab, events, release, "--keepalive-timeout-ms=0")
    host.cut()
    ran: list[Any] = []
    with _live_worker(lab, ran):
        time.sleep(2 * BOUND_MS / 1000)
        assert ran == []
        assert len(lab.local.jobs()) == 1
        host.restore()
        release.touch()
        wait_until(lambda: "end cut" in _lines(events), 30, 0.05, "the handler's end")
        wait_until(lambda: _archive(lab, job_id), 30, 0.05, "the cut-off worker's outcome")
    assert ran == []  # the host came back in time: its own outcome stands, once
    (archived,) = _archive(lab, job_id)
    assert archived[0] == "success" and f":{os.getpid()} " not in archived[1]


def test_in_lease_mode_the_lease_bounds_it_and_the_late_outcome_is_discarded(
    lab: Lab, tmp_files: tuple[Path, Path]
) -> None:
    events, release = tmp_files
    with _global_keepalives(lab, default=True):
        (job_id,) = enqueue_committed(lab.local, ("cut", "cut"))
        host = _start_cut_off_worker(
            lab, events, release, "--keepalive-timeout-ms=0", "--lease-ms=3000"
        )
    host.cut()
    ran: list[Any] = []
    retry = {"retries": 1, "delays": [0]}  # the lost attempt counts
    with _live_worker(lab, ran, lease_ms=3000, retry_strategy_fn=lambda job, exc: retry):
        wait_until(lambda: ran, 60, 0.05, "the job to run on a live worker")
    assert ran == ["cut"]
    _late_outcome_refused(lab, host, events, release, job_id)
    assert "event lease_lost" in _lines(events)


@contextlib.contextmanager
def _global_keepalives(lab: Lab, default: bool) -> Iterator[None]:
    """On MariaDB, the server's own keepalives for connections made in the block: the
    system's (`default`) or the lab's short ones; PostgreSQL's are per session."""
    if lab.server.kind != "mysql" or not default:
        yield
        return
    names = [option[2:].split("=")[0].replace("-", "_") for option in _MARIADB_KEEPALIVES]
    lab.local.execute("SET GLOBAL " + ", ".join(f"{name} = 0" for name in names))
    try:
        yield
    finally:
        lab.local.execute(
            "SET GLOBAL " + ", ".join(o[2:].replace("-", "_") for o in _MARIADB_KEEPALIVES)
        )

"""The Processes page by host and process, on both databases: each live worker under its
host and process, the stale ones in a section of their own, each busy thread's job linked;
what it shows checked against `admin.list_workers`."""

from __future__ import annotations

import re
import uuid
import warnings
from typing import Any

import pytest

from proletarian_di import admin
from proletarian_di.contrib.dashboard import dashboard
from proletarian_di.schema import workers_table

from backends import Backend, connection

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")


def row(backend: Backend, worker_id: str, host: str, pid: int, seen_ago_s: float, job: Any) -> None:
    """A worker's row as its process writes it, last seen `seen_ago_s` ago, running `job`
    on its first thread (None: idle)."""
    ago = (
        f"UTC_TIMESTAMP(6) - INTERVAL {seen_ago_s} SECOND"
        if backend.name == "mysql"
        else f"statement_timestamp() - interval '{seen_ago_s} seconds'"
    )
    running = (
        f'{{"thread":"w-0","activity":"running","for_s":2,"job_id":"{job}",'
        '"job_type":"import","attempt":1}'
        if job
        else '{"thread":"w-0","activity":"idle","for_s":3}'
    )
    backend.execute(
        f"INSERT INTO {workers_table(backend.job_table)} (worker_id, queue, queue_worker_id, "
        f"host, pid, threads, state, started_at, seen_at, activity) VALUES (%s, 'q', %s, %s, "
        f"%s, 2, 'running', {ago}, {ago}, %s)",
        (
            worker_id,
            f"proletarian[{worker_id}]",
            host,
            pid,
            f'[{running},{{"thread":"w-1","activity":"idle","for_s":3}}]',
        ),
    )


def test_workers_by_host_and_process_and_the_stale_apart(backend: Backend, pool: Any) -> None:
    busy = uuid.uuid4()
    row(backend, "a1", "host-a", 100, 0, busy)
    row(backend, "a2", "host-a", 100, 0, None)
    row(backend, "a3", "host-a", 101, 0, None)
    row(backend, "b1", "host-b", 200, 0, None)
    row(backend, "c1", "host-c", 300, 120, uuid.uuid4())
    with connection(backend) as conn:
        listed = {w.worker_id: w for w in admin.list_workers(conn)}
    assert {k: w.state for k, w in listed.items()} == {
        "a1": "running",
        "a2": "running",
        "a3": "running",
        "b1": "running",
        "c1": "stale",
    }
    page = TestClient(dashboard(pool)).get("/processes").text
    live, _, stale = page.partition('<section class="stale">')
    hosts = re.findall(r'<section class="host" data-host="([^"]+)">', live)
    assert hosts == ["host-a", "host-b"]
    processes = {}  # each process's tbody, to the next one
    for chunk in live.split('<tbody data-process="')[1:]:
        process, _, body = chunk.partition('"')
        processes[process] = re.findall(r'data-worker-id="([^"]+)"', body)
    assert processes == {"host-a:100": ["a1", "a2"], "host-a:101": ["a3"], "host-b:200": ["b1"]}
    for process, workers in processes.items():
        host, pid = process.split(":")
        assert all((listed[w].host, str(listed[w].pid)) == (host, pid) for w in workers)
    assert "host-a · PID 100 · 2 workers · 1 of 4 threads busy" in live
    assert re.findall(r'data-running="([^"]+)"', live) == [str(busy)]
    assert f'href="/jobs/{busy}"' in live
    assert re.findall(r'data-worker-id="([^"]+)"', stale) == ["c1"]
    assert "host-c · PID 300" in stale and "gone: not seen for" in stale


def test_only_stale_workers_say_so(backend: Backend, pool: Any) -> None:
    row(backend, "c1", "host-c", 300, 120, None)
    page = TestClient(dashboard(pool)).get("/processes").text
    assert "No live worker: every one listed is stale." in page
    assert '<section class="host"' not in page and '<section class="stale">' in page

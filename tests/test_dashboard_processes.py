"""The Processes page by host and process, on both databases: each live worker under its
host and process, the stale ones in a section of their own, each busy thread's job linked;
what it shows checked against `admin.list_workers`."""

from __future__ import annotations

import html
import re
import uuid
import warnings
from datetime import timedelta
from typing import Any

import pytest

from proletarian_di import RateLimit, admin, create_queue_worker
from proletarian_di._engine import registry as _registry
from proletarian_di.contrib.dashboard import dashboard
from proletarian_di.schema import workers_table

from backends import Backend, committed, connection, enqueue_committed, wait_until

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


# Why idle threads are idle ---------------------------------------------------------------------


@pytest.fixture
def quick_beats(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers beat every 50 ms here, so that the registry shows their threads at once."""
    monkeypatch.setattr(_registry, "BEAT_S", 0.05)


def idle_row(backend: Backend, worker_id: str, queue: str) -> None:
    """A live worker's row polling `queue`, its two threads idle."""
    backend.execute(
        f"INSERT INTO {workers_table(backend.job_table)} (worker_id, queue, queue_worker_id, "
        "host, pid, threads, state, started_at, seen_at, activity) VALUES (%s, %s, %s, 'h', 1, "
        f"2, 'running', {now_sql(backend)}, {now_sql(backend)}, %s)",
        (
            worker_id,
            queue,
            f"proletarian[{queue}]",
            '[{"thread":"w-0","activity":"idle","for_s":3},'
            '{"thread":"w-1","activity":"polling","for_s":1}]',
        ),
    )


def now_sql(backend: Backend) -> str:
    return "UTC_TIMESTAMP(6)" if backend.name == "mysql" else "statement_timestamp()"


def idle_of(page: str, worker_id: str) -> list[tuple[str, str, str]]:
    """The reasons shown beside a worker's idle threads: (kind, title, text) of each."""
    start = page.index(f'data-worker-id="{worker_id}"')
    block = page[start:].split("</table>", 1)[0]
    return [
        (kind, html.unescape(title), html.unescape(text))
        for kind, title, text in re.findall(
            r'<span class="badge badge-[a-z_]+" data-idle="([a-z_]+)" '
            r'title="([^"]*)">([^<]*)</span>',
            block,
        )
    ]


def explained(backend: Backend, job_id: uuid.UUID) -> list[str]:
    with connection(backend) as conn:
        found = admin.explain_job(conn, job_id)
    assert found is not None
    return found.reasons


def test_idle_threads_say_no_due_job_paused_or_nothing_as_the_database_has_it(backend, pool):
    idle_row(backend, "empty", "empty")
    idle_row(backend, "paused", "paused")
    idle_row(backend, "later", "later")
    idle_row(backend, "due", "due")
    [held] = enqueue_committed(backend, ("x", None), queue="paused")
    committed(backend, admin.pause_queue, "paused")
    enqueue_committed(backend, ("x", None), queue="later", process_in=timedelta(hours=1))
    [waiting] = enqueue_committed(backend, ("x", None), queue="due")
    page = TestClient(dashboard(pool)).get("/processes").text
    with connection(backend) as conn:
        stats = {q: admin.queue_overview(conn, q) for q in ("empty", "paused", "later", "due")}
    # no job due: both idle threads say so, and the database has none queued or retrying
    for queue in ("empty", "later"):
        assert stats[queue].queued == stats[queue].retrying == 0
        assert (
            idle_of(page, queue)
            == [
                (
                    "no_due_job",
                    f"no job of queue {queue!r} is due and free to claim now",
                    "no due job",
                )
            ]
            * 2
        )
    assert stats["later"].scheduled == 1
    # paused: the sentence explain_job says of its due job
    assert set(committed(backend, admin.paused_queues)) == {"paused"}
    [reason] = explained(backend, held)[:1]
    assert idle_of(page, "paused") == [("paused", reason, "queue paused")] * 2
    # a due job no worker runs: nothing holds the threads back, so no reason is given
    assert stats["due"].queued == 1 and explained(backend, waiting) == []
    assert idle_of(page, "due") == []


def test_a_thread_idle_beside_the_queues_only_running_job_says_no_due_job(
    backend, pool, gate, quick_beats
):
    [job] = enqueue_committed(backend, ("slow", None), queue="one")
    with create_queue_worker(pool, gate, queue="one", worker_threads=2):
        assert gate.started.wait(30)

        def shown() -> list[tuple[str, str, str]] | None:
            page = TestClient(dashboard(pool)).get("/processes").text
            found = re.findall(r'data-running="([^"]+)"', page)
            return idle_of(page, page.split('data-worker-id="')[1].split('"')[0]) if found else None

        reasons = wait_until(shown, description="the running job on the page")
        with connection(backend) as conn:
            assert admin.get_job(conn, job).state == "running"
            assert admin.queue_overview(conn, "one").queued == 0
        assert [kind for kind, _, _ in reasons] == ["no_due_job"]
        gate.release.set()


def test_max_running_full_and_rate_limited_as_explain_job_says(backend, pool, gate, quick_beats):
    [first] = enqueue_committed(backend, ("slow", 1), queue="capped")
    capped = create_queue_worker(pool, gate, queue="capped", worker_threads=2, max_running=1)
    rate = RateLimit(1, 60_000)
    limited = create_queue_worker(pool, lambda t, p: None, queue="limited", rate_limit=rate)
    with capped, limited:
        assert gate.started.wait(30)
        [second] = enqueue_committed(backend, ("slow", 2), queue="capped")
        [ran, later] = enqueue_committed(backend, ("call", 1), ("call", 2), queue="limited")

        def shown() -> dict[str, list[tuple[str, str, str]]] | None:
            page = TestClient(dashboard(pool)).get("/processes").text
            ids = dict(
                re.findall(r'data-worker-id="([^"]+)".*?<a href="/jobs\?queue=([^"]+)"', page, re.S)
            )
            found = {queue: idle_of(page, worker) for worker, queue in ids.items()}
            kinds = {q: {kind for kind, _, _ in r} for q, r in found.items()}
            wanted = kinds.get("capped") == {"max_running"} and kinds.get("limited") == {
                "rate_limited"
            }
            return found if wanted else None

        found = wait_until(shown, description="both queues' idle threads held back")
        [(_, capped_reason, capped_text)] = found["capped"]
        assert capped_text == "max_running full"
        assert [capped_reason] == explained(backend, second)
        assert capped_reason.endswith(f"and {first} holds its slot")
        [(_, limited_reason, limited_text)] = found["limited"]
        assert [limited_reason] == explained(backend, later)
        until = limited_reason.split(" until ")[1][:23]
        assert limited_text == f"rate limited until {until[11:19]} UTC"
        with connection(backend) as conn:
            assert admin.get_job(conn, ran).state == "succeeded"
            assert admin.get_job(conn, later).state == "queued"
        gate.release.set()

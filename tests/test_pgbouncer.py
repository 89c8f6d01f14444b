"""Workers, enqueue, admin and the lifecycle through a real PgBouncer in transaction pooling
mode (`pgbouncer_server`; Debian's 1.18 in CI, which `.ci/run` installs): `pgbouncer=True`
keeps nothing on a server connection past its transaction, and the listener goes around
the pooler (`listen_conninfo`). PostgreSQL only: PgBouncer is PostgreSQL's."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from faults import EventLog, running, wait_for
from psycopg_pool import ConnectionPool

from proletarian_di import ConfigurationError, admin, create_queue_worker, enqueue
from proletarian_di.lifecycle import worker_running

import pgbouncer_server
from backends import Backend, as_uuid

pytestmark = pytest.mark.db
JOBS = 200
TROUBLE = ("polling_error", "listener_error", "worker_thread_died", "heartbeat_error")


@pytest.fixture(scope="module")
def bouncer(postgresql_backend: Backend) -> Iterator[str]:
    """A URL through a PgBouncer in front of the session's PostgreSQL."""
    if pgbouncer_server.installed() is None:
        reason = "pgbouncer is not installed (Debian: apt-get install pgbouncer)"
        if os.environ.get("PROLETARIAN_REQUIRE_PGBOUNCER") == "1":
            pytest.fail(f"PROLETARIAN_REQUIRE_PGBOUNCER=1 but {reason}")
        pytest.skip(reason)
    with pgbouncer_server.pgbouncer(postgresql_backend.url) as url:
        yield url


@pytest.fixture
def pool(bouncer: str, pg: Backend) -> Iterator[ConnectionPool]:
    """A pool through PgBouncer that does not prepare statements, as the docs say."""
    with ConnectionPool(
        bouncer, min_size=1, max_size=8, kwargs={"prepare_threshold": None}
    ) as through:
        yield through


def enqueue_through(pool: ConnectionPool, count: int) -> list[Any]:
    with pool.connection() as conn:
        ids = [enqueue(conn, "work", {"n": n}) for n in range(count)]
    return ids


def archived(backend: Backend) -> list[tuple[Any, str]]:
    return [
        (as_uuid(job_id), status)
        for job_id, status in backend.query(
            f"SELECT job_id, status FROM {backend.archived_job_table}"
        )
    ]


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"batch_size": 5},
        {"lease_ms": 30_000},
        {"max_running": 2},
        {"job_timeout_ms": 30_000},
        {"lease_ms": 30_000, "job_timeout_ms": 30_000, "batch_size": 5},
        {"handler_fn_mode": "advanced"},
        {"max_crashes": 3},
    ],
    ids=[
        "held",
        "batch",
        "lease",
        "max_running",
        "timeout",
        "lease-timeout-batch",
        "advanced",
        "max_crashes",
    ],
)
def test_a_worker_drains_through_pgbouncer_with_no_error(pg, pool, options):
    ids = enqueue_through(pool, JOBS)
    events = EventLog()
    ran: list[Any] = []

    def handler(*args: Any) -> None:
        payload = args[0].payload if len(args) == 1 else args[1]  # advanced: the Job
        ran.append(payload["n"])

    worker = create_queue_worker(
        pool,
        handler,
        worker_threads=4,
        polling_interval_ms=20,
        pgbouncer=True,
        log=events,
        **options,
    )
    with running(worker):
        wait_for(lambda: len(archived(pg)) == JOBS, what=f"{JOBS} jobs archived")
    assert sorted(archived(pg)) == sorted((job_id, "success") for job_id in ids)
    assert sorted(ran) == list(range(JOBS))
    assert [(name, data) for name, data in events.events if name in TROUBLE] == []


def test_max_running_holds_through_pgbouncer(pg, pool):
    """The running slots are advisory locks of the claim's transaction: a pooler keeps
    them with the transaction, so 4 threads under max_running=2 never run 3 at once."""
    enqueue_through(pool, 24)
    lock, now, most = threading.Lock(), [0], [0]

    def handler(job_type: str, payload: Any) -> None:
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        time.sleep(0.03)
        with lock:
            now[0] -= 1

    worker = create_queue_worker(
        pool, handler, worker_threads=4, polling_interval_ms=10, max_running=2, pgbouncer=True
    )
    with running(worker):
        wait_for(lambda: len(archived(pg)) == 24, what="24 jobs archived")
    assert most[0] == 2


def test_the_listener_goes_around_the_pooler(pg, pool):
    """With polling every 30 s, a job enqueued through PgBouncer runs at once: its
    NOTIFY reaches the worker's LISTEN on `listen_conninfo`, a direct connection."""
    started = threading.Event()
    worker = create_queue_worker(
        pool,
        lambda job_type, payload: started.set(),
        polling_interval_ms=30_000,
        fallback_polling_interval_ms=60_000,
        pgbouncer=True,
        listen_conninfo=pg.url,
    )
    with running(worker):
        time.sleep(0.5)  # started, idle, and its first polls done
        enqueue_through(pool, 1)
        assert started.wait(10)


def test_enqueue_and_admin_read_through_pgbouncer(pg, pool):
    (job_id,) = enqueue_through(pool, 1)
    with pool.connection() as conn:
        info = admin.get_job(conn, job_id)
        stats = {s.queue: s for s in admin.queue_stats(conn)}
    assert info is not None and info.state == "queued"
    assert stats["default"].due == 1


def test_worker_running_starts_and_stops_a_worker_through_pgbouncer(pg, pool):
    enqueue_through(pool, 3)
    worker = create_queue_worker(pool, lambda t, p: None, polling_interval_ms=20, pgbouncer=True)
    with worker_running(worker):
        wait_for(lambda: len(archived(pg)) == 3, what="3 jobs archived")
    assert worker.state == "stopped"
    assert pg.query(f"SELECT count(*) FROM {pg.job_table}") == [(0,)]


def test_a_pool_that_prepares_statements_is_refused_at_start(pg, bouncer):
    with ConnectionPool(bouncer, min_size=1, max_size=2) as preparing:
        worker = create_queue_worker(preparing, lambda t, p: None, pgbouncer=True)
        with pytest.raises(ConfigurationError, match="prepare_threshold"):
            worker.start()
        assert worker.state == "new"  # nothing started


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"pgbouncer": True, "max_running": 2, "job_timeout_ms": 1_000}, "session-level"),
        ({"pgbouncer": True, "max_running": 2, "job_timeouts": {"x": 5}}, "session-level"),
        ({"listen_conninfo": "postgresql://u@127.0.0.1/db"}, "listen_conninfo is for"),
        ({"pgbouncer": "yes"}, "pgbouncer must be a bool"),
        ({"pgbouncer": True, "listen_conninfo": ""}, "listen_conninfo must be"),
        ({"pgbouncer": True, "listen_conninfo": "mysql://u@h/db"}, "must be a postgresql:// URL"),
    ],
)
def test_what_a_transaction_pooler_cannot_keep_is_refused(options, named):
    with pytest.raises(ConfigurationError, match=named):
        create_queue_worker(lambda: None, lambda t, p: None, **options)


def test_a_worker_finds_pgbouncer_by_itself_and_says_so(pg, pool):
    """Without `pgbouncer=True`, the handshake's backend pid (PgBouncer's own cancel key)
    tells the pooler at start: the worker works as with the option, with no error."""
    ids = enqueue_through(pool, 60)
    events = EventLog()
    worker = create_queue_worker(
        pool, lambda t, p: None, worker_threads=4, polling_interval_ms=10, log=events
    )
    with running(worker):
        wait_for(lambda: len(archived(pg)) == 60, what="60 jobs archived")
    assert sorted(archived(pg)) == sorted((job_id, "success") for job_id in ids)
    assert events.named("pooler_detected") == [
        {"queue_worker_id": worker.queue_worker_id, "listen_conninfo": False}
    ]
    assert [(name, data) for name, data in events.events if name in TROUBLE] == []


def test_a_direct_connection_is_not_taken_for_a_pooler(pg):
    events = EventLog()
    with ConnectionPool(pg.url, min_size=1, max_size=2) as direct:
        worker = create_queue_worker(direct, lambda t, p: None, log=events)
        with running(worker):
            pass
    assert events.named("pooler_detected") == []


def test_a_found_pooler_refuses_what_it_cannot_keep(pg, pool):
    worker = create_queue_worker(pool, lambda t, p: None, max_running=1, job_timeout_ms=1_000)
    with pytest.raises(ConfigurationError, match=r"a pooler .* max_running and a job timeout"):
        worker.start()

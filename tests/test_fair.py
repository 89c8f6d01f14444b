"""Group keys and fair claims: `enqueue(..., group_key=...)` and `fair=True`, where a
worker's claims take turns across a queue's group keys, on both databases, in both modes."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from proletarian_di import (
    ConfigurationError,
    SchemaError,
    admin,
    create_queue_worker,
    enqueue,
    enqueue_many,
    process_next_job,
    worker_running,
)

from backends import Backend, connection, wait_until

MODES = [pytest.param({}, id="held"), pytest.param({"lease_ms": 10_000}, id="lease")]


def enqueue_groups(backend: Backend, *groups: tuple[str | None, int]) -> None:
    """`count` jobs of each group key, in that order (each due a little after the last)."""
    with connection(backend) as conn:
        for group, count in groups:
            for n in range(count):
                enqueue(conn, "work", f"{group}-{n}", group_key=group)
        conn.commit()


def test_enqueue_many_gives_every_job_the_group_key(backend: Backend) -> None:
    with connection(backend) as conn:
        ids = enqueue_many(conn, [("work", n) for n in range(3)], group_key="t1", priority=2)
        conn.commit()
        assert [admin.get_job(conn, i).group_key for i in ids] == ["t1"] * 3


@pytest.mark.parametrize("mode", MODES)
def test_a_small_tenant_does_not_wait_behind_a_big_one(backend: Backend, pool: Any, mode):
    """200 jobs of tenant a, enqueued first, then 10 of b: one fair thread runs b's ten
    within the first twenty jobs, alternating with a's."""
    enqueue_groups(backend, ("a", 200), ("b", 10))
    ran: list[str] = []
    done = threading.Event()

    def handler(job_type: str, payload: str) -> None:
        ran.append(payload)
        if len(ran) == 210:
            done.set()

    worker = create_queue_worker(pool, handler, fair=True, polling_interval_ms=20, **mode)
    with worker_running(worker):
        assert done.wait(60)
    first = ran[:20]
    assert sorted(p for p in first if p.startswith("b-")) == sorted(f"b-{n}" for n in range(10))
    assert [p[0] for p in first] == ["a", "b"] * 10, first
    assert [p for p in ran if p.startswith("a-")] == [f"a-{n}" for n in range(200)], "in order"


def test_without_fair_the_queue_runs_in_enqueue_order(backend: Backend, pool: Any) -> None:
    enqueue_groups(backend, ("a", 5), ("b", 2))
    ran: list[str] = []
    while process_next_job(pool, lambda t, p: ran.append(p)):
        pass
    assert ran == ["a-0", "a-1", "a-2", "a-3", "a-4", "b-0", "b-1"]


def test_jobs_without_a_group_key_take_one_turn_per_round(backend: Backend, pool: Any) -> None:
    """Groups a, b and jobs with no key: each round serves a, b, then one job without a key;
    priorities still order the jobs within a group."""
    enqueue_groups(backend, (None, 3), ("b", 3), ("a", 3))
    with connection(backend) as conn:
        enqueue(conn, "work", "b-urgent", group_key="b", priority=10)
        conn.commit()
    ran: list[str] = []
    worker = create_queue_worker(
        pool, lambda t, p: ran.append(p), fair=True, polling_interval_ms=20
    )
    with worker_running(worker):
        wait_until(lambda: len(ran) == 10, timeout=30)
    assert ran == [
        "a-0", "b-urgent", "None-0",
        "a-1", "b-0", "None-1",
        "a-2", "b-1", "None-2",
        "b-2",
    ]  # fmt: skip


def test_two_fair_workers_share_between_groups(backend: Backend, pool: Any) -> None:
    """Two workers of two threads: however their turns interleave, group b's jobs take
    about every other start until they are done, while most of a's 300 still wait. (A
    thread the machine starves holds the job it claimed ahead meanwhile: the count is of
    the first 40 starts, not of the a's run before b's last.)"""
    enqueue_groups(backend, ("a", 300), ("b", 20))
    ran: list[str] = []
    lock = threading.Lock()

    def handler(job_type: str, payload: str) -> None:
        with lock:
            ran.append(payload)

    workers = [
        create_queue_worker(pool, handler, fair=True, worker_threads=2, polling_interval_ms=20)
        for _ in range(2)
    ]
    with worker_running(*workers):
        wait_until(lambda: sum(p.startswith("b-") for p in ran) == 20, timeout=60)
        with lock:
            first = ran[:40]
    b_first = sum(p.startswith("b-") for p in first)
    assert b_first >= 15, f"only {b_first} of the first 40 jobs were b's: {first}"


@pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")
def test_get_job_jobs_show_and_the_job_page_show_the_group_key(backend: Backend, pool) -> None:
    from starlette.testclient import TestClient
    from test_cli import run

    from proletarian_di.contrib.dashboard import dashboard

    with connection(backend) as conn:
        grouped = enqueue(conn, "work", None, group_key="<tenant-7>")
        plain = enqueue(conn, "work", None)
        conn.commit()
        assert admin.get_job(conn, grouped).group_key == "<tenant-7>"
        assert admin.get_job(conn, plain).group_key is None
    tables = ["--job-table", backend.job_table, "--archived-job-table", backend.archived_job_table]
    shown = run("jobs", "show", str(grouped), "-d", backend.url, *tables)
    assert shown.exit_code == 0 and "group key <tenant-7>" in shown.stdout, shown.output
    page = TestClient(dashboard(pool)).get(f"/jobs/{grouped}").text
    assert "<dt>Group key</dt><dd><code>&lt;tenant-7&gt;</code></dd>" in page


def test_a_fair_worker_with_max_running_takes_turns_within_its_cap(
    backend: Backend, pool: Any
) -> None:
    """`fair=True` and `max_running=1`, three threads: a's five jobs and b's two take turns,
    and never two run at once."""
    enqueue_groups(backend, ("a", 5), ("b", 2))
    order: list[str] = []
    running, most = [0], [0]
    lock = threading.Lock()

    def handler(job_type: str, payload: str) -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            order.append(payload[0])
        threading.Event().wait(0.02)
        with lock:
            running[0] -= 1

    worker = create_queue_worker(
        pool, handler, fair=True, max_running=1, worker_threads=3, polling_interval_ms=20
    )
    with worker_running(worker):
        wait_until(lambda: len(order) == 7, description="seven ran")
    assert most == [1]
    assert order == ["a", "b", "a", "b", "a", "a", "a"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"fair": True, "batch_size": 2}, "fair=True and batch_size > 1"),
        ({"fair": "yes"}, "fair must be a bool"),
    ],
)
def test_fair_refuses_what_it_cannot_take_turns_with(backend: Backend, options, message):
    with pytest.raises(ConfigurationError, match=message):
        create_queue_worker(backend.pool(1), print, **options)


@pytest.mark.parametrize(
    ("group", "message"),
    [("", "group_key must be a non-empty string"), ("x" * 256, "at most 255"), (7, "string")],
)
def test_bad_group_keys_are_clear_errors(backend: Backend, group, message) -> None:
    with connection(backend) as conn, pytest.raises(ConfigurationError, match=message):
        enqueue(conn, "work", None, group_key=group)


def test_a_group_key_on_a_schema_without_the_column_is_named(backend: Backend) -> None:
    tables = {"job_table": "fair_old.job"}
    old = backend.with_tables("fair_old.job", "fair_old.archived_job")
    old.install()
    index = "fair_old.job_queue_group_key"
    if backend.name == "mysql":
        index = "job_queue_group_key ON fair_old.job"
    try:
        old.execute(f"DROP INDEX {index}")
        old.execute("ALTER TABLE fair_old.job DROP COLUMN group_key")
        with connection(backend) as conn:
            with pytest.raises(SchemaError, match="older than the group_keys step"):
                enqueue(conn, "work", None, group_key="t", **tables)
            conn.rollback()
            enqueue(conn, "work", None, **tables)  # without a key, as before
    finally:
        old.execute("DROP TABLE IF EXISTS fair_old.job")

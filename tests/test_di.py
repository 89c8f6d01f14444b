"""dependency-injector resources: real pools and workers, start-up errors, shutdown order."""

from __future__ import annotations

import asyncio
import contextlib
import threading

import psycopg_pool
import pytest
from dependency_injector import containers, providers

from proletarian_di import QueueWorker, SchemaError, worker_running
from proletarian_di.di import (
    async_mysql_data_source,
    async_postgres_pool,
    async_queue_worker,
    container_workers,
    init_resources,
    mysql_data_source,
    postgres_pool,
    queue_worker,
    shutdown_resources,
)
from proletarian_di.errors import ConfigurationError
from proletarian_di.mysql import MySQLDataSource

from backends import enqueue_committed, wait_until

FAST = {"polling_interval_ms": 10}


def source_resource(backend, *, asynchronous=False):
    """The data-source resource for this backend, sized for the tests' workers."""
    if backend.name == "postgresql":
        fn = async_postgres_pool if asynchronous else postgres_pool
        return providers.Resource(fn, backend.url, min_size=1, max_size=6)
    fn = async_mysql_data_source if asynchronous else mysql_data_source
    return providers.Resource(fn, backend.url, max_connections=6)


def record_closes(monkeypatch, events):
    """Record when any pool of either kind is closed (the real close still runs)."""
    for cls in (psycopg_pool.ConnectionPool, MySQLDataSource):
        original = cls.close

        def close(self, *args, _original=original, **kwargs):
            events.append("pool closed")
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(cls, "close", close)


def pool_answers(source) -> bool:
    with source.connection() as conn:
        cur = conn.cursor()
        cur.execute("SELECT 1")
        return cur.fetchone()[0] == 1


_made: list[containers.DeclarativeContainer] = []


@pytest.fixture(autouse=True)
def _shut_down_leftovers():
    """A failing test must not leave workers polling a database that later tests reset."""
    yield
    while _made:
        container = _made.pop()
        if any(p.initialized for p in container.traverse(types=[providers.Resource])):
            with contextlib.suppress(Exception):
                result = container.shutdown_resources()
                if result is not None:
                    asyncio.run(result)
    leftover = [t.name for t in threading.enumerate() if t.name.startswith("proletarian[")]
    assert not leftover, f"worker threads still running after the test: {leftover}"


def make_container(backend, handler, *, asynchronous=False, **email_options):
    worker_fn = async_queue_worker if asynchronous else queue_worker

    class Container(containers.DeclarativeContainer):
        data_source = source_resource(backend, asynchronous=asynchronous)
        email_worker = providers.Resource(
            worker_fn,
            data_source,
            handler,
            queue="email",
            worker_threads=2,
            **FAST,
            **email_options,
        )
        reports_worker = providers.Resource(
            worker_fn, data_source, handler, queue="reports", **FAST
        )

    container = Container()
    _made.append(container)
    return container


def test_container_runs_jobs_then_drains_workers_before_closing_the_pool(backend, monkeypatch):
    events: list[str] = []
    started, release = threading.Event(), threading.Event()
    seen: list[tuple[str, object]] = []

    def handler(job_type, payload):
        if job_type == "slow":
            started.set()
            assert release.wait(10)
        seen.append((job_type, payload))

    def on_shutdown():
        events.append(f"worker stopped, pool answers={pool_answers(container.data_source())}")

    container = make_container(backend, handler, on_shutdown=on_shutdown)
    record_closes(monkeypatch, events)
    container.init_resources()
    worker = container.email_worker()
    assert isinstance(worker, QueueWorker) and worker.running
    assert set(container_workers(container)) == {worker, container.reports_worker()}

    enqueue_committed(backend, ("fast", {"n": 1}), queue="reports")
    enqueue_committed(backend, ("slow", {"n": 2}), queue="email")
    assert started.wait(10)
    wait_until(lambda: ("fast", {"n": 1}) in seen)

    stopper = threading.Thread(target=container.shutdown_resources)
    stopper.start()
    wait_until(lambda: not worker.running)  # stop() has begun, the slow job is in flight
    release.set()
    stopper.join(15)

    assert not stopper.is_alive()
    assert ("slow", {"n": 2}) in seen
    assert sorted(backend.archived()) == [("fast", "success", 1), ("slow", "success", 1)]
    assert events == ["worker stopped, pool answers=True", "pool closed"]
    assert not container.data_source.initialized
    assert worker.summary()["abandoned"] == 0


def test_async_init_runs_blocking_work_off_the_event_loop(backend, monkeypatch):
    events: list[str] = []
    record_closes(monkeypatch, events)
    ran: list[str] = []
    container = make_container(
        backend,
        lambda job_type, payload: ran.append(job_type),
        asynchronous=True,
        on_shutdown=lambda: events.append("worker stopped"),
    )

    async def main():
        loop_thread = threading.get_ident()
        start_threads: list[int] = []
        original_start = QueueWorker.start

        def start(self):
            start_threads.append(threading.get_ident())
            return original_start(self)

        monkeypatch.setattr(QueueWorker, "start", start)
        await container.init_resources()
        assert start_threads and loop_thread not in start_threads
        worker = await container.email_worker()
        assert worker.running
        enqueue_committed(backend, ("hello", None), queue="email")
        await asyncio.to_thread(wait_until, lambda: ran == ["hello"])
        await container.shutdown_resources()
        return worker

    worker = asyncio.run(main())
    assert not worker.running and not container_workers(container)
    assert events == ["worker stopped", "pool closed"]
    assert backend.archived() == [("hello", "success", 1)]


def test_worker_running_starts_and_stops_a_container(backend):
    ran: list[str] = []
    container = make_container(backend, lambda job_type, payload: ran.append(job_type))
    enqueue_committed(backend, ("a", None), ("b", None), queue="email")
    with worker_running(container):
        worker = container.email_worker()
        assert worker.running
        wait_until(lambda: len(backend.archived()) == 2)
    assert not worker.running
    assert not container.data_source.initialized
    assert sorted(ran) == ["a", "b"]


def test_one_failing_shutdown_step_does_not_skip_the_others(backend, monkeypatch):
    events: list[str] = []
    record_closes(monkeypatch, events)
    container = make_container(
        backend, lambda job_type, payload: None, on_shutdown=lambda: events.append("email")
    )
    container.init_resources()
    email = container.email_worker()
    reports = container.reports_worker()
    real_stop = email.stop

    def broken_stop():
        real_stop()
        raise RuntimeError("stop failed")

    monkeypatch.setattr(email, "stop", broken_stop)
    container.shutdown_resources()  # the failure is logged, not raised
    assert not reports.running and not email.running
    assert events == ["email", "pool closed"]


def test_shutdown_helper_goes_on_past_a_failing_user_resource(backend, monkeypatch):
    events: list[str] = []
    record_closes(monkeypatch, events)

    def flaky():
        yield "flaky"
        events.append("flaky failed")
        raise RuntimeError("flaky teardown")

    class Container(containers.DeclarativeContainer):
        data_source = source_resource(backend)
        broken = providers.Resource(flaky)
        worker = providers.Resource(queue_worker, data_source, lambda *a: None, **FAST)

    container = Container()
    container.init_resources()
    worker = container.worker()
    with pytest.raises(RuntimeError, match="flaky teardown"):
        shutdown_resources(container)
    assert not worker.running
    assert "flaky failed" in events and "pool closed" in events
    assert not any(p.initialized for p in container.traverse(types=[providers.Resource]))


def test_init_failure_closes_what_started(backend, monkeypatch):
    events: list[str] = []
    record_closes(monkeypatch, events)

    class Container(containers.DeclarativeContainer):
        data_source = source_resource(backend)
        worker = providers.Resource(
            queue_worker, data_source, lambda *a: None, job_table="proletarian.missing", **FAST
        )

    container = Container()
    with pytest.raises(SchemaError, match=r"proletarian\.missing"):
        init_resources(container)
    assert events == ["pool closed"]
    assert not container.data_source.initialized


def test_bad_postgres_url_fails_at_start_up_with_the_password_masked():
    class Container(containers.DeclarativeContainer):
        pool = providers.Resource(postgres_pool, "postgresql://app:s3cret@127.0.0.1:1/app")

    with pytest.raises(ConfigurationError) as info:
        Container().init_resources()
    message = str(info.value)
    assert "cannot connect to PostgreSQL at postgresql://app:***@127.0.0.1:1/app" in message
    assert "s3cret" not in message and "s3cret" not in repr(info.value.__cause__)


def test_bad_mysql_url_fails_at_start_up_with_the_password_masked():
    class Container(containers.DeclarativeContainer):
        source = providers.Resource(mysql_data_source, "mysql://app:s3cret@127.0.0.1:1/app")

    with pytest.raises(ConfigurationError) as info:
        Container().init_resources()
    assert "cannot connect to MySQL at mysql://app:***@127.0.0.1:1/app" in str(info.value)
    assert "s3cret" not in str(info.value)


def test_a_pool_smaller_than_the_worker_threads_is_a_clear_error(pg):
    class Container(containers.DeclarativeContainer):
        pool = providers.Resource(postgres_pool, pg.url, min_size=1, max_size=2)
        worker = providers.Resource(
            queue_worker, pool, lambda *a: None, queue="email", worker_threads=3
        )

    container = Container()
    with pytest.raises(ConfigurationError, match=r"max_size=2.*'email'.*worker_threads=3"):
        init_resources(container)
    assert not container.pool.initialized


def test_provider_override_injects_a_stub_handler(backend):
    calls: list[tuple[str, object]] = []

    class Container(containers.DeclarativeContainer):
        data_source = source_resource(backend)
        handler = providers.Object(lambda job_type, payload: 1 / 0)
        worker = providers.Resource(queue_worker, data_source, handler, **FAST)

    container = Container()
    container.handler.override(providers.Object(lambda t, p: calls.append((t, p))))
    enqueue_committed(backend, ("send_email", {"to": "a@example.com"}))
    with worker_running(container):
        wait_until(lambda: backend.archived())
    assert calls == [("send_email", {"to": "a@example.com"})]
    assert backend.archived() == [("send_email", "success", 1)]


def test_worker_running_shuts_down_a_container_that_failed_half_way(backend, monkeypatch):
    events: list[str] = []
    record_closes(monkeypatch, events)

    class Container(containers.DeclarativeContainer):
        data_source = source_resource(backend)
        good = providers.Resource(
            queue_worker,
            data_source,
            lambda *a: None,
            queue="good",
            on_shutdown=lambda: events.append("good stopped"),
            **FAST,
        )
        bad = providers.Resource(
            queue_worker, data_source, lambda *a: None, job_table="proletarian.missing", **FAST
        )

    container = Container()
    _made.append(container)
    with pytest.raises(SchemaError), worker_running(container):
        pass
    assert "pool closed" in events
    assert not any(p.initialized for p in container.traverse(types=[providers.Resource]))

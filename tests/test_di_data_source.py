"""A dependency-injector provider as the data source (`dashboard(container.pool)`,
`create_queue_worker(container.pool, ...)`), and callables that return something that is
not a connection, on both databases."""

from __future__ import annotations

import warnings

import pytest
from dependency_injector import containers, providers

from proletarian_di import create_queue_worker, process_next_job
from proletarian_di.contrib.dashboard import dashboard
from proletarian_di.di import mysql_data_source, postgres_pool
from proletarian_di.errors import ArgumentTypeError

from backends import Backend, enqueue_committed, wait_until

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")


def pool_container(backend: Backend) -> containers.DeclarativeContainer:
    """A container whose `pool` is a `Resource` of this backend's pool, not started yet."""
    if backend.name == "postgresql":
        resource = providers.Resource(postgres_pool, backend.url, min_size=1, max_size=4)
    else:
        resource = providers.Resource(mysql_data_source, backend.url, max_connections=4)

    class Container(containers.DeclarativeContainer):
        pool = resource
        connection = providers.Factory(backend.connect)

    return Container()


@pytest.fixture
def container(backend: Backend):
    made = pool_container(backend)
    yield made
    made.shutdown_resources()


def test_the_dashboard_takes_a_resource_provider_and_reads_through_its_pool(backend, container):
    (job_id,) = enqueue_committed(backend, ("send_email", {"to": "ann@example.com"}))
    client = TestClient(dashboard(container.pool))
    assert not container.pool.initialized  # mounting it starts nothing
    page = client.get("/")
    assert page.status_code == 200, page.text
    assert client.get(f"/jobs/{job_id}").status_code == 200
    assert container.pool.initialized


def test_the_dashboard_follows_a_container_that_restarts_its_resources(backend, container):
    client = TestClient(dashboard(container.pool))
    assert client.get("/").status_code == 200
    container.shutdown_resources()
    container.init_resources()
    assert client.get("/").status_code == 200


def test_a_worker_runs_jobs_through_a_resource_provider(backend, container):
    done: list[str] = []
    enqueue_committed(backend, ("a", {}), ("b", {}))
    worker = create_queue_worker(
        container.pool, lambda job_type, payload: done.append(job_type), polling_interval_ms=10
    )
    with worker:
        wait_until(lambda: len(done) == 2)
        worker.ping()  # a connection beside the pool, from the pool the provider gave
    assert sorted(done) == ["a", "b"]
    assert worker.summary()["succeeded"] == 2


def test_a_factory_provider_of_connections_opens_one_per_use(backend, container):
    enqueue_committed(backend, ("a", {}))
    assert process_next_job(container.connection, lambda job_type, payload: None) is True
    assert process_next_job(container.connection, lambda job_type, payload: None) is None


def test_a_callable_returning_a_pool_is_a_clear_error_naming_it(backend):
    pool = backend.pool(2)
    try:
        refused = r"returned a pool \(.*\).*pass the pool itself"
        with pytest.raises(ArgumentTypeError, match=refused):
            process_next_job(lambda: pool, lambda job_type, payload: None)
        client = TestClient(dashboard(lambda: pool), raise_server_exceptions=True)
        with pytest.raises(ArgumentTypeError, match=type(pool).__qualname__):
            client.get("/")
    finally:
        pool.close()


def test_a_callable_returning_something_else_names_what_it_returned(backend):
    with pytest.raises(ArgumentTypeError, match=r"returned builtins\.str, which is not a database"):
        process_next_job(lambda: "postgresql://nowhere", lambda job_type, payload: None)


def test_an_async_resource_provider_is_refused_at_once_with_what_to_pass(backend):
    from proletarian_di.di import async_mysql_data_source, async_postgres_pool

    if backend.name == "postgresql":
        resource = providers.Resource(async_postgres_pool, backend.url, min_size=1, max_size=2)
    else:
        resource = providers.Resource(async_mysql_data_source, backend.url)

    class Container(containers.DeclarativeContainer):
        pool = resource

    container = Container()
    for make in (dashboard, lambda source: create_queue_worker(source, print)):
        with pytest.raises(ArgumentTypeError, match=r"async provider.*await container\.pool\(\)"):
            make(container.pool)
    assert not container.pool.initialized


def test_a_scheduler_records_its_schedules_through_a_resource_provider(backend, container):
    from proletarian_di import PeriodicJob, create_scheduler

    name = "provider-hourly"
    backend.execute(f"DELETE FROM {backend.job_table}_periodic WHERE name = %s", (name,))
    scheduler = create_scheduler(container.pool, [PeriodicJob(name, "@hourly", "tick")])
    assert scheduler.register() == []
    rows = backend.query(f"SELECT cron FROM {backend.job_table}_periodic WHERE name = %s", (name,))
    assert [tuple(row) for row in rows] == [("@hourly",)]
    backend.execute(f"DELETE FROM {backend.job_table}_periodic WHERE name = %s", (name,))

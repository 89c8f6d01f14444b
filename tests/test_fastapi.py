"""worker_lifespan: real workers started and drained by a real FastAPI lifespan."""

from __future__ import annotations

import sys
import threading
from contextlib import asynccontextmanager
from pathlib import Path

import psycopg_pool
import pytest
from dependency_injector import containers, providers
from fastapi import FastAPI
from fastapi.testclient import TestClient

from proletarian_di import create_queue_worker
from proletarian_di.di import postgres_pool, queue_worker
from proletarian_di.fastapi import worker_lifespan

from backends import enqueue_committed, wait_until

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


class StubMailer:
    def __init__(self):
        self.sent = []

    def send(self, to, subject, body=""):
        self.sent.append((to, subject))


def test_lifespan_starts_workers_and_drains_them_before_the_pool_closes(pg, monkeypatch):
    events: list[str] = []
    started, release = threading.Event(), threading.Event()
    original_close = psycopg_pool.ConnectionPool.close

    def close(self, *args, **kwargs):
        events.append("pool closed")
        return original_close(self, *args, **kwargs)

    monkeypatch.setattr(psycopg_pool.ConnectionPool, "close", close)

    def handler(job_type, payload):
        started.set()
        assert release.wait(10)
        events.append(f"{job_type} finished")

    class Container(containers.DeclarativeContainer):
        pool = providers.Resource(postgres_pool, pg.url, min_size=1, max_size=4)
        worker = providers.Resource(
            queue_worker,
            pool,
            handler,
            polling_interval_ms=10,
            on_shutdown=lambda: events.append("worker stopped"),
        )

    @asynccontextmanager
    async def app_lifespan(app):
        events.append(f"app start, worker running={container.worker().running}")
        yield {"greeting": "hello"}
        events.append(f"app stop, worker running={container.worker().running}")

    container = Container()
    app = FastAPI(lifespan=worker_lifespan(container, lifespan=app_lifespan))

    @app.get("/state")
    def state(request_greeting: str | None = None):
        return {"running": container.worker().running}

    enqueue_committed(pg, ("slow", None))
    with TestClient(app) as client:
        assert client.get("/state").json() == {"running": True}
        assert started.wait(10)
        worker = container.worker()
        # release the in-flight job only once shutdown has begun
        threading.Thread(
            target=lambda: (wait_until(lambda: not worker.running), release.set())
        ).start()
    assert events == [
        "app start, worker running=True",
        "app stop, worker running=True",
        "slow finished",
        "worker stopped",
        "pool closed",
    ]
    assert pg.archived() == [("slow", "success", 1)]
    assert not container.pool.initialized


def test_lifespan_state_is_passed_through(pg):
    @asynccontextmanager
    async def app_lifespan(app):
        yield {"greeting": "hello"}

    worker = create_queue_worker(pg.connect, lambda t, p: None, polling_interval_ms=10)
    app = FastAPI(lifespan=worker_lifespan(worker, lifespan=app_lifespan))

    @app.get("/")
    def index(request: __import__("fastapi").Request):
        return {"greeting": request.state.greeting, "running": worker.running}

    with TestClient(app) as client:
        assert client.get("/").json() == {"greeting": "hello", "running": True}
    assert not worker.running


def test_a_failing_start_up_closes_the_pool_and_fails_the_app(pg):
    class Container(containers.DeclarativeContainer):
        pool = providers.Resource(postgres_pool, pg.url, min_size=1, max_size=2)
        worker = providers.Resource(
            queue_worker, pool, lambda t, p: None, job_table="proletarian.missing"
        )

    container = Container()
    app = FastAPI(lifespan=worker_lifespan(container))
    with pytest.raises(Exception, match=r"proletarian\.missing"), TestClient(app):
        pass
    assert not container.pool.initialized


def test_worker_lifespan_rejects_what_it_cannot_start():
    with pytest.raises(TypeError, match="container or a QueueWorker"):
        worker_lifespan(object())


@pytest.fixture
def signup_app(pg, monkeypatch):
    from containers.postgres import PostgresContainer
    from examples.fastapi_app.app import create_app

    monkeypatch.setenv("DATABASE_URL", pg.url)
    monkeypatch.setenv("EMAIL_POLLING_INTERVAL_MS", "10")
    pg.execute("DROP TABLE IF EXISTS app_account")
    container = PostgresContainer()
    mailer = StubMailer()
    container.mailer.override(providers.Object(mailer))
    return create_app(container), mailer


@pytest.mark.parametrize("path", ["/signup", "/signup-async"])
def test_signup_writes_the_account_and_its_email_job_in_one_transaction(signup_app, pg, path):
    app, mailer = signup_app
    with TestClient(app) as client:
        response = client.post(path, json={"email": "a@example.com"})
        assert response.status_code == 201, response.text
        wait_until(lambda: mailer.sent)
        duplicate = client.post(path, json={"email": "a@example.com"})
        assert duplicate.status_code == 409
    assert mailer.sent == [("a@example.com", "Confirm your account")]
    assert pg.query("SELECT email FROM app_account") == [("a@example.com",)]
    assert pg.archived() == [("send_email", "success", 1)]
    assert pg.jobs() == []  # the rolled-back duplicate left no job behind


def test_health_routes_and_metrics_mount_follow_the_containers_workers(backend):
    from prometheus_client import REGISTRY

    from proletarian_di.contrib.fastapi import health_router, metrics_app
    from proletarian_di.contrib.prometheus import metrics_observer
    from proletarian_di.di import mysql_data_source

    source = (
        providers.Resource(mysql_data_source, backend.url, max_connections=2)
        if backend.name == "mysql"
        else providers.Resource(postgres_pool, backend.url, min_size=1, max_size=2)
    )

    class Container(containers.DeclarativeContainer):
        pool = source
        worker = providers.Resource(
            queue_worker,
            pool,
            lambda job_type, payload: None,
            queue="health",
            polling_interval_ms=10,
            observers=[metrics_observer()],
        )

    container = Container()
    app = FastAPI(lifespan=worker_lifespan(container))
    app.include_router(health_router(container), prefix="/health")
    app.mount("/metrics", metrics_app())
    labels = {"queue": "health", "job_type": "ping", "outcome": "succeeded"}
    before = REGISTRY.get_sample_value("proletarian_jobs_total", labels) or 0
    with TestClient(app) as client:
        live, ready = client.get("/health/livez"), client.get("/health/readyz")
        assert (live.status_code, ready.status_code) == (200, 200), ready.text
        [worker] = ready.json()["workers"]
        assert worker["queue_worker_id"] == "proletarian[health]" and worker["ready"]
        enqueue_committed(backend, ("ping", None), queue="health")
        wait_until(
            lambda: REGISTRY.get_sample_value("proletarian_jobs_total", labels) == before + 1
        )
        scraped = client.get("/metrics/").text
        assert (
            'proletarian_jobs_total{job_type="ping",outcome="succeeded",queue="health"}' in scraped
        )
    # After shutdown the container has no running worker: nothing to be ready with.
    assert client.get("/health/readyz").status_code == 503


def test_a_scrape_while_the_database_hangs_holds_up_no_other_request(backend):
    from faults import TCPProxy, pool_via, upstream_of, url_via
    from prometheus_client import CollectorRegistry

    from proletarian_di.contrib.fastapi import metrics_app
    from proletarian_di.contrib.prometheus import register_queue_depth

    registry = CollectorRegistry()
    app = FastAPI()
    app.mount("/metrics", metrics_app(registry))

    @app.get("/ping")
    async def ping() -> dict[str, bool]:
        return {"pong": True}

    with TCPProxy(upstream_of(backend)) as proxy:
        pool = pool_via(backend, url_via(backend, proxy), 2)
        try:
            register_queue_depth(pool, registry=registry, timeout_s=60)
            with TestClient(app) as client:
                assert client.get("/metrics/").status_code == 200
                proxy.stall()
                try:
                    held = proxy.held
                    scraped: list[int] = []
                    scrape = threading.Thread(
                        target=lambda: scraped.append(client.get("/metrics/").status_code),
                        daemon=True,
                    )
                    scrape.start()
                    wait_until(lambda: proxy.held > held, description="the scrape to wait on it")
                    pinged: list[int] = []
                    other = threading.Thread(
                        target=lambda: pinged.append(client.get("/ping").status_code),
                        daemon=True,
                    )
                    other.start()
                    other.join(10)
                    assert pinged == [200], "the event loop was held up by the scrape"
                    assert scrape.is_alive()  # the scrape still waits on the database
                finally:
                    proxy.flow()  # before the client's exit, which waits for the event loop
                scrape.join(30)
                assert scraped == [200]
        finally:
            proxy.flow()
            pool.close()

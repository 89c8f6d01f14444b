"""Prometheus metrics on both databases: outcomes, run times and pickup delays counted by the
observer as jobs run, queue depths read by the collector at scrape time."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from faults import TCPProxy, pool_via, upstream_of, url_via
from prometheus_client import CollectorRegistry, generate_latest

from proletarian_di import RetrySpec, create_queue_worker, process_next_job
from proletarian_di.admin import Tables, pause_queue
from proletarian_di.contrib.prometheus import (
    PrometheusObserver,
    QueueDepthCollector,
    metrics_observer,
    register_queue_depth,
)
from proletarian_di.observers import Observer

from backends import Events, committed, enqueue_committed, wait_until


def flaky(job_type: str, payload: Any) -> None:
    if job_type == "bad":
        raise ValueError("no")


def jobs_total(registry: CollectorRegistry, queue: str, job_type: str, outcome: str) -> float:
    labels = {"queue": queue, "job_type": job_type, "outcome": outcome}
    return registry.get_sample_value("proletarian_jobs_total", labels) or 0.0


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


def test_outcomes_are_counted_per_queue_and_job_type(backend, pool, registry):
    observer = metrics_observer(registry)
    enqueue_committed(backend, ("ok", None), ("ok", None), ("bad", None), queue="mail")
    retry = {"retry_strategy_fn": lambda job, exc: RetrySpec(retries=1)}
    for _ in range(4):
        process_next_job(pool, flaky, queue="mail", observers=[observer], **retry)
    assert jobs_total(registry, "mail", "ok", "succeeded") == 2
    assert jobs_total(registry, "mail", "bad", "retried") == 1
    assert jobs_total(registry, "mail", "bad", "failed") == 1
    assert jobs_total(registry, "mail", "ok", "failed") == 0
    runs = registry.get_sample_value(
        "proletarian_job_run_seconds_count", {"queue": "mail", "job_type": "bad"}
    )
    assert runs == 2
    assert metrics_observer(registry) is observer


def test_timed_out_attempts_are_counted(backend, pool, registry):
    release = threading.Event()

    def stuck(job_type: str, payload: Any) -> None:
        release.wait(10)

    enqueue_committed(backend, ("slow", None), queue="slow")
    worker = create_queue_worker(
        pool,
        stuck,
        queue="slow",
        job_timeout_ms=200,
        polling_interval_ms=20,
        observers=[PrometheusObserver(registry)],
    )
    with worker:
        wait_until(lambda: jobs_total(registry, "slow", "slow", "failed") == 1)
        release.set()
    assert jobs_total(registry, "slow", "slow", "timed_out") == 1


def test_pickup_delay_runs_from_process_at_to_the_handler(backend, pool, registry):
    observer = PrometheusObserver(registry)
    [job_id] = enqueue_committed(backend, ("late", None), queue="q")
    key = job_id.bytes if backend.name == "mysql" else job_id
    backend.execute(
        f"UPDATE {backend.job_table} SET process_at = process_at - INTERVAL '30' SECOND "
        "WHERE job_id = %s",
        (key,),
    )
    assert process_next_job(pool, flaky, queue="q", observers=[observer]) is True
    labels = {"queue": "q", "job_type": "late"}
    assert registry.get_sample_value("proletarian_job_pickup_delay_seconds_count", labels) == 1
    assert 30 <= registry.get_sample_value("proletarian_job_pickup_delay_seconds_sum", labels) < 60


def test_queue_depth_is_read_at_scrape_time(backend, pool, registry):
    register_queue_depth(pool, registry=registry)
    enqueue_committed(backend, ("a", None), ("a", None), queue="mail")
    enqueue_committed(backend, ("b", None), queue="mail", process_in=timedelta(hours=1))
    committed(backend, pause_queue, "mail")

    def depth(state: str) -> float | None:
        return registry.get_sample_value(
            "proletarian_queue_jobs", {"queue": "mail", "state": state}
        )

    assert (depth("queued"), depth("scheduled"), depth("running")) == (2, 1, 0)
    assert registry.get_sample_value("proletarian_queue_paused", {"queue": "mail"}) == 1
    assert registry.get_sample_value("proletarian_database_up") == 1
    enqueue_committed(backend, ("a", None), queue="mail")
    assert depth("queued") == 3  # read again at the next scrape


def test_an_unreachable_database_is_reported_not_raised(backend, registry):
    def unreachable() -> Any:
        raise ConnectionError("connection refused (password=hunter2)")

    registry.register(QueueDepthCollector(unreachable))
    scraped = generate_latest(registry).decode()
    assert "proletarian_database_up 0.0" in scraped
    assert "proletarian_queue_jobs{" not in scraped


def test_an_observer_that_raises_never_fails_a_job(backend, pool):
    class Broken(Observer):
        def job_started(self, job: Any) -> None:
            raise RuntimeError("observer bug")

    events = Events()
    enqueue_committed(backend, ("ok", None))
    assert process_next_job(pool, flaky, observers=[Broken()], log=events) is True
    [error] = events.named("observer_error")
    assert error["hook"] == "job_started" and "observer bug" in str(error["exception"])


def test_observers_must_have_the_hooks(backend, pool):
    from proletarian_di import ConfigurationError

    with pytest.raises(ConfigurationError, match="lacks job_started, job_ended, job_counted"):
        create_queue_worker(pool, flaky, observers=[object()])
    with pytest.raises(ConfigurationError, match="observers must be a sequence"):
        create_queue_worker(pool, flaky, observers=PrometheusObserver)


# A hung database ------------------------------------------------------------------------


def scrape_within(registry: CollectorRegistry, seconds: float = 10.0) -> str:
    """One scrape, which must answer within `seconds` (else the test fails, not hangs)."""
    answers: list[str] = []
    scrape = threading.Thread(
        target=lambda: answers.append(generate_latest(registry).decode()), daemon=True
    )
    scrape.start()
    scrape.join(seconds)
    assert answers, f"the scrape did not answer within {seconds} s"
    return answers[0]


def probe_threads() -> int:
    return sum(1 for thread in threading.enumerate() if thread.name == "proletarian-probe")


OWN = Tables("proletarian_obs.job", "proletarian_obs.archived_job")
"""The hang tests' own tables, which no other test run on the same server resets."""


@pytest.fixture
def own(backend) -> Any:
    backend.install(OWN.job_table, OWN.archived_job_table)
    backend.execute(f"DELETE FROM {OWN.job_table}")
    return backend


@pytest.fixture
def proxy(backend) -> Any:
    with TCPProxy(upstream_of(backend)) as proxy:
        yield proxy
        proxy.flow()


def test_a_scrape_while_the_database_hangs_says_it_is_down_in_time(own, proxy, registry):
    pool = pool_via(own, url_via(own, proxy), 2)
    try:
        register_queue_depth(pool, [OWN], registry=registry, timeout_s=1)
        enqueue_committed(own, ("a", None), queue="hang", job_table=OWN.job_table)
        assert "proletarian_database_up 1.0" in scrape_within(registry)
        proxy.stall()
        held = proxy.held
        for _ in range(3):
            scraped = scrape_within(registry)  # each within the deadline, not at the recovery
            assert "proletarian_database_up 0.0" in scraped
            assert "proletarian_queue_jobs{" not in scraped
            assert proxy.held > held  # it did try, through the hung network
            assert probe_threads() <= 1  # one read at a time, however many scrapes
        proxy.flow()
        wait_until(lambda: "proletarian_database_up 1.0" in scrape_within(registry))
        assert 'proletarian_queue_jobs{queue="hang",state="queued"} 1.0' in scrape_within(registry)
        wait_until(lambda: probe_threads() == 0, description="the reads to end")
    finally:
        proxy.flow()
        pool.close()


def test_queue_depth_is_read_beside_the_pool_the_workers_hold(own, registry):
    pool = pool_via(own, own.url, 1, timeout=30)
    try:
        register_queue_depth(pool, [OWN], registry=registry)
        enqueue_committed(own, ("a", None), queue="full", job_table=OWN.job_table)
        with pool.connection():  # the pool's only connection, as busy worker threads hold it
            scraped = scrape_within(registry)
        assert "proletarian_database_up 1.0" in scraped
        assert 'proletarian_queue_jobs{queue="full",state="queued"} 1.0' in scraped
    finally:
        pool.close()


def test_a_scrape_timeout_must_be_a_positive_number(backend, pool):
    from proletarian_di import ArgumentTypeError

    for bad in (0, -1, "3", True, float("inf")):
        with pytest.raises(ArgumentTypeError, match="timeout_s must be"):
            QueueDepthCollector(pool, timeout_s=bad)  # type: ignore[arg-type]


def test_depth_is_read_through_a_function_or_a_pool_alone(own, registry):
    pool = own.pool(2)
    try:

        class OnlyItsPool:
            """A data source with no way to connect beside its pool: the scrape borrows."""

            def connection(self) -> Any:
                return pool.connection()

        enqueue_committed(own, ("a", None), queue="ways", job_table=OWN.job_table)
        for source in (own.connect, OnlyItsPool()):
            scraped_registry = CollectorRegistry()
            register_queue_depth(source, [OWN], registry=scraped_registry)
            scraped = scrape_within(scraped_registry)
            assert 'proletarian_queue_jobs{queue="ways",state="queued"} 1.0' in scraped
    finally:
        pool.close()

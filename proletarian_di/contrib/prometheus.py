"""Prometheus metrics (extra `metrics`): job outcomes, run times and pickup delays counted as
workers run jobs, and queue depths read from the database when Prometheus scrapes.

    observer = metrics_observer()                 # one per registry, shared by workers
    worker = create_queue_worker(pool, handler, observers=[observer])
    register_queue_depth(pool)                    # gauges, one query set per scrape
    register_queue_health(pool)                   # `proletarian-di doctor`'s readings
    serve_metrics(port=9100)                      # or mount metrics_app() in FastAPI

Nothing here runs a query per job: the gauges are read by the collector at scrape time, on
a short-lived connection of its own (never the workers' pool), within `timeout_s`; a scrape
while the database hangs answers in time, with `database_up 0`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any, Generic, TypeVar
from urllib.parse import parse_qs

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from .. import admin
from .._common.logging import describe
from .._common.types import DataSource
from .._store.probes import PROBE_TIMEOUT_S, Probe, check_timeout
from .._store.secrets import scrub
from ..jobs import Job
from ..observers import Observer

logger = logging.getLogger("proletarian_di.metrics")
T = TypeVar("T")

RUN_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800)
"""Run time buckets, seconds: from no-op jobs to half-hour ones."""
DELAY_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 3600)
"""Pickup delay buckets, seconds: from a listening worker's milliseconds to an hour behind."""
DEPTH_STATES = ("blocked", "queued", "scheduled", "retrying", "running")


class PrometheusObserver(Observer):
    """Counts every job outcome and times every run, labelled by queue and job type."""

    def __init__(self, registry: CollectorRegistry = REGISTRY, namespace: str = "proletarian"):
        labels = ("queue", "job_type")
        self.jobs = Counter(
            "jobs",
            "Job outcomes counted by workers (timed out and abandoned attempts are also "
            "counted as retried or failed).",
            (*labels, "outcome"),
            namespace=namespace,
            registry=registry,
        )
        self.run_seconds = Histogram(
            "job_run_seconds",
            "How long handlers ran, whatever their outcome.",
            labels,
            namespace=namespace,
            registry=registry,
            buckets=RUN_BUCKETS,
        )
        self.pickup_delay = Histogram(
            "job_pickup_delay_seconds",
            "From a job's process_at (when it fell due) to its handler's start.",
            labels,
            namespace=namespace,
            registry=registry,
            buckets=DELAY_BUCKETS,
        )

    def job_started(self, job: Job) -> None:
        delay = (datetime.now(timezone.utc) - job.process_at).total_seconds()
        self.pickup_delay.labels(job.queue, job.job_type).observe(max(0.0, delay))

    def job_ended(self, job: Job, error: BaseException | None, seconds: float) -> None:
        self.run_seconds.labels(job.queue, job.job_type).observe(seconds)

    def job_counted(self, job: Job, outcome: str) -> None:
        self.jobs.labels(job.queue, job.job_type, outcome).inc()


_observers: weakref.WeakKeyDictionary[CollectorRegistry, PrometheusObserver] = (
    weakref.WeakKeyDictionary()
)
_observers_lock = threading.Lock()


def metrics_observer(registry: CollectorRegistry = REGISTRY) -> PrometheusObserver:
    """The observer of `registry`, made on first use: every worker of a process shares it,
    since a registry takes each metric name once."""
    with _observers_lock:
        observer = _observers.get(registry)
        if observer is None:
            observer = _observers[registry] = PrometheusObserver(registry)
        return observer


class _ProbedCollector(Collector, Generic[T]):
    """Reads the database at each scrape: each data source on a short-lived connection of
    its own, beside the pool (the workers' threads may hold all of its connections), with a
    connect and statement timeout, in a thread, within `timeout_s` for the whole scrape: a
    hung database is reported by then, and ties up one thread per data source, not one per
    scrape."""

    def __init__(
        self,
        data_source: DataSource,
        tables: Sequence[admin.Tables] = (admin.DEFAULT_TABLES,),
        namespace: str = "proletarian",
        *,
        timeout_s: float = PROBE_TIMEOUT_S,
    ) -> None:
        self.timeout_s = check_timeout("timeout_s", timeout_s)
        self._probes: list[Probe[list[T]]] = []
        self._namespace = namespace
        self.add(data_source, tables)

    def add(self, data_source: DataSource, tables: Sequence[admin.Tables]) -> None:
        """Also read these tables, on this data source (workers on several databases)."""
        self._probes.append(Probe(data_source, self._reader(tables), self.timeout_s))

    def _reader(self, tables: Sequence[admin.Tables]) -> Callable[[Any], list[T]]:
        raise NotImplementedError

    def describe(self) -> list[Any]:
        """Nothing at registration: collecting then would query the database."""
        return []

    def _scrape(self, up: str, what: str) -> tuple[GaugeMetricFamily, list[T] | None]:
        """The gauge named `up`, 1 with this scrape's reads, or 0 with None when they failed
        or were late (said in the log, secrets masked)."""
        gauge = GaugeMetricFamily(
            f"{self._namespace}_{up}",
            f"1 when the {what} answered at this scrape (within {self.timeout_s:g} s).",
        )
        try:
            found = self._read()
        except Exception as exc:
            logger.warning("%s scrape failed: %s", what, scrub(describe(exc)))
            gauge.add_metric([], 0)
            return gauge, None
        gauge.add_metric([], 1)
        return gauge, found

    def _read(self) -> list[T]:
        deadline = time.monotonic() + self.timeout_s
        reads = [(probe, probe.start()) for probe in self._probes]
        found: list[T] = []
        for probe, future in reads:
            found += probe.result(future, deadline)
        return found


class QueueDepthCollector(_ProbedCollector[admin.QueueOverview]):
    """At each scrape, `admin.overview` of the given tables: jobs per queue and state, the
    oldest due job's wait, paused queues, and whether the database answered
    (`database_up 0` when it did not within `timeout_s`)."""

    def _reader(self, tables: Sequence[admin.Tables]) -> Callable[[Any], list[admin.QueueOverview]]:
        kept = {pair: admin.HourlyOutcomes() for pair in tables}

        def read(conn: Any) -> list[admin.QueueOverview]:
            queues: list[admin.QueueOverview] = []
            for pair, outcomes in kept.items():
                queues += admin.overview(conn, tables=pair, outcomes=outcomes)
            return queues

        return read

    def collect(self) -> Iterator[GaugeMetricFamily]:
        name = self._namespace
        depth = GaugeMetricFamily(
            f"{name}_queue_jobs",
            "Jobs waiting or running, per queue and state.",
            labels=["queue", "state"],
        )
        oldest = GaugeMetricFamily(
            f"{name}_queue_oldest_due_seconds",
            "How long the oldest due job of the queue has waited.",
            labels=["queue"],
        )
        paused = GaugeMetricFamily(
            f"{name}_queue_paused", "1 while the queue is paused.", labels=["queue"]
        )
        up, queues = self._scrape("database_up", "depth query")
        if queues is None:
            yield up
            return
        totals: dict[tuple[str, str], int] = {}
        for item in queues:
            for state in DEPTH_STATES:
                key = (item.queue, state)
                totals[key] = totals.get(key, 0) + getattr(item, state)
            if item.oldest_due is not None:
                oldest.add_metric([item.queue], item.oldest_due.total_seconds())
            paused.add_metric([item.queue], int(item.paused))
        for (queue, state), count in totals.items():
            depth.add_metric([queue, state], count)
        yield from (depth, oldest, paused, up)


class QueueHealthCollector(_ProbedCollector[tuple[str, admin.Finding]]):
    """At each scrape, `admin.diagnose` of the given tables: each reading, its threshold and
    whether it warns, labelled by check and job table (`proletarian-di doctor`'s figures)."""

    def __init__(
        self,
        data_source: DataSource,
        tables: Sequence[admin.Tables] = (admin.DEFAULT_TABLES,),
        namespace: str = "proletarian",
        *,
        timeout_s: float = PROBE_TIMEOUT_S,
        thresholds: admin.Thresholds | None = None,
    ) -> None:
        self.thresholds = thresholds or admin.Thresholds()
        super().__init__(data_source, tables, namespace, timeout_s=timeout_s)

    def _reader(
        self, tables: Sequence[admin.Tables]
    ) -> Callable[[Any], list[tuple[str, admin.Finding]]]:
        def read(conn: Any) -> list[tuple[str, admin.Finding]]:
            return [
                (pair.job_table, finding)
                for pair in tables
                for finding in admin.diagnose(conn, tables=pair, thresholds=self.thresholds)
            ]

        return read

    def collect(self) -> Iterator[GaugeMetricFamily]:
        name, labels = self._namespace, ["check", "job_table"]
        value = GaugeMetricFamily(
            f"{name}_health_value", "A health reading (proletarian-di doctor).", labels=labels
        )
        threshold = GaugeMetricFamily(
            f"{name}_health_threshold", "Where the reading turns to a warning.", labels=labels
        )
        warning = GaugeMetricFamily(
            f"{name}_health_warning",
            "1 while the reading is past its threshold, 0 while it is not (absent: unknown).",
            labels=labels,
        )
        up, found = self._scrape("health_up", "health readings")
        if found is None:
            yield up
            return
        for table, finding in found:
            key = [finding.check, table]
            threshold.add_metric(key, finding.threshold)
            if finding.value is not None:
                value.add_metric(key, finding.value)
            if finding.status != "unknown":
                warning.add_metric(key, int(finding.status == "warn"))
        yield from (value, threshold, warning, up)


def register_queue_depth(
    data_source: DataSource,
    tables: Sequence[admin.Tables] = (admin.DEFAULT_TABLES,),
    registry: CollectorRegistry = REGISTRY,
    *,
    timeout_s: float = PROBE_TIMEOUT_S,
) -> QueueDepthCollector:
    """Add the queue depth gauges of these tables to `registry`, read at each scrape on a
    connection of their own within `timeout_s` (`database_up 0` when the database is late)."""
    collector = QueueDepthCollector(data_source, tables, timeout_s=timeout_s)
    registry.register(collector)
    return collector


def register_queue_health(
    data_source: DataSource,
    tables: Sequence[admin.Tables] = (admin.DEFAULT_TABLES,),
    registry: CollectorRegistry = REGISTRY,
    *,
    timeout_s: float = PROBE_TIMEOUT_S,
    thresholds: admin.Thresholds | None = None,
) -> QueueHealthCollector:
    """Add the queue health gauges of these tables to `registry` (`admin.diagnose` at each
    scrape, on a connection of their own within `timeout_s`)."""
    collector = QueueHealthCollector(
        data_source, tables, timeout_s=timeout_s, thresholds=thresholds
    )
    registry.register(collector)
    return collector


def serve_metrics(
    port: int, host: str = "127.0.0.1", registry: CollectorRegistry = REGISTRY
) -> tuple[Any, threading.Thread]:
    """Serve `registry` at http://host:port/metrics in a daemon thread (prometheus-client's
    own server); 127.0.0.1 unless told otherwise. Returns (server, thread)."""
    return start_http_server(port, addr=host, registry=registry)


_scrapes = ThreadPoolExecutor(max_workers=2, thread_name_prefix="proletarian-metrics")
"""Where `metrics_app` collects: threads of its own, so a slow scrape neither blocks the
event loop nor takes the threads the application's sync routes run in."""


async def _off_loop(render: Callable[[], T]) -> T:
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # another event loop than asyncio's (trio, through anyio)
        import anyio.to_thread

        return await anyio.to_thread.run_sync(render)
    return await asyncio.wrap_future(_scrapes.submit(render))


def metrics_app(registry: CollectorRegistry = REGISTRY) -> Any:
    """An ASGI app serving `registry`, to mount: `app.mount("/metrics", metrics_app())`.

    The collectors run in a thread, never on the event loop, so a scrape while the
    database hangs does not hold up the application's other requests; the queue depth
    gauges answer within their `timeout_s` (`database_up 0` when late)."""
    from prometheus_client.exposition import _bake_output

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        headers = {
            name.decode("latin-1").lower(): value.decode("latin-1")
            for name, value in scope.get("headers", [])
        }
        params = parse_qs(scope.get("query_string", b"").decode())
        status, out_headers, body = await _off_loop(
            lambda: _bake_output(
                registry,
                headers.get("accept", ""),
                headers.get("accept-encoding", ""),
                params,
                False,
            )
        )
        await send(
            {
                "type": "http.response.start",
                "status": int(status.split(" ")[0]),
                "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in out_headers],
            }
        )
        await send({"type": "http.response.body", "body": body})

    return app

"""Health checks for orchestrators: is a worker alive (its threads are not stuck), and is it
ready (running, and its database answers)?

`check_health(workers)` answers both; `serve_health(workers, port=...)` answers them over
HTTP at `/livez` and `/readyz` (200 or 503, with the details as JSON), on 127.0.0.1 unless
told otherwise. The FastAPI adapter mounts the same answers (`health_router`).
"""

from __future__ import annotations

import dataclasses
import json
import threading
import weakref
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ._logging import describe
from ._secrets import scrub
from .errors import ArgumentTypeError
from .worker import QueueWorker

STUCK_AFTER_S = 60.0
"""A thread on one database call (a claim, a settle) for longer than this is stuck."""
PING_TIMEOUT_S = 2.0
"""How long readiness waits for the database's `SELECT 1`."""

Workers = Iterable[QueueWorker] | Callable[[], Iterable[QueueWorker]]


@dataclasses.dataclass(frozen=True)
class WorkerHealth:
    """One worker's answer: alive and ready, what its threads do, and what is wrong."""

    queue_worker_id: str
    state: str
    alive: bool
    ready: bool
    threads: list[dict[str, Any]]
    problems: list[str]


@dataclasses.dataclass(frozen=True)
class Health:
    """Alive when every worker is; ready when every worker is (and there is one)."""

    alive: bool
    ready: bool
    workers: list[WorkerHealth]

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def check_health(
    workers: Workers,
    *,
    stuck_after_s: float = STUCK_AFTER_S,
    database: bool = True,
    ping_timeout_s: float = PING_TIMEOUT_S,
) -> Health:
    """Each worker is alive while it runs (or drains) and none of its threads has spent more
    than `stuck_after_s` on one database call; ready when it runs and, with `database`, its
    database answered `SELECT 1` within `ping_timeout_s`. Idle threads and running
    handlers are alive: a handler's own bound is its job timeout."""
    for name, value in (("stuck_after_s", stuck_after_s), ("ping_timeout_s", ping_timeout_s)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ArgumentTypeError(f"{name} must be a positive number, got {value!r}")
    answers = [
        _worker_health(worker, stuck_after_s, database, ping_timeout_s)
        for worker in _workers(workers)
    ]
    return Health(
        alive=all(answer.alive for answer in answers),
        ready=bool(answers) and all(answer.ready for answer in answers),
        workers=answers,
    )


def _workers(workers: Workers) -> list[QueueWorker]:
    found = list(workers() if callable(workers) else workers)
    for worker in found:
        if not isinstance(worker, QueueWorker):
            raise ArgumentTypeError(f"health checks take QueueWorkers, got {worker!r}")
    return found


def _worker_health(
    worker: QueueWorker, stuck_after_s: float, database: bool, ping_timeout_s: float
) -> WorkerHealth:
    problems: list[str] = []
    state = worker.state
    threads: list[dict[str, Any]] = []
    for name, activity, seconds in worker.threads():
        threads.append({"name": name, "activity": activity, "seconds": round(seconds, 3)})
        if activity in ("connecting", "polling") and seconds > stuck_after_s:
            problems.append(
                f"thread {name} has waited {seconds:.0f} s on the database "
                f"(stuck after {stuck_after_s:g} s)"
            )
    alive = state in ("starting", "running", "stopping") and not problems
    if state not in ("starting", "running", "stopping"):
        why = f": {describe(worker.failure)}" if worker.failure is not None else ""
        problems.append(f"worker is {state}{why}")
    ready = alive and state == "running"
    if ready and database:
        problem = _ping(worker, ping_timeout_s)
        if problem is not None:
            problems.append(problem)
            ready = False
    return WorkerHealth(worker.queue_worker_id, state, alive, ready, threads, problems)


_pinger = ThreadPoolExecutor(max_workers=4, thread_name_prefix="proletarian-health")
_pings: weakref.WeakKeyDictionary[QueueWorker, Future[None]] = weakref.WeakKeyDictionary()
_pings_lock = threading.Lock()


def _ping(worker: QueueWorker, timeout: float) -> str | None:
    """None if the worker's database answered in time, else why not. A ping still running
    from an earlier check is waited on, not doubled, so a hung database ties up one thread."""
    with _pings_lock:
        future = _pings.get(worker)
        if future is None or future.done():
            future = _pings[worker] = _pinger.submit(worker.ping)
    try:
        future.result(timeout)
    except FutureTimeout:
        return f"the database did not answer within {timeout:g} s"
    except Exception as exc:
        return f"the database did not answer: {scrub(describe(exc))}"
    return None


class HealthServer:
    """A small HTTP server answering `/livez` and `/readyz` in a daemon thread."""

    def __init__(self, workers: Workers, host: str, port: int, **options: Any) -> None:
        check = lambda database: check_health(workers, database=database, **options)  # noqa: E731

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0].rstrip("/")
                if path not in ("/livez", "/readyz", "/healthz"):
                    self._answer(404, {"error": f"no such check: {path}; try /livez or /readyz"})
                    return
                health = check(database=path != "/livez")
                ok = health.alive if path == "/livez" else health.alive and health.ready
                self._answer(200 if ok else 503, health.as_dict())

            def _answer(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                """Probes come every few seconds: they are not logged."""

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.host, self.port = host, self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="proletarian-health-server", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        """Stop answering and free the port."""
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> HealthServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve_health(
    workers: Workers, *, port: int, host: str = "127.0.0.1", **options: Any
) -> HealthServer:
    """Answer `/livez` (alive) and `/readyz` (alive and ready) over HTTP on host:port, 200
    or 503 with `check_health`'s details as JSON; port 0 picks a free one (`.port`)."""
    return HealthServer(workers, host, port, **options)

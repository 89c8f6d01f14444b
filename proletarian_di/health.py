"""Health checks for orchestrators: is a worker alive (its threads are not stuck), and is it
ready (running, and its database answers)?

`check_health(workers)` answers both; `serve_health(workers, port=...)` answers them over
HTTP at `/livez` and `/readyz` (200 or 503, with the details as JSON), on 127.0.0.1 unless
told otherwise. The FastAPI adapter mounts the same answers (`health_router`).

The server is meant for probes, not for the open internet, yet it holds out against slow
or stalled clients: a request must arrive within `request_timeout_s` (5 s) or the
connection is cut, at most `max_clients` (8) are answered at once (more are refused at
once), so it never runs more than that many threads, whatever the number of clients.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import socket
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ._common.logging import describe
from ._store.probes import Probe, ProbeTimeout
from ._store.secrets import scrub
from .errors import ArgumentTypeError
from .worker import QueueWorker

STUCK_AFTER_S = 60.0
"""A thread on one database call (a claim, a settle) for longer than this is stuck."""
PING_TIMEOUT_S = 2.0
"""How long readiness waits for the database's `SELECT 1`."""
REQUEST_TIMEOUT_S = 5.0
"""How long the health server waits for a client's request before it cuts the connection."""
MAX_CLIENTS = 8
"""How many connections the health server answers at once (one thread each)."""

Workers = Iterable[QueueWorker] | Callable[[], Iterable[QueueWorker]]


@dataclasses.dataclass(frozen=True)
class WorkerHealth:
    """One worker's answer: alive and ready, what its threads do, and what is wrong.
    `ready` is None when it was not checked (a liveness check does not ask the database)."""

    queue_worker_id: str
    state: str
    alive: bool
    ready: bool | None
    threads: list[dict[str, Any]]
    problems: list[str]


@dataclasses.dataclass(frozen=True)
class Health:
    """Alive when every worker is; ready when every worker is (and there is one); ready is
    None when no worker is known not to be but some were not checked (`database=False`)."""

    alive: bool
    ready: bool | None
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
    database answered `SELECT 1` within `ping_timeout_s`. Without `database`, a running
    worker's readiness is unknown (None): only the database can tell. Idle threads and
    running handlers are alive: a handler's own bound is its job timeout."""
    for name, value in (("stuck_after_s", stuck_after_s), ("ping_timeout_s", ping_timeout_s)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ArgumentTypeError(f"{name} must be a positive number, got {value!r}")
    answers = [
        _worker_health(worker, stuck_after_s, database, ping_timeout_s)
        for worker in _workers(workers)
    ]
    readiness = [answer.ready for answer in answers]
    ready: bool | None = bool(answers) and all(readiness)
    if answers and False not in readiness and None in readiness:
        ready = None
    return Health(alive=all(answer.alive for answer in answers), ready=ready, workers=answers)


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
    ready: bool | None = alive and state == "running"
    if ready and not database:
        ready = None
    elif ready:
        problem = _ping(worker, ping_timeout_s)
        if problem is not None:
            problems.append(problem)
            ready = False
    return WorkerHealth(worker.queue_worker_id, state, alive, ready, threads, problems)


def _select_one(conn: Any) -> None:
    cur = conn.cursor()
    try:
        cur.execute("SELECT 1")
        cur.fetchall()
    finally:
        cur.close()


_pings: weakref.WeakKeyDictionary[QueueWorker, dict[float, Probe[None]]] = (
    weakref.WeakKeyDictionary()
)
_pings_lock = threading.Lock()


def _ping(worker: QueueWorker, timeout: float) -> str | None:
    """None if the worker's database answered `SELECT 1` in time, else why not: on a
    short-lived connection beside the pool, with connect and statement timeouts, cut at the
    deadline. A ping still running from an earlier check is waited on, not doubled."""
    with _pings_lock:
        probes = _pings.setdefault(worker, {})
        probe = probes.get(timeout)
        if probe is None:
            probe = probes[timeout] = Probe(worker.data_source, _select_one, timeout)
    try:
        probe.run()
    except ProbeTimeout:
        return f"the database did not answer within {timeout:g} s"
    except Exception as exc:
        return f"the database did not answer: {scrub(describe(exc))}"
    return None


class _BoundedHTTPServer(ThreadingHTTPServer):
    """A thread per connection, at most `max_clients` of them; a connection whose request
    has not arrived `request_timeout_s` after it was accepted is cut."""

    daemon_threads = True
    request_queue_size = 64

    def __init__(
        self, address: tuple[str, int], handler: Any, max_clients: int, request_timeout_s: float
    ) -> None:
        self._slots = threading.BoundedSemaphore(max_clients)
        self._request_timeout_s = request_timeout_s
        self._waiting: dict[Any, float] = {}
        self._open_lock = threading.Lock()
        self.refused = 0
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.refused += 1
            self.shutdown_request(request)
            return
        with self._open_lock:
            self._waiting[request] = time.monotonic() + self._request_timeout_s
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.shutdown_request(request)
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (or was cut) is no error of the server's: not printed."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)

    def request_arrived(self, request: Any) -> None:
        """The request is read: the check and the answer are bounded on their own."""
        with self._open_lock:
            self._waiting.pop(request, None)

    def shutdown_request(self, request: Any) -> None:
        self.request_arrived(request)
        super().shutdown_request(request)

    def service_actions(self) -> None:
        """Between polls of the listening socket (every 0.5 s at most): cut the late."""
        now = time.monotonic()
        with self._open_lock:
            for request, deadline in list(self._waiting.items()):
                if deadline <= now:
                    del self._waiting[request]
                    with contextlib.suppress(OSError):
                        request.shutdown(socket.SHUT_RDWR)


class HealthServer:
    """A small HTTP server answering `/livez` and `/readyz` in a daemon thread: each
    request within `request_timeout_s`, at most `max_clients` at once."""

    def __init__(
        self,
        workers: Workers,
        host: str,
        port: int,
        *,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        max_clients: int = MAX_CLIENTS,
        **options: Any,
    ) -> None:
        if (
            isinstance(request_timeout_s, bool)
            or not isinstance(request_timeout_s, (int, float))
            or not 0 < request_timeout_s < float("inf")
        ):
            raise ArgumentTypeError(
                f"request_timeout_s must be a positive number, got {request_timeout_s!r}"
            )
        if isinstance(max_clients, bool) or not isinstance(max_clients, int) or max_clients < 1:
            raise ArgumentTypeError(f"max_clients must be a positive integer, got {max_clients!r}")
        check = lambda database: check_health(workers, database=database, **options)  # noqa: E731

        class Handler(BaseHTTPRequestHandler):
            timeout = request_timeout_s  # each read and write of the connection

            def do_GET(self) -> None:
                server: Any = self.server
                server.request_arrived(self.request)
                path = self.path.split("?", 1)[0].rstrip("/")
                if path not in ("/livez", "/readyz", "/healthz"):
                    self._answer(404, {"error": f"no such check: {path}; try /livez or /readyz"})
                    return
                health = check(database=path != "/livez")
                ok = health.alive if path == "/livez" else health.alive and bool(health.ready)
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

        self._server = _BoundedHTTPServer((host, port), Handler, max_clients, request_timeout_s)
        self.host, self.port = host, self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="proletarian-health-server", daemon=True
        )
        self._thread.start()

    @property
    def refused(self) -> int:
        """Connections refused so far because `max_clients` were being answered."""
        return self._server.refused

    def close(self) -> None:
        """Stop answering and free the port."""
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> HealthServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve_health(
    workers: Workers,
    *,
    port: int,
    host: str = "127.0.0.1",
    request_timeout_s: float = REQUEST_TIMEOUT_S,
    max_clients: int = MAX_CLIENTS,
    **options: Any,
) -> HealthServer:
    """Answer `/livez` (alive) and `/readyz` (alive and ready) over HTTP on host:port, 200
    or 503 with `check_health`'s details as JSON; port 0 picks a free one (`.port`).
    A client has `request_timeout_s` to send its request; `max_clients` are answered at
    once, and more are refused. `options` go to `check_health`."""
    return HealthServer(
        workers,
        host,
        port,
        request_timeout_s=request_timeout_s,
        max_clients=max_clients,
        **options,
    )

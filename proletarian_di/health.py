"""Health checks for orchestrators: is a worker alive (its threads are not stuck), and is it
ready (running, and its database answers)?

`check_health(workers)` answers both; `serve_health(workers, port=...)` answers them over
HTTP at `/livez` and `/readyz` (200 or 503, with the details as JSON), on 127.0.0.1 unless
told otherwise. The FastAPI adapter mounts the same answers (`health_router`).

The server is meant for probes, not for the open internet, yet it holds out against slow
or stalled clients: one thread reads every connection's request as it comes, so an idle
client holds no thread and keeps no other waiting; a request must arrive within
`request_timeout_s` (5 s) or the connection is cut, and past `MAX_WAITING` waiting
connections the oldest is cut. At most `max_clients` (8) requests are answered at once
(more are refused at once), so it never runs more than that many threads and one,
whatever the number of clients.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import json
import math
import selectors
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler
from typing import Any

from . import admin
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
DIAGNOSE_EVERY_S = 30.0
"""How often readiness reads the queue health (`Health.degraded`); checks between reuse it."""
MAX_CLIENTS = 8
"""How many requests the health server answers at once (one thread each)."""
MAX_WAITING = 128
"""How many connections the health server keeps while their requests arrive (no thread
each); past that, the oldest is cut."""
MAX_REQUEST_BYTES = 16384
"""The longest request head the health server reads; a longer one is cut."""
LISTEN_BACKLOG = 64
READ_BYTES = 4096
POLL_S = 0.5
ANSWER_THREAD = "proletarian-health-answer"

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
    None when no worker is known not to be but some were not checked (`database=False`).
    `degraded`: the queue health warnings of the workers' tables (`admin.diagnose`, read at
    most every `DIAGNOSE_EVERY_S`): a degraded queue is still ready, as a restart would not
    mend it, but the reasons say what to do."""

    alive: bool
    ready: bool | None
    workers: list[WorkerHealth]
    degraded: list[str] = dataclasses.field(default_factory=list)

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
    degraded = _diagnosed(_workers(workers), ping_timeout_s) if ready else []
    alive = all(answer.alive for answer in answers)
    return Health(alive=alive, ready=ready, workers=answers, degraded=degraded)


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


@dataclasses.dataclass
class _Diagnosis:
    """The last queue health read of one worker's tables, and when it was read."""

    probe: Probe[list[str]]
    read_at: float = -math.inf
    warnings: list[str] = dataclasses.field(default_factory=list)


_diagnoses: weakref.WeakKeyDictionary[QueueWorker, _Diagnosis] = weakref.WeakKeyDictionary()


def _diagnosed(workers: list[QueueWorker], timeout: float) -> list[str]:
    """The queue health warnings of the workers' tables, each read at most every
    `DIAGNOSE_EVERY_S` (once per data source and tables), on a short-lived connection as the
    ping's; a read that fails is said as one warning, and tried again at the next check."""
    warnings: list[str] = []
    seen: set[tuple[int, str, str]] = set()
    for worker in workers:
        options = worker.options
        key = (id(worker.data_source), options.job_table, options.archived_job_table)
        if key in seen:
            continue
        seen.add(key)
        tables = admin.Tables(options.job_table, options.archived_job_table)
        with _pings_lock:
            diagnosis = _diagnoses.get(worker)
            if diagnosis is None:
                read = functools.partial(_warnings, tables=tables)
                diagnosis = _diagnoses[worker] = _Diagnosis(
                    Probe(worker.data_source, read, timeout)
                )
        if time.monotonic() - diagnosis.read_at >= DIAGNOSE_EVERY_S:
            try:
                diagnosis.warnings = diagnosis.probe.run()
                diagnosis.read_at = time.monotonic()
            except Exception as exc:
                diagnosis.warnings = [f"the queue health was not read: {scrub(describe(exc))}"]
        warnings += diagnosis.warnings
    return warnings


def _warnings(conn: Any, tables: admin.Tables) -> list[str]:
    try:
        return admin.degraded(admin.diagnose(conn, tables=tables))
    finally:
        conn.rollback()


class _HealthListener:
    """Reads every connection's request in one selector loop, so idle or slow clients hold
    no thread and delay no other client: a connection whose request has not arrived
    `request_timeout_s` after it was accepted is cut, and so is the oldest waiting one when
    more than `MAX_WAITING` wait. A request read whole is answered on a thread of its own,
    at most `max_clients` at once (more are refused at once)."""

    def __init__(
        self, address: tuple[str, int], handler: Any, max_clients: int, request_timeout_s: float
    ) -> None:
        self._handler = handler
        self._slots = threading.BoundedSemaphore(max_clients)
        self._request_timeout_s = request_timeout_s
        self._waiting: dict[socket.socket, tuple[float, bytearray]] = {}
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self.refused = 0
        self._listener = socket.create_server(address, backlog=LISTEN_BACKLOG)
        self._listener.setblocking(False)
        self.server_address = self._listener.getsockname()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ)

    def serve_forever(self) -> None:
        try:
            while not self._stop.is_set():
                for key, _ in self._selector.select(self._wait_s()):
                    if key.fileobj is self._listener:
                        self._accept()
                    else:
                        self._read(key.fileobj)  # type: ignore[arg-type]
                self._cut_late()
        finally:
            for conn in list(self._waiting):
                self._drop(conn)
            self._stopped.set()

    def shutdown(self) -> None:
        self._stop.set()
        self._stopped.wait()

    def server_close(self) -> None:
        self._selector.close()
        self._listener.close()

    def _wait_s(self) -> float:
        """Until the earliest request deadline, and at most `POLL_S` (to see a shutdown)."""
        if not self._waiting:
            return POLL_S
        first = min(deadline for deadline, _ in self._waiting.values())
        return min(POLL_S, max(0.0, first - time.monotonic()))

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of descriptors, or the client gave up: the next poll retries
                return
            conn.setblocking(False)
            self._waiting[conn] = (time.monotonic() + self._request_timeout_s, bytearray())
            self._selector.register(conn, selectors.EVENT_READ)
            if len(self._waiting) > MAX_WAITING:
                self.refused += 1
                self._drop(next(iter(self._waiting)))

    def _read(self, conn: socket.socket) -> None:
        try:
            data = conn.recv(READ_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(conn)
            return
        head = self._waiting[conn][1]
        head += data
        if b"\r\n\r\n" not in head and b"\n\n" not in head:
            if len(head) > MAX_REQUEST_BYTES:
                self._drop(conn)
            return
        self._selector.unregister(conn)
        del self._waiting[conn]
        if not self._slots.acquire(blocking=False):
            self.refused += 1
            _close(conn)
            return
        try:
            threading.Thread(
                target=self._answer, args=(conn, bytes(head)), name=ANSWER_THREAD, daemon=True
            ).start()
        except BaseException:
            self._slots.release()
            _close(conn)
            raise

    def _answer(self, conn: socket.socket, head: bytes) -> None:
        try:
            conn.setblocking(True)
            self._handler((conn, head), conn.getpeername(), self)
        except OSError:
            pass  # a client that went away (or was cut) is no error of the server's
        finally:
            _close(conn)
            self._slots.release()

    def _cut_late(self) -> None:
        now = time.monotonic()
        for conn, (deadline, _) in list(self._waiting.items()):
            if deadline <= now:
                self._drop(conn)

    def _drop(self, conn: socket.socket) -> None:
        if self._waiting.pop(conn, None) is not None:
            self._selector.unregister(conn)
        _close(conn)


def _close(conn: socket.socket) -> None:
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_RDWR)
    conn.close()


class _Handler(BaseHTTPRequestHandler):
    """Answers one request whose head the listener has read already (`request` is the
    connection and that head)."""

    def setup(self) -> None:
        self.connection, head = self.request
        self.connection.settimeout(self.timeout)
        self.rfile = io.BytesIO(head)
        self.wfile = self.connection.makefile("wb")


class HealthServer:
    """A small HTTP server answering `/livez` and `/readyz` in a daemon thread: each
    request read within `request_timeout_s` of its connection, at most `max_clients`
    answered at once; idle connections hold up no other."""

    def __init__(
        self,
        workers: Workers,
        host: str,
        port: int,
        *,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        max_clients: int = MAX_CLIENTS,
        check: Callable[[bool], Health] | None = None,
        **options: Any,
    ) -> None:
        """`check(database)`, when given, answers instead of `check_health(workers, ...)`
        (a supervisor's answer for the worker processes it runs)."""
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
        answer: Callable[[bool], Health] = check or (
            lambda database: check_health(workers, database=database, **options)
        )

        class Handler(_Handler):
            timeout = request_timeout_s  # each write of the answer

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0].rstrip("/")
                if path not in ("/livez", "/readyz", "/healthz"):
                    self._answer(404, {"error": f"no such check: {path}; try /livez or /readyz"})
                    return
                health = answer(path != "/livez")
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

        self._server = _HealthListener((host, port), Handler, max_clients, request_timeout_s)
        self.host, self.port = host, self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="proletarian-health-server", daemon=True
        )
        self._thread.start()

    @property
    def refused(self) -> int:
        """Connections refused so far: while `max_clients` were being answered, or cut as the
        oldest of more than `MAX_WAITING` waiting for their requests."""
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
    A client has `request_timeout_s` to send its request, and waiting for it holds up no
    other client; `max_clients` requests are answered at once, and more are refused.
    `options` go to `check_health`."""
    return HealthServer(
        workers,
        host,
        port,
        request_timeout_s=request_timeout_s,
        max_clients=max_clients,
        **options,
    )

"""Fault-injection helpers: a TCP proxy that can cut connections, and run counters."""

from __future__ import annotations

import collections
import contextlib
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

from backends import Events, wait_until

Upstream = tuple[str, int] | str


def wait_for(predicate: Callable[[], Any], timeout: float = 20.0, what: str = "") -> Any:
    """`backends.wait_until` with the fault tests' longer default timeout."""
    return wait_until(predicate, timeout=timeout, description=what)


def upstream_of(backend: Any) -> Upstream:
    """Where a proxy in front of the backend's server connects: MySQL's host and port, or
    PostgreSQL's (a unix socket path when its URL names a directory)."""
    if backend.name == "mysql":
        return (backend.options["host"], backend.options["port"])
    from psycopg.conninfo import conninfo_to_dict

    info = conninfo_to_dict(backend.url)
    host = str(info.get("host") or "/var/run/postgresql").split(",")[0]
    port = int(str(info.get("port") or 5432).split(",")[0])
    return f"{host}/.s.PGSQL.{port}" if host.startswith("/") else (host, port)


def url_via(backend: Any, proxy: TCPProxy) -> str:
    """The backend's URL (a conninfo on PostgreSQL) with the proxy as its server."""
    if backend.name == "mysql":
        from urllib.parse import urlsplit

        parts = urlsplit(backend.url)
        user, at, _ = parts.netloc.rpartition("@")
        return parts._replace(netloc=f"{user}{at}127.0.0.1:{proxy.port}").geturl()
    from psycopg.conninfo import make_conninfo

    return make_conninfo(backend.url, host="127.0.0.1", port=str(proxy.port))


def pool_via(backend: Any, url: str, size: int, timeout: float = 5.0) -> Any:
    """A pool on `url` as an application would build it (psycopg_pool or MySQLDataSource)."""
    if backend.name == "mysql":
        from proletarian_di.mysql import MySQLDataSource

        return MySQLDataSource(url, max_connections=size)
    from psycopg_pool import ConnectionPool

    return ConnectionPool(url, min_size=1, max_size=size, timeout=timeout, open=True)


class TCPProxy:
    """Forwards 127.0.0.1:<port> to a TCP address or a unix socket path.

    `drop()` cuts every open connection (both sides, as a network failure or a
    server crash would); `down()` also refuses new ones until `up()`.
    """

    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream
        self._lock = threading.Lock()
        self._pairs: set[tuple[socket.socket, socket.socket]] = set()
        self._accepting = True
        self._closed = False
        self._flowing = threading.Event()
        self._flowing.set()
        self.accepted = 0
        self.peak = 0
        self.held = 0
        """How many reads `stall()` has held so far: a client is waiting on the "server"."""
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, name="tcp-proxy", daemon=True)
        self._thread.start()

    def __enter__(self) -> TCPProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._pairs)

    def drop(self) -> int:
        """Cut every open connection; return how many were cut."""
        with self._lock:
            pairs, self._pairs = self._pairs, set()
        for client, server in pairs:
            for sock in (client, server):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()
        return len(pairs)

    def down(self) -> int:
        """Cut every connection and refuse new ones (the server is gone)."""
        with self._lock:
            self._accepting = False
        return self.drop()

    def up(self) -> None:
        """Accept connections again (the server is back)."""
        with self._lock:
            self._accepting = True

    def stall(self) -> None:
        """Hold every byte in both directions (a hung server or network), until `flow()`."""
        self._flowing.clear()

    def flow(self) -> None:
        self._flowing.set()

    def close(self) -> None:
        self._flowing.set()
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()
        self.drop()

    def _connect_upstream(self) -> socket.socket:
        if isinstance(self.upstream, str):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(self.upstream)
            return sock
        return socket.create_connection(self.upstream)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                accepting = self._accepting
            if not accepting:
                with contextlib.suppress(OSError):
                    client.close()
                continue
            try:
                server = self._connect_upstream()
            except OSError:
                client.close()
                continue
            pair = (client, server)
            with self._lock:
                self._pairs.add(pair)
                self.accepted += 1
                self.peak = max(self.peak, len(self._pairs))
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(src, dst, pair), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, pair: Any) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if not self._flowing.is_set():
                    with self._lock:
                        self.held += 1
                    self._flowing.wait()
                dst.sendall(data)
        except OSError:
            pass
        with self._lock:
            self._pairs.discard(pair)
        for sock in pair:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class Runs:
    """Counts handler runs per job id, thread-safe, and can hold handlers at a gate."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: collections.Counter[Any] = collections.Counter()
        self.gate = threading.Event()
        self.gate.set()
        self.waiting: list[Any] = []

    def record(self, key: Any) -> int:
        with self._lock:
            self.counts[key] += 1
            return self.counts[key]

    def hold(self, key: Any, timeout: float = 30.0) -> None:
        """Block the calling handler until `release()` (while the gate is closed)."""
        if self.gate.is_set():
            return
        with self._lock:
            self.waiting.append(key)
        self.gate.wait(timeout)

    def close_gate(self) -> None:
        self.gate.clear()

    def release(self) -> None:
        self.gate.set()

    def duplicates(self) -> dict[Any, int]:
        with self._lock:
            return {key: n for key, n in self.counts.items() if n > 1}


class NotAnException(BaseException):
    """A BaseException subclass, as some libraries raise (e.g. timeouts, cancellation)."""


class EventLog(Events):
    """`Events` without `polling_for_jobs`, which an idle worker logs at every poll."""

    def __call__(self, event: str, data: dict[str, Any]) -> None:
        if event != "polling_for_jobs":
            super().__call__(event, data)


@contextlib.contextmanager
def running(worker: Any) -> Iterator[Any]:
    """Start a worker and make sure it is stopped, even when the test fails."""
    worker.start()
    try:
        yield worker
    finally:
        worker.stop()

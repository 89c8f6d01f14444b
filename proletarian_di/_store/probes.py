"""Reads for scrapes and probes that a hung database cannot hold up: each on a short-lived
connection of its own (not one the workers need), opened with a connect timeout and a
statement (PostgreSQL, MySQL) and socket read timeout (MySQL), under a deadline for the whole
read. At the deadline the connection's socket is cut, so the thread reading frees itself;
while one read is still running, the next waits on it instead of starting another, so a
hung database ties up one thread per data source, whatever the number of scrapes."""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Generic, TypeVar

from ..errors import ArgumentTypeError
from .datasource import connection_factory, direct_connect, resolved
from .dialects import unwrap_connection
from .dialects.base import shutdown_socket
from .mysql_pool import MySQLDataSource

T = TypeVar("T")

PROBE_TIMEOUT_S = 3.0
"""The default deadline of a probe's read, connecting included: below Prometheus's
default 10 s scrape timeout, so a scrape answers (with the database down) before it."""


class ProbeTimeout(TimeoutError):
    """The database did not answer within the probe's deadline."""


def check_timeout(name: str, value: object) -> float:
    """`value` as a positive number of seconds, or a clear error naming `name`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ArgumentTypeError(f"{name} must be a positive number of seconds, got {value!r}")
    if not math.isfinite(value):
        raise ArgumentTypeError(f"{name} must be finite, got {value!r}")
    return float(value)


def _pg_connect(conninfo: str, kwargs: dict[str, Any], timeout_s: float) -> Callable[[], Any]:
    import psycopg

    options = {**kwargs, "connect_timeout": max(2, math.ceil(timeout_s))}
    return lambda: psycopg.connect(conninfo, **options)


def _mysql_connect(options: dict[str, Any], timeout_s: float) -> Callable[[], Any]:
    import pymysql

    seconds = max(1, math.ceil(timeout_s))
    bounded = {
        **options,
        "connect_timeout": seconds,
        "read_timeout": seconds,
        "write_timeout": seconds,
    }
    return lambda: pymysql.connect(**bounded)


def probe_connector(data_source: Any, timeout_s: float) -> Callable[[], Any] | None:
    """A function opening a new connection beside `data_source`'s pool, with a connect
    timeout (and read and write timeouts on MySQL) where the data source says how it
    connects; its caller closes it. None when the data source gives no way but its pool."""
    data_source = resolved(data_source)
    conninfo = getattr(data_source, "conninfo", None)
    if isinstance(conninfo, str):
        return _pg_connect(conninfo, dict(getattr(data_source, "kwargs", None) or {}), timeout_s)
    if isinstance(data_source, MySQLDataSource):
        return _mysql_connect(dict(data_source._options), timeout_s)
    return direct_connect(data_source)


def _kind(conn: Any) -> tuple[str, Any]:
    raw = unwrap_connection(conn)
    module = type(raw).__module__.split(".", 1)[0]
    return {"psycopg": "postgresql", "pymysql": "mysql"}.get(module, ""), raw


def bound_statements(conn: Any, timeout_s: float) -> None:
    """Have the server end any statement of this (own, short-lived) connection that runs
    longer than `timeout_s`, and PyMySQL's socket give up a read as long."""
    kind, raw = _kind(conn)
    ms = max(1, math.ceil(timeout_s * 1000))
    if kind == "postgresql":
        local = "false" if raw.autocommit else "true"
        raw.execute(f"SELECT set_config('statement_timeout', '{ms}', {local})")
    elif kind == "mysql":
        sock = getattr(raw, "_sock", None)
        if sock is not None:
            sock.settimeout(max(1, math.ceil(timeout_s)))
        raw._read_timeout = raw._write_timeout = max(1, math.ceil(timeout_s))
        with contextlib.closing(raw.cursor()) as cur:
            if "mariadb" in raw.get_server_info().lower():
                cur.execute(f"SET SESSION max_statement_time = {ms / 1000:.3f}")
            else:
                cur.execute(f"SET SESSION max_execution_time = {ms}")


def cut(conn: Any) -> None:
    """Shut a connection's socket down from another thread (the one reading gets an error)."""
    kind, raw = _kind(conn)
    if kind == "postgresql":
        with contextlib.suppress(Exception):
            shutdown_socket(raw.pgconn.socket)
    elif kind == "mysql":
        sock = getattr(raw, "_sock", None)
        if sock is not None:
            with contextlib.suppress(Exception):
                shutdown_socket(sock.fileno())


def bounded_read(data_source: Any, read: Callable[[Any], T], timeout_s: float) -> T:
    """`read(conn)` in this thread on a new connection beside `data_source`'s pool
    (`probe_connector`: a connect timeout), its statements bounded (`bound_statements`), its
    socket cut at `timeout_s` so a database that stops answering frees the thread then, with
    `ProbeTimeout`; rolled back and closed. Where the data source gives no way but its
    pool, on a pooled connection, which is never cut (the pool lends it again)."""
    direct = probe_connector(data_source, timeout_s)
    if direct is None:
        with connection_factory(data_source)() as conn:
            try:
                return read(conn)
            finally:
                conn.rollback()
    conn = direct()
    late = threading.Event()

    def cut_late() -> None:
        late.set()
        cut(conn)

    timer = threading.Timer(timeout_s, cut_late)
    timer.daemon = True
    timer.start()
    try:
        bound_statements(conn, timeout_s)
        return read(conn)
    except Exception:
        if late.is_set():
            raise ProbeTimeout(f"the database did not answer within {timeout_s:g} s") from None
        raise
    finally:
        timer.cancel()
        timer.join()  # a cut never reaches a socket number reused after the close
        with contextlib.suppress(Exception):
            conn.rollback()
        with contextlib.suppress(Exception):
            conn.close()


def _without_frames(exc: BaseException) -> BaseException:
    """`exc` (and its causes) without tracebacks: their frames would keep a connection that
    failed to open alive, its socket open, for as long as the answer is kept."""
    seen: set[int] = set()
    error: BaseException | None = exc
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        error.__traceback__ = None
        error = error.__cause__ or error.__context__
    return exc


class Probe(Generic[T]):
    """Runs `read(conn)` on a connection of its own within `timeout_s`, one at a time."""

    def __init__(self, data_source: Any, read: Callable[[Any], T], timeout_s: float) -> None:
        self.timeout_s = check_timeout("timeout_s", timeout_s)
        self._read = read
        self._direct = probe_connector(data_source, self.timeout_s)
        self._pooled = connection_factory(data_source) if self._direct is None else None
        self._lock = threading.Lock()
        self._future: Future[T] | None = None
        self._conn: Any = None

    def start(self) -> Future[T]:
        """The read in flight, or a new one if none is."""
        with self._lock:
            future = self._future
            if future is None or future.done():
                future = self._future = Future()
                future.set_running_or_notify_cancel()
                threading.Thread(
                    target=self._run, args=(future,), name="proletarian-probe", daemon=True
                ).start()
            return future

    def result(self, future: Future[T], deadline: float) -> T:
        """The read's answer by `deadline` (time.monotonic()); else cut it and raise
        `ProbeTimeout`. The read's own errors are raised as they are."""
        try:
            return future.result(max(0.0, deadline - time.monotonic()))
        except FutureTimeout:
            with self._lock:
                if self._conn is not None and self._future is future:
                    cut(self._conn)
            raise ProbeTimeout(f"the database did not answer within {self.timeout_s:g} s") from None

    def run(self) -> T:
        """Start (or join) a read and wait for it, at most `timeout_s`."""
        return self.result(self.start(), time.monotonic() + self.timeout_s)

    def _run(self, future: Future[T]) -> None:
        try:
            with self._connection() as conn:
                value = self._read(conn)
        except BaseException as exc:
            future.set_exception(_without_frames(exc))
        else:
            future.set_result(value)

    @contextlib.contextmanager
    def _connection(self) -> Iterator[Any]:
        if self._direct is None:  # a pool's connection is never cut: the pool lends it again
            assert self._pooled is not None
            with self._pooled() as conn:
                try:
                    yield conn
                finally:
                    with contextlib.suppress(Exception):
                        conn.rollback()
            return
        conn = self._direct()
        try:
            with self._held(conn):
                bound_statements(conn, self.timeout_s)
                yield conn
        finally:
            with contextlib.suppress(Exception):
                conn.close()

    @contextlib.contextmanager
    def _held(self, conn: Any) -> Iterator[None]:
        """Make `conn` the one to cut at the deadline, until the read is over; the lock
        keeps a cut from reaching a socket number the system gave to another after close."""
        with self._lock:
            self._conn = conn
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                conn.rollback()
            with self._lock:
                if self._conn is conn:
                    self._conn = None

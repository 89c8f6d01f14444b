"""The health server against stalled clients (bounded threads, timed out requests), and what
`/livez` says while the database hangs, on both databases."""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Any

import httpx
import psutil
import pytest
from faults import TCPProxy, pool_via, running, upstream_of, url_via

from proletarian_di import ArgumentTypeError, create_queue_worker
from proletarian_di.health import ANSWER_THREAD, MAX_WAITING, check_health, serve_health

from backends import wait_until


def health_threads() -> int:
    """The threads answering the health server's requests."""
    return sum(1 for thread in threading.enumerate() if thread.name == ANSWER_THREAD)


def stalled_clients(port: int, count: int, peaks: list[int]) -> list[socket.socket]:
    """`count` connections that each send half a request, then nothing."""
    clients = []
    for _ in range(count):
        client = socket.create_connection(("127.0.0.1", port), timeout=10)
        with contextlib.suppress(OSError):
            client.sendall(b"GET /livez HTTP/1.1\r\nHost: probe\r\n")
        clients.append(client)
        peaks.append(threading.active_count())
    return clients


def closed_by_the_server(client: socket.socket) -> bool:
    client.settimeout(10)
    try:
        return client.recv(1024) == b""
    except ConnectionResetError:
        return True


def test_stalled_clients_are_timed_out_and_hold_no_thread():
    before = threading.active_count()
    with serve_health([], port=0, request_timeout_s=0.5, max_clients=4) as server:
        peaks: list[int] = []
        clients = stalled_clients(server.port, 300, peaks)
        try:
            assert max(peaks) <= before + 1  # the server's thread: a waiting one takes none
            wait_until(lambda: health_threads() == 0, description="the stalled requests to end")
            assert all(closed_by_the_server(client) for client in clients)
        finally:
            for client in clients:
                client.close()
        answer = httpx.get(f"http://127.0.0.1:{server.port}/livez", timeout=10)
        assert answer.status_code == 200
    wait_until(lambda: threading.active_count() <= before, description="no thread left")


def ready_at_once(port: int) -> httpx.Response:
    """`/readyz`, with 2 s for the answer: a probe waits no longer."""
    return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2)


@pytest.mark.parametrize("idle", [8, 64])
def test_idle_half_sent_requests_do_not_keep_a_ready_worker_unready(backend, pool, idle):
    worker = create_queue_worker(pool, lambda job_type, payload: None)
    with running(worker), serve_health([worker], port=0) as server:
        before = threading.active_count()
        clients = stalled_clients(server.port, idle, [])
        try:
            for _ in range(3):
                answer = ready_at_once(server.port)
                assert answer.status_code == 200 and answer.json()["ready"] is True
            assert server.refused == 0
            # each still waits on its request: none was cut to make room
            for client in clients:
                client.settimeout(0.01)
                with pytest.raises(TimeoutError):
                    client.recv(1)
            assert threading.active_count() <= before
        finally:
            for client in clients:
                client.close()


def test_a_flood_of_idle_connections_keeps_threads_and_connections_bounded(backend, pool):
    worker = create_queue_worker(pool, lambda job_type, payload: None)
    with running(worker), serve_health([worker], port=0, request_timeout_s=30) as server:
        before = threading.active_count()
        peaks: list[int] = []
        clients = stalled_clients(server.port, 3 * MAX_WAITING, peaks)
        try:
            assert max(peaks) <= before
            answer = ready_at_once(server.port)
            assert answer.status_code == 200 and answer.json()["ready"] is True
            # the oldest were cut to keep MAX_WAITING, well before their request timeout
            cut = sum(closed_by_the_server(client) for client in clients[: 2 * MAX_WAITING])
            assert cut >= 2 * MAX_WAITING - 1 and server.refused >= cut
            for client in clients[-MAX_WAITING // 2 :]:
                client.settimeout(0.01)
                with pytest.raises(TimeoutError):
                    client.recv(1)
        finally:
            for client in clients:
                client.close()


def test_a_client_sending_its_request_byte_by_byte_is_cut_at_the_request_timeout():
    with serve_health([], port=0, request_timeout_s=0.5) as server:
        client = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        with contextlib.closing(client):
            request = b"GET /livez HTTP/1.1\r\nHost: probe\r\nX-Slow: " + b"a" * 1000
            cut = False
            for byte in request:  # each byte well within the socket timeout of each read
                try:
                    client.sendall(bytes([byte]))
                except OSError:
                    cut = True
                    break
                client.settimeout(0.05)
                try:
                    if client.recv(1) == b"":
                        cut = True
                        break
                except TimeoutError:
                    pass
                except ConnectionResetError:
                    cut = True
                    break
            assert cut, "the server waited for the whole slow request"
        wait_until(lambda: health_threads() == 0, description="its thread to end")


def test_health_server_options_are_checked():
    for bad in (0, -1, "5", True):
        with pytest.raises(ArgumentTypeError, match="request_timeout_s must be"):
            serve_health([], port=0, request_timeout_s=bad)  # type: ignore[arg-type]
    for bad in (0, 2.5, None):
        with pytest.raises(ArgumentTypeError, match="max_clients must be"):
            serve_health([], port=0, max_clients=bad)  # type: ignore[arg-type]


def test_livez_does_not_say_ready_while_the_database_hangs(backend):
    with TCPProxy(upstream_of(backend)) as proxy:
        pool = pool_via(backend, url_via(backend, proxy), 2)
        try:
            worker = create_queue_worker(pool, lambda job_type, payload: None)
            with running(worker), serve_health([worker], port=0) as server:
                base = f"http://127.0.0.1:{server.port}"
                assert httpx.get(f"{base}/readyz", timeout=10).json()["ready"] is True
                proxy.stall()
                try:
                    live = httpx.get(f"{base}/livez", timeout=10)
                    assert live.status_code == 200  # alive: nothing is stuck for long
                    assert live.json()["ready"] is None  # not asked: unknown, not true
                    assert live.json()["workers"][0]["ready"] is None
                    ready = httpx.get(f"{base}/readyz", timeout=10)
                    assert ready.status_code == 503 and ready.json()["ready"] is False
                finally:
                    proxy.flow()
        finally:
            pool.close()


def test_check_health_without_the_database_leaves_readiness_unknown(backend, pool: Any):
    worker = create_queue_worker(pool, lambda job_type, payload: None)
    with running(worker):
        health = check_health([worker], database=False)
        assert (health.alive, health.ready, health.workers[0].ready) == (True, None, None)
    stopped = check_health([worker], database=False)
    assert (stopped.alive, stopped.ready) == (False, False)  # known without asking


def connections_to(port: int) -> int:
    """This process's established TCP connections to `port` (the proxy's clients' ends)."""
    return sum(
        1
        for conn in psutil.Process().net_connections("tcp")
        if conn.raddr and conn.raddr.port == port and conn.status == psutil.CONN_ESTABLISHED
    )


def test_a_readiness_check_while_the_database_hangs_leaves_no_connection_behind(backend):
    with TCPProxy(upstream_of(backend)) as proxy:
        pool = pool_via(backend, url_via(backend, proxy), 2)
        try:
            worker = create_queue_worker(pool, lambda job_type, payload: None, worker_threads=1)
            with running(worker):
                assert check_health([worker]).ready is True
                before = connections_to(proxy.port)  # the worker's own
                proxy.stall()
                try:
                    health = check_health([worker], ping_timeout_s=0.5)
                    assert health.ready is False
                    assert "did not answer within 0.5 s" in health.workers[0].problems[0]
                    # Its connection times out or is cut: not left to wait for the database.
                    wait_until(
                        lambda: connections_to(proxy.port) <= before,
                        description="the ping's connection to be given up",
                    )
                finally:
                    proxy.flow()
                wait_until(lambda: check_health([worker]).ready, description="ready again")
        finally:
            pool.close()

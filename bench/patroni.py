"""A real Patroni cluster on this host, for the failover scenario: one etcd and two
PostgreSQL nodes (the machine's binaries), each run by a Patroni of its own.

    with Cluster(Path(folder), synchronous=True) as cluster:
        cluster.url                     # both nodes, target_session_attrs=read-write
        cluster.switchover()            # the leader hands over to the replica
        cluster.kill_leader()           # SIGKILL to the leader's Patroni and postmaster

Needs Debian's `patroni` and `etcd-server`. As root, PostgreSQL and Patroni run as the
`postgres` user (the server refuses root); etcd as the caller.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import psycopg

PG_BINDIRS = tuple(f"/usr/lib/postgresql/{v}/bin" for v in range(18, 11, -1))
PASSWORD = "bench"  # a throwaway cluster's, on 127.0.0.1 only
TTL_S, LOOP_WAIT_S, RETRY_TIMEOUT_S = 10, 1, 4


def missing() -> str | None:
    """What this machine lacks for the cluster, or None."""
    for program, package in (("patroni", "patroni"), ("etcd", "etcd-server")):
        if shutil.which(program) is None:
            return f"{program} is not installed (apt-get install {package})"
    if next((d for d in PG_BINDIRS if os.path.exists(f"{d}/postgres")), None) is None:
        return "no PostgreSQL server binaries under /usr/lib/postgresql"
    return None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _until(check: Callable[[], Any], seconds: float, what: str) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            found = check()
        except OSError:
            found = None
        if found:
            return found
        time.sleep(0.2)
    raise TimeoutError(f"{what} within {seconds:.0f} s")


class Node:
    """One Patroni and the PostgreSQL it runs."""

    def __init__(self, cluster: Cluster, name: str) -> None:
        self.cluster, self.name = cluster, name
        self.port, self.api_port = free_port(), free_port()
        self.data = cluster.root / name
        self.config = cluster.root / f"{name}.yml"
        self.log = cluster.root / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def write_config(self, synchronous: bool, bindir: str, etcd: str) -> None:
        root = str(self.cluster.root)
        config = {
            "scope": "bench",
            "name": self.name,
            "restapi": {
                "listen": f"127.0.0.1:{self.api_port}",
                "connect_address": f"127.0.0.1:{self.api_port}",
            },
            "etcd3": {"hosts": [etcd]},
            "bootstrap": {
                "dcs": {
                    "ttl": TTL_S,
                    "loop_wait": LOOP_WAIT_S,
                    "retry_timeout": RETRY_TIMEOUT_S,
                    "maximum_lag_on_failover": 1 << 20,
                    "synchronous_mode": synchronous,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "parameters": {"wal_log_hints": "on", "max_connections": 100},
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"auth": "trust"}],
                "pg_hba": [
                    "local all all trust",
                    "host replication replicator 127.0.0.1/32 trust",
                    "host all all 127.0.0.1/32 trust",
                ],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{self.port}",
                "connect_address": f"127.0.0.1:{self.port}",
                "data_dir": str(self.data),
                "bin_dir": bindir,
                "pgpass": f"{root}/{self.name}.pgpass",
                "authentication": {
                    "superuser": {"username": "postgres", "password": PASSWORD},
                    "replication": {"username": "replicator", "password": PASSWORD},
                    "rewind": {"username": "postgres", "password": PASSWORD},
                },
                "parameters": {"unix_socket_directories": root},
            },
            "tags": {"nofailover": False, "noloadbalance": False},
        }
        self.config.write_text(json.dumps(config))  # JSON is YAML

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [*self.cluster.as_postgres, "patroni", str(self.config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def api(self, path: str, body: dict[str, Any] | None = None) -> Any:
        """Patroni's REST API: GET, or POST with a JSON body."""
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.api_port}{path}",
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=5) as answer:
            text = answer.read().decode()
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def writable(self) -> bool:
        """Whether this node's server takes writes now."""
        url = f"postgresql://postgres:{PASSWORD}@127.0.0.1:{self.port}/postgres"
        try:
            with psycopg.connect(url, connect_timeout=2, target_session_attrs="read-write"):
                return True
        except psycopg.OperationalError:
            return False

    def kill(self) -> None:
        """SIGKILL to Patroni and to the postmaster: the machine lost."""
        postmaster = self.postmaster_pid()
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)  # runuser and Patroni under it
            self.process.wait()
        if postmaster is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(postmaster, signal.SIGKILL)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.kill()


class Cluster:
    """etcd and two Patroni nodes under `root`; started on enter, stopped on exit."""

    def __init__(self, root: Path, *, synchronous: bool) -> None:
        self.root, self.synchronous = root, synchronous
        self.as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        self.etcd_port, self.etcd_peer_port = free_port(), free_port()
        self.etcd: subprocess.Popen[bytes] | None = None
        self.nodes = [Node(self, "node1"), Node(self, "node2")]

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)
        return (
            f"postgresql://postgres:{PASSWORD}@{hosts}/postgres"
            "?target_session_attrs=read-write&connect_timeout=2"
        )

    def __enter__(self) -> Cluster:
        self.root.mkdir(parents=True, exist_ok=True)
        if self.as_postgres:
            shutil.chown(self.root, "postgres")
        bindir = next(d for d in PG_BINDIRS if os.path.exists(f"{d}/postgres"))
        try:
            self._start_etcd()
            for node in self.nodes:
                node.write_config(self.synchronous, bindir, f"127.0.0.1:{self.etcd_port}")
                node.start()
                if node is self.nodes[0]:
                    _until(lambda: self.leader(), 60, "no leader")
            _until(self.healthy, 90, "the replica did not catch up")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        for node in self.nodes:
            node.stop()
        if self.etcd is not None:
            self.etcd.terminate()
            self.etcd.wait(10)

    def _start_etcd(self) -> None:
        client, peer = (
            f"http://127.0.0.1:{self.etcd_port}",
            f"http://127.0.0.1:{self.etcd_peer_port}",
        )
        with open(self.root / "etcd.log", "ab") as log:
            self.etcd = subprocess.Popen(
                ["etcd", "--name", "bench", "--data-dir", str(self.root / "etcd"),
                 "--listen-client-urls", client, "--advertise-client-urls", client,
                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", f"bench={peer}"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        _until(lambda: urllib.request.urlopen(f"{client}/health", timeout=2).status == 200,
               30, "etcd did not start")  # fmt: skip

    def members(self) -> list[dict[str, Any]]:
        """Patroni's view of the cluster, from the first node that answers."""
        for node in self.nodes:
            if node.process is None or node.process.poll() is not None:
                continue
            try:
                return list(node.api("/cluster")["members"])
            except OSError:
                continue
        return []

    def leader(self) -> Node | None:
        for member in self.members():
            if member["role"] == "leader" and member["state"] == "running":
                return next(n for n in self.nodes if n.name == member["name"])
        return None

    def healthy(self) -> bool:
        """A running leader and a streaming replica (synchronous, when asked for)."""
        wanted = "sync_standby" if self.synchronous else "replica"
        members = self.members()
        return self.leader() is not None and any(
            m["role"] == wanted and m["state"] in ("running", "streaming") for m in members
        )

    def switchover(self) -> tuple[Node, Node]:
        """The leader hands over to the other node; (old, new) once the new one leads."""
        old = self.leader()
        assert old is not None, "no leader to switch over from"
        new = next(n for n in self.nodes if n is not old)
        old.api("/switchover", {"leader": old.name, "candidate": new.name})
        _until(lambda: self.leader() is new and new.writable(), 60, "no switchover")
        return old, new

    def kill_leader(self) -> tuple[Node, Node]:
        """The leader's machine lost; (old, new) once the other node leads."""
        old = self.leader()
        assert old is not None, "no leader to kill"
        new = next(n for n in self.nodes if n is not old)
        old.kill()
        _until(lambda: self.leader() is new and new.writable(), 90, "no promotion")
        return old, new

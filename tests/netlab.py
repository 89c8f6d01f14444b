"""Hosts on real network links, for the tests across machines: Linux network namespaces of
the test's own, a database host and worker hosts, each worker host joined to the database
host by a veth pair of its own. Nothing reaches the machine's own network.

    with NetLab() as lab:
        with lab.postgres() as db:               # or lab.mariadb(*server_options)
            host = lab.host("w1")                # 10.231.1.2, the database at 10.231.1.1
            worker = host.popen([...])           # a process on that host
            host.cut()                           # the host vanishes: no FIN, no RST
            host.restore()

A server on the database host listens on every link and on a Unix socket in a folder that
every namespace sees (`Server.local_url`): the test itself reaches it that way, from no
host of the lab. A link is cut by taking the worker host's end down: the database host's
packets to it go nowhere, as to a machine unplugged. (This kernel has no `netem`, so links
have no added latency or loss.)

Needs root and iproute2's `ip`; `available()` says whether this machine has both.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from servers import Watchdog, binary, stop

_IP = binary("ip")
_PG_BINDIRS = tuple(f"/usr/lib/postgresql/{v}/bin" for v in range(18, 11, -1))
PG_PORT = 5432
MY_PORT = 3306


def available() -> str | None:
    """Why the lab cannot run here, or None if it can."""
    if _IP is None:
        return "iproute2's ip is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root"
    probe = f"proletarian-probe-{uuid.uuid4().hex[:8]}"
    done = subprocess.run([_IP, "netns", "add", probe], capture_output=True, text=True)
    if done.returncode:
        return f"cannot create a network namespace: {done.stderr.strip()}"
    subprocess.run([_IP, "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str) -> None:
    subprocess.run([_IP or "ip", *args], check=True, capture_output=True, text=True)


@dataclass
class Host:
    """A worker host: a namespace joined to the database host by a veth pair."""

    lab: NetLab
    name: str
    namespace: str
    address: str
    db_address: str
    processes: list[subprocess.Popen[str]] = field(default_factory=list)

    def exec_prefix(self) -> list[str]:
        return [_IP or "ip", "netns", "exec", self.namespace]

    def popen(self, argv: Sequence[str], **options: Any) -> subprocess.Popen[str]:
        """Start `argv` on this host (stopped with the lab)."""
        options.setdefault("text", True)
        process = subprocess.Popen([*self.exec_prefix(), *argv], **options)
        self.processes.append(process)
        return process

    def kill(self) -> None:
        """Kill the processes started on this host, its link up so that the servers hear
        their connections close."""
        self.restore()
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait()

    def cut(self) -> None:
        """Take the host off the network: its end of the link goes down, silently."""
        _ip("-n", self.namespace, "link", "set", "eth0", "down")

    def restore(self) -> None:
        """Put the host back on the network."""
        _ip("-n", self.namespace, "link", "set", "eth0", "up")

    def lose(self, percent: int) -> None:
        """Drop `percent` % of the host's packets, each way, at random (nftables' `numgen`;
        Debian's `nftables`); 0 drops none again."""
        nft = binary("nft")
        if nft is None:
            raise RuntimeError("packet loss needs nftables' nft (apt-get install nftables)")
        rules = "flush ruleset\n"
        if percent:
            rules += "table inet loss {\n"
            for hook, device in (("input", "iifname"), ("output", "oifname")):
                rules += (
                    f"  chain {hook} {{ type filter hook {hook} priority 0; "
                    f'{device} != "lo" numgen random mod 100 < {int(percent)} drop; }}\n'
                )
            rules += "}\n"
        subprocess.run([*self.exec_prefix(), nft, "-f", "-"], input=rules, text=True, check=True)


@dataclass
class Server:
    """A database server on the lab's database host."""

    kind: str
    local_url: str
    """The URL through the Unix socket, from outside the lab."""
    process: subprocess.Popen[bytes]
    connect_args: dict[str, Any] = field(default_factory=dict)
    """What the driver needs beside `local_url` (PyMySQL's `unix_socket`)."""

    def url_from(self, host: Host) -> str:
        """The server's URL over the network, from `host`."""
        if self.kind == "postgresql":
            return f"postgresql://postgres@{host.db_address}:{PG_PORT}/postgres"
        return f"mysql://root@{host.db_address}:{MY_PORT}/test"


class NetLab:
    """A database host and worker hosts, each a network namespace of this lab's own."""

    def __init__(self) -> None:
        self.tag = uuid.uuid4().hex[:8]
        self.db_namespace = f"proletarian-{self.tag}-db"
        self.hosts: list[Host] = []
        self.home = tempfile.mkdtemp(prefix="proletarian-netlab-")
        os.chmod(self.home, 0o755)
        self._watchdog = Watchdog()

    def __enter__(self) -> NetLab:
        # Killed before `__exit__`, this process leaves the lab to the watchdog: it kills
        # what runs in the lab's namespaces, deletes them and removes the folder.
        ip, prefix = _IP or "ip", f"proletarian-{self.tag}-"
        script = (
            f"for ns in $({ip} netns list | grep -o '^{prefix}[a-z0-9]*'); do "
            f'{ip} netns pids "$ns" | xargs -r kill -9; {ip} netns del "$ns"; done'
        )
        self._watchdog.arm(None, self.home, then=[["sh", "-c", script]])
        _ip("netns", "add", self.db_namespace)
        _ip("-n", self.db_namespace, "link", "set", "lo", "up")
        return self

    def __exit__(self, *exc: object) -> None:
        for host in self.hosts:
            host.kill()
            subprocess.run([_IP or "ip", "netns", "del", host.namespace], capture_output=True)
        subprocess.run([_IP or "ip", "netns", "del", self.db_namespace], capture_output=True)
        shutil.rmtree(self.home, ignore_errors=True)
        self._watchdog.close()

    def host(self, name: str) -> Host:
        """A new worker host, on a link of its own to the database host."""
        n = len(self.hosts) + 1
        namespace = f"proletarian-{self.tag}-{name}"
        _ip("netns", "add", namespace)
        _ip(
            "link", "add", "eth0", "netns", namespace, "type", "veth",
            "peer", "name", f"link{n}", "netns", self.db_namespace,
        )  # fmt: skip
        host = Host(self, name, namespace, f"10.231.{n}.2", f"10.231.{n}.1")
        self.hosts.append(host)
        _ip("-n", self.db_namespace, "addr", "add", f"{host.db_address}/24", "dev", f"link{n}")
        _ip("-n", namespace, "addr", "add", f"{host.address}/24", "dev", "eth0")
        for ns, device in ((self.db_namespace, f"link{n}"), (namespace, "eth0"), (namespace, "lo")):
            _ip("-n", ns, "link", "set", device, "up")
        return host

    def _on_db_host(
        self, argv: Sequence[str], log: str, user: str | None
    ) -> subprocess.Popen[bytes]:
        runas = [] if user is None else ["runuser", "-u", user, "--"]
        with open(log, "wb") as out:
            return subprocess.Popen(
                [_IP or "ip", "netns", "exec", self.db_namespace, *runas, *argv],
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    @contextlib.contextmanager
    def postgres(self, *settings: str) -> Iterator[Server]:
        """The machine's PostgreSQL binaries, a new cluster on the database host (trust
        authentication), with `settings` ("name=value") on its command line."""
        bindir = next((d for d in _PG_BINDIRS if os.path.exists(f"{d}/postgres")), None)
        if bindir is None:
            raise RuntimeError("no PostgreSQL server binaries under /usr/lib/postgresql")
        data, sock = os.path.join(self.home, "pgdata"), os.path.join(self.home, "pgsock")
        for folder in (data, sock):
            os.mkdir(folder, 0o700)
            shutil.chown(folder, "postgres")
        subprocess.run(
            ["runuser", "-u", "postgres", "--", f"{bindir}/initdb", "-D", data, "-U", "postgres",
             "--auth=trust", "--no-sync"],
            check=True, capture_output=True,
        )  # fmt: skip
        with open(os.path.join(data, "pg_hba.conf"), "a") as hba:
            hba.write("host all all 10.231.0.0/16 trust\n")
        options = [f"-c{s}" for s in ("listen_addresses=*", f"unix_socket_directories={sock}",
                                       "fsync=off", *settings)]  # fmt: skip
        process = self._on_db_host(
            [f"{bindir}/postgres", "-D", data, "-p", str(PG_PORT), *options],
            os.path.join(self.home, "pg.log"),
            "postgres",
        )
        try:
            local = f"postgresql://postgres@/postgres?host={sock}&port={PG_PORT}"
            _wait_for(process, lambda: _pg_ready(local), os.path.join(self.home, "pg.log"))
            yield Server("postgresql", local, process)
        finally:
            stop(process)

    @contextlib.contextmanager
    def mariadb(self, *options: str) -> Iterator[Server]:
        """The machine's MariaDB, a new data folder on the database host (root with no
        password from anywhere in the lab), with `options` on its command line."""
        server, installer = binary("mariadbd", "mysqld"), binary("mariadb-install-db")
        if server is None or installer is None:
            raise RuntimeError("no MariaDB server on this machine")
        data, sock = os.path.join(self.home, "mydata"), os.path.join(self.home, "my.sock")
        subprocess.run(
            [installer, "--no-defaults", f"--datadir={data}", "--user=root",
             "--auth-root-authentication-method=normal", "--skip-test-db"],
            check=True, capture_output=True,
        )  # fmt: skip
        process = self._on_db_host(
            [server, "--no-defaults", f"--datadir={data}", f"--socket={sock}",
             f"--port={MY_PORT}", "--bind-address=0.0.0.0", f"--pid-file={self.home}/my.pid",
             "--skip-log-bin", "--user=root", "--innodb-buffer-pool-size=64M",
             "--character-set-server=utf8mb4", "--collation-server=utf8mb4_general_ci",
             "--skip-name-resolve", *options],
            os.path.join(self.home, "my.log"),
            None,
        )  # fmt: skip
        try:
            _wait_for(process, lambda: _my_ready(sock), os.path.join(self.home, "my.log"))
            yield Server("mysql", "mysql://root@localhost/test", process, {"unix_socket": sock})
        finally:
            stop(process)


def _pg_ready(url: str) -> bool:
    import psycopg

    try:
        psycopg.connect(url, connect_timeout=2).close()
    except psycopg.OperationalError:
        return False
    return True


def _my_ready(sock: str) -> bool:
    import pymysql

    try:
        conn = pymysql.connect(unix_socket=sock, user="root", autocommit=True)
    except pymysql.err.OperationalError:
        return False
    with contextlib.closing(conn), conn.cursor() as cursor:
        cursor.execute("CREATE USER IF NOT EXISTS 'root'@'%'")
        cursor.execute("GRANT ALL PRIVILEGES ON *.* TO 'root'@'%' WITH GRANT OPTION")
        cursor.execute("CREATE DATABASE IF NOT EXISTS test")
    return True


def _wait_for(process: subprocess.Popen[bytes], ready: Any, log: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if process.poll() is not None or time.monotonic() > deadline:
            with open(log, errors="replace") as text:
                raise RuntimeError(f"the lab's server did not start:\n{text.read()[-2000:]}")
        time.sleep(0.1)

"""CPU time per job: the client's (this process and the children it waited for) and the
server's (its processes, read from /proc), so figures do not swing with the wall clock.

The server's CPU is only known when it runs on this machine and its processes are readable:
PostgreSQL's postmaster with every backend and background process (those that exited are
in the postmaster's `cutime`/`cstime`), MySQL/MariaDB's one process with all its threads.
Otherwise the server's column is left empty.
"""

from __future__ import annotations

import contextlib
import os
import resource
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TICK = 1 / os.sysconf("SC_CLK_TCK")
# Backends whose clients just closed are still exiting: read the server after they are
# reaped (their CPU then in the postmaster's), not between a scan of /proc and their exit.
SETTLE = 0.3


@dataclass
class Figure:
    """One measurement: a rate, and the CPU seconds client and server spent on its jobs."""

    rate: float
    jobs: int
    client: float | None = None
    server: float | None = None

    def per_job(self, seconds: float | None) -> float | None:
        """Microseconds per job of `seconds`."""
        return None if seconds is None else seconds / self.jobs * 1e6


def _stat(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command name (field 3 is index 0)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2 :].split()


def _own(fields: list[str]) -> float:
    return (int(fields[11]) + int(fields[12])) * TICK


def _reaped(fields: list[str]) -> float:
    return (int(fields[13]) + int(fields[14])) * TICK


def _processes() -> Iterator[tuple[int, str]]:
    """(pid, command name) of every process this user can see."""
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                yield int(entry.name), Path(entry.path, "comm").read_text().strip()


def client_seconds() -> float:
    """CPU seconds of this process (every thread) and of the children it has waited for."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


class ServerClock:
    """Reads the CPU seconds the database server has used so far, or None if it cannot."""

    def __init__(self, db: Any) -> None:
        self.pid: int | None = None
        self.tree = db.name == "postgresql"
        with contextlib.suppress(Exception):
            self.pid = self._find(db)

    def _find(self, db: Any) -> int | None:
        if self.tree:
            with contextlib.closing(db.connect()) as conn:  # its backend alive while read
                backend = int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])
                return int(_stat(backend)[1])  # the backend's parent: the postmaster
        pid_file, datadir, port = db.query("SELECT @@pid_file, @@datadir, @@port")[0]
        with contextlib.suppress(OSError, ValueError):
            return int(Path(str(datadir), str(pid_file)).read_text().split()[0])
        servers = [pid for pid, comm in _processes() if comm in ("mariadbd", "mysqld")]
        for pid in servers:
            with contextlib.suppress(OSError):
                if f"--port={port}".encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return pid
        return servers[0] if len(servers) == 1 else None

    def seconds(self) -> float | None:
        if self.pid is None:
            return None
        try:
            fields = _stat(self.pid)
        except OSError:
            return None
        if not self.tree:
            return _own(fields)
        total = _own(fields) + _reaped(fields)
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError, IndexError, ValueError):
                child = _stat(int(entry.name))
                if int(child[1]) == self.pid:
                    total += _own(child)
        return total


_clocks: dict[str, ServerClock] = {}


@contextlib.contextmanager
def metered(db: Any, figure: Figure) -> Iterator[Figure]:
    """Fill `figure.client` and `figure.server` with the CPU seconds spent inside the block
    (the reading of the server's processes is left out of the client's)."""
    clock = _clocks.get(db.url) or _clocks.setdefault(db.url, ServerClock(db))
    server = clock.seconds()
    client = client_seconds()
    yield figure
    figure.client = client_seconds() - client
    time.sleep(SETTLE)
    after = clock.seconds()
    figure.server = None if server is None or after is None else after - server

"""What the tests' own servers (a private MariaDB, a PgBouncer, the embedded PostgreSQL)
share: finding the machine's binaries, a free port on 127.0.0.1, stopping a server process,
and a watchdog that stops a server when the test process that started it dies, however it
dies (`Watchdog`).

A test process stops its servers when their blocks end, also on Ctrl-C or SIGTERM
(`conftest.py` turns SIGTERM into KeyboardInterrupt). A process killed outright (SIGKILL, as
pytest-xdist does to a worker that has not ended 10 s after being told to, or `os._exit`)
runs no such code, and the embedded PostgreSQL, which `pg_ctl` starts in a session of its
own, no signal to the tests' process group reaches: it would run on. So each such server
gets a small process of its own, in a session of its own too, that waits for the end of a
pipe that only the test process holds: when the pipe closes and the server still runs, it
stops the server and removes its folder. Run as a script, this file is that process (with
the standard library only).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence

_SBIN = os.pathsep.join((os.environ.get("PATH", ""), "/usr/sbin", "/usr/local/sbin"))


def binary(*names: str) -> str | None:
    """The first of `names` on the PATH or in the sbin folders, if any."""
    for name in names:
        found = shutil.which(name, path=_SBIN)
        if found:
            return found
    return None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def stop(process: subprocess.Popen[bytes], grace: float = 30.0) -> None:
    """SIGTERM, then SIGKILL if the process has not ended within `grace` seconds."""
    process.terminate()
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


_GRACE = 5.0
"""Seconds a server has to end after its stop signal before SIGKILL."""


class Watchdog:
    """Stops the server `arm` names, and removes its folder, once this process is gone.

    Open it before the server starts and close it after the server stopped (an
    `ExitStack`, or `with closing(Watchdog()), server:`): closed then, it finds the server
    gone and only ends; if this process dies first, it finds the server running and stops it.
    """

    def __init__(self) -> None:
        self._write: int | None = None
        self._process: subprocess.Popen[bytes] | None = None

    def arm(
        self,
        pid: int | None,
        folder: str,
        stop_signal: int = signal.SIGTERM,
        then: Sequence[Sequence[str]] = (),
    ) -> None:
        """Watch the server process `pid`, whose command line names `folder` (the server's
        own temporary folder, removed last); `stop_signal` stops it. The commands `then` run
        after it stopped (with no `pid`, only they run, and the folder goes)."""
        if self._process is not None:
            raise RuntimeError("this watchdog watches a server already")
        read, self._write = os.pipe()  # not inherited by other children (PEP 446)
        try:
            self._process = subprocess.Popen(
                [
                    sys.executable,
                    "-I",
                    "-S",
                    os.path.abspath(__file__),
                    str(pid or 0),
                    folder,
                    str(int(stop_signal)),
                    json.dumps([list(command) for command in then]),
                ],
                stdin=read,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # out of reach of signals to the tests' process group
            )
        finally:
            os.close(read)

    def arm_postgres(self, url: str) -> None:
        """Watch the embedded PostgreSQL at `url`: its postmaster, and the temporary folder
        that holds its data directory."""
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute("SHOW data_directory").fetchone()
        data = str(row[0]) if row else ""
        with open(os.path.join(data, "postmaster.pid")) as pid_file:
            pid = int(pid_file.readline())
        # Immediate shutdown: the data is thrown away anyway.
        self.arm(pid, os.path.dirname(data), signal.SIGQUIT)

    def close(self) -> None:
        """Let the watchdog go; it stops the server first if it still runs."""
        if self._write is not None:
            os.close(self._write)
            self._write = None
        if self._process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):  # it goes on by itself
                self._process.wait(_GRACE * 3)
            self._process = None


def _runs(pid: int, folder: str) -> bool:
    """Whether `pid` is a live process whose command line names `folder` (not a zombie, nor
    another process that got the number since)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            if stat.read().rpartition(b")")[2].split()[0] == b"Z":
                return False
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return folder.encode() in cmdline.read()
    except (OSError, IndexError):
        return False


def _stop(pid: int, folder: str, stop_signal: int) -> None:
    """Stop the server if it still runs; SIGKILL it if it will not end."""
    if _runs(pid, folder):
        try:
            os.kill(pid, stop_signal)
            deadline = time.monotonic() + _GRACE
            while _runs(pid, folder) and time.monotonic() < deadline:
                time.sleep(0.05)
            if _runs(pid, folder):
                os.kill(pid, signal.SIGKILL)
                while _runs(pid, folder):
                    time.sleep(0.05)
        except ProcessLookupError:
            pass


def main(argv: list[str]) -> None:
    pid, folder, stop_signal, then = int(argv[0]), argv[1], int(argv[2]), json.loads(argv[3])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while sys.stdin.buffer.read(4096):  # the test process writes nothing: this waits for EOF
        pass
    if pid:
        _stop(pid, folder, stop_signal)
    for command in then:
        subprocess.run(command, capture_output=True, check=False)
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])

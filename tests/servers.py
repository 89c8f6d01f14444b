"""What the tests' own servers (a private MariaDB, a PgBouncer) share: finding the
machine's binaries, a free port on 127.0.0.1, and stopping a server process."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess

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

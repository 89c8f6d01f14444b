"""`admin.diagnose` and `proletarian-di doctor`: each reading checked against what the
database says of itself, and each warning made real (dead rows, a transaction holding the
horizon, InnoDB's purge lag, a due job left waiting)."""

from __future__ import annotations

import json
import re
import time
from datetime import datetime, timezone
from typing import Any

import pytest
from typer.testing import CliRunner

from proletarian_di import admin, enqueue
from proletarian_di.cli import app
from proletarian_di.errors import ConfigurationError

from backends import Backend, connection, enqueue_committed, wait_until

runner = CliRunner()
SECRET = "hunter2-doctor"


def findings(backend: Backend, **limits: Any) -> dict[str, admin.Finding]:
    with connection(backend) as conn:
        found = admin.diagnose(conn, thresholds=admin.Thresholds(**limits))
        conn.rollback()
    return {f.check: f for f in found}


def test_a_healthy_queue_warns_of_nothing(backend: Backend) -> None:
    expected = (
        ["dead_rows", "autovacuum", "horizon", "claim_latency"]
        if backend.name == "postgresql"
        else ["purge_lag", "long_transaction", "claim_latency"]
    )
    found = findings(backend, vacuum_lag_s=10**9)
    assert list(found) == expected
    assert found["claim_latency"].status == "ok"
    assert found["claim_latency"].message == "no due job is waiting"


def make_overdue(backend: Backend, queue: str, minutes: int) -> datetime:
    """Make the queue's jobs due `minutes` ago (enqueue takes a past time as now): the
    process_at the database then holds."""
    ago = (
        f"now() - interval '{minutes} minutes'"
        if backend.name == "postgresql"
        else f"UTC_TIMESTAMP(6) - INTERVAL {minutes} MINUTE"
    )
    table = backend.job_table
    backend.execute(f"UPDATE {table} SET process_at = {ago} WHERE queue = '{queue}'")
    [(stored,)] = backend.query(f"SELECT MIN(process_at) FROM {table} WHERE queue = '{queue}'")
    return stored if stored.tzinfo else stored.replace(tzinfo=timezone.utc)


def test_a_due_job_left_waiting_is_the_claim_latency(backend: Backend) -> None:
    """Its wait is now minus the row's process_at; a paused queue's jobs do not count."""
    enqueue_committed(backend, ("late", 1), queue="slow")
    enqueue_committed(backend, ("later", 1), queue="held")
    stored_at = make_overdue(backend, "slow", 5)
    make_overdue(backend, "held", 60)
    with connection(backend) as conn:
        admin.pause_queue(conn, "held")
        conn.commit()
    before = (datetime.now(timezone.utc) - stored_at).total_seconds()
    latency = findings(backend, claim_latency_s=60)["claim_latency"]
    after = (datetime.now(timezone.utc) - stored_at).total_seconds()
    assert latency.status == "warn"
    assert latency.details["queue"] == "slow"
    assert latency.value is not None and before - 1 <= latency.value <= after + 1
    assert "queue slow has waited 0:05:0" in latency.message
    assert findings(backend, claim_latency_s=3600)["claim_latency"].status == "ok"


def test_postgres_dead_rows_are_what_its_statistics_say(pg: Backend) -> None:
    with connection(pg) as conn:
        for n in range(30):
            enqueue(conn, "gone", n)
        conn.commit()
    pg.execute(f"DELETE FROM {pg.job_table}")
    with connection(pg) as conn:
        conn.execute("SELECT pg_stat_force_next_flush()")
        conn.commit()

    def dead() -> int:
        with connection(pg) as conn:
            row = conn.execute(
                "SELECT n_dead_tup FROM pg_stat_all_tables WHERE relid = to_regclass(%s)",
                (pg.job_table,),
            ).fetchone()
        return int(row[0])

    assert wait_until(lambda: dead() >= 30, timeout=15)
    found = findings(pg, dead_rows=10)["dead_rows"]
    assert found.status == "warn"
    assert found.value == dead()
    assert f"{pg.job_table} holds {dead():,} dead rows" in found.message
    # (a server without autovacuum keeps every dead row earlier tests left: hence dead())
    assert findings(pg, dead_rows=dead() + 100_000)["dead_rows"].status == "ok"


def test_postgres_names_the_session_that_holds_the_horizon(pg: Backend) -> None:
    """A REPEATABLE READ transaction left open: its pid, application and statement (any
    secret in it masked), and what to do."""
    holder = pg.connect()
    try:
        holder.execute("SET application_name = 'doctor-holder'")
        holder.commit()
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        pid = holder.execute("SELECT pg_backend_pid()").fetchone()[0]
        holder.execute(f"SELECT 'postgresql://app:{SECRET}@db/app' AS leaked")
        time.sleep(0.2)
        found = findings(pg, horizon_s=0.1)["horizon"]
        assert found.status == "warn"
        assert found.details["id"] == str(pid)
        assert found.details["application"] == "doctor-holder"
        assert "postgresql://app:" in found.details["query"] and SECRET not in found.message
        assert f"pg_terminate_backend({pid})" in found.message
        assert findings(pg, horizon_s=3600)["horizon"].status == "ok"
    finally:
        holder.close()
    assert findings(pg, horizon_s=0.1)["horizon"].status == "ok"


def test_mysql_names_the_long_transaction_and_its_purge_lag(mysql_backend: Backend) -> None:
    """An open transaction's connection id and age; while it keeps its snapshot, the rows
    deleted meanwhile stay in InnoDB's history list, whose length is the purge lag."""
    my = mysql_backend
    my.reset()
    holder = my.connect()
    try:
        with holder.cursor() as cursor:
            cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cursor.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            cursor.execute(f"SELECT COUNT(*) FROM {my.job_table}")
            cursor.execute("SELECT CONNECTION_ID()")
            (thread,) = cursor.fetchone()
        with connection(my) as conn:
            for n in range(200):
                enqueue(conn, "gone", n)
            conn.commit()
        my.execute(f"DELETE FROM {my.job_table}")
        time.sleep(2.2)  # the server counts whole seconds: at least 2 past the threshold of 1
        before = history(my)
        found = findings(my, horizon_s=1, purge_lag=1)
        after = history(my)
        transaction = found["long_transaction"]
        assert transaction.status == "warn"
        assert transaction.details["id"] == thread
        assert f"KILL {thread}" in transaction.message
        lag = found["purge_lag"]
        assert lag.status == "warn" and before <= (lag.value or 0) <= after
        assert before >= 1
    finally:
        holder.close()
    assert findings(my, horizon_s=3600)["long_transaction"].status == "ok"


def history(my: Backend) -> int:
    (row,) = my.query(
        "SELECT `COUNT` FROM information_schema.INNODB_METRICS WHERE NAME = 'trx_rseg_history_len'"
    )
    return int(row[0])


def test_the_doctor_command_exits_8_when_a_reading_warns(backend: Backend) -> None:
    enqueue_committed(backend, ("late", 1))
    make_overdue(backend, "default", 3)
    url = backend.url
    warned = runner.invoke(
        app, ["doctor", "--database-url", url, "--claim-latency", "60", "--vacuum-lag", "1e9"]
    )
    assert warned.exit_code == 8, warned.output
    assert "warn" in warned.output and "claim_latency" in warned.output
    calm = runner.invoke(
        app,
        [
            "doctor",
            "--database-url",
            url,
            "--json",
            "--claim-latency",
            "3600",
            *["--vacuum-lag", "1e9"],
        ],
    )
    report = json.loads(calm.stdout)
    latency = next(f for f in report if f["check"] == "claim_latency")
    assert latency["status"] == "ok" and latency["details"]["queue"] == "default"
    statuses = {f["check"]: f["status"] for f in report}
    assert calm.exit_code == (8 if "warn" in statuses.values() else 0), statuses


@pytest.mark.parametrize("bad", ["0", "-3", "lots"])
def test_a_bad_threshold_is_a_usage_error(backend: Backend, bad: str) -> None:
    result = runner.invoke(app, ["doctor", "--database-url", backend.url, "--dead-rows", bad])
    assert result.exit_code == 2
    assert "--dead-rows" in result.output


@pytest.mark.parametrize("field", ["dead_rows", "horizon_s", "claim_latency_s"])
def test_thresholds_refuse_what_is_not_a_positive_number(field: str) -> None:
    for bad in (0, -1, True, "10"):
        with pytest.raises(ConfigurationError, match=f"threshold {field} must be a positive"):
            admin.Thresholds(**{field: bad})


def test_the_health_gauges_are_the_doctors_readings(backend: Backend, pool: Any) -> None:
    """`register_queue_health`: each check's value, threshold and warning at each scrape, as
    `diagnose` reads them; an unreachable database is `health_up 0`, not an error."""
    from prometheus_client import CollectorRegistry, generate_latest

    from proletarian_di.contrib.prometheus import QueueHealthCollector, register_queue_health

    registry = CollectorRegistry()
    thresholds = admin.Thresholds(claim_latency_s=60, vacuum_lag_s=10**9)
    register_queue_health(pool, registry=registry, thresholds=thresholds)
    enqueue_committed(backend, ("late", 1))
    make_overdue(backend, "default", 2)
    labels = {"check": "claim_latency", "job_table": backend.job_table}
    assert registry.get_sample_value("proletarian_health_warning", labels) == 1
    assert registry.get_sample_value("proletarian_health_threshold", labels) == 60
    waited = registry.get_sample_value("proletarian_health_value", labels) or 0
    assert 115 <= waited <= 130
    assert registry.get_sample_value("proletarian_health_up") == 1
    read = findings(backend, claim_latency_s=60, vacuum_lag_s=10**9)
    for check, finding in read.items():
        at = {"check": check, "job_table": backend.job_table}
        if finding.status != "unknown":
            shown = registry.get_sample_value("proletarian_health_warning", at)
            assert shown == int(finding.status == "warn"), check
    backend.execute(f"DELETE FROM {backend.job_table}")
    assert registry.get_sample_value("proletarian_health_warning", labels) == 0

    def unreachable() -> Any:
        raise ConnectionError("connection refused (password=hunter2)")

    other = CollectorRegistry()
    other.register(QueueHealthCollector(unreachable))
    scraped = generate_latest(other).decode()
    assert "proletarian_health_up 0.0" in scraped and "hunter2" not in scraped


def test_readyz_says_the_queue_is_degraded_and_why(backend: Backend, pool: Any) -> None:
    """A ready worker's `/readyz` stays 200 (a restart would not mend the queue) and lists
    the queue health warnings, the same as `diagnose` reads: here a queue no worker serves,
    whose due job has waited two minutes."""
    import httpx

    from proletarian_di import create_queue_worker
    from proletarian_di.health import serve_health

    enqueue_committed(backend, ("stuck", 1), queue="unserved")
    make_overdue(backend, "unserved", 2)
    worker = create_queue_worker(pool, lambda job_type, payload: None)
    with worker, serve_health([worker], port=0) as server:
        wait_until(lambda: worker.state == "running")
        ready = httpx.get(f"http://127.0.0.1:{server.port}/readyz", timeout=10)
        with connection(backend) as conn:
            expected = admin.degraded(admin.diagnose(conn))
            conn.rollback()
    assert ready.status_code == 200 and ready.json()["ready"] is True
    degraded = ready.json()["degraded"]
    assert any("queue unserved has waited 0:02:0" in reason for reason in degraded), degraded
    assert [r.split(" has waited ")[0] for r in degraded] == [
        r.split(" has waited ")[0] for r in expected
    ]


@pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")
def test_the_dashboards_health_page_shows_the_doctors_findings(backend: Backend, pool: Any) -> None:
    """Each check's row: its status and message as `diagnose` reads them from the database
    (here with a due job left waiting for three minutes, past the default minute)."""
    import html

    from starlette.testclient import TestClient

    from proletarian_di.contrib.dashboard import dashboard

    enqueue_committed(backend, ("late", 1), queue="unserved")
    make_overdue(backend, "unserved", 3)
    page = TestClient(dashboard(pool)).get("/health")
    assert page.status_code == 200
    with connection(backend) as conn:
        expected = admin.diagnose(conn)
        conn.rollback()
    for finding in expected:
        row = re.search(rf'<tr data-check="{finding.check}">.*?</tr>', page.text, re.S)
        assert row, finding.check
        assert f'class="health-{finding.status}"' in row.group(), finding.check
        if finding.check != "claim_latency":  # its wait grows by the second
            assert finding.message in html.unescape(row.group())
    latency = re.search(r'<tr data-check="claim_latency">.*?</tr>', page.text, re.S)
    assert latency and 'class="health-warn"' in latency.group()
    assert "queue unserved has waited 0:03:0" in latency.group()

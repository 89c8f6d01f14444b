"""The dashboard's health at a glance, on both databases: each queue's last hour by minute
(its sparkline and failure rate), the oldest due job's age and its colour, the badges of
what holds a backlog back (paused, max_running full, rate limited until T, no live worker),
and a queue's own page; every figure checked against the database."""

from __future__ import annotations

import contextlib
import html
import re
import uuid
import warnings
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from proletarian_di import RateLimit, admin, create_queue_worker, process_next_job
from proletarian_di._engine import registry as _registry
from proletarian_di._store.dialects import dialect_of
from proletarian_di.contrib.dashboard import _chart, dashboard
from proletarian_di.contrib.dashboard._app import _age_class, _percent

from backends import Backend, committed, connection, enqueue_committed, wait_until

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")


@pytest.fixture(autouse=True)
def quick_beats(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers beat every 50 ms here, so that the registry shows a running job at once."""
    monkeypatch.setattr(_registry, "BEAT_S", 0.05)


def tables_dialect(backend: Backend, conn: Any) -> Any:
    """The dialect of `conn` for the backend's tables."""
    return dialect_of(conn, admin.Tables(backend.job_table, backend.archived_job_table))


def archive_at(backend: Backend, queue: str, status: str, minutes_ago: list[float]) -> None:
    """Archived jobs of `queue` with this status, one finished each of `minutes_ago`."""
    now = datetime.now(timezone.utc)
    with contextlib.closing(backend.connect()) as conn:
        dialect = tables_dialect(backend, conn)
        at = dialect.encode_time
        values = [
            (
                dialect.default_id_strategy.encode(uuid.uuid4()),
                queue,
                at(now - timedelta(minutes=ago + 1)),
                status,
                at(now - timedelta(minutes=ago)),
            )
            for ago in minutes_ago
        ]
        with contextlib.closing(conn.cursor()) as cur:
            cur.executemany(
                f"INSERT INTO {backend.archived_job_table} (job_id, queue, job_type, payload, "
                "attempts, enqueued_at, process_at, status, finished_at) "
                "VALUES (%s, %s, 'x', 'null', 1, %s, %s, %s, %s)",
                [(key, q, due, due, st, end) for key, q, due, st, end in values],
            )
        conn.commit()


def archive_counts(backend: Backend, queue: str, since: datetime) -> dict[str, int]:
    """The archive's successes and failures of `queue` finished since `since`, counted in SQL."""
    with contextlib.closing(backend.connect()) as conn:
        dialect = tables_dialect(backend, conn)
        rows = dialect.fetchall(
            conn,
            f"SELECT status, COUNT(*) FROM {backend.archived_job_table} "
            "WHERE queue = %s AND finished_at >= %s GROUP BY status",
            (queue, dialect.encode_time(since)),
        )
        conn.rollback()
    return {str(status): int(count) for status, count in rows}


def row_of(page: str, queue: str) -> str:
    match = re.search(rf'<tr data-queue="{re.escape(queue)}">.*?</tr>', page, re.S)
    assert match, page
    return match.group()


def holds_of(fragment: str) -> dict[str, str]:
    """The badges of a row or page: each hold's kind and its title (the sentence)."""
    return {
        kind: html.unescape(title)
        for kind, title in re.findall(
            r'<span class="badge badge-[a-z_]+" data-hold="([a-z_]+)" title="([^"]*)">', fragment
        )
    }


def reasons(backend: Backend, job_id: uuid.UUID) -> list[str]:
    with connection(backend) as conn:
        found = admin.explain_job(conn, job_id)
    assert found is not None
    return found.reasons


def test_the_last_hour_by_minute_is_the_archives(backend, pool):
    archive_at(backend, "mail", "success", [0.2, 2.5, 2.5, 2.6, 30, 58])
    archive_at(backend, "mail", "failure", [2.5, 10])
    archive_at(backend, "mail", "success", [61, 90])  # before the hour: not in it
    archive_at(backend, "mail", "cancelled", [1])  # never ran: not counted
    archive_at(backend, "other", "failure", [1])
    now = datetime.now(timezone.utc)
    with connection(backend) as conn:
        minutes = admin.last_hour(conn, ["mail", "other", "idle"], now=now)
    start = now.replace(second=0, microsecond=0) - timedelta(minutes=59)
    assert [b.start for b in minutes["mail"]] == [start + timedelta(minutes=n) for n in range(60)]
    expected = archive_counts(backend, "mail", start)
    assert sum(b.succeeded for b in minutes["mail"]) == expected["success"]
    assert sum(b.failed for b in minutes["mail"]) == expected["failure"]
    with connection(backend) as conn:
        dialect = tables_dialect(backend, conn)
        for bucket in minutes["mail"]:  # each minute as SQL counts it
            [(ok, bad)] = dialect.fetchall(
                conn,
                "SELECT COALESCE(SUM(CASE WHEN status = 'success' THEN 1 ELSE 0 END), 0), "
                "COALESCE(SUM(CASE WHEN status = 'failure' THEN 1 ELSE 0 END), 0) "
                f"FROM {backend.archived_job_table} WHERE queue = 'mail' "
                "AND finished_at >= %s AND finished_at < %s",
                (
                    dialect.encode_time(bucket.start),
                    dialect.encode_time(bucket.start + timedelta(minutes=1)),
                ),
            )
            assert (bucket.succeeded, bucket.failed) == (int(ok), int(bad)), bucket.start
    assert sum(b.failed for b in minutes["other"]) == 1
    assert all(b.succeeded == b.failed == 0 for b in minutes["idle"])

    page = TestClient(dashboard(pool)).get("/").text
    mail = row_of(page, "mail")
    spark = re.search(r'<svg class="spark"[^>]*data-succeeded="(\d+)" data-failed="(\d+)"', mail)
    assert spark, mail
    shown = archive_counts(backend, "mail", start)
    assert (int(spark.group(1)), int(spark.group(2))) == (shown["success"], shown["failure"])
    rate = shown["failure"] / (shown["success"] + shown["failure"])
    assert (
        f'data-count="failure-rate" title="2 of 8 finished in the last hour">{_percent(rate)}<'
        in mail
    )
    assert _percent(rate) == "25.0%"
    assert mail.count('<path class="fail"') == 1 and mail.count('<path class="ok"') == 1
    assert 'href="/queue?name=mail"' in mail
    other = row_of(page, "other")
    assert 'data-count="failure-rate" title="1 of 1 finished in the last hour">100%<' in other


def test_the_sparkline_draws_a_bar_for_every_minute_with_jobs():
    start = datetime(2024, 5, 1, 9, 0, tzinfo=timezone.utc)
    buckets = [admin.ThroughputBucket(start + timedelta(minutes=n), 0, 0) for n in range(60)]
    buckets[3] = admin.ThroughputBucket(buckets[3].start, 1000, 0)
    buckets[59] = admin.ThroughputBucket(buckets[59].start, 1, 1)
    spark = _chart.sparkline(buckets)
    assert (spark.succeeded, spark.failed, spark.peak, spark.start) == (1001, 1, 1000, "09:00")
    # the busy minute fills the height; a minute of one job is still one unit high
    assert spark.succeeded_path == "M6.0 0.0h1.6v24.0h-1.6zM118.0 23.0h1.6v1.0h-1.6z"
    assert spark.failed_path == "M118.0 22.0h1.6v1.0h-1.6z"
    empty = _chart.sparkline(buckets[:1] * 0)
    assert (empty.succeeded_path, empty.failed_path, empty.peak) == ("", "", 0)


def test_shares_and_ages_are_never_rounded_into_a_lie():
    assert [_percent(s) for s in (None, 0, 0.0004, 0.25, 0.9996, 1)] == [
        "-",
        "0%",
        "<0.1%",
        "25.0%",
        ">99.9%",
        "100%",
    ]
    ages = [None, timedelta(seconds=59), timedelta(minutes=1), timedelta(minutes=5)]
    assert [_age_class(a) for a in ages] == ["age-none", "age-ok", "age-warn", "age-bad"]


def test_the_oldest_due_age_is_coloured_by_its_wait(backend, pool):
    for queue, minutes in (("fresh", 0), ("slow", 2), ("stuck", 10)):
        enqueue_committed(backend, ("x", None), queue=queue)
        with connection(backend) as conn:
            due = tables_dialect(backend, conn).encode_time(
                datetime.now(timezone.utc) - timedelta(minutes=minutes)
            )
        backend.execute(
            f"UPDATE {backend.job_table} SET process_at = %s WHERE queue = %s", (due, queue)
        )
    enqueue_committed(backend, ("x", None), queue="later", process_in=timedelta(hours=1))
    page = TestClient(dashboard(pool)).get("/").text
    with connection(backend) as conn:
        oldest = {q.queue: q.oldest_due for q in admin.overview(conn)}
    assert oldest["later"] is None
    for queue, age in (("fresh", "age-ok"), ("slow", "age-warn"), ("stuck", "age-bad")):
        assert _age_class(oldest[queue]) == age
        assert f'data-age="{age}"' in row_of(page, queue)
    assert 'data-age="age-none"' in row_of(page, "later")
    assert re.search(r'data-age="age-bad">10\.\dm<', row_of(page, "stuck"))


def test_badges_say_paused_and_no_live_worker_as_explain_job_does(backend, pool):
    [mail] = enqueue_committed(backend, ("send", None), queue="mail")
    [other] = enqueue_committed(backend, ("send", None), queue="other")
    enqueue_committed(backend, ("send", None), queue="later", process_in=timedelta(hours=1))
    committed(backend, admin.pause_queue, "mail")
    committed(backend, admin.pause_queue, "empty")
    page = TestClient(dashboard(pool)).get("/").text
    mail_holds = holds_of(row_of(page, "mail"))
    assert list(mail_holds) == ["paused", "no_worker"]
    assert list(mail_holds.values()) == reasons(backend, mail)
    assert list(holds_of(row_of(page, "other")).values()) == reasons(backend, other)
    assert list(holds_of(row_of(page, "other"))) == ["no_worker"]
    assert list(holds_of(row_of(page, "empty"))) == ["paused"]
    later = row_of(page, "later")  # nothing due: nothing held back
    assert holds_of(later) == {} and '<span class="active">active</span>' in later
    with create_queue_worker(pool, lambda t, p: None, queue="other"):
        wait_until(lambda: not reasons_of_queue(pool, "other"), description="a run")
    # once the worker has gone, its queue has no live worker again, but nothing is due
    assert holds_of(row_of(TestClient(dashboard(pool)).get("/").text, "other")) == {}


def reasons_of_queue(pool: Any, queue: str) -> list[str]:
    """The badges' sentences of a queue's row on the overview."""
    return list(holds_of(row_of(TestClient(dashboard(pool)).get("/").text, queue)).values())


def test_max_running_full_and_rate_limited_badges_match_explain_job(backend, pool, gate):
    [first] = enqueue_committed(backend, ("slow", 1), queue="capped")
    capped = create_queue_worker(pool, gate, queue="capped", worker_threads=2, max_running=1)
    rate = RateLimit(1, 60_000)
    limited = create_queue_worker(pool, lambda t, p: None, queue="limited", rate_limit=rate)
    with capped, limited:
        assert gate.started.wait(30)
        [second] = enqueue_committed(backend, ("slow", 2), queue="capped")
        [ran, held] = enqueue_committed(backend, ("call", 1), ("call", 2), queue="limited")

        def badges() -> dict[str, dict[str, str]] | None:
            page = TestClient(dashboard(pool)).get("/").text
            found = {queue: holds_of(row_of(page, queue)) for queue in ("capped", "limited")}
            wanted = "max_running" in found["capped"] and "rate_limited" in found["limited"]
            return found if wanted else None

        found = wait_until(badges, description="both queues held back")
        assert list(found["capped"].values()) == reasons(backend, second)
        assert found["capped"]["max_running"].endswith(f"and {first} holds its slot")
        assert list(found["limited"].values()) == reasons(backend, held)
        [reason] = found["limited"].values()
        until = reason.split(" until ")[1][:23]
        page = TestClient(dashboard(pool)).get("/").text
        assert f"rate limited until {until[11:19]} UTC</span>" in row_of(page, "limited")
        with connection(backend) as conn:
            assert admin.get_job(conn, ran).state == "succeeded"
        queue_page = TestClient(dashboard(pool)).get("/queue", params={"name": "capped"}).text
        assert holds_of(queue_page) == found["capped"]
        workers = re.findall(r'<tr class="worker worker-running".*?</tr>', queue_page, re.S)
        assert len(workers) == 1
        assert '<td class="n" data-option="max_running">1</td>' in workers[0]
        assert '<td class="n" data-count="busy">1 / 2</td>' in workers[0]
        limited_page = TestClient(dashboard(pool)).get("/queue", params={"name": "limited"}).text
        assert '<td data-option="rate_limit">1 per 60 s</td>' in limited_page
        gate.release.set()


def test_a_queues_page_shows_its_counts_failures_and_minutes(backend, pool):
    [done] = enqueue_committed(backend, ("send", {"n": 1}), queue="mail")
    assert process_next_job(pool, lambda t, p: None, queue="mail") is True
    [bad] = enqueue_committed(backend, ("send", {"n": 2}), queue="mail")
    assert process_next_job(pool, lambda t, p: 1 / 0, queue="mail") is False
    enqueue_committed(backend, ("send", {"n": 3}), ("send", {"n": 4}), queue="mail")
    enqueue_committed(backend, ("send", {"n": 5}), queue="mail", process_in=timedelta(hours=1))
    enqueue_committed(backend, ("send", {"n": 6}), queue="other")
    client = TestClient(dashboard(pool))
    page = client.get("/queue", params={"name": "mail"})
    assert page.status_code == 200, page.text
    with connection(backend) as conn:
        [mail] = [q for q in admin.overview(conn) if q.queue == "mail"]
        failed = admin.list_jobs(conn, queue="mail", state="failed")
        alone = admin.queue_overview(conn, "mail")
    assert (alone.queued, alone.scheduled, alone.retrying, alone.running) == (
        mail.queued,
        mail.scheduled,
        mail.retrying,
        mail.running,
    )
    assert (mail.queued, mail.scheduled) == (2, 1)
    counts = dict(re.findall(r'<dd data-count="([a-z-]+)">([^<]*)</dd>', page.text))
    assert counts["queued"] == str(mail.queued) and counts["scheduled"] == str(mail.scheduled)
    assert counts["due"] == str(mail.queued + mail.retrying)
    assert counts["last-hour"] == "1 succeeded, 1 failed (50.0% failed)"
    assert (
        counts["last-day"] == f"{mail.succeeded_last_day} succeeded, {mail.failed_last_day} failed"
    )
    listed = re.findall(r'data-job-id="([^"]+)"', page.text)
    assert listed == [str(job.job_id) for job in failed] == [str(bad)]
    assert str(done) not in listed
    assert "1 succeeded and 1 failed jobs in the last hour" in page.text
    assert "jobs per minute, minutes in UTC" in page.text
    assert "No worker of this queue is registered" in page.text
    assert list(holds_of(page.text)) == ["no_worker"]
    nothing = client.get("/queue", params={"name": "nowhere"})
    assert nothing.status_code == 200 and '<dd data-count="due">0</dd>' in nothing.text
    assert client.get("/queue").status_code == 400

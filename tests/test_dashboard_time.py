"""The dashboard's time, on both databases: the hourly charts' bars lead to the jobs that
finished in their hour (the jobs listing's finished range), checked against the archive."""

from __future__ import annotations

import contextlib
import html
import itertools
import math
import re
import uuid
import warnings
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import unquote

import pytest

from proletarian_di import admin
from proletarian_di._store.dialects import dialect_of
from proletarian_di.contrib.dashboard import _chart, dashboard

from backends import Backend, connection

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")


def tables_dialect(backend: Backend, conn: Any) -> Any:
    return dialect_of(conn, admin.Tables(backend.job_table, backend.archived_job_table))


def archived(
    backend: Backend,
    queue: str,
    status: str,
    finished: list[datetime],
    *,
    job_type: str = "x",
    waited: timedelta = timedelta(0),
    ran: timedelta = timedelta(0),
) -> list[uuid.UUID]:
    """Archived jobs of `queue`, one finished at each of `finished`, each due `waited` before
    it started and started `ran` before it finished."""
    ids = [uuid.uuid4() for _ in finished]
    with contextlib.closing(backend.connect()) as conn:
        dialect = tables_dialect(backend, conn)
        at = dialect.encode_time
        with contextlib.closing(conn.cursor()) as cur:
            cur.executemany(
                f"INSERT INTO {backend.archived_job_table} (job_id, queue, job_type, payload, "
                "attempts, enqueued_at, process_at, started_at, status, finished_at) "
                "VALUES (%s, %s, %s, 'null', 1, %s, %s, %s, %s, %s)",
                [
                    (
                        dialect.default_id_strategy.encode(key),
                        queue,
                        job_type,
                        at(end - ran - waited),
                        at(end - ran - waited),
                        at(end - ran),
                        status,
                        at(end),
                    )
                    for key, end in zip(ids, finished, strict=True)
                ],
            )
        conn.commit()
    return ids


def finished_in(backend: Backend, start: datetime, end: datetime, queue: str | None = None) -> int:
    """How many archived jobs (of `queue`) finished in [start, end), counted in SQL."""
    with connection(backend) as conn:
        dialect = tables_dialect(backend, conn)
        sql = (
            f"SELECT COUNT(*) FROM {backend.archived_job_table} "
            "WHERE finished_at >= %s AND finished_at < %s"
        )
        params = [dialect.encode_time(start), dialect.encode_time(end)]
        if queue is not None:
            sql += " AND queue = %s"
            params.append(queue)
        [(count,)] = dialect.fetchall(conn, sql, params)
    return int(count)


def bar_links(page: str) -> list[str]:
    """The links of a page's chart bars, in order."""
    return [unquote(html.unescape(h)) for h in re.findall(r'<a class="bar" href="([^"]+)"', page)]


def listed(page: str) -> list[str]:
    return re.findall(r'data-job-id="([^"]+)"', page)


def test_the_hourly_charts_bars_lead_to_that_hours_jobs(backend, pool):
    now = datetime.now(timezone.utc)
    hour = now.replace(minute=0, second=0, microsecond=0)
    three_ago = hour - timedelta(hours=3)
    inside = [three_ago + timedelta(minutes=m) for m in (0, 10, 59.5)]
    mail_ok = archived(backend, "mail", "success", inside[:2])
    mail_bad = archived(backend, "mail", "failure", inside[2:])
    crm = archived(backend, "crm", "success", [three_ago + timedelta(minutes=30)])
    # the edges: just before the hour, and its end (the next hour's start)
    archived(
        backend,
        "mail",
        "success",
        [three_ago - timedelta(seconds=1), three_ago + timedelta(hours=1)],
    )
    client = TestClient(dashboard(pool))

    overview = client.get("/").text
    links = bar_links(overview)
    assert len(links) == 24
    [link] = [link for link in links if three_ago.strftime("since=%Y-%m-%dT%H:00:00Z") in link]
    assert "queue=" not in link
    page = client.get(link)
    assert page.status_code == 200, page.text
    shown = listed(page.text)
    assert sorted(shown) == sorted(str(i) for i in [*mail_ok, *mail_bad, *crm])
    assert len(shown) == finished_in(backend, three_ago, three_ago + timedelta(hours=1)) == 4
    with connection(backend) as conn:
        for job_id in shown:
            job = admin.get_job(conn, uuid.UUID(job_id))
            assert job is not None and job.finished_at is not None
            assert three_ago <= job.finished_at < three_ago + timedelta(hours=1)
    assert "Finished from" in page.text and "(archived jobs only)" in page.text

    queue_page = client.get("/queue", params={"name": "mail"}).text
    start = three_ago.strftime("finished_since=%Y-%m-%dT%H:00:00Z")
    hourly = [link for link in bar_links(queue_page) if start in link]
    assert len(hourly) == 1 and "queue=mail" in hourly[0], bar_links(queue_page)
    mail_listed = listed(client.get(hourly[0]).text)
    assert sorted(mail_listed) == sorted(str(i) for i in [*mail_ok, *mail_bad])
    assert len(mail_listed) == finished_in(
        backend, three_ago, three_ago + timedelta(hours=1), "mail"
    )


def test_the_finished_range_filters_the_listing_and_keeps_to_it(backend, pool):
    now = datetime.now(timezone.utc).replace(microsecond=0)
    old = archived(backend, "q", "failure", [now - timedelta(hours=5)])
    new = archived(backend, "q", "failure", [now - timedelta(minutes=5)])
    client = TestClient(dashboard(pool, actions=True, auth=lambda request: "alice"))
    since = (now - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    page = client.get("/failed", params={"finished_since": since})
    assert listed(page.text) == [str(new[0])]
    assert finished_in(backend, now - timedelta(hours=1), now + timedelta(hours=1)) == 1
    # no action on every job of the filter: it would not keep to the range
    assert "Retry every failed job" not in page.text and 'name="all"' not in page.text
    assert f'name="finished_since" value="{since}"' in page.text  # kept by the filter form
    until = client.get("/jobs", params={"finished_until": since, "state": "failed"})
    assert listed(until.text) == [str(old[0])]
    everything = client.get("/failed")
    assert set(listed(everything.text)) == {str(old[0]), str(new[0])}
    assert "Retry every failed job" in everything.text
    bad = client.get("/jobs", params={"finished_since": "yesterday"})
    assert bad.status_code == 400 and "finished_since" in bad.text


def nearest_rank(values: list[float], share: float) -> float:
    """The nearest-rank percentile: the smallest value with at least `share` of them at or
    under it."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(share * len(ordered))) - 1]


def archive_rows(
    backend: Backend, queue: str, job_type: str
) -> list[tuple[datetime, float, float]]:
    """Each archived job of the pair with a start: (finished_at, wait s, run s), from SQL."""
    with connection(backend) as conn:
        dialect = tables_dialect(backend, conn)
        rows = dialect.fetchall(
            conn,
            f"SELECT finished_at, process_at, started_at FROM {backend.archived_job_table} "
            "WHERE queue = %s AND job_type = %s AND started_at IS NOT NULL",
            (queue, job_type),
        )
    decode = dialect.decode_time
    return [
        (
            decode(end),
            (decode(start) - decode(due)).total_seconds(),
            (decode(end) - decode(start)).total_seconds(),
        )
        for end, due, start in rows
    ]


def slot_titles(figure: str) -> dict[str, str]:
    """A duration chart's slots: each's first time (HH:MM) to its title."""
    return {
        title[:5]: html.unescape(title) for title in re.findall(r"<title>([^<]+)</title>", figure)
    }


def test_the_timings_charts_draw_each_hours_and_minutes_percentiles(backend, pool):
    now = datetime.now(timezone.utc)
    two_ago = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=2)
    for wait, run in ((1, 0.1), (2, 0.2), (10, 0.3)):
        archived(
            backend,
            "mail",
            "success",
            [two_ago + timedelta(minutes=20)],
            job_type="send",
            waited=timedelta(seconds=wait),
            ran=timedelta(seconds=run),
        )
    recent = now.replace(second=0, microsecond=0) - timedelta(minutes=5) + timedelta(seconds=30)
    [fresh] = archived(
        backend,
        "mail",
        "failure",
        [recent],
        job_type="send",
        waited=timedelta(seconds=4),
        ran=timedelta(seconds=2),
    )
    archived(backend, "mail", "success", [recent], job_type="other", waited=timedelta(hours=1))
    client = TestClient(dashboard(pool))
    page = client.get("/timings", params={"queue": "mail", "job_type": "send"}).text
    figures = re.findall(r'<figure class="chart lines">.*?</figure>', page, re.S)
    assert [re.search(r"<figcaption>([^<]+)<", f).group(1) for f in figures] == [
        "Wait, by hour",
        "Run, by hour",
        "Wait, by minute",
        "Run, by minute",
    ]
    rows = archive_rows(backend, "mail", "send")
    in_hour = [r for r in rows if two_ago <= r[0] < two_ago + timedelta(hours=1)]
    waits, runs = [r[1] for r in in_hour], [r[2] for r in in_hour]
    assert (nearest_rank(waits, 0.5), nearest_rank(waits, 0.95)) == (2, 10)
    hour = two_ago.strftime("%H:%M")
    assert slot_titles(figures[0])[hour] == (
        f"{hour} to {(two_ago + timedelta(hours=1)):%H:%M} UTC: 3 jobs, wait p50 2 s, p95 10 s"
    )
    assert (nearest_rank(runs, 0.5), nearest_rank(runs, 0.95)) == (0.2, 0.3)
    assert slot_titles(figures[1])[hour].endswith("3 jobs, run p50 200 ms, p95 300 ms")
    with connection(backend) as conn:
        [minute] = admin.last_hour_timings(conn, queue="mail", job_type="send", now=now)
    assert minute.start == recent.replace(second=0) and minute.jobs == 1
    mark = f"{minute.start:%H:%M}"
    assert slot_titles(figures[2])[mark].endswith("1 job, wait p50 4 s, p95 4 s")
    assert slot_titles(figures[3])[mark].endswith("1 job, run p50 2 s, p95 2 s")
    # only the slots with jobs: the hour of the three and the current one (the fresh job)
    assert len(slot_titles(figures[0])) == 2 and len(slot_titles(figures[2])) == 1
    # a slot leads to its jobs, of this queue and job type only
    links = bar_links(figures[2])
    assert len(links) == 1 and "queue=mail" in links[0] and "job_type=send" in links[0]
    assert listed(client.get(links[0]).text) == [str(fresh)]
    [hour_link] = [link for link in bar_links(figures[0]) if two_ago.strftime("%H:00:00Z") in link]
    assert len(listed(client.get(hour_link).text)) == len(in_hour) == 3


def test_the_timings_page_has_the_last_hour_by_minute(backend, pool):
    now = datetime.now(timezone.utc)
    archived(backend, "mail", "success", [now - timedelta(minutes=m) for m in (1, 1, 30)])
    archived(backend, "crm", "failure", [now - timedelta(minutes=2)])
    archived(backend, "crm", "success", [now - timedelta(minutes=90)])
    page = TestClient(dashboard(pool)).get("/timings").text
    after = datetime.now(timezone.utc)
    chart = re.search(r'<figure class="chart">.*?</figure>', page, re.S).group()
    assert len(bar_links(chart)) == 60
    with connection(backend) as conn:
        dialect = tables_dialect(backend, conn)
        counts = dict(
            dialect.fetchall(
                conn,
                f"SELECT status, COUNT(*) FROM {backend.archived_job_table} "
                "WHERE finished_at >= %s GROUP BY status",
                (dialect.encode_time(now - timedelta(hours=1)),),
            )
        )
    assert (counts["success"], counts["failure"]) == (3, 1)
    assert 'aria-label="3 succeeded and 1 failed jobs in the last hour"' in chart
    assert "charts</a>" in page  # each pair leads to its charts
    assert '<figure class="chart lines">' not in page  # drawn for one pair only
    # 60 clock minutes, one after the other, the current one (as the page read it) last
    titles = re.findall(r"<title>([^<]+)</title>", chart)
    firsts = [datetime.strptime(title[:5], "%H:%M") for title in titles]
    assert [(b - a) % timedelta(days=1) for a, b in itertools.pairwise(firsts)] == [
        timedelta(minutes=1)
    ] * 59
    assert titles[-1][:5] in {f"{now:%H:%M}", f"{after:%H:%M}"}
    assert re.search(r"finished_since=\S+T\d\d:\d\d:00Z&", bar_links(chart)[0] + "&")


def test_a_duration_chart_leaves_gaps_and_draws_a_lone_slot_as_a_dot():
    start = datetime(2026, 5, 1, 9, 0, tzinfo=timezone.utc)

    def timing(n: int, p50: float, p95: float) -> admin.Timing:
        seconds = [timedelta(seconds=v) for v in (p50, p95, p95)]
        return admin.Timing("q", "t", start + timedelta(hours=n), 1, *seconds, *seconds)

    found = _chart.lines(
        [timing(0, 1, 2), timing(1, 2, 4), timing(3, 3, 7.5)],
        "wait",
        start,
        4,
        timedelta(hours=1),
        "Wait, by hour",
    )
    # 4 slots of 60 units; the scale tops at 8 s (2 s steps) over 90 units
    assert found.p95_path == "M30.0 67.5L90.0 45.0M210.0 5.62h0.01"
    assert found.p50_path == "M30.0 78.75L90.0 67.5M210.0 56.25h0.01"
    assert found.p50_dots == "M30.0 78.75h0.01M90.0 67.5h0.01M210.0 56.25h0.01"
    assert [t.label for t in found.y_ticks] == ["0 s", "2 s", "4 s", "6 s", "8 s"]
    assert [s.title for s in found.slots][2] == "12:00 to 13:00 UTC: 1 job, wait p50 3 s, p95 7.5 s"
    assert found.peak == timedelta(seconds=7.5) and not found.linked
    short = _chart.lines([timing(0, 0.3, 0.929)], "run", start, 4, timedelta(hours=1), "Run")
    assert [t.label for t in short.y_ticks] == ["0 ms", "500 ms", "1000 ms"]
    empty = _chart.lines([], "run", start, 60, timedelta(minutes=1), "Run, by minute")
    assert (empty.p50_path, empty.slots, empty.peak) == ("", [], timedelta(0))

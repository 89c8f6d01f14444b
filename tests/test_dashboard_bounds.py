"""The dashboard acts on the values as stored and bounds each page's work, on both databases:
queue names that differ only by spaces, CRs or LFs; bad query values as 400s; the rows and
statements a listing reads on a large table with a row held; payload prefixes in listings;
the overview in pages of queues. The statements and rows are counted on the connection."""

from __future__ import annotations

import contextlib
import html
import json
import logging
import math
import re
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from faults import TCPProxy, pool_via, upstream_of, url_via
from test_dashboard import confirm

from proletarian_di import admin, enqueue_many
from proletarian_di._store.dialects import dialect_of
from proletarian_di._store.urls import connect, connect_postgres
from proletarian_di.contrib.dashboard import dashboard
from proletarian_di.contrib.dashboard._app import (
    PAYLOAD_CHARS,
    QUEUES_PER_PAGE,
    TIMINGS_PER_PAGE,
    _duration,
)
from proletarian_di.errors import ConfigurationError

from backends import Backend, committed, connection, enqueue_committed, lock_view_settled

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")


def header_user(request: Any) -> str | None:
    return request.headers.get("x-user")


# Counting what a page reads, on the real connection ----------------------------------------------


@dataclass
class Reads:
    """The statements a connection ran and the rows and text values it fetched."""

    statements: int = 0
    rows: int = 0
    longest: int = 0
    sql: list[str] = field(default_factory=list)

    def fetched(self, rows: Any) -> None:
        for row in rows or ():
            self.rows += 1
            for value in row:
                if isinstance(value, (str, bytes)):
                    self.longest = max(self.longest, len(value))

    def reset(self) -> None:
        self.statements = self.rows = self.longest = 0
        self.sql.clear()


def counting_connection(backend: Backend, reads: Reads) -> Any:
    """A driver connection that counts into `reads` (a psycopg cursor class, a PyMySQL
    connection class: the driver's own, with a tally)."""
    if backend.name == "postgresql":
        import psycopg

        class Cursor(psycopg.Cursor):  # type: ignore[type-arg]
            def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
                reads.statements += 1
                reads.sql.append(str(query))
                return super().execute(query, params, **kwargs)

            def fetchall(self) -> Any:
                rows = super().fetchall()
                reads.fetched(rows)
                return rows

            def fetchone(self) -> Any:
                row = super().fetchone()
                reads.fetched([row] if row is not None else [])
                return row

        return psycopg.connect(backend.url, cursor_factory=Cursor)
    import pymysql

    class Connection(pymysql.connections.Connection):  # type: ignore[misc]
        def query(self, sql: Any, unbuffered: bool = False) -> Any:
            reads.statements += 1
            reads.sql.append(str(sql))
            result = super().query(sql, unbuffered)
            reads.fetched(getattr(self._result, "rows", None))
            return result

    return Connection(**backend.options, autocommit=False)


class OneConnection:
    """A data source lending the same counting connection to every request."""

    def __init__(self, backend: Backend) -> None:
        self.reads = Reads()
        self.conn = counting_connection(backend, self.reads)

    @contextlib.contextmanager
    def connection(self) -> Iterator[Any]:
        yield self.conn

    def close(self) -> None:
        self.conn.close()


@pytest.fixture
def counted(backend: Backend) -> Iterator[OneConnection]:
    backend.reset()
    source = OneConnection(backend)
    yield source
    source.close()


def bulk(backend: Backend, count: int, queue: str, payload: Any = None) -> list[uuid.UUID]:
    with contextlib.closing(backend.connect()) as conn:
        ids = enqueue_many(conn, [("bulk", payload or {"n": n}) for n in range(count)], queue=queue)
        conn.commit()
    return list(ids)


def forms(page: str, action: str) -> list[dict[str, str]]:
    """The fields of each form of the page posting to `action`, as a browser reads them."""
    found = []
    for form in re.findall(rf'<form[^>]*action="{action}".*?</form>', page, re.S):
        fields = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', form)
        found.append({name: html.unescape(value) for name, value in fields})
    return found


def listed(page: str) -> set[str]:
    return set(re.findall(r'data-job-id="([^"]+)"', page))


def pages_from(client: TestClient, counted: OneConnection, link: str | None) -> Iterator[Any]:
    """Each page from `link` on, through its "Look further" or next link, counting each
    page's reads from nothing; at most 100 pages."""
    pages = 0
    while link is not None:
        counted.reads.reset()
        page = client.get(link)
        assert page.status_code == 200, page.text
        pages += 1
        assert pages <= 100
        yield page
        more = re.search(r'<a href="([^"]+)">Look further', page.text) or re.search(
            r'<a rel="next" href="([^"]+)"', page.text
        )
        link = more and html.unescape(more.group(1))


# 1. Values as stored -----------------------------------------------------------------------------


def test_queue_names_that_differ_by_spaces_are_different_queues(backend, pool):
    billing = enqueue_committed(backend, ("charge", {}), queue="billing")
    billing_ = enqueue_committed(backend, ("charge", {}), queue="billing ")
    reports = enqueue_committed(backend, ("report", {}), ("report", {}), queue="reports")
    reports_ = enqueue_committed(backend, ("report", {}), queue="reports ")
    client = TestClient(dashboard(pool, actions=True, auth=header_user), headers={"X-User": "al"})

    overview = client.get("/").text
    [pause] = [f for f in forms(overview, "/pause") if f["queue"] == "billing "]
    assert client.post("/pause", data=pause).status_code == 200
    assert set(committed(backend, admin.paused_queues)) == {"billing "}

    page = client.get("/jobs", params={"queue": "reports "})
    assert listed(page.text) == {str(job_id) for job_id in reports_}
    assert 'value="reports "' in page.text
    [cancel] = forms(page.text, "/cancel")[:1]
    assert cancel["queue"] == "reports "
    assert "Cancel every waiting job of queue reports " in page.text
    asked = client.post("/cancel", data=cancel)
    assert "Cancel 1 waiting job of queue reports ?" in asked.text
    done = confirm(client, asked)
    assert done.status_code == 200 and "1 job cancelled" in done.text
    with connection(backend) as conn:
        states = {
            job_id: admin.get_job(conn, job_id).state  # type: ignore[union-attr]
            for job_id in [*billing, *billing_, *reports, *reports_]
        }
    assert [states[job_id] for job_id in reports] == ["queued", "queued"]
    assert [states[job_id] for job_id in reports_] == ["cancelled"]
    assert listed(client.get("/jobs", params={"queue": "billing"}).text) == {str(billing[0])}


def test_queue_names_with_cr_and_lf_round_trip_through_links_and_forms(backend, pool):
    names = ["two\r\nlines", "two\nlines", "two\rlines", "twolines"]
    ids = {name: enqueue_committed(backend, ("x", {}), queue=name)[0] for name in names}
    client = TestClient(dashboard(pool, actions=True, auth=header_user), headers={"X-User": "al"})
    overview = client.get("/").text
    links = re.findall(r'<th scope="row"><a href="/jobs\?queue=([^"]+)">', overview)
    assert len(links) == 4
    for link in links:
        page = client.get("/jobs?queue=" + html.unescape(link)).text
        assert len(listed(page)) == 1
    pauses = forms(overview, "/pause")
    assert sorted(json.loads(f["queue_exact"]) for f in pauses if "queue_exact" in f) == sorted(
        names[:3]
    )
    for form in pauses:
        # as a browser sends a hidden field: every CR, LF or CRLF as CRLF
        form["queue"] = re.sub(r"\r\n|\r|\n", "\r\n", form["queue"])
        if form.get("queue_exact") and json.loads(form["queue_exact"]) == "two\rlines":
            assert client.post("/pause", data=form).status_code == 200
    assert set(committed(backend, admin.paused_queues)) == {"two\rlines"}
    filtered = client.get("/jobs", params={"queue": "two\nlines"}).text
    assert listed(filtered) == {str(ids["two\nlines"])}
    # the filter form's text box drops the LF; its exact companion brings it back
    exact = re.search(r'name="queue_exact" value="([^"]+)"', filtered)
    assert exact and json.loads(html.unescape(exact.group(1))) == "two\nlines"
    again = {"queue": "twolines", "queue_exact": html.unescape(exact.group(1))}
    assert listed(client.get("/jobs", params=again).text) == {str(ids["two\nlines"])}
    typed = {"queue": "twolinesx", "queue_exact": html.unescape(exact.group(1))}
    assert listed(client.get("/jobs", params=typed).text) == set()


# 11a. Bad values are 400s, not 500s --------------------------------------------------------------


def test_unusable_query_values_are_400_without_a_traceback(backend, pool, caplog):
    enqueue_committed(backend, ("x", {}), queue="mail")
    client = TestClient(
        dashboard(pool, actions=True, auth=header_user),
        headers={"X-User": "al"},
        raise_server_exceptions=False,
    )
    [form] = forms(client.get("/").text, "/pause")
    with caplog.at_level(logging.DEBUG):
        for path, params, named in [
            ("/jobs", "limit=%C2%B2", "limit &#39;²&#39; is not a number"),
            ("/failed", "limit=%C2%B2", "limit &#39;²&#39; is not a number"),
            ("/jobs", "queue=%00", "queue &#39;\\x00&#39; contains a NUL character"),
            ("/jobs", "job_type=%00", "job_type &#39;\\x00&#39; contains a NUL character"),
            ("/failed", "queue=a%00b", "queue &#39;a\\x00b&#39; contains a NUL character"),
            ("/", "page=%C2%B2", "page &#39;²&#39; is not a number"),
            ("/jobs", "queue=a&queue_exact=1", "queue_exact must be a JSON string"),
        ]:
            page = client.get(f"{path}?{params}")
            assert page.status_code == 400, (path, params, page.text)
            assert named in page.text, (path, params, page.text)
        refused = client.post("/pause", data={**form, "queue": "a\x00"})
        assert refused.status_code == 400 and "contains a NUL character" in refused.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert committed(backend, admin.paused_queues) == {}


# 4. A page's work is bounded ---------------------------------------------------------------------


def test_a_listing_reads_a_bounded_number_of_rows_with_a_row_held(backend, counted):
    """MariaDB cannot list held rows: with one held, every row is a candidate to probe; a page
    still reads at most MAX_EXAMINED rows, in a few statements, and says it is partial."""
    [oldest] = bulk(backend, 1, "big")
    bulk(backend, 4 * admin.MAX_EXAMINED, "big")
    client = TestClient(dashboard(counted))
    with contextlib.closing(backend.connect()) as holder:
        key = oldest.bytes if backend.name == "mysql" else oldest
        holder.cursor().execute(
            f"SELECT job_id FROM {backend.job_table} WHERE job_id = %s FOR UPDATE", (key,)
        )
        lock_view_settled(backend)  # MySQL's view of row locks lags 100 ms behind
        seen: list[str] = []
        pages = 0
        for page in pages_from(client, counted, "/jobs?state=running"):
            pages += 1
            # as many whatever the queues: on MySQL the oldest due jobs take one per
            # priority level and one more
            assert counted.reads.statements <= 13, counted.reads.sql
            # the rows listed, and the ids the probe of them returns
            assert counted.reads.rows <= 2 * admin.MAX_EXAMINED + 10
            seen += listed(page.text)
        assert pages <= 10
        holder.rollback()
    assert seen == [str(oldest)]
    if backend.name == "mysql":
        assert pages > 1  # the first pages were partial: they say so and go on
    overview = client.get("/")
    assert overview.status_code == 200


def test_list_jobs_page_is_bounded_and_complete_over_its_pages(backend, counted):
    bulk(backend, 300, "q")
    with contextlib.closing(backend.connect()) as holder:
        holder.cursor().execute(f"SELECT job_id FROM {backend.job_table} LIMIT 1 FOR UPDATE")
        lock_view_settled(backend)  # MySQL's view of row locks lags 100 ms behind
        conn = counted.conn
        page = admin.list_jobs_page(conn, state="queued", limit=50, max_examined=100)
        assert page.examined <= 100 and len(page.jobs) == 50 and not page.partial
        collected = []
        before: str | None = None
        while True:
            page = admin.list_jobs_page(
                conn, state="queued", limit=50, max_examined=60, before=before
            )
            conn.rollback()
            collected += page.jobs
            assert page.examined <= 60
            if page.next_before is None:
                break
            before = page.next_before
        holder.rollback()
    assert len({job.job_id for job in collected}) == 299
    for bad in ({"max_examined": 0}, {"payload_chars": True}, {"limit": 1001}):
        with pytest.raises(ConfigurationError, match="must be a whole number"):
            admin.list_jobs_page(counted.conn, **bad)


@pytest.mark.parametrize("archived", [False, True], ids=["waiting", "archived"])
def test_a_filter_that_matches_few_rows_reads_a_window_a_page(backend, counted, archived):
    """One job of queue "rare" under 450 newer ones of another queue: each page reads a
    window of at most `max_examined` rows of each table in the listing's order, says it is
    partial and where to go on, and the pages together find the job, once; a failed job
    filtered by its queue and state (the queue page's latest failures) too."""
    [rare] = bulk(backend, 1, "rare")
    bulk(backend, 450, "busy")
    if archived:
        backend.query(
            f"INSERT INTO {backend.archived_job_table} (job_id, queue, job_type, payload, "
            "attempts, enqueued_at, process_at, status, finished_at) SELECT job_id, queue, "
            "job_type, payload, 1, enqueued_at, process_at, CASE WHEN queue = 'rare' THEN "
            f"'failure' ELSE 'success' END, enqueued_at FROM {backend.job_table}"
        )
        backend.query(f"DELETE FROM {backend.job_table}")
    state = "failed" if archived else None
    conn, before, pages, found = counted.conn, None, 0, []
    while True:
        page = admin.list_jobs_page(
            conn, queue="rare", state=state, limit=10, max_examined=100, before=before
        )
        conn.rollback()
        pages += 1
        assert page.examined <= 100 * (1 if archived else 2)
        found += [job.job_id for job in page.jobs]
        if page.next_before is None:
            break
        assert page.partial and page.jobs == []
        before = page.next_before
    assert found == [rare] and 4 <= pages <= 6
    if archived:
        client = TestClient(dashboard(counted))
        assert client.get("/queue?name=rare").status_code == 200


# 5. Listings read payload prefixes ---------------------------------------------------------------


def test_listings_fetch_payload_prefixes_and_the_job_page_the_whole(backend, counted):
    big = {"blob": "x" * 100_000}
    ids = bulk(backend, 30, "heavy", big)
    client = TestClient(dashboard(counted))
    counted.reads.reset()
    page = client.get("/jobs", params={"limit": "1000"})
    assert page.status_code == 200 and len(listed(page.text)) == 30
    assert 0 < counted.reads.longest <= PAYLOAD_CHARS + 1
    assert "<code>{&#34;blob&#34;:&#34;xxx" in page.text
    counted.reads.reset()
    detail = client.get(f"/jobs/{ids[0]}")
    assert detail.status_code == 200 and counted.reads.longest > 100_000
    assert "x" * 100_000 in detail.text
    redacting = TestClient(dashboard(counted, redact=lambda job_type, payload: {"blob": "***"}))
    hidden = redacting.get("/jobs").text
    assert "xxxx" not in hidden and "open the job to see it" in hidden
    with connection(backend) as conn:
        [job] = admin.list_jobs_page(conn, limit=1, payload_chars=10).jobs
        assert job.payload_truncated and job.payload == '{"blob":"x'
        [whole] = admin.list_jobs_page(conn, limit=1).jobs
        assert not whole.payload_truncated and whole.payload == big


# 11e. The overview in pages of queues ------------------------------------------------------------


def test_the_overview_of_2000_queues_comes_in_bounded_pages(backend, counted):
    names = [f"queue-{n:04d}" for n in range(2000)]
    with contextlib.closing(backend.connect()) as conn:
        for name in names:
            enqueue_many(conn, [("x", {})], queue=name)
        conn.commit()
    client = TestClient(dashboard(counted, actions=True, auth=header_user))
    client.headers["X-User"] = "al"
    seen: list[str] = []
    pages = 0
    holder = backend.connect()
    holder.cursor().execute(
        f"SELECT job_id FROM {backend.job_table} WHERE queue = %s FOR UPDATE", (names[0],)
    )
    lock_view_settled(backend)  # MySQL's view of row locks lags 100 ms behind
    try:
        for page in pages_from(client, counted, "/"):
            pages += 1
            assert len(page.content) < 96_000  # 50 queues a page, each with its sparkline
            # as many whatever the queues: on MySQL the oldest due jobs take one per
            # priority level and one more; the hourly sums' check times, up to three; the
            # page's queues' health, four (their last hour, whether there is a registry,
            # their live workers, the paused queues) and their rate slots where limited
            assert counted.reads.statements <= 20, counted.reads.sql
            shown = re.findall(r'<tr data-queue="([^"]+)">', page.text)
            assert len(shown) <= QUEUES_PER_PAGE
            seen += shown
        assert seen == names and pages == 2000 // QUEUES_PER_PAGE
        first = client.get("/").text
    finally:  # a failure must not leave the row locked for the next tests
        holder.rollback()
        holder.close()
    assert "2000 in all · page 1 of 40" in first
    row = re.search(r'<tr data-queue="queue-0000">.*?</tr>', first, re.S)
    assert row and '<td class="n" data-count="running">1</td>' in row.group()
    last = client.get("/?page=40").text
    assert 'rel="prev" href="/?page=39"' in last and 'rel="next"' not in last
    assert "No queues on this page" in client.get("/?page=41").text
    with connection(backend) as conn:
        second = admin.overview_page(conn, page=2, per_page=100)
        assert [q.queue for q in second.queues] == names[100:200]
        assert (second.pages, second.total, len(second.last_day)) == (20, 2000, 24)
        with pytest.raises(ConfigurationError, match="page must be"):
            admin.overview_page(conn, page=0)


# 7. The timings in pages of queue and job type pairs --------------------------------------------


def archive_timed(backend: Backend, rows: list[tuple[str, str, float, float]]) -> None:
    """Archived successes, one per (queue, job type, wait s, run s), finished this last hour."""
    now = datetime.now(timezone.utc)
    with contextlib.closing(backend.connect()) as conn:
        dialect = dialect_of(conn, admin.Tables(backend.job_table, backend.archived_job_table))
        values = []
        for queue, job_type, wait_s, run_s in rows:
            due = now - timedelta(minutes=50)
            started = due + timedelta(seconds=wait_s)
            finished = started + timedelta(seconds=run_s)
            key = dialect.default_id_strategy.encode(uuid.uuid4())
            at = dialect.encode_time
            values.append((key, queue, job_type, at(due), at(due), at(finished), at(started)))
        with contextlib.closing(conn.cursor()) as cur:
            cur.executemany(
                f"INSERT INTO {backend.archived_job_table} (job_id, queue, job_type, payload, "
                "attempts, enqueued_at, process_at, status, finished_at, started_at, worker) "
                "VALUES (%s, %s, %s, 'null', 1, %s, %s, 'success', %s, %s, 'w')",
                values,
            )
        conn.commit()


def expected_timings(backend: Backend) -> dict[str, list[str]]:
    """Each pair's count, wait p50, p95 and max, run p50, p95 and max as the page shows them,
    computed here from the archive's rows (nearest-rank percentiles)."""
    waits: dict[str, list[timedelta]] = {}
    runs: dict[str, list[timedelta]] = {}
    with contextlib.closing(backend.connect()) as conn:
        dialect = dialect_of(conn, admin.Tables(backend.job_table, backend.archived_job_table))
        rows = dialect.fetchall(
            conn,
            f"SELECT queue, job_type, process_at, started_at, finished_at "
            f"FROM {backend.archived_job_table}",
            (),
        )
    for queue, job_type, due, started, finished in rows:
        due, started, finished = map(dialect.decode_time, (due, started, finished))
        waits.setdefault(f"{queue}/{job_type}", []).append(started - due)
        runs.setdefault(f"{queue}/{job_type}", []).append(finished - started)

    def figures(values: list[timedelta]) -> list[str]:
        ranked = sorted(values)
        at = [ranked[math.ceil(share * len(ranked)) - 1] for share in (0.5, 0.95)]
        return [_duration(value) for value in (*at, ranked[-1])]

    return {
        pair: [str(len(waits[pair])), *figures(waits[pair]), *figures(runs[pair])] for pair in waits
    }


def test_the_timings_of_2000_queues_come_in_bounded_pages(backend, counted):
    names = [f"queue-{n:04d}" for n in range(2000)]
    rows = [(name, "x", (n + 1) / 1000, (n + 1) / 500) for n, name in enumerate(names)]
    # a second job type every 25 queues (a page's last pair and the next's first share a
    # queue), and a second job of it: two jobs ranked
    rows += [(name, "y", 0.5, 1.5) for name in names[::25]]
    rows += [(name, "y", 0.25, 3.0) for name in names[::25]]
    archive_timed(backend, rows)
    client = TestClient(dashboard(counted))
    seen: list[str] = []
    shown: dict[str, list[str]] = {}
    pages = 0
    for page in pages_from(client, counted, "/timings"):
        pages += 1
        assert len(page.content) < 150_000
        assert counted.reads.statements <= 4, counted.reads.sql
        # the page's pairs, then their days and hours: at most a row a pair and hour
        assert counted.reads.rows <= (TIMINGS_PER_PAGE + 1) + TIMINGS_PER_PAGE * 25
        groups = re.findall(r'<tbody data-timing="([^"]+)">(.*?)</tbody>', page.text, re.S)
        assert 0 < len(groups) <= TIMINGS_PER_PAGE
        for pair, body in groups:
            seen.append(pair)
            whole = re.search(r'<tr class="whole">(.*?)</tr>', body, re.S)
            assert whole is not None
            shown[pair] = re.findall(r'<td class="n">([^<]*)</td>', whole.group(1))
    pairs = sorted({f"{queue}/{job_type}" for queue, job_type, *_ in rows})
    assert seen == pairs  # every pair exactly once, in order
    assert len({pair.split("/")[0] for pair in seen}) == 2000
    assert pages == -(-len(pairs) // TIMINGS_PER_PAGE)
    assert shown == expected_timings(backend)
    assert shown["queue-0025/y"][0] == "2"
    last = client.get("/timings?after_queue=queue-1999&after_job_type=x")
    assert "No more queues and job types past this page" in last.text
    refused = client.get("/timings?after_queue=queue-0001")
    assert refused.status_code == 400 and "after_queue and after_job_type go together" in (
        refused.text
    )
    with connection(backend) as conn:
        first = admin.timings_page(conn, per_page=3)
        assert [(w.queue, w.job_type) for w, _ in first.groups] == [
            ("queue-0000", "x"),
            ("queue-0000", "y"),
            ("queue-0001", "x"),
        ]
        assert first.next_after == ("queue-0001", "x")
        for bad, message in (({"per_page": 0}, "per_page must be"), ({"after": "q"}, "after must")):
            with pytest.raises(ConfigurationError, match=message):
                admin.timings_page(conn, **bad)


# 9. A page's time on the database is bounded ----------------------------------------------------

NOT_ANSWERING = "the database is not answering"


@pytest.mark.timeout(120)
def test_pages_answer_503_when_the_database_stops_answering(backend):
    backend.reset()
    [job_id] = enqueue_committed(backend, ("x", {}), queue="mail")
    with TCPProxy(upstream_of(backend)) as proxy:
        pool = pool_via(backend, url_via(backend, proxy), 2)
        try:
            client = TestClient(dashboard(pool, timeout_s=1), raise_server_exceptions=False)
            overview = client.get("/")
            assert overview.status_code == 200
            row = re.search(r'<tr data-queue="mail">.*?</tr>', overview.text, re.S)
            with connection(backend) as conn:
                [mail] = admin.overview(conn)
            assert row and f'data-count="queued">{mail.queued}</td>' in row.group()
            assert client.get(f"/jobs/{job_id}").status_code == 200
            proxy.stall()
            try:
                for path in ("/", f"/jobs/{job_id}", "/timings"):
                    page = client.get(path)
                    assert page.status_code == 503, (path, page.text)
                    assert NOT_ANSWERING in page.text, (path, page.text)
            finally:
                proxy.flow()
            assert client.get("/").status_code == 200
        finally:
            pool.close()


@pytest.mark.timeout(120)
def test_a_read_the_database_stops_answering_midway_is_cut_at_the_deadline(backend):
    """The connection opens, then the database stops answering: its read is cut at the
    deadline (the socket, PostgreSQL having no read timeout), and the page says so."""
    backend.reset()
    [job_id] = enqueue_committed(backend, ("x", {}), queue="mail")
    with TCPProxy(upstream_of(backend)) as proxy:
        url = url_via(backend, proxy)

        def stalling() -> Any:
            conn = connect(url) if backend.name == "mysql" else connect_postgres(url)
            proxy.stall()
            return conn

        client = TestClient(dashboard(stalling, timeout_s=1), raise_server_exceptions=False)
        try:
            for path in ("/", f"/jobs/{job_id}"):
                proxy.flow()  # each page's connection opens, then its database stops
                page = client.get(path)
                assert page.status_code == 503, (path, page.text)
                assert NOT_ANSWERING in page.text, (path, page.text)
        finally:
            proxy.flow()


# 8. The processes page's idle reasons ------------------------------------------------------------


def test_the_idle_reasons_read_a_bounded_number_of_rows(backend, counted):
    """A queue of many due jobs, its oldest held as a running job's: the processes page
    reads its first `DUE_PROBED` due rows, not the queue, to say why an idle thread is idle."""
    from test_dashboard_processes import idle_row

    from proletarian_di.admin.idle import DUE_PROBED

    [oldest] = bulk(backend, 1, "big")
    bulk(backend, 4 * admin.MAX_EXAMINED, "big")
    idle_row(backend, "w-big", "big")
    idle_row(backend, "w-empty", "empty")
    client = TestClient(dashboard(counted))
    with contextlib.closing(backend.connect()) as holder:
        key = oldest.bytes if backend.name == "mysql" else oldest
        holder.cursor().execute(
            f"SELECT job_id FROM {backend.job_table} WHERE job_id = %s FOR UPDATE", (key,)
        )
        counted.reads.reset()
        page = client.get("/processes")
        holder.rollback()
    assert page.status_code == 200
    assert counted.reads.statements <= 15, counted.reads.sql
    # the due rows and their probe, the workers, and on MySQL the tables' column lists
    assert counted.reads.rows <= 3 * DUE_PROBED < admin.MAX_EXAMINED, counted.reads.rows
    assert 'data-idle="no_due_job"' in page.text.split('data-worker-id="w-empty"')[1]
    assert "data-idle" not in page.text.split('data-worker-id="w-big"')[1].split("</table>")[0]

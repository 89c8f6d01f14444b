"""Finding a job, on both databases: by a whole id, the start or the end of one (hex, with or
without dashes), by job type and by payload, in the job table and the archive; the searches
no index serves read a bounded number of rows and say when they stopped short."""

from __future__ import annotations

import contextlib
import html
import uuid
import warnings
from typing import Any

import pytest
from test_dashboard_bounds import listed

from proletarian_di import ConfigurationError, admin, enqueue_many, process_next_job
from proletarian_di.admin import find_jobs, id_fragment
from proletarian_di.contrib.dashboard import dashboard
from proletarian_di.job_ids import BinaryUUIDStrategy, UUIDStrategy

from backends import Backend, connection, enqueue_committed

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")

PREFIX = "0190aaaa-bbbb-7ccc-8ddd-"


def fail(job_type: str, payload: Any) -> None:
    raise ValueError("no")


def with_id(backend: Backend, job_id: uuid.UUID, job_type: str, payload: Any, **options: Any):
    """Enqueue one job with this id."""
    base = BinaryUUIDStrategy if backend.name == "mysql" else UUIDStrategy

    class Fixed(base):  # type: ignore[valid-type,misc]
        def generate(self) -> uuid.UUID:
            return job_id

    [found] = enqueue_committed(backend, (job_type, payload), job_id_strategy=Fixed(), **options)
    return found


@pytest.fixture
def known(backend: Backend, pool: Any) -> dict[str, uuid.UUID]:
    """Three jobs whose ids share their first 24 hex digits: two waiting, one failed (in the
    archive); and a job of another id altogether."""
    ids = {
        name: with_id(backend, uuid.UUID(PREFIX + tail), job_type, payload, queue=queue)
        for name, tail, job_type, payload, queue in (
            ("first", "000000000001", "send_email", {"to": "ada@example.com"}, "mail"),
            ("second", "00000000beef", "send_sms", {"to": "+44 100% sure_thing"}, "mail"),
            ("failed", "0000c0ffee42", "charge_card", {"amount": 1000}, "pay"),
        )
    }
    assert process_next_job(pool, fail, queue="pay") is False
    ids["other"] = with_id(
        backend, uuid.UUID("01900000-0000-7000-8000-000000000000"), "report", {"month": 5}
    )
    return ids


def found(backend: Backend, text: str, **options: Any) -> list[uuid.UUID]:
    with connection(backend) as conn:
        return [job.job_id for job in find_jobs(conn, text, **options).jobs]


def test_a_whole_id_with_or_without_dashes_in_either_case(backend, known):
    failed = known["failed"]
    for text in (str(failed), failed.hex, str(failed).upper(), f"  {failed}  "):
        assert found(backend, text, by="id") == [failed], text
    with connection(backend) as conn:
        [job] = find_jobs(conn, str(failed)).jobs
    assert job.state == "failed" and job.error_headline == "ValueError: no"


def test_an_ids_start_is_found_in_both_tables(backend, known):
    everyone = {known["first"], known["second"], known["failed"]}
    assert set(found(backend, PREFIX, by="id")) == everyone
    assert set(found(backend, PREFIX.replace("-", ""), by="id")) == everyone
    assert found(backend, "01900000", by="id") == [known["other"]]
    with connection(backend) as conn:
        search = find_jobs(conn, "0190", by="id", limit=2)
    assert len(search.jobs) == 2 and search.more and not search.cut_short


def test_an_ids_end_is_found_in_both_tables(backend, known):
    assert found(backend, "beef", by="id") == [known["second"]]
    assert found(backend, "c0ffee42", by="id") == [known["failed"]]
    assert found(backend, "0000-C0FFEE42", by="id") == [known["failed"]]
    assert found(backend, "ffffff", by="id") == []


def test_job_type_and_payload_contain_the_text(backend, known):
    assert found(backend, "send_", by="job_type") == [known["second"], known["first"]]
    assert found(backend, "charge", by="job_type") == [known["failed"]]
    assert found(backend, "ada@example", by="payload") == [known["first"]]
    assert found(backend, "1000", by="payload") == [known["failed"]]
    # % and _ are the text itself, not LIKE's wildcards
    assert found(backend, "100%", by="payload") == [known["second"]]
    assert found(backend, "e_t", by="payload") == [known["second"]]
    assert found(backend, "x_e", by="payload") == []
    assert found(backend, "ADA", by="payload") == []  # case-sensitive on both databases
    # "any" looks at the id (the text is hex), the job type and the payload
    assert set(found(backend, "beef")) == {known["second"]}
    assert found(backend, "report") == [known["other"]]


TYPED = {
    "slash": {"path": "back\\slash"},  # one backslash
    "slashes": {"path": "two\\\\slashes"},  # two
    "escape": {"note": "a\\nb"},  # a backslash and an n
    "quoted": {"said": 'say "hi" twice'},
    "key": {"say": "hi"},
    "lines": {"note": "first line\nsecond line"},
    "tab": {"note": "col\tcol"},
    "unicode": {"name": "Zoë \u2013 naïve ☃ 日本"},
    "wild": {"rate": "50%_off!"},
    "plain": {"rate": "50 off"},
}


def typed(backend: Backend, serializer: Any = None) -> dict[str, uuid.UUID]:
    """A job for each payload of `TYPED`, written by `serializer` (JSON by default)."""
    options = {} if serializer is None else {"serializer": serializer}
    with contextlib.closing(backend.connect()) as conn:
        ids = enqueue_many(conn, [("typed", payload) for payload in TYPED.values()], **options)
        conn.commit()
    return dict(zip(TYPED, ids, strict=True))


SEARCHES = [
    ("back\\slash", {"slash"}),
    ("k\\s", {"slash"}),
    ("two\\\\slashes", {"slashes"}),
    ("o\\s", set()),  # one backslash: not the payload with two
    ("a\\nb", {"escape"}),
    ('say "hi"', {"quoted"}),
    ('"hi"', {"quoted", "key"}),  # the value's own quotes, or the JSON's around a value
    ("line\nsecond", {"lines"}),
    ("line\\nsecond", set()),  # a backslash and an n are not a line break
    ("col\tcol", {"tab"}),
    ("Zoë \u2013 naïve ☃ 日本", {"unicode"}),
    ("☃", {"unicode"}),
    ("50%_off!", {"wild"}),
    ("%", {"wild"}),
    ("0%", {"wild"}),
    ("_", {"wild"}),
    ("!", {"wild"}),
    ("50 off", {"plain"}),
]


@pytest.mark.parametrize("serializer", ["json", "transit"])
def test_payload_text_is_found_as_typed(backend, serializer):
    from proletarian_di.serializers import TransitSerializer

    codec = TransitSerializer() if serializer == "transit" else None
    options = {} if codec is None else {"serializer": codec}
    ids = typed(backend, codec)
    names = {job_id: name for name, job_id in ids.items()}
    for text, expected in SEARCHES:
        hits = found(backend, text, by="payload", **options)
        assert {names[job_id] for job_id in hits} == expected, text
    # a key as JSON writes it, quotes and all (Transit writes keys as keywords: "~:say")
    keys = {names[job_id] for job_id in found(backend, '"say":', by="payload", **options)}
    assert keys == (set() if codec else {"key"})


def test_a_scan_reads_the_newest_rows_only_and_says_so(backend, pool):
    """The newest rows are those of the highest ids (time-ordered): fixed ids make the oldest
    and newest certain."""
    needle = {"n": "haystack-needle"}
    old = with_id(backend, uuid.UUID("00000000-0000-7000-8000-00000000c0de"), "needle", needle)
    with contextlib.closing(backend.connect()) as conn:
        enqueue_many(conn, [("hay", {"n": n}) for n in range(30)])
        conn.commit()
    new = with_id(backend, uuid.UUID("0fffffff-ffff-7fff-bfff-ffffffffffff"), "needle", needle)
    with connection(backend) as conn:
        bounded = find_jobs(conn, "needle", by="payload", max_examined=10)
        whole = find_jobs(conn, "needle", by="payload", max_examined=100)
        suffix = find_jobs(conn, old.hex[-12:], by="id", max_examined=10)
        start = find_jobs(conn, old.hex[:20], by="id", max_examined=10)
    assert [job.job_id for job in bounded.jobs] == [new] and bounded.cut_short
    assert bounded.searched == 10
    assert [job.job_id for job in whole.jobs] == [new, old] and not whole.cut_short
    with connection(backend) as conn:  # 32 waiting jobs: a bound of 32 reads them all
        exact = find_jobs(conn, "needle", by="payload", max_examined=32)
        one_short = find_jobs(conn, "needle", by="payload", max_examined=31)
    assert not exact.cut_short and len(exact.jobs) == 2
    assert one_short.cut_short and [job.job_id for job in one_short.jobs] == [new]
    # an id's end needs the scan; its start is a range of the primary key, never cut short
    assert suffix.jobs == [] and suffix.cut_short
    assert [job.job_id for job in start.jobs] == [old]


@pytest.mark.parametrize(
    ("text", "options", "problem"),
    [
        ("xyz", {"by": "id"}, "not a job id nor the start or end of one"),
        ("12 34", {"by": "id"}, "not a job id"),
        ("0" * 33, {"by": "id"}, "not a job id"),
        ("--", {"by": "id"}, "not a job id"),
        ("", {}, "1 to 200 characters"),
        ("   ", {}, "1 to 200 characters"),
        ("a" * 201, {}, "1 to 200 characters"),
        ("a\x00b", {}, "NUL"),
        ("abc", {"by": "queue"}, "by must be one of any, id, job_type, payload"),
        ("abc", {"limit": 0}, "limit must be"),
        ("abc", {"max_examined": 0}, "max_examined must be"),
    ],
)
def test_bad_searches_are_refused_by_name(backend, text, options, problem):
    with connection(backend) as conn, pytest.raises(ConfigurationError, match=problem):
        find_jobs(conn, text, **options)


def test_id_fragments():
    assert id_fragment(" 0190AAAA-bb ") == "0190aaaabb"
    assert id_fragment("g") is None and id_fragment("") is None
    assert id_fragment("f" * 32) == "f" * 32 and id_fragment("f" * 33) is None


# The dashboard's search box ----------------------------------------------------------------------


@pytest.fixture
def reader(pool: Any) -> TestClient:
    return TestClient(dashboard(pool))


def test_every_page_has_the_search_box(reader, known):
    for path in (
        "/",
        "/jobs",
        "/failed",
        "/failed/errors",
        "/schedules",
        f"/jobs/{known['first']}",
    ):
        page = reader.get(path)
        assert '<form class="search" role="search" method="get" action="/search">' in page.text


def test_the_search_page_finds_by_an_ids_end_start_type_and_payload(reader, known):
    def hits(**params: str) -> set[str]:
        page = reader.get("/search", params=params)
        assert page.status_code == 200, page.text
        return listed(page.text)

    assert hits(q="c0ffee42") == {str(known["failed"])}
    assert set(hits(q=PREFIX, by="id")) == {str(known[n]) for n in ("first", "second", "failed")}
    assert hits(q="send_sms", by="job_type") == {str(known["second"])}
    assert hits(q="ada@example.com", by="payload") == {str(known["first"])}
    page = reader.get("/search", params={"q": "nothing-like-it"})
    assert "No job found for “nothing-like-it”" in page.text
    # the listing shows each id's distinguishing end, the whole id in its title
    job_id = known["second"]
    assert f'title="{job_id}">…{job_id.hex[-12:]}</a>' in reader.get("/search?q=beef").text


def test_a_whole_id_goes_to_its_job(reader, known):
    jump = reader.get("/search", params={"q": known["failed"].hex.upper()}, follow_redirects=False)
    assert jump.status_code == 303 and jump.headers["location"] == f"/jobs/{known['failed']}"
    missing = reader.get("/search", params={"q": str(uuid.uuid4())})
    assert missing.status_code == 200 and "No job found" in missing.text


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        ({"q": "not-hex!", "by": "id"}, "is not a job id nor the start or end of one"),
        ({"q": "a" * 201}, "a search needs 1 to 200 characters"),
        ({"q": "abc", "by": "queue"}, "search by one of any, id, job_type, payload"),
        ({"q": "a\x00b"}, "contains a NUL character"),
    ],
)
def test_bad_searches_are_400(reader, params, problem):
    page = reader.get("/search", params=params)
    assert page.status_code == 400 and problem in html.unescape(page.text)


def test_a_search_cut_short_says_so(backend, pool, monkeypatch):
    monkeypatch.setattr(admin, "SEARCH_ROWS", 5)
    with contextlib.closing(backend.connect()) as conn:
        enqueue_many(conn, [("hay", {"n": n}) for n in range(8)])
        conn.commit()
    page = TestClient(dashboard(pool)).get("/search", params={"q": "hay"})
    assert "The search was cut short" in page.text and "newest 5 jobs" in page.text


def test_the_search_page_finds_payload_text_as_typed(backend, reader):
    ids = typed(backend)
    for text, name in (('say "hi"', "quoted"), ("back\\slash", "slash"), ("50%_off", "wild")):
        page = reader.get("/search", params={"q": text, "by": "payload"})
        assert page.status_code == 200, page.text
        assert listed(page.text) == {str(ids[name])}, text

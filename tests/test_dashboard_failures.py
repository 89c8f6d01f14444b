"""Failed jobs at a glance, on both databases: discarding a failure removes only it; failures
grouped by their error; exact counts and bulk actions by ids or filters, in batches."""

from __future__ import annotations

import contextlib
import html
import re
import uuid
import warnings
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from test_dashboard import confirm, header_user, job_state, make_jobs, token
from test_dashboard_bounds import forms, listed

from proletarian_di import RetrySpec, admin, enqueue_many, process_next_job
from proletarian_di.contrib.dashboard import dashboard
from proletarian_di.errors import ConfigurationError
from proletarian_di.testing import run_due_jobs

from backends import Backend, Events, connection, enqueue_committed

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")


def test_discard_removes_only_that_failed_job(backend: Backend, pool: object) -> None:
    jobs = make_jobs(backend, pool)
    with connection(backend) as conn:
        assert admin.discard_failed(conn, [jobs.queued, jobs.sent]) == 0
        assert admin.discard_failed(conn, [jobs.failed]) == 1
        conn.commit()
    with connection(backend) as conn:
        assert admin.get_job(conn, jobs.failed) is None
        for kept in (jobs.sent, jobs.queued, jobs.scheduled):
            assert admin.get_job(conn, kept) is not None


def test_discard_needs_ids_or_a_filter(backend: Backend, pool: object) -> None:
    with connection(backend) as conn, pytest.raises(ConfigurationError, match="needs job ids"):
        admin.discard_failed(conn)


# Failures grouped by error, and bulk actions on them ------------------------------------------

TIMEOUT = "TimeoutError: gave up after 30 s"
MISSING = "KeyError: 'customer'"


def flaky(job_type: str, payload: Any) -> None:
    if payload["kind"] == "timeout":
        raise TimeoutError(f"gave up after 30 s\n(attempt for {payload['n']})")
    raise KeyError("customer")


def failures(backend: Backend, pool: Any, kind: str, count: int, queue: str) -> list[uuid.UUID]:
    """`count` jobs of this queue that failed for good with this kind of error."""
    with contextlib.closing(backend.connect()) as conn:
        ids = enqueue_many(
            conn, [("sync", {"kind": kind, "n": n}) for n in range(count)], queue=queue
        )
        conn.commit()
    assert run_due_jobs(pool, flaky, queue=queue) == count
    return list(ids)


@pytest.fixture
def failed(backend: Backend, pool: Any) -> dict[str, list[uuid.UUID]]:
    return {
        "timeouts": failures(backend, pool, "timeout", 7, "mail"),
        "missing_mail": failures(backend, pool, "missing", 3, "mail"),
        "missing_pay": failures(backend, pool, "missing", 2, "pay"),
    }


def counts(groups: admin.ErrorGroups) -> list[tuple[str | None, int]]:
    return [(group.error, group.count) for group in groups.groups]


def test_failures_group_by_their_errors_first_line(backend, failed):
    with connection(backend) as conn:
        every = admin.failure_groups(conn)
        mail = admin.failure_groups(conn, queue="mail")
        bounded = admin.failure_groups(conn, max_examined=4)
        group = admin.list_jobs(conn, state="failed", error=MISSING)
    assert counts(every) == [(TIMEOUT, 7), (MISSING, 5)]
    assert every.examined == 12 and not every.partial
    assert counts(mail) == [(TIMEOUT, 7), (MISSING, 3)]
    assert bounded.examined == 4 and bounded.partial
    newest = max(job.finished_at for job in group if job.finished_at)
    assert {group.error: group.newest for group in every.groups}[MISSING] == newest
    assert {job.error_headline for job in group} == {MISSING} and len(group) == 5
    assert "Traceback" in (group[0].error or "")


def test_the_error_filter_counts_lists_and_acts_on_exactly_its_group(backend, failed):
    with connection(backend) as conn:
        page = admin.list_jobs_page(conn, state="failed", error=MISSING)
        assert {job.job_id for job in page.jobs} == {
            *failed["missing_mail"],
            *failed["missing_pay"],
        }
        assert admin.retry_jobs(conn, error=MISSING, dry_run=True) == 5
        assert admin.discard_failed(conn, queue="mail", error=MISSING, dry_run=True) == 3
        assert admin.discard_failed(conn, queue="mail", error=MISSING) == 3
        assert admin.retry_jobs(conn, error=TIMEOUT) == 7
        conn.commit()
    with connection(backend) as conn:
        assert counts(admin.failure_groups(conn)) == [(MISSING, 2)]
        assert len(admin.list_jobs(conn, state="queued", error=TIMEOUT)) == 7


def test_in_batches_commits_batch_by_batch_and_leaves_out_newer_failures(backend, pool, failed):
    with connection(backend) as conn:
        until = datetime.now(timezone.utc)
    later = failures(backend, pool, "timeout", 2, "mail")
    moved, seen_between = [], []
    with connection(backend) as conn:
        steps = admin.in_batches(conn, admin.retry_jobs, error=TIMEOUT, until=until, batch_size=3)
        assert admin.retry_jobs(conn, error=TIMEOUT, until=until, dry_run=True) == 7
        for count in steps:
            conn.commit()
            moved.append(count)
            with connection(backend) as other:
                seen_between.append(len(admin.list_jobs(other, state="queued")))
    assert moved == [3, 3, 1]
    assert seen_between[:3] == [3, 6, 7]
    with connection(backend) as conn:
        still = {job.job_id for job in admin.list_jobs(conn, state="failed", error=TIMEOUT)}
    assert still == set(later)


def test_in_batches_discards_and_cancels_and_passes_a_running_job_over(backend, pool, failed):
    with connection(backend) as conn:
        assert sum(admin.in_batches(conn, admin.discard_failed, queue="pay", batch_size=1)) == 2
        conn.commit()
    waiting = enqueue_committed(backend, *[("later", {"n": n}) for n in range(5)], queue="w")
    with connection(backend) as conn:
        steps = admin.in_batches(
            conn, admin.cancel_jobs, failed["timeouts"] + waiting, batch_size=2
        )
        assert sum(steps) == 5
        conn.commit()
        assert {job.state for job in admin.list_jobs(conn, queue="w")} == {"cancelled"}
        assert admin.failure_groups(conn, queue="pay").groups == []


def test_cancel_by_state_and_by_last_error(backend, pool):
    retry_later = {"retry_strategy_fn": lambda job, exc: RetrySpec(retries=3, delays=[3_600_000])}
    enqueue_committed(backend, ("sync", {"kind": "missing", "n": 1}), queue="r")
    assert process_next_job(pool, flaky, queue="r", **retry_later) is False
    enqueue_committed(backend, ("sync", {"kind": "missing", "n": 2}), queue="r")
    with connection(backend) as conn:
        assert admin.cancel_jobs(conn, queue="r", state="retrying", dry_run=True) == 1
        assert admin.cancel_jobs(conn, queue="r", state="queued", dry_run=True) == 1
        assert admin.cancel_jobs(conn, error=MISSING) == 1
        conn.commit()
        [retried] = admin.list_jobs(conn, queue="r", state="cancelled")
    assert retried.attempts == 1 and retried.error_headline == MISSING


@pytest.mark.parametrize(
    ("call", "problem"),
    [
        (lambda c: admin.retry_jobs(c, error="two\nlines"), "error must be an error's first line"),
        (lambda c: admin.discard_failed(c, error="x" * 201), "error must be"),
        (lambda c: admin.list_jobs_page(c, error=""), "error must be"),
        (
            lambda c: admin.cancel_jobs(c, state="running"),
            "state must be blocked, queued, scheduled or",
        ),
        (lambda c: admin.cancel_jobs(c, state="failed"), "state must be blocked, queued"),
        (lambda c: admin.in_batches(c, admin.delete_archived), "in_batches runs retry_jobs"),
        (lambda c: admin.in_batches(c, admin.discard_failed), "needs job ids or a filter"),
        (lambda c: admin.in_batches(c, admin.retry_jobs, batch_size=0), "batch_size must be"),
        (lambda c: admin.failure_groups(c, max_examined=0), "max_examined must be"),
    ],
)
def test_bad_bulk_input_is_refused_by_name(backend, call, problem):
    with connection(backend) as conn, pytest.raises(ConfigurationError, match=problem):
        call(conn)


# The dashboard: failures at a glance, and bulk actions behind a counted confirmation -------------


@pytest.fixture
def events() -> Events:
    return Events()


@pytest.fixture
def client(pool: Any, events: Events) -> TestClient:
    """A dashboard with actions, signed in as alice, logging into `events`."""
    site = dashboard(pool, actions=True, auth=header_user, log=events)
    return TestClient(site, headers={"X-User": "alice"})


def test_the_failed_list_shows_each_errors_first_line_and_filters_by_it(client, failed):
    page = client.get("/failed")
    assert page.status_code == 200
    rows = re.findall(r'<tr data-job-id="([^"]+)".*?</tr>', page.text, re.S)
    assert len(rows) == 12
    row = re.search(rf'<tr data-job-id="{failed["timeouts"][0]}".*?</tr>', page.text, re.S)
    assert row and f">{html.escape(TIMEOUT, quote=False)}</a>" in row.group()
    assert "(attempt for" not in row.group()  # the first line only
    # ids are shown by their last digits, which differ from job to job; the title is whole
    job_id = failed["timeouts"][0]
    assert f'title="{job_id}">…{job_id.hex[-12:]}</a>' in row.group()
    narrowed = client.get("/failed", params={"error": MISSING, "queue": "mail"})
    assert set(listed(narrowed.text)) == {str(i) for i in failed["missing_mail"]}
    bad = client.get("/failed", params={"error": "x" * 201})
    assert bad.status_code == 400 and "error must be an error&#39;s first line" in bad.text


def test_failures_grouped_by_error_link_to_their_jobs(client, failed):
    page = client.get("/failed/errors")
    assert page.status_code == 200
    groups = re.findall(
        r'<tr data-error="([^"]*)">.*?href="([^"]+)".*?data-count="failures">([\d,]+)<',
        page.text,
        re.S,
    )
    assert [(html.unescape(error), count) for error, _, count in groups] == [
        (TIMEOUT, "7"),
        (MISSING, "5"),
    ]
    link = html.unescape(groups[1][1])
    assert set(listed(client.get(link).text)) == {
        str(i) for i in failed["missing_mail"] + failed["missing_pay"]
    }
    pay = client.get("/failed/errors", params={"queue": "pay"})
    assert re.findall(r'data-count="failures">(\d+)<', pay.text) == ["2"]


def test_a_filter_wide_retry_states_its_exact_count_and_does_only_that(
    backend, pool, client, events, failed
):
    page = client.get("/failed/errors")
    [retry_form] = [f for f in forms(page.text, "/retry") if f.get("error") == TIMEOUT]
    asked = client.post("/retry", data=retry_form)
    assert asked.status_code == 200
    question = f"Retry 7 failed jobs with the error “{TIMEOUT}”?"
    assert html.escape(question, quote=False) in asked.text
    assert job_state(backend, failed["timeouts"][0]) == "failed"  # nothing changed yet
    later = failures(backend, pool, "timeout", 2, "mail")  # after the count: left alone
    done = confirm(client, asked)
    assert done.status_code == 200 and "7 jobs back in the queue" in done.text
    assert [job_state(backend, i) for i in later] == ["failed", "failed"]
    assert {job_state(backend, i) for i in failed["timeouts"]} == {"queued"}
    [logged] = events.named("dashboard_action")
    assert (logged["action"], logged["error"], logged["count"], logged["confirmed"]) == (
        "retry",
        TIMEOUT,
        7,
        7,
    )


def test_when_the_set_moves_the_message_says_how_many_changed(backend, client, failed):
    asked = client.post(
        "/discard", data={"csrf_token": token(client.get("/failed")), "error": MISSING}
    )
    assert "Discard 5 failed jobs with the error" in asked.text
    with connection(backend) as conn:
        assert admin.retry_jobs(conn, failed["missing_pay"]) == 2
        conn.commit()
    done = confirm(client, asked)
    assert "3 jobs discarded, of the 5 counted: the others changed in the meantime" in done.text
    assert [job_state(backend, i) for i in failed["missing_pay"]] == ["queued", "queued"]


def test_selected_jobs_are_counted_then_acted_on(backend, client, failed):
    waiting = enqueue_committed(backend, ("later", {}), queue="w")
    chosen = [*failed["missing_pay"], *waiting]
    page = client.get("/jobs")
    assert f'<input type="checkbox" name="job_id" value="{chosen[0]}" form="selected"' in page.text
    data = {"csrf_token": token(page), "job_id": [str(i) for i in chosen], "next": "/jobs"}
    asked = client.post("/retry", data=data)
    assert "Retry 2 failed jobs (of the 3 selected)?" in asked.text
    done = confirm(client, asked, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == "/jobs"
    assert [job_state(backend, i) for i in chosen] == ["queued", "queued", "queued"]
    empty = client.post("/retry", data={**data, "job_id": [], "selected": "1"})
    assert empty.status_code == 400 and "no job selected to retry" in empty.text
    cancel = client.post("/cancel", data=data)
    assert "Cancel 3 waiting jobs (of the 3 selected)?" in cancel.text
    assert "3 jobs cancelled" in confirm(client, cancel).text


def test_one_failed_job_is_discarded_from_its_page(backend, client, events, failed):
    job_id = failed["missing_pay"][0]
    page = client.get(f"/jobs/{job_id}")
    [discard] = forms(page.text, "/discard")
    assert discard["job_id"] == str(job_id)
    asked = client.post("/discard", data=discard)
    assert "Discard 1 failed job (of the 1 selected)?" in asked.text
    assert "deleted for good" in asked.text
    done = confirm(client, asked, follow_redirects=False)
    assert done.headers["location"] == f"/jobs/{job_id}"
    assert client.get(f"/jobs/{job_id}").status_code == 404
    [logged] = events.named("dashboard_action")
    assert (logged["action"], logged["job_ids"], logged["count"]) == ("discard", [str(job_id)], 1)


def test_nothing_to_do_is_said_and_offers_no_button(client, failed):
    asked = client.post(
        "/retry", data={"csrf_token": token(client.get("/failed")), "queue": "nowhere"}
    )
    assert "There are no failed jobs of queue nowhere to retry now." in asked.text
    assert 'class="confirm"' not in asked.text


def test_bulk_actions_stay_off_authenticated_and_csrf_protected(backend, pool, failed):
    reader = TestClient(dashboard(pool))
    page = reader.get("/failed")
    assert 'type="checkbox"' not in page.text and "/discard" not in page.text
    assert "Retry all" not in reader.get("/failed/errors").text
    assert reader.post("/discard", data={"error": MISSING}).status_code == 403
    stranger = TestClient(dashboard(pool, actions=True, auth=header_user))
    assert stranger.post("/discard", data={"error": MISSING}).status_code == 401
    site = TestClient(dashboard(pool, actions=True, auth=header_user), headers={"X-User": "al"})
    site.get("/failed")
    forged = site.post("/discard", data={"error": MISSING, "confirmed": "5", "until": "x"})
    assert forged.status_code == 403
    with connection(backend) as conn:
        assert admin.discard_failed(conn, error=MISSING, dry_run=True) == 5


@pytest.mark.parametrize(
    ("path", "fields", "problem"),
    [
        ("/retry", {"error": MISSING, "confirmed": "5"}, "needs a count and the time"),
        ("/retry", {"error": MISSING, "confirmed": "5", "until": "soon"}, "not an ISO 8601"),
        ("/retry", {"confirmed": "5", "until": "2026-01-01T00:00:00"}, "needs its time zone"),
        ("/retry", {"error": MISSING, "confirmed": "many", "until": "x"}, "needs a count"),
        ("/retry", {"state": "queued"}, "retry acts on failed jobs, not queued"),
        ("/cancel", {"state": "failed"}, "cancel acts on waiting jobs"),
        ("/discard", {}, "discard_failed needs job ids or a filter"),
        ("/discard", {"job_id": "nope"}, "job id &#39;nope&#39; is not a UUID"),
        ("/retry", {"error": "e" * 201}, "error must be an error&#39;s first line"),
    ],
)
def test_bad_action_forms_are_400(client, failed, path, fields, problem):
    answer = client.post(path, data={"csrf_token": token(client.get("/failed")), **fields})
    assert answer.status_code == 400, answer.text
    assert problem in answer.text


def test_a_confirmed_action_runs_in_batches_each_committed(backend, client, failed, monkeypatch):
    from proletarian_di.contrib.dashboard import _app

    batches: list[int] = []
    original = admin.in_batches

    def recorded(conn: Any, *args: Any, **options: Any) -> Any:
        for count in original(conn, *args, **options):
            batches.append(count)
            yield count

    monkeypatch.setattr(_app, "BATCH_SIZE", 3)
    monkeypatch.setattr(admin, "in_batches", recorded)
    asked = client.post("/retry", data={"csrf_token": token(client.get("/failed"))})
    assert "Retry 12 failed jobs?" in asked.text
    assert "12 jobs back in the queue" in confirm(client, asked).text
    assert batches == [3, 3, 3, 3, 0]


# A large bulk action, in steps -----------------------------------------------------------------

MANY = 5_000


def archived_failures(backend: Backend, count: int, queue: str, at: datetime) -> list[uuid.UUID]:
    """`count` jobs of `queue` archived as failed at `at`, written straight into the archive
    (running thousands of jobs would take the test's time)."""
    with contextlib.closing(backend.connect()) as conn:
        ids = list(enqueue_many(conn, [("sync", {"n": n}) for n in range(count)], queue=queue))
        finished = at.replace(tzinfo=None) if backend.name == "mysql" else at
        cursor = conn.cursor()
        cursor.execute(
            f"INSERT INTO {backend.archived_job_table} (job_id, queue, job_type, payload, "
            "attempts, enqueued_at, process_at, status, finished_at, last_error) SELECT job_id, "
            "queue, job_type, payload, 3, enqueued_at, process_at, 'failure', %s, "
            f"'RuntimeError: down' FROM {backend.job_table} WHERE queue = %s",
            (finished, queue),
        )
        cursor.execute(f"DELETE FROM {backend.job_table} WHERE queue = %s", (queue,))
        conn.commit()
    return ids


def failures_of(backend: Backend, queue: str) -> int:
    """The archived failures of `queue`, counted in the database."""
    return int(
        backend.query(
            f"SELECT COUNT(*) FROM {backend.archived_job_table} "
            "WHERE queue = %s AND status = 'failure'",
            (queue,),
        )[0][0]
    )


def waiting_in(backend: Backend, queue: str) -> dict[uuid.UUID, tuple[int, datetime]]:
    """The jobs of `queue` in the job table: their attempts and when they are due (UTC)."""
    rows = backend.query(
        f"SELECT job_id, attempts, process_at FROM {backend.job_table} WHERE queue = %s",
        (queue,),
    )
    return {
        uuid.UUID(bytes=key) if isinstance(key, bytes) else uuid.UUID(str(key)): (
            attempts,
            at.replace(tzinfo=timezone.utc) if at.tzinfo is None else at,
        )
        for key, attempts, at in rows
    }


def progress(page: Any) -> tuple[int, int]:
    """What a progress page says: the jobs done so far, and those still to go."""
    done = re.search(r"([\d,]+) jobs? back in the queue so far", page.text)
    left = re.search(r"([\d,]+) still to go", page.text)
    assert done and left, page.text
    return int(done.group(1).replace(",", "")), int(left.group(1).replace(",", ""))


def test_a_large_confirmed_retry_goes_on_in_steps_each_showing_what_the_database_holds(
    backend, client, events, monkeypatch
):
    from proletarian_di.contrib.dashboard import _app

    earlier = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(hours=1)
    many = archived_failures(backend, MANY, "bulk", earlier)
    other = archived_failures(backend, 2, "other", earlier)
    monkeypatch.setattr(_app, "BATCH_SIZE", 1_000)
    monkeypatch.setattr(_app, "STEP_SECONDS", 0.0)  # each request, one batch
    fields = {"csrf_token": token(client.get("/failed")), "queue": "bulk"}
    asked = client.post("/retry", data=fields)
    assert f"Retry {MANY:,} failed jobs of queue bulk?" in asked.text
    later = archived_failures(backend, 1, "bulk", datetime.now(timezone.utc) + timedelta(hours=1))

    page = confirm(client, asked)
    for step in (1, 2):
        assert page.status_code == 200 and "still to go" in page.text, page.text
        done, left = progress(page)
        assert (done, left) == (step * 1_000, MANY - step * 1_000)
        assert left == failures_of(backend, "bulk") - 1  # the later failure is not counted
        assert done == len(waiting_in(backend, "bulk"))
        page = confirm(client, page)
    steps = events.named("dashboard_action_step")
    assert [(step["count"], step["left"]) for step in steps[:2]] == [(1_000, 4_000), (1_000, 3_000)]

    # Left there (the tab closed): what is left is counted again, and done from there on.
    asked = client.post("/retry", data=fields)
    assert f"Retry {MANY - 3_000:,} failed jobs of queue bulk?" in asked.text
    monkeypatch.setattr(_app, "STEP_SECONDS", 3600.0)
    finished = confirm(client, asked)
    assert f"{MANY - 3_000:,} jobs back in the queue" in finished.text

    waiting = waiting_in(backend, "bulk")
    assert set(waiting) == set(many)
    now = datetime.now(timezone.utc)
    assert all(attempts == 0 and due <= now for attempts, due in waiting.values())
    assert failures_of(backend, "bulk") == 1 and set(waiting_in(backend, "other")) == set()
    with connection(backend) as conn:
        assert admin.retry_jobs(conn, later + other, dry_run=True) == 3


def test_a_steps_count_of_what_was_done_is_the_dashboards_own(backend, client, failed):
    """The progress page carries what the earlier steps did, signed: a count made up, or
    signed for another action, is refused, and nothing is done."""
    fields = {
        "csrf_token": token(client.get("/failed")),
        "error": MISSING,
        "confirmed": "5",
        "until": datetime.now(timezone.utc).isoformat(),
    }
    for done in ("4000", "retry 4000", _signed(client, "discard 4000")):
        forged = client.post("/retry", data={**fields, "done": done})
        assert forged.status_code == 400, done
        assert "not a count of this action that this dashboard signed" in forged.text
    with connection(backend) as conn:
        assert admin.retry_jobs(conn, error=MISSING, dry_run=True) == 5


def _signed(client: TestClient, text: str) -> str:
    """`text` signed by the client's dashboard, as its progress page signs a count."""
    site = client.app
    for route in site.routes:  # type: ignore[attr-defined]
        owner = getattr(route.endpoint, "__self__", None)
        if owner is not None and hasattr(owner, "signer"):
            return owner.signer.sign(text)
    raise AssertionError("no dashboard routes")

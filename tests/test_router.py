"""JobRouter: dispatch on job type, the make_handler and functools.partial patterns."""

from __future__ import annotations

import functools

import pytest

from proletarian_di import ConfigurationError, process_next_job
from proletarian_di.router import JobRouter, UnknownJobType
from proletarian_di.testing import run_due_jobs

from backends import archive_by_id, enqueue_committed


class StubMailer:
    def __init__(self):
        self.sent = []

    def send(self, to, subject):
        self.sent.append((to, subject))


class StubSearch:
    def __init__(self):
        self.indexed = []

    def index(self, doc_id):
        self.indexed.append(doc_id)


def make_handler(system):
    """Proletarian's make-handler: a router whose functions close over the system."""
    router = JobRouter()

    @router.handler("send_email")
    def send_email(job_type, payload):
        system["mailer"].send(payload["to"], payload["subject"])

    @router.handler("index_doc", "reindex_doc")
    def index_doc(job_type, payload):
        system["search"].index(payload["id"])

    return router


def test_make_handler_with_stubs_dispatches_on_job_type():
    system = {"mailer": StubMailer(), "search": StubSearch()}
    handler = make_handler(system)
    handler("send_email", {"to": "a@example.com", "subject": "Hi"})
    handler("index_doc", {"id": 7})
    handler("reindex_doc", {"id": 8})
    assert system["mailer"].sent == [("a@example.com", "Hi")]
    assert system["search"].indexed == [7, 8]
    assert handler.job_types == ("send_email", "index_doc", "reindex_doc")
    assert "send_email" in handler and "nope" not in handler and len(handler) == 3


def test_unknown_job_type_is_a_lookup_error_naming_the_type():
    handler = make_handler({"mailer": StubMailer(), "search": StubSearch()})
    with pytest.raises(UnknownJobType) as info:
        handler("send_sms", {})
    assert isinstance(info.value, LookupError)
    assert info.value.job_type == "send_sms"
    assert "'send_sms'" in str(info.value) and "'send_email'" in str(info.value)


def test_a_default_catches_unregistered_types():
    seen = []
    router = JobRouter(default=lambda job_type, payload: seen.append(job_type))
    router("anything", None)
    assert seen == ["anything"]


def test_registering_a_type_twice_or_a_non_callable_is_an_error():
    router = JobRouter({"a": print})
    with pytest.raises(ConfigurationError, match="'a' already has a handler"):
        router.register("a", print)
    with pytest.raises(ConfigurationError, match="must be callable"):
        router.register("b", "not a function")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="non-empty string"):
        router.register("", print)


def handle_job(db, mailer, job_type, payload):
    """The partial pattern: dependencies first, then (job_type, payload)."""
    if job_type == "send_email":
        mailer.send(payload["to"], "welcome")
    else:
        db.append(payload)


def test_partial_pattern_with_stubs():
    db, mailer = [], StubMailer()
    handler = functools.partial(handle_job, db, mailer)
    handler("send_email", {"to": "b@example.com"})
    handler("write_audit", {"id": 1})
    assert mailer.sent == [("b@example.com", "welcome")] and db == [{"id": 1}]


def test_router_runs_real_jobs_and_an_unknown_type_fails_the_job_naming_it(backend, pool):
    system = {"mailer": StubMailer(), "search": StubSearch()}
    sent, mystery = enqueue_committed(
        backend,
        ("send_email", {"to": "a@example.com", "subject": "Hi"}),
        ("mystery", {}),
    )
    failures = []
    ran = run_due_jobs(
        pool,
        make_handler(system),
        failed_job_fn=lambda job, exc: failures.append((job.job_id, exc)),
    )
    assert ran == 2
    assert system["mailer"].sent == [("a@example.com", "Hi")]
    assert sorted(backend.archived()) == [("mystery", "failure", 1), ("send_email", "success", 1)]
    assert archive_by_id(backend) == {sent: ("success", 1), mystery: ("failure", 1)}
    ((failed_id, exc),) = failures
    assert failed_id == mystery
    assert type(exc) is UnknownJobType and isinstance(exc, LookupError)
    assert exc.job_type == "mystery"
    assert "'mystery'" in str(exc) and "'send_email'" in str(exc)


def test_router_in_advanced_mode_passes_the_job(backend, pool):
    router = JobRouter()
    seen = []

    @router.handler("send_email")
    def send_email(job):
        seen.append((job.job_type, job.payload, job.attempts))

    enqueue_committed(backend, ("send_email", {"to": "c@example.com"}))
    assert process_next_job(pool, router, handler_fn_mode="advanced") is True
    assert seen == [("send_email", {"to": "c@example.com"}, 1)]

"""The reference containers in containers/: config from YAML and env, two queues, stubs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from dependency_injector import providers

from proletarian_di import worker_running
from proletarian_di.di import container_workers

from backends import enqueue_committed, wait_until

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from containers import EMAIL_QUEUE, REPORTS_QUEUE, System, make_handler  # noqa: E402
from containers.mysql import MySQLContainer  # noqa: E402
from containers.postgres import PostgresContainer  # noqa: E402


class StubMailer:
    def __init__(self):
        self.sent = []

    def send(self, to, subject, body):
        self.sent.append((to, subject))


class StubSearch:
    def __init__(self):
        self.documents = {}

    def index(self, doc_id, document):
        self.documents[doc_id] = document


def container_for(backend, monkeypatch):
    variable = "DATABASE_URL" if backend.name == "postgresql" else "MYSQL_URL"
    monkeypatch.setenv(variable, backend.url)
    monkeypatch.setenv("EMAIL_POLLING_INTERVAL_MS", "10")
    monkeypatch.setenv("REPORTS_POLLING_INTERVAL_MS", "10")
    cls = PostgresContainer if backend.name == "postgresql" else MySQLContainer
    return cls()


def test_config_comes_from_yaml_and_the_environment(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgresql://app@db.internal/app")
    monkeypatch.setenv("EMAIL_WORKER_THREADS", "6")
    monkeypatch.delenv("REPORTS_POLLING_INTERVAL_MS", raising=False)
    config = PostgresContainer().config()
    assert config["database"]["url"] == "postgresql://app@db.internal/app"
    assert config["queues"]["email"]["worker_threads"] == 6
    assert config["queues"]["reports"] == {"worker_threads": 1, "polling_interval_ms": 5000}


def test_reference_container_runs_both_queues_with_stubbed_components(backend, monkeypatch):
    container = container_for(backend, monkeypatch)
    mailer, search = StubMailer(), StubSearch()
    container.mailer.override(providers.Object(mailer))
    container.search.override(providers.Object(search))
    enqueue_committed(
        backend,
        ("send_email", {"to": "a@example.com", "subject": "Welcome"}),
        ("index_document", {"id": 7, "document": {"title": "Hello"}}),
        queue=EMAIL_QUEUE,
    )
    enqueue_committed(backend, ("daily_report", {"to": "ops@example.com"}), queue=REPORTS_QUEUE)
    with worker_running(container):
        workers = {w.options.queue: w for w in container_workers(container)}
        assert {q: w.options.worker_threads for q, w in workers.items()} == {
            EMAIL_QUEUE: 4,
            REPORTS_QUEUE: 1,
        }
        wait_until(lambda: len(backend.archived()) == 3)
    assert not any(w.running for w in workers.values())
    assert not container.pool.initialized
    assert sorted(mailer.sent) == [
        ("a@example.com", "Welcome"),
        ("ops@example.com", "Daily job report"),
    ]
    assert search.documents == {"7": {"title": "Hello"}}
    assert {status for _, status, _ in backend.archived()} == {"success"}


def test_make_handler_with_stubs_needs_no_database():
    mailer, search = StubMailer(), StubSearch()
    handler = make_handler(System(mailer=mailer, search=search))
    handler("send_email", {"to": "b@example.com", "subject": "Hi"})
    handler("index_document", {"id": 1})
    assert mailer.sent == [("b@example.com", "Hi")] and search.documents == {"1": {}}


def test_containers_is_not_an_installed_package():
    import tomllib
    from setuptools import find_namespace_packages

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    find = pyproject["tool"]["setuptools"]["packages"]["find"]
    packages = find_namespace_packages(
        str(ROOT), include=find.get("include", ["*"]), exclude=find.get("exclude", [])
    )
    assert "proletarian_di" in packages
    assert "containers" not in packages
    assert all(p == "proletarian_di" or p.startswith("proletarian_di.") for p in packages)


@pytest.mark.parametrize("name", ["postgres", "mysql"])
def test_container_modules_name_their_config_files(name):
    assert (ROOT / "containers" / f"{name}.yml").is_file()


@pytest.mark.parametrize("container_class", [PostgresContainer, MySQLContainer])
def test_every_worker_and_the_system_name_the_containers_own_pool(container_class):
    """One pool per container: the workers (and the system) use the pool the container
    declares, so the workers drain before that very pool closes."""
    container = container_class()
    for provider in (container.email_worker, container.reports_worker):
        assert provider.args[0] is container.pool
        assert container.pool in provider.related
    assert container.system.kwargs["data_source"] is container.pool
    resources = list(container.traverse(types=[providers.Resource]))
    assert len(resources) == 3

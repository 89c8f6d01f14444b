"""Reference dependency-injector containers for proletarian-di applications.

Copy these into your application: they are examples, not an installed
package (a top-level `containers` package would shadow your own
`containers.py`). Run them from the repository root, e.g.
`proletarian-di worker containers.postgres:PostgresContainer`.

- `containers.postgres.PostgresContainer`: PostgreSQL (psycopg_pool), config
  from `containers/postgres.yml` and the environment.
- `containers.mysql.MySQLContainer`: MySQL/MariaDB (PyMySQL + DBUtils), config
  from `containers/mysql.yml` and the environment.
- `containers.demo.DemoContainer`: the system `proletarian-di demo` runs; its
  code ships in the package, as `proletarian_di.contrib.demo`.

Both application containers are copies of `ApplicationContainer` below, each
declaring only its `config` and its `pool`: two queues ("email": several
threads, fast polling; "reports": one thread, slower polling), stub-able
components (a mailer and a search client), and `make_handler(system)`,
Proletarian's handler factory that closes over the system's components.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from dependency_injector import containers, providers

from proletarian_di import Job, RetrySpec
from proletarian_di.di import queue_worker
from proletarian_di.router import JobRouter

EMAIL_QUEUE = "email"
REPORTS_QUEUE = "reports"

logger = logging.getLogger("containers")

ContainerClass = TypeVar("ContainerClass", bound=type[containers.DeclarativeContainer])


class Mailer(Protocol):
    """Sends one email; tests replace it with a stub."""

    def send(self, to: str, subject: str, body: str) -> None: ...


class SearchClient(Protocol):
    """Indexes one document; tests replace it with a stub."""

    def index(self, doc_id: str, document: dict[str, Any]) -> None: ...


class LoggingMailer:
    """A mailer that logs and remembers what it sent, instead of talking SMTP."""

    def __init__(self, sender: str = "noreply@example.com") -> None:
        self.sender = sender
        self.sent: list[tuple[str, str, str]] = []
        self._lock = threading.Lock()

    def send(self, to: str, subject: str, body: str) -> None:
        with self._lock:
            self.sent.append((to, subject, body))
        logger.info("mail from=%s to=%s subject=%r", self.sender, to, subject)


class InMemorySearchClient:
    """A search client that keeps documents in a dict, instead of a search server."""

    def __init__(self, url: str = "memory://") -> None:
        self.url = url
        self.documents: dict[str, dict[str, Any]] = {}

    def index(self, doc_id: str, document: dict[str, Any]) -> None:
        self.documents[doc_id] = document


@dataclasses.dataclass
class System:
    """The components a handler may use: built by the container, stubbed by tests."""

    mailer: Mailer
    search: SearchClient
    data_source: Any = None


def make_handler(system: System) -> JobRouter:
    """The handler factory (Proletarian's make-handler): one function per job type."""
    router = JobRouter()

    @router.handler("send_email")
    def send_email(job_type: str, payload: dict[str, Any]) -> None:
        system.mailer.send(payload["to"], payload["subject"], payload.get("body", ""))

    @router.handler("index_document")
    def index_document(job_type: str, payload: dict[str, Any]) -> None:
        system.search.index(str(payload["id"]), payload.get("document", {}))

    @router.handler("daily_report")
    def daily_report(job_type: str, payload: dict[str, Any]) -> None:
        with system.data_source.connection() as conn:
            cur = conn.cursor()
            cur.execute("SELECT status, count(*) FROM proletarian.archived_job GROUP BY status")
            counts = {status: int(n) for status, n in cur.fetchall()}
            conn.rollback()
        system.mailer.send(payload["to"], "Daily job report", repr(dict(sorted(counts.items()))))

    return router


def email_retry_strategy(job: Job, exc: BaseException) -> RetrySpec:
    """Emails are retried three times: 1 s, 5 s, then 30 s later."""
    return RetrySpec(retries=3, delays=(1_000, 5_000, 30_000))


class ApplicationContainer(containers.DeclarativeContainer):
    """What both application containers share: a subclass declares `config` and `pool`.

    Decorated with `@copy_providers(ApplicationContainer)`, the subclass's workers name its
    pool resource directly as their data source, so they drain before the pool closes.
    """

    config = providers.Configuration()
    pool: providers.Provider[Any] = providers.Dependency()

    mailer = providers.Singleton(LoggingMailer, sender=config.mailer.sender)
    search = providers.Singleton(InMemorySearchClient, url=config.search.url)
    system = providers.Singleton(System, mailer=mailer, search=search, data_source=pool)
    handler = providers.Singleton(make_handler, system)

    email_worker = providers.Resource(
        queue_worker,
        pool,
        handler,
        queue=EMAIL_QUEUE,
        worker_threads=config.queues.email.worker_threads.as_int(),
        polling_interval_ms=config.queues.email.polling_interval_ms.as_int(),
        retry_strategy_fn=email_retry_strategy,
    )
    reports_worker = providers.Resource(
        queue_worker,
        pool,
        handler,
        queue=REPORTS_QUEUE,
        worker_threads=config.queues.reports.worker_threads.as_int(),
        polling_interval_ms=config.queues.reports.polling_interval_ms.as_int(),
    )


def copy_providers(
    base: type[containers.DeclarativeContainer],
) -> Callable[[ContainerClass], ContainerClass]:
    """`@containers.copy(base)` as documented: base's providers, rewired to the class's own.

    dependency-injector 4.49's `containers.copy` rejects a redeclared `Configuration`
    (ets-labs/python-dependency-injector#856) and copies the class's own providers after
    wiring the base's copies to the originals (#628): the workers would open a second pool.
    """

    def decorate(cls: ContainerClass) -> ContainerClass:
        own = cls.cls_providers
        memo = {id(base.providers[name]): own[name] for name in own if name in base.providers}
        for name, provider in providers.deepcopy(dict(base.providers), memo).items():
            if name not in own:
                setattr(cls, name, provider)
        return cls

    return decorate

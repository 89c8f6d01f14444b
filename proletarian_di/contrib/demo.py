"""The reference demo system that `proletarian-di demo` runs (PostgreSQL).

Accounts sign up; each sign-up inserts an account row and enqueues its job in
the same transaction (the outbox pattern): personal accounts get a welcome
email on the "email" queue, business accounts an onboarding report on the
"reports" queue. The mail and report services are fakes that fail on purpose,
deterministically, so the demo shows retries and a failure archive:

- every 50th account's welcome email fails once (a temporary SMTP error), then succeeds;
- every 100th business account's report times out once, then succeeds;
- addresses at bounce.invalid never exist: no retry, archived as failures;
- the report of every 400th account keeps failing until its retries run out.

Handlers run in advanced mode and write through `job.connection`, so their
effects commit together with the job's archive row, or not at all.

Copy this container: a pool resource, a handler built from the system's
components, and one worker resource per queue. It ships in the package so the
demo runs from an installed wheel (extras `cli` and `postgres`);
`containers/demo.py` in the repository re-exports it.
"""

from __future__ import annotations

from typing import Any

from dependency_injector import containers, providers

from .. import Job, RetrySpec, WorkerOptions, enqueue
from ..router import JobRouter
from .di import postgres_pool, queue_worker

EMAIL_QUEUE = "email"
REPORTS_QUEUE = "reports"
QUEUES = (EMAIL_QUEUE, REPORTS_QUEUE)

TABLES = """\
CREATE SCHEMA IF NOT EXISTS demo;
DROP TABLE IF EXISTS demo.report, demo.account;
CREATE TABLE demo.account (
    id           INTEGER PRIMARY KEY,
    email        TEXT NOT NULL,
    kind         TEXT NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    email_status TEXT NOT NULL DEFAULT 'pending',
    welcomed_at  TIMESTAMPTZ
);
CREATE TABLE demo.report (
    account_id INTEGER PRIMARY KEY REFERENCES demo.account (id),
    built_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);
"""


class TemporaryMailError(Exception):
    """The mail server asked us to try again later."""


class MailboxDoesNotExist(Exception):
    """The address bounced: retrying cannot help."""


class ReportServiceError(Exception):
    """The report service failed or timed out."""


def is_business(account_id: int) -> bool:
    """Every fourth account is a business account (it gets a report, not an email)."""
    return account_id % 4 == 3


def email_address(account_id: int) -> str:
    """The account's address; a few are at bounce.invalid and never exist."""
    domain = "bounce.invalid" if account_id % 200 == 101 else "example.com"
    return f"user{account_id}@{domain}"


class FlakyMailer:
    """A fake mail service that fails on purpose, the same way on every run."""

    def send_welcome(self, conn: Any, account_id: int, email: str, attempt: int) -> None:
        """Mark the welcome email sent, unless this address or attempt is one that fails."""
        if email.endswith("@bounce.invalid"):
            raise MailboxDoesNotExist(f"550 no such mailbox: {email}")
        if account_id % 50 == 0 and attempt == 1:
            raise TemporaryMailError("421 too many connections, try again later")
        conn.execute(
            "UPDATE demo.account SET email_status = 'sent', welcomed_at = now() WHERE id = %s",
            (account_id,),
        )


class ReportBuilder:
    """A fake report service: slow sometimes, and broken for a few accounts."""

    def build(self, conn: Any, account_id: int, attempt: int) -> None:
        """Record the account's report, unless this account or attempt is one that fails."""
        if account_id % 400 == 399:
            raise ReportServiceError(f"report template missing for account {account_id}")
        if account_id % 100 == 3 and attempt == 1:
            raise ReportServiceError("report service timed out")
        conn.execute("INSERT INTO demo.report (account_id) VALUES (%s)", (account_id,))


def make_handler(mailer: FlakyMailer, reports: ReportBuilder) -> JobRouter:
    """The demo's handler: one function per job type, closing over the system's services."""
    router = JobRouter()

    @router.handler("send_welcome_email")
    def send_welcome_email(job: Job) -> None:
        mailer.send_welcome(
            job.connection, job.payload["account_id"], job.payload["email"], job.attempts
        )

    @router.handler("build_onboarding_report")
    def build_onboarding_report(job: Job) -> None:
        reports.build(job.connection, job.payload["account_id"], job.attempts)

    return router


def retry_strategy(job: Job, exc: BaseException) -> RetrySpec | None:
    """Two retries, 20 then 50 ms later; a bounced address is not worth retrying."""
    if isinstance(exc, MailboxDoesNotExist):
        return None
    return RetrySpec(retries=2, delays=(20, 50))


def mark_undeliverable(job: Job, exc: BaseException) -> None:
    """Record the permanent failure on the account, in the job's own transaction."""
    job.connection.execute(
        "UPDATE demo.account SET email_status = 'failed' WHERE id = %s",
        (job.payload["account_id"],),
    )


WORKER_OPTIONS: WorkerOptions = {
    "polling_interval_ms": 20,
    "handler_fn_mode": "advanced",
    "retry_strategy_fn": retry_strategy,
    "failed_job_fn": mark_undeliverable,
    "await_termination_timeout_ms": 5_000,
}
"""What both demo queues' workers share."""


class DemoContainer(containers.DeclarativeContainer):
    """The demo system: a pool, the services, a handler and a worker per queue."""

    config = providers.Configuration()

    pool = providers.Resource(postgres_pool, config.database_url, min_size=6, max_size=8)

    mailer = providers.Singleton(FlakyMailer)
    reports = providers.Singleton(ReportBuilder)
    handler = providers.Singleton(make_handler, mailer=mailer, reports=reports)

    email_worker = providers.Resource(
        queue_worker,
        pool,
        handler,
        queue=EMAIL_QUEUE,
        queue_worker_id="demo-email",
        worker_threads=4,
        **WORKER_OPTIONS,
    )
    reports_worker = providers.Resource(
        queue_worker,
        pool,
        handler,
        queue=REPORTS_QUEUE,
        queue_worker_id="demo-reports",
        worker_threads=2,
        **WORKER_OPTIONS,
    )


def create_tables(conn: Any) -> None:
    """(Re)create the demo's application tables and commit."""
    for statement in TABLES.split(";"):
        if statement.strip():
            conn.execute(statement)
    conn.commit()


def sign_up(conn: Any, account_ids: range) -> None:
    """Create accounts and enqueue their jobs in one transaction: both commit, or neither."""
    with conn.pipeline():
        for account_id in account_ids:
            email = email_address(account_id)
            kind = "business" if is_business(account_id) else "personal"
            conn.execute(
                "INSERT INTO demo.account (id, email, kind) VALUES (%s, %s, %s)",
                (account_id, email, kind),
            )
            if kind == "business":
                enqueue(
                    conn,
                    "build_onboarding_report",
                    {"account_id": account_id},
                    queue=REPORTS_QUEUE,
                )
            else:
                enqueue(
                    conn,
                    "send_welcome_email",
                    {"account_id": account_id, "email": email},
                    queue=EMAIL_QUEUE,
                )
    conn.commit()


def jobs_per_queue(count: int) -> dict[str, int]:
    """How many of `count` sign-ups enqueue on each queue."""
    business = sum(1 for account_id in range(count) if is_business(account_id))
    return {EMAIL_QUEUE: count - business, REPORTS_QUEUE: business}


def expected_outcomes(count: int) -> dict[str, int]:
    """What the demo must end with for `count` sign-ups: succeeded, failed and retried jobs."""
    failed = retried = 0
    for account_id in range(count):
        if is_business(account_id):
            if account_id % 400 == 399:
                failed, retried = failed + 1, retried + 2
            elif account_id % 100 == 3:
                retried += 1
        elif email_address(account_id).endswith("@bounce.invalid"):
            failed += 1
        elif account_id % 50 == 0:
            retried += 1
    return {"succeeded": count - failed, "failed": failed, "retried": retried}

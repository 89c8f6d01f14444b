"""The demo system `proletarian-di demo` runs: its code lives in `proletarian_di.contrib.demo`.

It ships in the package, so the demo also runs from an installed wheel; read it
there (proletarian_di/contrib/demo.py). It is re-exported here so it sits with
the other reference containers: `containers.demo.DemoContainer` is a pool
resource, a handler built from the system's services, and one worker resource
per queue, on PostgreSQL.
"""

from __future__ import annotations

from proletarian_di.contrib.demo import (
    EMAIL_QUEUE,
    QUEUES,
    REPORTS_QUEUE,
    TABLES,
    DemoContainer,
    FlakyMailer,
    MailboxDoesNotExist,
    ReportBuilder,
    ReportServiceError,
    TemporaryMailError,
    create_tables,
    email_address,
    expected_outcomes,
    is_business,
    jobs_per_queue,
    make_handler,
    mark_undeliverable,
    retry_strategy,
    sign_up,
)

__all__ = [
    "EMAIL_QUEUE",
    "QUEUES",
    "REPORTS_QUEUE",
    "TABLES",
    "DemoContainer",
    "FlakyMailer",
    "MailboxDoesNotExist",
    "ReportBuilder",
    "ReportServiceError",
    "TemporaryMailError",
    "create_tables",
    "email_address",
    "expected_outcomes",
    "is_business",
    "jobs_per_queue",
    "make_handler",
    "mark_undeliverable",
    "retry_strategy",
    "sign_up",
]

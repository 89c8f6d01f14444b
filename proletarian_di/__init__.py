"""proletarian-di: a durable job queue on PostgreSQL and MySQL, after Proletarian.

Jobs are rows, enqueued in the application's own transaction, claimed with
`SELECT … FOR UPDATE SKIP LOCKED`, run while the row lock is held and archived
in the same transaction: at-least-once, no broker.
"""

from ._common.types import DataSource, EnqueueOptions, HandlerMode, WorkerOptions
from ._engine.rates import RateLimit
from ._store.enqueue import enqueue, enqueue_async, enqueue_many
from .errors import (
    ArgumentTypeError,
    ConfigurationError,
    CrashLoop,
    DatabaseURLError,
    EmbeddedPostgresUnavailable,
    InvalidRetrySpec,
    JobAbandoned,
    JobTimedOut,
    LeaseExpired,
    NoCurrentJob,
    PayloadError,
    ProletarianError,
    SchemaError,
    TransactionAborted,
    UnknownJobType,
    UnsupportedDatabase,
    WorkerStateError,
)
from .job_ids import BinaryUUIDStrategy, JobIdStrategy, UUIDStrategy
from .jobs import DEFAULT_QUEUE, Cancel, Job, Snooze, current_job
from .lifecycle import worker_running
from .mysql import MySQLDataSource
from .periodic import PeriodicJob, Scheduler, create_scheduler
from .retry import RetrySpec
from .router import JobRouter
from .schema import install_schema
from .serializers import JSONSerializer, Serializer
from .worker import QueueWorker, create_queue_worker, process_next_job
from .workflows import Workflow, WorkflowJob

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_QUEUE",
    "ArgumentTypeError",
    "BinaryUUIDStrategy",
    "Cancel",
    "ConfigurationError",
    "CrashLoop",
    "DataSource",
    "DatabaseURLError",
    "EmbeddedPostgresUnavailable",
    "EnqueueOptions",
    "HandlerMode",
    "InvalidRetrySpec",
    "JSONSerializer",
    "Job",
    "JobAbandoned",
    "JobIdStrategy",
    "JobRouter",
    "JobTimedOut",
    "LeaseExpired",
    "MySQLDataSource",
    "NoCurrentJob",
    "PayloadError",
    "PeriodicJob",
    "ProletarianError",
    "QueueWorker",
    "RateLimit",
    "RetrySpec",
    "Scheduler",
    "SchemaError",
    "Serializer",
    "Snooze",
    "TransactionAborted",
    "UUIDStrategy",
    "UnknownJobType",
    "UnsupportedDatabase",
    "WorkerOptions",
    "WorkerStateError",
    "Workflow",
    "WorkflowJob",
    "create_queue_worker",
    "create_scheduler",
    "current_job",
    "enqueue",
    "enqueue_async",
    "enqueue_many",
    "install_schema",
    "process_next_job",
    "worker_running",
]

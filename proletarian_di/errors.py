"""Exceptions raised by proletarian-di."""

from __future__ import annotations


class ProletarianError(Exception):
    """Base class of every error raised by proletarian-di."""


class ConfigurationError(ProletarianError, ValueError):
    """An option given to `enqueue` or `create_queue_worker` is invalid."""


class PayloadError(ProletarianError, ValueError):
    """A payload cannot be encoded, or a stored payload cannot be decoded."""


class InvalidRetrySpec(ProletarianError, ValueError):
    """A retry strategy returned something that is not a valid retry spec."""


class SchemaError(ProletarianError):
    """The queue tables are missing or do not match what the worker needs."""


class UnsupportedDatabase(ProletarianError):
    """The server is too old for SKIP LOCKED, or the driver is not supported."""


class TransactionAborted(ProletarianError):
    """A handler or callback left the job's transaction unusable, or ended it.

    It caught a database error and returned (PostgreSQL then refuses every
    statement until a rollback), or the server rolled the transaction back (a
    MySQL deadlock), or it committed or rolled back `job.connection` itself.
    The worker undoes the callback's writes and counts the attempt as failed.
    """


class JobAbandoned(ProletarianError):
    """A job was still running when `stop()` gave up waiting; its attempt counts as failed."""

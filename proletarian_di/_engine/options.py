"""Worker options: defaults and validation, in one place (their types are in `_types`)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Any

from .._common.checks import (
    JobTypeStyle,
    callable_or_none,
    check_clock,
    check_id_strategy,
    check_job_type_style,
    check_log,
    check_ms,
    check_name,
    check_queue,
    int_at_least,
    job_type_from_keyword,
    utc_now,
    validated,
)
from .._common.logging import default_log
from .._common.types import (
    Clock,
    FailedJobFn,
    HandlerMode,
    LogFn,
    PollingErrorFn,
    RetryStrategyFn,
    ShutdownFn,
)
from .._store.secrets import mask
from .._store.tables import DEFAULT_ARCHIVED_JOB_TABLE, DEFAULT_JOB_TABLE, check_table_name
from .._store.urls import url_dialect
from ..errors import ConfigurationError
from ..job_ids import JobIdStrategy
from ..jobs import DEFAULT_QUEUE
from ..observers import Observer, check_observers
from ..serializers import DEFAULT_SERIALIZER, Serializer, check_serializer, serializer_name
from .rates import RateLimit, check_rate_limit

HANDLER_MODES = ("default", "advanced")


DEFAULT_KEEPALIVE_TIMEOUT_MS = 45_000
"""How long a PostgreSQL server waits on a silent worker host by default: its held job
runs again on a live worker within about this long plus a polling interval."""
MAX_KEEPALIVE_TIMEOUT_MS = 86_400_000


def check_keepalive_timeout(ms: Any) -> None:
    """`keepalive_timeout_ms`: 0 (the connection's own keepalives), else from 3 s (a second
    idle and three probes a second apart) to a day."""
    if ms == 0 and type(ms) is int:
        return
    if isinstance(ms, bool) or not isinstance(ms, int) or ms < 3_000:
        raise ConfigurationError(
            f"keepalive_timeout_ms must be 0 (off) or an int >= 3000, got {ms!r}"
        )
    if ms > MAX_KEEPALIVE_TIMEOUT_MS:
        raise ConfigurationError(
            f"keepalive_timeout_ms must be at most {MAX_KEEPALIVE_TIMEOUT_MS} (a day), got {ms}"
        )


@dataclasses.dataclass(frozen=True)
class WorkerSettings:
    """Every option of `create_queue_worker`, validated, with its default filled in."""

    queue: str = DEFAULT_QUEUE
    worker_threads: int = 1
    polling_interval_ms: int = 100
    retry_strategy_fn: RetryStrategyFn | None = None
    failed_job_fn: FailedJobFn | None = None
    on_polling_error: PollingErrorFn | None = None
    handler_fn_mode: HandlerMode = "default"
    install_shutdown_hook: bool = False
    await_termination_timeout_ms: int = 10_000
    queue_worker_id: str = ""
    on_shutdown: ShutdownFn | None = None
    job_table: str = DEFAULT_JOB_TABLE
    archived_job_table: str = DEFAULT_ARCHIVED_JOB_TABLE
    serializer: Serializer = DEFAULT_SERIALIZER
    job_id_strategy: JobIdStrategy | None = None
    log: LogFn = default_log
    clock: Clock = utc_now
    batch_size: int = 1
    max_running: int | None = None
    lease_ms: int | None = None
    job_timeout_ms: int | None = None
    job_timeouts: Mapping[str, int | None] = dataclasses.field(default_factory=dict)
    max_crashes: int | None = None
    fallback_polling_interval_ms: int = 5_000
    observers: Sequence[Observer] = ()
    pgbouncer: bool = False
    listen_conninfo: str | None = None
    keepalive_timeout_ms: int = DEFAULT_KEEPALIVE_TIMEOUT_MS
    share_cpu: bool = True
    rate_limit: RateLimit | None = None
    fair: bool = False
    job_type_style: JobTypeStyle = "plain"

    def __post_init__(self) -> None:
        check_queue(self.queue)
        int_at_least(self.worker_threads, "worker_threads", 1)
        check_ms(self.polling_interval_ms, "polling_interval_ms", 0)
        check_ms(self.await_termination_timeout_ms, "await_termination_timeout_ms", 0)
        int_at_least(self.batch_size, "batch_size", 1)
        for name in ("max_running", "max_crashes"):
            if getattr(self, name) is not None:
                int_at_least(getattr(self, name), name, 1)
        if self.job_timeout_ms is not None:
            check_ms(self.job_timeout_ms, "job_timeout_ms", 1)
        check_ms(self.fallback_polling_interval_ms, "fallback_polling_interval_ms", 0)
        check_job_timeouts(self.job_timeouts)
        if self.lease_ms is not None:
            check_ms(self.lease_ms, "lease_ms", MIN_LEASE_MS)
            check_lease_mode(self)
        if self.handler_fn_mode not in HANDLER_MODES:
            raise ConfigurationError(
                f"handler_fn_mode must be 'default' or 'advanced', got {self.handler_fn_mode!r}"
            )
        for name in ("install_shutdown_hook", "share_cpu", "fair"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigurationError(f"{name} must be a bool, got {getattr(self, name)!r}")
        for name in ("retry_strategy_fn", "failed_job_fn", "on_polling_error", "on_shutdown"):
            callable_or_none(getattr(self, name), name)
        check_table_name(self.job_table, "job_table")
        check_table_name(self.archived_job_table, "archived_job_table")
        if not isinstance(self.queue_worker_id, str):
            raise ConfigurationError(
                f"queue_worker_id must be a string, got {self.queue_worker_id!r}"
            )
        if not self.queue_worker_id:
            object.__setattr__(self, "queue_worker_id", f"proletarian[{self.queue}]")
        object.__setattr__(self, "serializer", check_serializer(self.serializer))
        check_id_strategy(self.job_id_strategy)
        check_clock(self.clock)
        check_log(self.log)
        object.__setattr__(self, "observers", check_observers(self.observers))
        check_pgbouncer(self)
        check_keepalive_timeout(self.keepalive_timeout_ms)
        if check_rate_limit(self.rate_limit) is not None and self.batch_size > 1:
            raise ConfigurationError(
                "rate_limit and batch_size > 1 cannot go together: a rate limit counts each "
                "job's start when it is claimed, and a batch claims its later jobs before "
                "they start; use worker_threads for more at once"
            )
        check_fair(self)
        check_job_type_style(self.job_type_style)

    @property
    def lends_connection(self) -> bool:
        """Whether user code is handed the job's connection: an advanced-mode handler, a
        retry strategy or a failed-job callback (each is given the `Job`, connection and
        all). Otherwise the worker's connection runs only the worker's own statements."""
        return (
            self.handler_fn_mode == "advanced"
            or self.retry_strategy_fn is not None
            or self.failed_job_fn is not None
        )

    def handed_job_type(self, stored: str) -> str:
        """The job type a handler is given for a row's text: with job_type_style="keyword"
        the keyword without its colon (see `job_type_from_keyword`), else the text."""
        return job_type_from_keyword(stored) if self.job_type_style == "keyword" else stored

    def timeout_s(self, job_type: str) -> float | None:
        """How long a job of this type may run, in seconds, or None for no bound."""
        ms = self.job_timeouts.get(job_type, self.job_timeout_ms)
        return None if ms is None else ms / 1000


MIN_LEASE_MS = 100
"""The shortest lease: the heartbeat renews it every third of it."""


def check_job_timeouts(timeouts: Any) -> None:
    """`job_timeouts`: job type -> milliseconds (None: no bound for that type)."""
    if not isinstance(timeouts, Mapping):
        raise ConfigurationError(
            f"job_timeouts must be a mapping of job type to milliseconds, got {timeouts!r}"
        )
    for job_type, ms in timeouts.items():
        check_name(job_type, "job_timeouts' job type")
        if ms is not None:
            check_ms(ms, f"job_timeouts[{job_type!r}]", 1)


def check_lease_mode(settings: WorkerSettings) -> None:
    """Refuse the options lease mode cannot honour, naming why."""
    if settings.handler_fn_mode == "advanced":
        raise ConfigurationError(
            "lease_ms and handler_fn_mode='advanced' cannot go together: in lease mode the "
            "handler runs with no transaction open, so there is no job.connection to make "
            "its writes commit exactly once with the job; drop lease_ms (the held-transaction "
            "mode) or use handler_fn_mode='default'"
        )
    if settings.max_running is not None:
        raise ConfigurationError(
            "lease_ms and max_running cannot go together yet: max_running's slots are held "
            "by the job's transaction, which lease mode commits at the claim"
        )
    if settings.max_crashes is not None:
        raise ConfigurationError(
            "lease_ms and max_crashes cannot go together: lease mode counts an attempt when "
            "it claims the job, so the retry strategy already bounds a job that crashes "
            "its process"
        )


def check_fair(settings: WorkerSettings) -> None:
    """`fair`: refuse what would claim past the group's turn. A rate limit by group key
    implies it: a plain claim would wait behind the first job of a group held back, where
    a fair one goes on to the next group."""
    rate = settings.rate_limit
    if rate is not None and rate.by == "group_key" and settings.fair is False:
        object.__setattr__(settings, "fair", True)
    if not settings.fair:
        return
    if settings.batch_size > 1:
        raise ConfigurationError(
            "fair=True and batch_size > 1 cannot go together: a fair claim takes one job "
            "of the next group key at a time; use worker_threads for more at once"
        )


def check_pgbouncer(settings: WorkerSettings) -> None:
    """`pgbouncer` and `listen_conninfo`: types, and what a transaction pooler cannot keep."""
    if not isinstance(settings.pgbouncer, bool):
        raise ConfigurationError(f"pgbouncer must be a bool, got {settings.pgbouncer!r}")
    conninfo = settings.listen_conninfo
    if conninfo is not None:
        if not isinstance(conninfo, str) or not conninfo.strip():
            raise ConfigurationError(
                f"listen_conninfo must be a postgresql:// URL or libpq conninfo, got {conninfo!r}"
            )
        if "://" in conninfo and url_dialect(conninfo) != "postgresql":
            raise ConfigurationError(
                f"listen_conninfo must be a postgresql:// URL, got {mask(conninfo)!r}"
            )
        if not settings.pgbouncer:
            raise ConfigurationError(
                "listen_conninfo is for pgbouncer=True (the worker's LISTEN goes around the "
                "pooler); without it the worker listens on a connection of its data source"
            )
    if settings.pgbouncer:
        check_pooled(settings, "pgbouncer=True")


def check_pooled(settings: WorkerSettings, why: str) -> None:
    """Refuse what a transaction pooler cannot keep (`why`: how the worker knows of it)."""
    timeouts = settings.job_timeout_ms is not None or any(
        ms is not None for ms in settings.job_timeouts.values()
    )
    if settings.max_running is not None and timeouts:
        raise ConfigurationError(
            f"{why} with max_running and a job timeout cannot go together: a job "
            "past its timeout keeps its running slot with a session-level advisory lock, "
            "which a transaction pooler hands to other clients; give this worker a direct "
            "URL, or drop one of them"
        )


def worker_settings(**options: Any) -> WorkerSettings:
    """Validate keyword options into `WorkerSettings`, naming any option that does not exist."""
    return validated(WorkerSettings, "worker", options)


STORAGE_OPTIONS = ("serializer", "job_type_style")
"""The options that say how rows are written and read, which the worker command can set for
every worker and scheduler it runs (`storage_defaults`)."""

_STORAGE_DEFAULTS: ContextVar[Mapping[str, Any] | None] = ContextVar(
    "storage_defaults", default=None
)


@contextlib.contextmanager
def storage_defaults(
    serializer: Serializer | str | None = None, job_type_style: str | None = None
) -> Iterator[None]:
    """While the block runs (in this thread), `create_queue_worker` and `create_scheduler`
    use these options where their caller leaves them out, and refuse another value: how
    `proletarian-di worker --serializer transit --job-type-style keyword` reaches the workers
    its target makes. Each value is checked here (a `ConfigurationError` naming it)."""
    defaults: dict[str, Any] = {}
    if serializer is not None:
        defaults["serializer"] = check_serializer(serializer)
    if job_type_style is not None:
        defaults["job_type_style"] = check_job_type_style(job_type_style)
    token = _STORAGE_DEFAULTS.set(defaults)
    try:
        yield
    finally:
        _STORAGE_DEFAULTS.reset(token)


def with_storage_defaults(options: Mapping[str, Any], owner: str) -> dict[str, Any]:
    """`options` with the block's `storage_defaults` for those left out (None); a
    `ConfigurationError` naming `owner` where the options give another value."""
    merged = dict(options)
    for name, default in (_STORAGE_DEFAULTS.get() or {}).items():
        given = options.get(name)
        if given is None:
            merged[name] = default
        elif _storage_text(name, given) != _storage_text(name, default):
            raise ConfigurationError(
                f"{owner} is given {name}={_storage_text(name, given)!r}, but it runs with "
                f"{name}={_storage_text(name, default)!r} (proletarian-di worker "
                f"--{name.replace('_', '-')}, or PROLETARIAN_{name.upper()}): leave the "
                "option out of its code, or run it with the same"
            )
    return merged


def _storage_text(name: str, value: Any) -> str:
    """A storage option's value as its name: "transit", "keyword"."""
    if name == "serializer":
        return serializer_name(check_serializer(value))
    return str(check_job_type_style(value))

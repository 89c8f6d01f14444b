"""The types the public API is written in: aliases, the data source protocol, worker options.

Typing only: nothing here needs a database driver, and `Unpack` (for
`**options: Unpack[WorkerOptions]`) is imported under `TYPE_CHECKING` where used.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypedDict, Union

from ..job_ids import JobIdStrategy
from ..jobs import Job
from ..retry import RetrySpec
from ..serializers import Serializer, SerializerName

if TYPE_CHECKING:
    from .._engine.rates import RateLimit
    from ..observers import Observer

Connection = Any
"""An open DB-API connection: psycopg 3 (PostgreSQL) or PyMySQL (MySQL/MariaDB)."""

DialectName = Literal["postgresql", "mysql"]
"""The databases proletarian-di speaks: PostgreSQL, and MySQL/MariaDB."""

HandlerMode = Literal["default", "advanced"]
"""How a handler is called: `handler(job_type, payload)` or `handler(job)`."""

Handler = Callable[..., Any]
"""`handler(job_type, payload)` or, in advanced mode, `handler(job)`; may be `async`."""

Clock = Callable[[], datetime]
"""`() -> aware datetime`: the worker's notion of now."""

RetrySpecLike = Union[RetrySpec, Mapping[str, Any], None]  # noqa: UP007 (an alias evaluated at run time)
RetryStrategyFn = Callable[
    [Job, BaseException], Union[RetrySpecLike, Awaitable[RetrySpecLike]]  # noqa: UP007
]
FailedJobFn = Callable[[Job, BaseException], object]
PollingErrorFn = Callable[[BaseException], bool]
ShutdownFn = Callable[[], object]
LogFn = Callable[[str, dict[str, Any]], None]
"""`log(event, data)`: receives every worker event."""


class Pool(Protocol):
    """A pool that lends connections for a `with` block (psycopg_pool, `MySQLDataSource`)."""

    def connection(self) -> AbstractContextManager[Any]: ...


DataSource = Union[Pool, Callable[[], Any]]  # noqa: UP007
"""Where a worker gets its connections: a `Pool`, or a callable returning a new connection."""


class EnqueueOptions(TypedDict, total=False):
    """The keyword options of `enqueue`, `enqueue_many` and `enqueue_async`."""

    queue: str
    process_at: datetime | None
    process_in: timedelta | None
    priority: int
    unique_key: str | None
    group_key: str | None
    depends_on: Iterable[uuid.UUID | str]
    job_table: str
    archived_job_table: str
    serializer: Serializer | SerializerName | None
    job_id_strategy: JobIdStrategy | None
    clock: Clock | None
    job_type_style: Literal["plain", "keyword"]


class WorkerOptions(TypedDict, total=False):
    """Every keyword option of `create_queue_worker` (and `process_next_job`, `run_due_jobs`,
    `di.queue_worker`); `None` means the default. See the docs' table of options."""

    queue: str | None
    worker_threads: int | None
    polling_interval_ms: int | None
    retry_strategy_fn: RetryStrategyFn | None
    failed_job_fn: FailedJobFn | None
    on_polling_error: PollingErrorFn | None
    handler_fn_mode: HandlerMode | None
    install_shutdown_hook: bool | None
    await_termination_timeout_ms: int | None
    queue_worker_id: str | None
    on_shutdown: ShutdownFn | None
    job_table: str | None
    archived_job_table: str | None
    serializer: Serializer | SerializerName | None
    job_id_strategy: JobIdStrategy | None
    log: LogFn | None
    clock: Clock | None
    batch_size: int | None
    max_running: int | None
    lease_ms: int | None
    job_timeout_ms: int | None
    job_timeouts: Mapping[str, int | None] | None
    max_crashes: int | None
    fallback_polling_interval_ms: int | None
    observers: Sequence[Observer] | None
    pgbouncer: bool | None
    listen_conninfo: str | None
    keepalive_timeout_ms: int | None
    share_cpu: bool | None
    rate_limit: RateLimit | None
    fair: bool | None
    job_type_style: Literal["plain", "keyword"] | None

"""Why a job is not running now (`explain_job`).

`explain_job` reads the job, its queue's live workers and the time once, as `Facts`. Each
reason is a small function of those `Facts`: it returns a sentence when the thing it checks
holds the job back now, else None. A new reason (jobs it depends on) is one more function in
`REASONS`, reading what it needs from `Facts`.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from .._common.types import Connection
from .._engine import pauses as _pauses
from .._engine import registry as _registry
from .._engine.rates import RateLimit, bucket_of
from .._engine.registry import WorkerInfo
from .._store.dialects import Dialect, dialect_of
from .._store.dialects.base import RunningSlots, running_slots
from .._store.tables import DEFAULT_TABLES, Tables, workers_table
from ..serializers import check_serializer
from ._checks import _job_id, _utc
from .jobs import _graph, _group_key, _infos, _Query, _select
from .workers import STALE_AFTER

WAITING_STATES = ("blocked", "queued", "scheduled", "retrying")
"""The states in which something may hold a job back."""


@dataclasses.dataclass(frozen=True)
class Explanation:
    """Why a job is where it is: its `state` (as `admin.get_job` tells it) and `reasons`, a
    sentence for each thing that holds it back now (empty when nothing does: a running or
    finished job, or a due one that waits for a free worker thread); `note` says what it is
    doing or waits for when no reason holds it back."""

    job_id: uuid.UUID
    queue: str
    state: str
    reasons: list[str]
    note: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The fields for JSON, the id as a string."""
        return {**dataclasses.asdict(self), "job_id": str(self.job_id)}


@dataclasses.dataclass
class Shared:
    """Reads that the `Facts` of several queues share (`queue_holds`), each made once for
    all of them: the paused queues, whether the rate slots' table is there, and the rate
    slots of the queues' buckets (None: not read yet, so each `Facts` reads its own)."""

    paused: dict[str, datetime] | None = None
    rate_table: bool | None = None
    rate_rows: dict[str, list[Any]] | None = None


@dataclasses.dataclass(frozen=True)
class Facts:
    """What the reasons are told from, read once: the job (a waiting `JobInfo`), the time,
    the connection, and the workers registered for its queue (None: the schema has no
    registry, so nothing is said about workers); `shared` holds the reads that the facts of
    several queues share."""

    conn: Any
    dialect: Dialect
    job: Any
    now: datetime
    workers: list[WorkerInfo] | None
    shared: Shared = dataclasses.field(default_factory=Shared)

    @property
    def due(self) -> bool:
        return bool(self.job.process_at <= self.now)

    def live(self, *states: str) -> list[WorkerInfo]:
        """The registered workers of the job's queue in these states (default: any but stale)."""
        wanted = states or ("running", "stopping")
        return [w for w in self.workers or () if w.state in wanted]

    def paused_since(self) -> datetime | None:
        """When the job's queue was paused (None: it is not), read once for every queue."""
        if self.shared.paused is None:
            self.shared.paused = _pauses.paused_queues(self.conn, self.dialect)
        return self.shared.paused.get(self.job.queue)

    def has_rate_table(self) -> bool:
        """Whether the rate slots' table is there (read once)."""
        if self.shared.rate_table is None:
            rate_table = self.dialect.rate_table
            self.shared.rate_table = bool(self.dialect.table_columns(self.conn, rate_table))
        return self.shared.rate_table

    def rate_slots(self, *buckets: str) -> list[Any]:
        """The rate slots of these buckets: (bucket, slot, used_at, period_ms, db now)."""
        if self.shared.rate_rows is None:
            return rate_rows(self.conn, self.dialect, buckets)
        return [row for bucket in buckets for row in self.shared.rate_rows.get(bucket, ())]


def rate_rows(conn: Any, dialect: Dialect, buckets: Sequence[str]) -> list[Any]:
    """The rate slots of these buckets, each with the database's time now, in one read."""
    marks = ", ".join(["%s"] * len(buckets))
    return dialect.fetchall(
        conn,
        f"SELECT bucket, slot, used_at, period_ms, {dialect.db_now} FROM {dialect.rate_table} "
        f"WHERE bucket IN ({marks})",
        tuple(buckets),
    )


def paused(facts: Facts) -> str | None:
    """Its queue is paused: no worker claims its jobs until it is resumed."""
    since = facts.paused_since()
    if since is None:
        return None
    return f"its queue {facts.job.queue!r} is paused (since {moment(since)}); resume it to run it"


def waiting_on_parents(facts: Facts) -> str | None:
    """It waits on jobs it depends on (`depends_on`): how many have not ended, which, or the
    parent whose end means it will be cancelled, from where each parent is now."""
    job = facts.job
    if job.state != "blocked":
        return None
    waits_for = job.waits_for or ""
    if not waits_for.startswith("after"):
        return f"waiting on dependencies: {waits_for}"
    waiting = [str(parent) for parent, state in job.parent_states if state == "waiting"]
    more = len(waiting) - 10
    shown = ", ".join(waiting[:10]) + (f" and {more} more" if more > 0 else "")
    return f"waiting on dependencies: runs {waits_for} ({shown})"


def not_due(facts: Facts) -> str | None:
    """It is not due yet: scheduled, or waiting out a retry's delay."""
    job = facts.job
    if facts.due or job.state == "blocked":
        return None
    if job.attempts > 0:
        tries = "attempt" if job.attempts == 1 else "attempts"
        return f"retrying until {moment(job.process_at)} (after {job.attempts} failed {tries})"
    return f"scheduled until {moment(job.process_at)}"


def slots_full(facts: Facts) -> str | None:
    """Due, but its queue's `max_running` slots are all taken: the jobs that hold them, as
    the live workers' registry lists them, and the slots taken, from the database's locks."""
    polling = facts.live("running")
    caps = [w.max_running for w in polling]
    if not facts.due or not caps or None in caps:
        return None
    size = max(cap for cap in caps if cap is not None)
    slots = running_slots(facts.dialect.job_table, facts.job.queue, size)
    if taken_slots(facts.conn, facts.dialect, slots) < size:
        return None
    holders = sorted(
        str(job_id)
        for worker in facts.live()
        for thread in worker.threads
        if (job_id := thread.job_id) is not None and job_id != facts.job.job_id
    )
    cap = f"queue {facts.job.queue!r} runs at most {size} job{'s' if size > 1 else ''} at once"
    slot = "its slot" if size == 1 else "its slots"
    if not holders:
        return f"max_running is full: {cap}, and jobs not reported yet hold {slot}"
    holds = "holds" if len(holders) == 1 else "hold"
    return f"max_running is full: {cap}, and {', '.join(holders)} {holds} {slot}"


def rate_limited(facts: Facts) -> str | None:
    """Due, but a `rate_limit` of its queue's live workers (or, on a schema without the
    registry, the one its slots were written with) has no start left in the window: until
    when, from the slots' starts by the database's clock. Slots outlive the limit that wrote
    them, so a limit no live worker has holds nothing back."""
    dialect, job = facts.dialect, facts.job
    if not facts.due:
        return None
    if facts.workers is None:
        limits = None
    else:
        limits = {w.rate_limit for w in facts.live("running") if w.rate_limit is not None}
        if not limits:
            return None
    if not facts.has_rate_table():
        return None
    group = bucket_of(job.queue, job.group_key or "")
    rows = facts.rate_slots(job.queue, group)
    if not rows:
        return None
    now = dialect.decode_time(rows[0][4])
    if limits is None:  # no registry: the limits the slots were written with
        limits = {
            RateLimit(
                sum(1 for other in rows if other[0] == bucket),
                int(period_ms),
                "group_key" if bucket == group else "queue",
            )
            for bucket, _, _, period_ms, _ in rows
        }
    for rate in sorted(limits, key=lambda r: (r.by != "group_key", r.limit, r.period_ms)):
        bucket = group if rate.by == "group_key" else job.queue
        period = timedelta(milliseconds=rate.period_ms)
        starts = sorted(
            started
            for name, slot, used_at, *_ in rows
            if name == bucket
            and slot < rate.limit
            and (started := dialect.decode_time(used_at)) > now - period
        )
        if len(starts) < rate.limit:
            continue
        free_at = starts[-rate.limit] + period
        what = f"group key {job.group_key or ''!r} of queue" if rate.by == "group_key" else "queue"
        n = rate.limit
        return (
            f"rate limited until {moment(free_at)}: {what} {job.queue!r} starts at most "
            f"{n} job{'s' if n > 1 else ''} in any {period.total_seconds():g} s, and "
            f"has {'started them' if n > 1 else 'started it'} in the last one"
        )
    return None


def no_live_worker(facts: Facts) -> str | None:
    """No live worker polls its queue (known from the registry only)."""
    if facts.workers is None or facts.live("running"):
        return None
    reason = f"no live worker polls queue {facts.job.queue!r}"
    stopping, stale = facts.live("stopping"), facts.live("stale")
    if stopping:
        n = len(stopping)
        reason += f" (its {n} worker{'s are' if n > 1 else ' is'} stopping)"
    elif stale:
        last = max(w.last_seen for w in stale)
        reason += f" (the last one was seen at {moment(last)})"
    return reason


REASONS: Sequence[Callable[[Facts], str | None]] = (
    waiting_on_parents,
    paused,
    not_due,
    slots_full,
    rate_limited,
    no_live_worker,
)
"""Every reason, in the order `Explanation.reasons` lists them."""


def explain_job(
    conn: Connection,
    job_id: uuid.UUID | str,
    *,
    now: datetime | None = None,
    tables: Tables = DEFAULT_TABLES,
) -> Explanation | None:
    """Why the job with this id is not running now, or None if there is no such job: its
    state (as `get_job` tells it) and a sentence for each thing that holds it back (its
    queue paused, scheduled or retrying until a time, its queue's `max_running` full, with
    the running jobs that hold the slots, its queue's or group's rate limit spent until a
    time, no live worker polling its queue). A running or
    finished job has no reasons; `Explanation.note` then says who runs it, or when it ended.

    The workers are the live workers' registry's (see `list_workers`); on a schema without
    it, nothing is said about workers. A few small reads, whatever the tables' size."""
    wanted = _job_id(job_id)
    at = _utc(now or datetime.now(timezone.utc))
    dialect = dialect_of(conn, tables)
    with dialect.admin_read(conn):
        held = dialect.held_rows(conn)
        query = _Query(job_id=wanted)
        sql, params = _select(dialect, tables, query, held, None, at, 1, 1)
        rows = dialect.fetchall(conn, sql, params)
        found = _infos(conn, dialect, rows, held, at, check_serializer(None), 1)
        if not found:
            return None
        job = dataclasses.replace(
            found[0],
            group_key=_group_key(conn, dialect, tables, found[0]),
            **_graph(conn, dialect, found[0]),
        )
        registry = workers_table(tables.job_table)
        workers = None
        if dialect.table_columns(conn, registry):
            workers = _registry.read_workers(conn, dialect, registry, found[0].queue, STALE_AFTER)
        return explain(Facts(conn, dialect, job, at, workers))


@dataclasses.dataclass(frozen=True)
class Hold:
    """Something that holds a queue's due jobs back now, as the dashboard's badges show it:
    its `kind` ("paused", "max_running", "rate_limited", "no_worker"), the sentence
    `explain_job` says of it for a job of the queue (`reason`), and until when for a rate
    limit."""

    kind: str
    reason: str
    until: datetime | None = None


QUEUE_HOLDS: Sequence[tuple[str, Callable[[Facts], str | None]]] = (
    ("paused", paused),
    ("max_running", slots_full),
    ("rate_limited", rate_limited),
    ("no_worker", no_live_worker),
)
"""The reasons that hold a whole queue back, with their kinds, in the order of `REASONS`."""


@dataclasses.dataclass(frozen=True)
class _Head:
    """A stand-in for a queue's due jobs, as the reasons read a job: due now, never tried,
    no group key."""

    queue: str
    process_at: datetime
    job_id: uuid.UUID | None = None
    group_key: str | None = None
    state: str = "queued"
    attempts: int = 0


def queue_holds(
    conn: Connection,
    queues: Mapping[str, bool],
    *,
    now: datetime | None = None,
    tables: Tables = DEFAULT_TABLES,
) -> dict[str, list[Hold]]:
    """What holds each queue's due jobs back now, each said as `explain_job` says it of a
    due job of the queue without a group key: its queue paused, `max_running` full, rate
    limited until a time, no live worker polling it. `queues` maps each queue to whether it
    has due jobs; one without is only said to be paused.

    The paused queues, the queues' live workers and their rate slots are read once for all
    of them (a few statements, however many queues); each queue with due jobs whose live
    workers all have a `max_running` reads its slots' locks, as `explain_job` does."""
    at = _utc(now or datetime.now(timezone.utc))
    dialect = dialect_of(conn, tables)
    shared = Shared()
    due = [queue for queue, has_due in queues.items() if has_due]
    with dialect.admin_read(conn):
        registry = workers_table(tables.job_table)
        workers: dict[str, list[WorkerInfo]] | None = None
        if dialect.table_columns(conn, registry):
            workers = {queue: [] for queue in queues}
            for worker in _registry.read_workers(conn, dialect, registry, due, STALE_AFTER):
                workers[worker.queues[0]].append(worker)
        limited = workers is None or any(
            w.rate_limit is not None and w.state == "running" for q in due for w in workers[q]
        )
        first = Facts(conn, dialect, _Head("", at), at, None, shared)
        if due and limited and first.has_rate_table():
            shared.rate_rows = {}
            buckets = [bucket for queue in due for bucket in (queue, bucket_of(queue, ""))]
            for row in rate_rows(conn, dialect, buckets):
                shared.rate_rows.setdefault(row[0], []).append(row)
        holds: dict[str, list[Hold]] = {}
        for queue, has_due in queues.items():
            mine = None if workers is None else workers[queue]
            facts = Facts(conn, dialect, _Head(queue, at), at, mine, shared)
            checks = QUEUE_HOLDS if has_due else QUEUE_HOLDS[:1]
            holds[queue] = [
                Hold(kind, reason, _until(reason) if kind == "rate_limited" else None)
                for kind, check in checks
                if (reason := check(facts)) is not None
            ]
    return holds


def _until(reason: str) -> datetime | None:
    """The time a rate limit's reason names (`rate limited until <moment>: …`)."""
    _, _, rest = reason.partition(" until ")
    try:
        return datetime.strptime(rest[:23], "%Y-%m-%d %H:%M:%S UTC").replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def explain(facts: Facts) -> Explanation:
    """The job's state, what holds it back now, and a note when nothing does."""
    job = facts.job
    if job.state not in WAITING_STATES:
        return Explanation(job.job_id, job.queue, job.state, [], _settled(facts))
    reasons = [reason for check in REASONS if (reason := check(facts)) is not None]
    note = None
    if not reasons:
        note = f"due since {moment(job.process_at)}; {_threads_note(facts)}"
    return Explanation(job.job_id, job.queue, job.state, reasons, note)


def _threads_note(facts: Facts) -> str:
    """What a due job with no reason waits for: a free worker thread when the live workers'
    threads all run jobs, else their next claim (their threads are idle: their last beat
    says so)."""
    if facts.workers is None:
        return "waiting for a free worker thread"
    polling = facts.live("running")
    n = len(polling)
    workers = f"{n} live worker{'s poll' if n != 1 else ' polls'} its queue"
    total = sum(worker.worker_threads for worker in polling)
    idle = total - sum(worker.busy for worker in polling)
    if idle <= 0:
        return f"waiting for a free worker thread ({workers}, every thread running a job)"
    threads = "thread is" if idle == 1 else "threads are"
    return f"{idle} of {total} worker {threads} free, to claim it at their next poll ({workers})"


def _settled(facts: Facts) -> str | None:
    """The note of a running or finished job: who runs it, or when it finished."""
    job = facts.job
    if job.finished_at is not None:
        return f"{job.state} at {moment(job.finished_at)}"
    for worker in facts.live():
        for thread in worker.threads:
            if thread.job_id == job.job_id:
                return f"running on {worker.host} pid {worker.pid} (thread {thread.name})"
    return None


def moment(at: datetime) -> str:
    """A time as the reasons say it: UTC, to the second."""
    return f"{at.astimezone(timezone.utc):%Y-%m-%d %H:%M:%S} UTC"


_TAKEN_PG = (
    "SELECT COUNT(DISTINCT objid) FROM pg_locks WHERE locktype = 'advisory' AND granted "
    "AND objsubid = 2 AND classid = %s::bigint::oid AND objid::bigint BETWEEN 1 AND %s "
    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
)
"""PostgreSQL: how many of a queue's slots (advisory locks `(key, n)`) some session holds."""


def taken_slots(conn: Any, dialect: Dialect, slots: RunningSlots) -> int:
    """How many of `slots` are held now, by any session, read without taking any."""
    if dialect.name == "postgresql":
        row = dialect.fetchone(conn, _TAKEN_PG, (slots.key % 2**32, slots.size))
    else:  # MySQL: a GET_LOCK name per slot; IS_USED_LOCK names its holder, or NULL
        used = " + ".join(["(IS_USED_LOCK(%s) IS NOT NULL)"] * slots.size)
        names = [f"{slots.prefix}{n}" for n in range(1, slots.size + 1)]
        row = dialect.fetchone(conn, f"SELECT {used}", names)
    return int(row[0]) if row is not None and row[0] is not None else 0

"""The engine's promises, checked where its options meet.

The matrix is {held, lease} x {batch 1, batch 5} x {default, advanced handler} x {no
timeout, a 300 ms job timeout} x {no cap, max_running=1} x {no rate limit, 50 starts a
second} x {plain, fair claims}. Lease mode refuses advanced handlers and max_running, a rate
limit and fair claims refuse batches (tested below, test_rate_limits and test_fair); of the
rest, `COMBINATIONS` is a sample that covers every pair of values. Every job has its type as
its group key. Each combination is driven through the events that can befall a job (it
succeeds, raises, times out, its process is SIGKILLed, `stop()` abandons it, the database
drops every connection, it snoozes or cancels itself), on both databases, and `Ledger.check`
then asserts:

- no job lost: each is waiting or archived, never both, never neither;
- no job runs more often than its retry spec allows, outside a crash;
- a job that succeeded never runs again;
- no two runs of one job at once (but a sync handler that timed out, which cannot be
  stopped and is documented to keep running beside its retry);
- the cap (`max_running`) is never exceeded, timed-out handlers still running included;
- every attempt is recorded once: an archived job's attempts are the runs it had, but
  for its runs that snoozed (`Snooze` spends no attempt).

Every combination's in-process worker runs three threads, so its threads share one CPU while
they claim and settle (`share_cpu`, on by default) and take their own back in handlers, a
timed-out or abandoned one's included.

Every combination's in-process worker sets the shortest `keepalive_timeout_ms` (3 s; its
processes keep the 45 s default): on PostgreSQL over TCP the server's keepalives are set
at each checkout and put back at each release, a timed-out job's included, and a live
host is never cut off by them. A host that vanishes is `test_host_cut_off`'s.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
import math
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import long_job_process
import pytest
from faults import TCPProxy, upstream_of
from psycopg.conninfo import make_conninfo

from proletarian_di import (
    Cancel,
    ConfigurationError,
    RateLimit,
    RetrySpec,
    Snooze,
    Workflow,
    create_queue_worker,
    enqueue,
)
from proletarian_di.mysql import MySQLDataSource
from proletarian_di.observers import Observer

from backends import Backend, Events, as_uuid, wait_until

RETRIES = 1
TIMEOUT_MS = 300


@dataclasses.dataclass(frozen=True)
class Combination:
    lease: bool = False
    batch: int = 1
    advanced: bool = False
    timeout: bool = False
    cap: bool = False
    rate: bool = False
    fair: bool = False

    @property
    def id(self) -> str:
        parts = ["lease" if self.lease else "held", f"batch{self.batch}"]
        parts += ["advanced"] if self.advanced else []
        parts += ["timeout"] if self.timeout else []
        parts += ["cap1"] if self.cap else []
        parts += ["rate50"] if self.rate else []
        parts += ["fair"] if self.fair else []
        return "-".join(parts)

    def options(self) -> dict[str, Any]:
        return {
            "lease_ms": 2000 if self.lease else None,
            "batch_size": self.batch,
            "handler_fn_mode": "advanced" if self.advanced else "default",
            "job_timeout_ms": TIMEOUT_MS if self.timeout else None,
            "max_running": 1 if self.cap else None,
            "rate_limit": RateLimit(50, 1000) if self.rate else None,
            "fair": self.fair,
            "keepalive_timeout_ms": 3_000,
        }

    def process_args(self) -> list[str]:
        """The same options for `long_job_process`."""
        args = ["--batch-size", str(self.batch), "--retries", str(RETRIES)]
        args += ["--lease-ms", "2000"] if self.lease else []
        args += ["--advanced"] if self.advanced else []
        args += ["--job-timeout-ms", str(TIMEOUT_MS)] if self.timeout else []
        args += ["--max-running", "1"] if self.cap else []
        args += ["--rate-per-s", "50"] if self.rate else []
        args += ["--fair"] if self.fair else []
        return args


COMBINATIONS = [
    Combination(),
    Combination(batch=5, advanced=True, timeout=True, cap=True),
    Combination(advanced=True, timeout=True),
    Combination(batch=5, timeout=True, cap=True),
    Combination(batch=5, advanced=True),
    Combination(timeout=True, cap=True),
    Combination(advanced=True, cap=True),
    Combination(lease=True, timeout=True),
    Combination(lease=True, batch=5),
    Combination(lease=True, batch=5, timeout=True),
    Combination(advanced=True, timeout=True, cap=True, rate=True),
    Combination(advanced=True, timeout=True, fair=True),
    Combination(lease=True, rate=True, fair=True),
    Combination(timeout=True, cap=True, fair=True),
    Combination(advanced=True, cap=True, rate=True, fair=True),
]
ALL = [pytest.param(c, id=c.id) for c in COMBINATIONS]
# The events that need a process of their own or a proxy: a sample still meeting each value.
SAMPLE = [
    pytest.param(c, id=c.id)
    for c in (
        COMBINATIONS[0],
        COMBINATIONS[1],
        COMBINATIONS[3],
        COMBINATIONS[7],
        COMBINATIONS[9],
        COMBINATIONS[10],
        COMBINATIONS[12],
        COMBINATIONS[13],
    )
]


CUT_REACH_S = 0.2
"""How long after the connections drop a worker may still start jobs it claimed before:
the rest of a batch of 5 jobs of 10 ms, with room for a loaded machine."""


@dataclasses.dataclass
class Run:
    job_id: uuid.UUID
    attempt: int
    started: float
    ended: float | None = None
    snoozed: bool = False


class Ledger:
    """Every handler run in this process, and the checks of the promises above."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runs: list[Run] = []
        self.running = 0
        self.most_running = 0
        self.cuts: list[tuple[float, float]] = []
        """When the database dropped every connection (from before the drop began until it
        was done): a run in flight then lost its row lock and its running slot with its
        connection, and may run again, or another job start, before it ends (the
        at-least-once contract of docs/operations.md), so its overlaps are allowed."""

    @contextlib.contextmanager
    def cut(self) -> Iterator[None]:
        """The database drops every connection inside this block."""
        began = time.monotonic()
        try:
            yield
        finally:
            with self.lock:
                self.cuts.append((began, time.monotonic()))

    def in_flight_at_a_cut(self, run: Run) -> bool:
        """The run was going on during a cut, or began soon after it on rows claimed before
        it (the rest of a batch, a claim made in the last commit's round trip), whose locks
        and slot went with the connection the worker does not know yet is gone."""
        return any(
            run.started <= done + CUT_REACH_S and (run.ended is None or run.ended >= began)
            for began, done in self.cuts
        )

    @contextlib.contextmanager
    def run(self, job_id: Any, attempt: int) -> Any:
        run = Run(as_uuid(job_id), attempt, time.monotonic())
        with self.lock:
            self.runs.append(run)
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        try:
            yield run
        finally:
            with self.lock:
                run.ended = time.monotonic()
                self.running -= 1

    def of(self, job_id: Any, snoozed: bool = True) -> list[Run]:
        """The job's runs, those that snoozed too unless `snoozed` is false."""
        with self.lock:
            return [
                run
                for run in self.runs
                if run.job_id == as_uuid(job_id) and (snoozed or not run.snoozed)
            ]

    def check(
        self,
        backend: Backend,
        combination: Combination,
        ids: list[Any],
        events: Events,
        crashes: int = 0,
    ) -> None:
        """The promises, on the database's state and this ledger; `crashes`: how often a
        process died or the database dropped its connections, each of which may have
        rolled back a run (so a job may have run that many times more)."""
        waiting = {as_uuid(i): a for i, a in backend.query(_ids(backend, backend.job_table))}
        archived = {
            as_uuid(i): (status, attempts)
            for i, status, attempts in backend.query(
                f"SELECT job_id, status, attempts FROM {backend.archived_job_table}"
            )
        }
        timed_out = {(as_uuid(e["job_id"]), e["attempt"]) for e in events.named("job_timed_out")}
        for job_id in map(as_uuid, ids):
            assert (job_id in waiting) != (job_id in archived), f"{job_id} lost or doubled"
            runs = self.of(job_id, snoozed=False)
            allowed = RETRIES + 1 + crashes
            assert len(runs) <= allowed, f"{job_id} ran {len(runs)} times"
            if job_id in archived:
                status, attempts = archived[job_id]
                if not crashes:
                    assert attempts == len(runs), f"{job_id}: {attempts} attempts, runs {runs}"
                assert all(run.attempt <= attempts for run in runs), f"{job_id} ran on"
                if status == "success":
                    success_runs = [r for r in runs if r.attempt == attempts]
                    assert len(success_runs) <= 1 + crashes, f"{job_id} ran after succeeding"
            for earlier, later in itertools.pairwise(runs):
                overlapping = earlier.ended is None or earlier.ended > later.started
                stoppable = combination.advanced and not combination.lease
                if self.in_flight_at_a_cut(earlier):
                    continue
                if overlapping and (stoppable or (job_id, earlier.attempt) not in timed_out):
                    raise AssertionError(f"{job_id}: two runs at once: {earlier} and {later}")
        if combination.cap and not self.cuts:
            assert self.most_running <= 1, f"{self.most_running} ran at once with max_running=1"
        if combination.cap:
            # a run in flight when the connections dropped gave its slot back with them
            kept = [run for run in self.runs if not self.in_flight_at_a_cut(run)]
            for a, b in itertools.combinations(kept, 2):
                a_end = math.inf if a.ended is None else a.ended
                b_end = math.inf if b.ended is None else b.ended
                assert a_end <= b.started or b_end <= a.started, (
                    f"two ran at once with max_running=1: {a} and {b}"
                )


def _ids(backend: Backend, table: str) -> str:
    return f"SELECT job_id, attempts FROM {table}"


def handler_for(combination: Combination, ledger: Ledger, release: threading.Event) -> Any:
    """ok: returns; boom: raises; slow: its first attempt outlives the timeout; hang:
    blocks until `release`; nap: snoozes its first run; drop: cancels itself."""

    def handle(job_id: Any, job_type: str, attempt: int) -> None:
        first = not ledger.of(job_id)
        with ledger.run(job_id, attempt) as run:
            if job_type == "boom":
                raise RuntimeError("boom")
            if job_type == "nap" and first:
                run.snoozed = True
                raise Snooze(0)
            if job_type == "drop":
                raise Cancel("dropped")
            if job_type == "slow" and attempt == 1:
                time.sleep(0.8)
            elif job_type == "hang":
                release.wait(30)
            else:
                time.sleep(0.01)

    if combination.advanced:
        return lambda job: handle(job.job_id, job.job_type, job.attempts)

    def default(job_type: str, payload: Any) -> None:
        job = _current.job
        handle(job.job_id, job_type, job.attempts)

    return default


class _Current(threading.local):
    job: Any = None


_current = _Current()


class _Observing(Observer):
    """A default-mode handler learns its job (id, attempt) from this observer."""

    def job_started(self, job: Any) -> None:
        _current.job = job


def enqueue_jobs(backend: Backend, *job_types: str) -> list[Any]:
    """One job of each type, its payload its type, due in that order; their ids."""
    with contextlib.closing(backend.connect()) as conn:
        ids = [enqueue(conn, job_type, job_type, group_key=job_type) for job_type in job_types]
        conn.commit()
    return ids


def enqueue_graph(backend: Backend) -> tuple[list[Any], list[Any]]:
    """The jobs of `enqueue_jobs(..., "ok", "ok", "ok", "ok", "boom", "slow", "nap", "drop")`,
    in a workflow with three more: "child" after the first two successes, "orphan" after
    the failure (cancelled), "callback" after the slow one and the cancelled one, whatever
    they end as (`when="complete"`). The ids of the eight, and of the three."""
    wf = Workflow("invariants")
    kinds = ("ok", "ok", "ok", "ok", "boom", "slow", "nap", "drop")
    jobs = [wf.add(kind, kind, group_key=kind) for kind in kinds]
    waiting = [
        wf.add("child", "child", group_key="child", after=jobs[:2]),
        wf.add("orphan", "orphan", group_key="orphan", after=[jobs[4]]),
        wf.add("callback", "callback", group_key="callback", after=jobs[5:8:2], when="complete"),
    ]
    with contextlib.closing(backend.connect()) as conn:
        wf.enqueue(conn)
        conn.commit()
    return [job.job_id for job in jobs], [job.job_id for job in waiting]


def worker_for(
    source: Any, combination: Combination, handler: Any, events: Events, **more: Any
) -> Any:
    return create_queue_worker(
        source,
        handler,
        worker_threads=3,
        polling_interval_ms=20,
        fallback_polling_interval_ms=100,
        retry_strategy_fn=lambda job, exc: RetrySpec(RETRIES),
        job_timeouts={"hang": None},
        await_termination_timeout_ms=300,
        observers=[_Observing()],
        log=events,
        **combination.options(),
        **more,
    )


@pytest.mark.parametrize("combination", ALL)
def test_succeed_raise_time_out_and_be_abandoned(
    backend: Backend, pool: Any, combination: Combination
) -> None:
    """Four jobs succeed, one raises every time, one outlives its timeout once, one snoozes
    once, one cancels itself, and three wait on others (`depends_on`: on two successes, on
    the failure, and `when="complete"` on the cancelled and the slow one); then one blocks
    until `stop()` abandons it."""
    ledger, release, events = Ledger(), threading.Event(), Events()
    worker = worker_for(pool, combination, handler_for(combination, ledger, release), events)
    # The graph is there before the worker starts, so its jobs' workers release their
    # dependents (the primary path), not the sweep a worker's beat starts once it
    # learns that jobs wait on others.
    ids, waiting = enqueue_graph(backend)
    worker.start()
    try:
        wait_until(lambda: len(backend.archived()) == 11, timeout=20, description="all settled")
        [hang] = enqueue_jobs(backend, "hang")
        wait_until(lambda: ledger.of(hang), timeout=10, description="hang started")
        assert worker.stop() is False, "the hanging job is abandoned"
    finally:
        release.set()
        worker.stop()
    wait_until(lambda: ledger.running == 0, timeout=10, description="handlers returned")
    time.sleep(0.2)
    ledger.check(backend, combination, [*ids, *waiting, hang], events)
    child, orphan, callback = waiting
    timed_out = {(as_uuid(e["job_id"]), e["attempt"]) for e in events.named("job_timed_out")}
    stoppable = combination.advanced and not combination.lease

    def ended(parents: list[Any]) -> float:
        """When the last of the parents' runs ended; a sync handler that timed out is
        documented to run on beside its retry, so its end does not count."""
        return max(
            run.ended or math.inf
            for parent in parents
            for run in ledger.of(parent)
            if stoppable or (as_uuid(parent), run.attempt) not in timed_out
        )

    assert min(run.started for run in ledger.of(child)) >= ended(ids[:2]), (
        "a dependent started before its parents ended"
    )
    assert ledger.of(orphan) == []
    assert min(run.started for run in ledger.of(callback)) >= ended(ids[5:8:2])
    by_type = {job_type: (status, attempts) for job_type, status, attempts in backend.archived()}
    assert by_type["child"] == ("success", 1)
    assert by_type["orphan"] == ("cancelled", 0)
    assert by_type["callback"] == ("success", 1)
    assert by_type["ok"] == ("success", 1)
    assert by_type["boom"] == ("failure", RETRIES + 1)
    assert by_type["slow"] == ("success", 2 if combination.timeout else 1)
    assert by_type["nap"] == ("success", 1)
    assert by_type["drop"] == ("cancelled", 1)
    [(attempts, error)] = backend.query(f"SELECT attempts, last_error FROM {backend.job_table}")
    assert attempts == 0 and error.startswith("JobAbandoned: ")


@pytest.mark.parametrize("combination", SAMPLE)
def test_a_killed_process(backend: Backend, tmp_path: Path, combination: Combination) -> None:
    """The worker process is SIGKILLed while a job runs (the first: a batch's others have
    not started); another worker then finishes the queue. In lease mode every run that started
    counts an attempt, the dead one too, and no other; in the held mode the dead run's
    transaction is rolled back, so only the finishing worker's runs count."""
    payloads = ["die", "ok1", "ok2", "ok3"]
    ids = enqueue_jobs(backend, *payloads)
    events_file = tmp_path / "events"
    process = long_job_process.start(
        backend, events_file, "kill", "--only", "die", *combination.process_args()
    )
    try:
        assert process.wait(30) == -signal.SIGKILL
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        process.communicate(timeout=30)
    ledger, events = Ledger(), Events()
    source = backend.pool(4)
    worker = worker_for(
        source, combination, handler_for(combination, ledger, threading.Event()), events
    )
    try:
        with worker:
            wait_until(lambda: len(backend.archived()) == 4, timeout=30, description="done")
    finally:
        source.close()
    ledger.check(backend, combination, ids, events, crashes=1)
    statuses = {status for _, status, _ in backend.archived()}
    assert statuses == {"success"}, backend.archived()
    dead_runs = collections.Counter(
        line.removeprefix("start ") for line in long_job_process.starts(events_file)
    )
    attempts = {
        as_uuid(job_id): n
        for job_id, n in backend.query(f"SELECT job_id, attempts FROM {backend.archived_job_table}")
    }
    for job_id, payload in zip(ids, payloads, strict=True):
        runs = len(ledger.of(job_id))
        # held: archived by the dead process (one run), or run again here
        expected = runs + dead_runs[payload] if combination.lease else runs or 1
        assert attempts[as_uuid(job_id)] == expected, (payload, runs, dead_runs)


@pytest.mark.parametrize("combination", SAMPLE)
def test_the_database_drops_every_connection(backend: Backend, combination: Combination) -> None:
    """Twice while twenty jobs run, as a server restart would: every job still ends once
    in the archive, as a success."""
    upstream = upstream_of(backend)
    ledger, events = Ledger(), Events()
    ids = enqueue_jobs(backend, *["ok"] * 20)
    with TCPProxy(upstream) as proxy:
        if backend.name == "mysql":
            source: Any = MySQLDataSource(
                f"mysql://root@127.0.0.1:{proxy.port}/test", max_connections=6
            )
        else:
            from psycopg_pool import ConnectionPool

            url = make_conninfo(backend.url, host="127.0.0.1", port=str(proxy.port))
            source = ConnectionPool(url, min_size=1, max_size=6, timeout=5, open=True)
        worker = worker_for(
            source, combination, handler_for(combination, ledger, threading.Event()), events
        )
        try:
            with worker:
                for _ in range(2):
                    wait_until(lambda: ledger.runs, timeout=10, description="jobs running")
                    time.sleep(0.05)
                    with ledger.cut():
                        proxy.drop()
                wait_until(
                    lambda: len(backend.archived()) == 20, timeout=60, description="all done"
                )
        finally:
            source.close()
    ledger.check(backend, combination, ids, events, crashes=2)
    assert {status for _, status, _ in backend.archived()} == {"success"}


@pytest.mark.parametrize(
    "options, named",
    [
        pytest.param({"handler_fn_mode": "advanced"}, "handler_fn_mode", id="advanced"),
        pytest.param({"max_running": 1}, "max_running", id="cap"),
    ],
)
def test_lease_mode_refuses_what_it_cannot_honour(
    backend: Backend, pool: Any, options: dict[str, Any], named: str
) -> None:
    with pytest.raises(ConfigurationError, match=f"lease_ms and {named}"):
        create_queue_worker(pool, lambda job: None, lease_ms=2000, **options)

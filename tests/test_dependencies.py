"""Jobs that wait for other jobs (`depends_on`, `Workflow`): blocked until their parents
end, released or cancelled by the last parent's worker (in its transaction, or for a
success right after it commits), on both databases and in both worker modes."""

from __future__ import annotations

import functools
import json
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from proletarian_di import (
    ConfigurationError,
    Workflow,
    admin,
    create_queue_worker,
    current_job,
    enqueue,
    enqueue_many,
    process_next_job,
    worker_running,
)
from proletarian_di._engine import steps
from proletarian_di._store import dependencies
from proletarian_di._store.dependencies import SWEEP_EVERY_S
from proletarian_di._store.dialects import dialect_for
from proletarian_di._store.dialects.mysql import MySQLDialect
from proletarian_di._store.dialects.postgresql import PostgresDialect
from proletarian_di.testing import run_due_jobs

from backends import (
    Backend,
    CountedConnections,
    Events,
    StatementLog,
    archive_by_id,
    as_uuid,
    connection,
    enqueue_committed,
    logged_pool,
    wait_until,
)

MODES = [pytest.param({}, id="held"), pytest.param({"lease_ms": 10_000}, id="lease")]


class Recorder:
    """A handler that records each start and end (by the test's clock), fails the job types
    in `fail` and returns its payload."""

    def __init__(self, fail: tuple[str, ...] = (), pause: float = 0.01) -> None:
        self.lock = threading.Lock()
        self.pause = pause
        self.starts: dict[str, list[float]] = {}
        self.ends: dict[str, float] = {}
        self.fail = fail

    def __call__(self, job_type: str, payload: Any) -> Any:
        name = payload["name"]
        with self.lock:
            self.starts.setdefault(name, []).append(time.monotonic())
        time.sleep(self.pause)
        with self.lock:
            self.ends[name] = time.monotonic()
        if job_type in self.fail:
            raise RuntimeError(f"{name} fails")
        return {"from": name}

    def ran(self) -> set[str]:
        with self.lock:
            return set(self.starts)


def run_until(pool: Any, handler: Any, mode: dict[str, Any], done: Any, **options: Any) -> Events:
    events = Events()
    worker = create_queue_worker(
        pool, handler, polling_interval_ms=50, worker_threads=4, log=events, **mode, **options
    )
    with worker_running(worker):
        wait_until(done, timeout=20)
    return events


def state(backend: Backend, job_id: Any) -> str:
    with connection(backend) as conn:
        info = admin.get_job(conn, job_id)
    assert info is not None
    return info.state


@pytest.mark.parametrize("mode", MODES)
def test_a_diamond_runs_each_job_once_after_its_parents(backend: Backend, pool: Any, mode) -> None:
    wf = Workflow("diamond")
    a = wf.add("step", {"name": "a"})
    b = wf.add("step", {"name": "b"}, after=[a])
    c = wf.add("step", {"name": "c"}, after=[a])
    d = wf.add("step", {"name": "d"}, after=[b, c])
    with connection(backend) as conn:
        workflow_id = wf.enqueue(conn)
        conn.commit()
    assert [state(backend, j.job_id) for j in (a, b, c, d)] == ["queued", *["blocked"] * 3]
    recorder = Recorder()
    run_until(pool, recorder, mode, lambda: len(archive_by_id(backend)) == 4)
    assert {name: len(times) for name, times in recorder.starts.items()} == dict.fromkeys("abcd", 1)
    assert recorder.starts["b"][0] >= recorder.ends["a"]
    assert recorder.starts["c"][0] >= recorder.ends["a"]
    assert recorder.starts["d"][0] >= max(recorder.ends["b"], recorder.ends["c"])
    with connection(backend) as conn:
        info = admin.get_workflow(conn, workflow_id)
        d_info = admin.get_job(conn, d.job_id)
    assert info is not None and info.name == "diamond" and info.finished
    assert info.states == {"succeeded": 4}
    assert [j.job_id for j in info.jobs] == [a.job_id, b.job_id, c.job_id, d.job_id]
    assert d_info is not None and d_info.workflow_id == workflow_id
    assert set(d_info.parents) == {b.job_id, c.job_id} and d_info.children == ()
    assert backend.query(f"SELECT COUNT(*) FROM {backend.job_table}_blocked") == [(0,)]


@pytest.mark.parametrize("mode", MODES)
def test_a_failure_cancels_the_dependents_down_the_graph(backend: Backend, pool: Any, mode) -> None:
    wf = Workflow("chain")
    a = wf.add("breaks", {"name": "a"})
    b = wf.add("step", {"name": "b"}, after=[a])
    c = wf.add("step", {"name": "c"}, after=[b])
    after_all = wf.add("step", {"name": "after_all"}, after=[a, c], when="complete")
    with connection(backend) as conn:
        wf.enqueue(conn)
        conn.commit()
    recorder = Recorder(fail=("breaks",))
    run_until(pool, recorder, mode, lambda: len(archive_by_id(backend)) == 4)
    assert recorder.ran() == {"a", "after_all"}
    with connection(backend) as conn:
        infos = {j: admin.get_job(conn, j.job_id) for j in (a, b, c, after_all)}
    assert [infos[j].state for j in (a, b, c, after_all)] == [
        "failed",
        "cancelled",
        "cancelled",
        "succeeded",
    ]
    assert infos[b].attempts == 0 and infos[c].attempts == 0
    assert f"job {a.job_id}, which this job depends on, failed" in infos[b].error
    assert f"job {b.job_id}, which this job depends on, was cancelled" in infos[c].error


def test_a_dependent_reads_its_parents_results(backend: Backend, pool: Any) -> None:
    first, second = enqueue_committed(backend, ("step", {"name": "x"}), ("quiet", None))
    [last] = enqueue_committed(backend, ("gather", None), depends_on=[first, second])
    seen: dict[str, Any] = {}

    def handler(job_type: str, payload: Any) -> Any:
        if job_type == "gather":
            seen.update(current_job().parent_results())
            return None
        return None if job_type == "quiet" else {"from": payload["name"]}

    run_until(pool, handler, {}, lambda: len(archive_by_id(backend)) == 3)
    assert seen == {first: {"from": "x"}, second: None}
    assert state(backend, last) == "succeeded"


def test_process_next_job_releases_a_dependent_in_the_parents_transaction(
    backend: Backend,
) -> None:
    with connection(backend) as conn:
        parent = enqueue(conn, "step", {"name": "p"})
        child = enqueue(conn, "step", {"name": "c"}, depends_on=[parent])
        conn.commit()
    recorder = Recorder()
    assert process_next_job(backend.connect, recorder) is True
    assert state(backend, child) == "queued"
    assert process_next_job(backend.connect, recorder) is True
    assert recorder.ran() == {"p", "c"} and state(backend, child) == "succeeded"


def test_a_workflow_rolled_back_leaves_nothing(backend: Backend) -> None:
    wf = Workflow("gone")
    a = wf.add("step", {"name": "a"})
    wf.add("step", {"name": "b"}, after=[a])
    with connection(backend) as conn:
        wf.enqueue(conn)
        conn.rollback()
    for table in ("", "_dependencies", "_blocked", "_workflows"):
        assert backend.query(f"SELECT COUNT(*) FROM {backend.job_table}{table}") == [(0,)]


def test_depending_on_jobs_that_already_ended(backend: Backend) -> None:
    good, bad = enqueue_committed(backend, ("step", {"name": "good"}), ("breaks", {"name": "b"}))
    recorder = Recorder(fail=("breaks",))
    while process_next_job(backend.connect, recorder):
        pass
    with connection(backend) as conn:
        runs = enqueue(conn, "step", {"name": "runs"}, depends_on=[good])
        cancelled = enqueue(conn, "step", {"name": "never"}, depends_on=[good, str(bad)])
        conn.commit()
    assert state(backend, runs) == "queued"
    assert state(backend, cancelled) == "cancelled"


def test_bad_dependencies_are_refused_and_write_nothing(backend: Backend) -> None:
    [parent] = enqueue_committed(backend, ("step", {"name": "p"}))
    cases = [
        ({"depends_on": [uuid.uuid4()]}, "which is neither waiting nor archived"),
        ({"depends_on": "not-a-list"}, "depends_on must be a list of job ids"),
        ({"depends_on": ["nope"]}, "'nope', which is not a job id"),
        ({"depends_on": [parent], "unique_key": "k"}, "cannot be given with unique_key"),
        (
            {"depends_on": [parent], "process_in": timedelta(seconds=5)},
            "cannot be given with process_in",
        ),
    ]
    for options, message in cases:
        with connection(backend) as conn:
            with pytest.raises(ConfigurationError, match=message):
                enqueue(conn, "step", None, **options)
            conn.rollback()
    assert backend.query(f"SELECT COUNT(*) FROM {backend.job_table}") == [(1,)]
    wf = Workflow("w")
    with pytest.raises(ConfigurationError, match="after= takes jobs this workflow"):
        wf.add("x", after=[Workflow("other").add("y")])
    with pytest.raises(ConfigurationError, match="when must be 'success' or 'complete'"):
        wf.add("x", after=[wf.add("y")], when="always")
    with pytest.raises(ConfigurationError, match="is for a job added with after="):
        wf.add("x", when="complete")


def test_many_jobs_can_wait_on_the_same_parents(backend: Backend) -> None:
    [parent] = enqueue_committed(backend, ("step", {"name": "p"}))
    with connection(backend) as conn:
        children = enqueue_many(
            conn, [("step", {"name": f"c{i}"}) for i in range(3)], depends_on=[parent]
        )
        conn.commit()
    with connection(backend) as conn:
        explained = admin.explain_job(conn, children[0])
    assert explained.state == "blocked"
    assert explained.reasons[0] == (
        f"waiting on dependencies: runs after 1 of its 1 parent succeed ({parent})"
    )
    recorder = Recorder()
    while process_next_job(backend.connect, recorder):
        pass
    assert recorder.ran() == {"p", "c0", "c1", "c2"}


def test_a_parent_cancelled_by_an_operator_is_settled_by_a_workers_sweep(
    backend: Backend, pool: Any
) -> None:
    [parent] = enqueue_committed(backend, ("step", {"name": "p"}), queue="elsewhere")
    [child] = enqueue_committed(backend, ("step", {"name": "c"}), depends_on=[parent])
    with connection(backend) as conn:
        assert admin.cancel_jobs(conn, [parent]) == 1
        conn.commit()
    recorder = Recorder()
    started = time.monotonic()
    run_until(pool, recorder, {}, lambda: state(backend, child) == "cancelled")
    assert time.monotonic() - started < SWEEP_EVERY_S * 5
    with connection(backend) as conn:
        info = admin.get_job(conn, child)
    assert info is not None and "was cancelled" in (info.error or "")
    assert recorder.ran() == set()


def test_purges_keep_the_jobs_of_an_unfinished_workflow(backend: Backend) -> None:
    wf = Workflow("kept")
    first = wf.add("step", {"name": "first"}, queue="one")
    second = wf.add("step", {"name": "second"}, queue="two")
    wf.add("step", {"name": "last"}, after=[first], queue="two")
    with connection(backend) as conn:
        workflow_id = wf.enqueue(conn)
        conn.commit()
    recorder = Recorder()
    assert process_next_job(backend.connect, recorder, queue="one") is True
    assert process_next_job(backend.connect, recorder, queue="two") is True
    old = {"older_than": timedelta(0), "now": datetime.now(timezone.utc) + timedelta(hours=1)}
    with connection(backend) as conn:
        assert admin.still_needed(conn, **old) == 2
        assert admin.purge_archive(conn, dry_run=True, **old) == 0
        assert admin.purge_archive(conn, **old) == 0
        pruned = list(admin.prune_archive(conn, keep_succeeded=timedelta(0)))
        conn.commit()
    assert sum(step.jobs for step in pruned) == 0
    assert set(archive_by_id(backend)) == {first.job_id, second.job_id}
    assert process_next_job(backend.connect, recorder, queue="two") is True
    assert recorder.ran() == {"first", "second", "last"}
    with connection(backend) as conn:
        assert admin.get_workflow(conn, workflow_id).finished
        assert admin.still_needed(conn, **old) == 0
        assert admin.purge_archive(conn, **old) == 3
        conn.commit()
    with connection(backend) as conn:
        assert admin.get_workflow(conn, workflow_id) is None
    for table in ("_dependencies", "_workflows"):
        assert backend.query(f"SELECT COUNT(*) FROM {backend.job_table}{table}") == [(0,)]


def test_jobs_show_and_the_dashboard_show_a_jobs_place_in_its_workflow(
    backend: Backend, pool: Any
) -> None:
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient
    from typer.testing import CliRunner

    from proletarian_di.cli import app
    from proletarian_di.contrib.dashboard import dashboard

    wf = Workflow("shown")
    a = wf.add("step", {"name": "a"})
    b = wf.add("step", {"name": "b"}, after=[a])
    with connection(backend) as conn:
        workflow_id = wf.enqueue(conn)
        conn.commit()
    shown = CliRunner().invoke(
        app, ["jobs", "show", str(b.job_id), "-d", backend.url], env={"COLUMNS": "200"}
    )
    assert shown.exit_code == 0, shown.output
    assert "state blocked" in " ".join(shown.stdout.split())
    assert f"workflow {workflow_id}" in " ".join(shown.stdout.split())
    assert f"waits on {a.job_id} (waiting)" in " ".join(shown.stdout.split())
    assert "due after 1 of its 1 parent succeed" in " ".join(shown.stdout.split())
    page = TestClient(dashboard(pool)).get(f"/jobs/{a.job_id}").text
    assert f'<dt>Waited on by</dt><dd class="graph"><a href="/jobs/{b.job_id}"' in page
    page = TestClient(dashboard(pool)).get(f"/jobs/{b.job_id}").text
    assert "waiting on dependencies: runs after 1 of its 1 parent succeed" in page
    with connection(backend) as conn:
        assert admin.cancel_jobs(conn, state="blocked") == 1
        conn.commit()
    assert state(backend, b.job_id) == "cancelled"


FAN_OUT = 1_000


class Statements:
    """Counts the statements every dialect sends (a spy: each still runs)."""

    METHODS = ("execute", "executemany", "fetchone", "fetchall", "execute_count")

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        for cls in (PostgresDialect, MySQLDialect):
            for name in self.METHODS:
                monkeypatch.setattr(cls, name, self._counted(getattr(cls, name)))

    def _counted(self, method: Any) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return method(*args, **kwargs)

        return counted


def fan_out(backend: Backend, grandchildren: bool = False) -> tuple[Any, list[Any], list[Any]]:
    """A parent with `FAN_OUT` dependents (each with a dependent of its own, if asked)."""
    [parent] = enqueue_committed(backend, ("step", {"name": "p"}))
    with connection(backend) as conn:
        children = enqueue_many(
            conn, [("step", {"name": f"c{i}"}) for i in range(FAN_OUT)], depends_on=[parent]
        )
        below = [
            enqueue(conn, "step", {"name": f"g{i}"}, depends_on=[child])
            for i, child in enumerate(children if grandchildren else [])
        ]
        conn.commit()
    return parent, children, below


def due_and_blocked(backend: Backend) -> tuple[int, int]:
    """How many waiting jobs are due by now, and how many are blocked (by the tables)."""
    [(due,)] = backend.query(
        f"SELECT COUNT(*) FROM {backend.job_table} WHERE process_at < '9999-01-01'"
    )
    [(blocked,)] = backend.query(f"SELECT COUNT(*) FROM {backend.job_table}_blocked")
    return due, blocked


def test_a_parent_releases_a_thousand_dependents_in_a_few_statements(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, children, _ = fan_out(backend)
    statements = Statements(monkeypatch)
    recorder = Recorder(pause=0)
    assert process_next_job(backend.connect, recorder) is True
    assert statements.count < 40, statements.count
    assert due_and_blocked(backend) == (FAN_OUT, 0)
    assert run_due_jobs(backend.connect, recorder, max_jobs=2 * FAN_OUT) == FAN_OUT
    assert {name: len(times) for name, times in recorder.starts.items()} == {
        "p": 1,
        **{f"c{i}": 1 for i in range(FAN_OUT)},
    }
    assert min(recorder.starts[f"c{i}"][0] for i in range(FAN_OUT)) >= recorder.ends["p"]
    archived = archive_by_id(backend)
    assert all(archived[child] == ("success", 1) for child in children)


def test_a_failed_parent_cancels_its_whole_graph_in_its_own_transaction(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent, children, below = fan_out(backend, grandchildren=True)
    statements = Statements(monkeypatch)
    recorder = Recorder(fail=("step",))
    assert process_next_job(backend.connect, recorder) is False
    assert statements.count < 60, statements.count
    assert recorder.ran() == {"p"}
    archived = archive_by_id(backend)
    assert [archived[job] for job in [*children, *below]] == [("cancelled", 0)] * (2 * FAN_OUT)
    assert backend.query(f"SELECT COUNT(*) FROM {backend.job_table}") == [(0,)]
    assert backend.query(f"SELECT COUNT(*) FROM {backend.job_table}_blocked") == [(0,)]
    with connection(backend) as conn:
        child, grandchild = admin.get_job(conn, children[7]), admin.get_job(conn, below[7])
    assert child is not None and grandchild is not None
    assert child.error == f"Cancel: job {parent}, which this job depends on, failed"
    assert grandchild.error == (
        f"Cancel: job {children[7]}, which this job depends on, was cancelled"
    )


@pytest.mark.parametrize("mode", MODES)
def test_a_worker_without_its_sweep_releases_every_dependent_once_after_its_parent(
    backend: Backend, pool: Any, mode: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dependencies, "sweep", lambda *args, **kwargs: (0, None))
    parent, children, _ = fan_out(backend)
    recorder = Recorder(pause=0)
    run_until(pool, recorder, mode, lambda: len(archive_by_id(backend)) == FAN_OUT + 1)
    archived = archive_by_id(backend)
    assert [archived[job] for job in [parent, *children]] == [("success", 1)] * (FAN_OUT + 1)
    assert {name: len(times) for name, times in recorder.starts.items()} == {
        "p": 1,
        **{f"c{i}": 1 for i in range(FAN_OUT)},
    }
    assert min(recorder.starts[f"c{i}"][0] for i in range(FAN_OUT)) >= recorder.ends["p"]


@pytest.mark.parametrize("mode", MODES)
def test_plain_jobs_beside_a_thousand_blocked_ones_take_the_plain_path(
    backend: Backend, pool: Any, mode: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thousand jobs wait on a parent due later: the plain jobs drained meanwhile write no
    end, and the one parent with a dependent still releases it, right after its commit (the
    sweep is off)."""
    monkeypatch.setattr(dependencies, "sweep", lambda *args, **kwargs: (0, None))
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    [waited] = enqueue_committed(backend, ("later", {"name": "later"}), process_at=later)
    with connection(backend) as conn:
        enqueue_many(conn, [("step", {"name": f"b{i}"}) for i in range(1000)], depends_on=[waited])
        conn.commit()
    [parent] = enqueue_committed(backend, ("step", {"name": "p"}))
    with connection(backend) as conn:
        child = enqueue(conn, "step", {"name": "c"}, depends_on=[parent])
        conn.commit()
    plain = enqueue_committed(backend, *[("step", {"name": f"j{i}"}) for i in range(30)])
    ends: list[uuid.UUID] = []
    real_ended = dependencies.ended

    def ended(conn: Any, dialect: Any, parents: Any, *args: Any) -> Any:
        ends.extend(as_uuid(raw) for raw in parents)
        return real_ended(conn, dialect, parents, *args)

    monkeypatch.setattr(dependencies, "ended", ended)
    recorder = Recorder(pause=0)
    plain_handler = lambda job_type, payload: recorder(job_type, payload) and None  # noqa: E731
    run_until(pool, plain_handler, mode, lambda: len(archive_by_id(backend)) == len(plain) + 2)
    archived = archive_by_id(backend)
    assert [archived[job] for job in [parent, child, *plain]] == [("success", 1)] * 32
    assert ends == [parent]
    assert recorder.starts["c"][0] >= recorder.ends["p"]
    assert due_and_blocked(backend) == (1, 1000)


@pytest.mark.parametrize("mode", MODES)
def test_postgres_an_idle_worker_is_told_of_the_first_blocked_job(
    pg: Backend, mode: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Idle since before any job was blocked, the worker knows of none; the notification
    that a job was blocked, not its next beat (nor the sweep, off here), makes the parent's
    worker release its dependent."""
    monkeypatch.setattr(dependencies, "sweep", lambda *args, **kwargs: (0, None))
    recorder = Recorder(pause=0)
    source = pg.pool(4)
    worker = create_queue_worker(
        source, recorder, polling_interval_ms=50, log=lambda e, d: None, **mode
    )
    try:
        with worker:
            assert worker._listener is not None
            wait_until(worker._listener.listening.is_set, description="the listener")
            assert worker._runner.graph_active is False
            wf = Workflow("after an idle spell")
            first = wf.add("step", {"name": "first"})
            wf.add("step", {"name": "then"}, after=[first])
            with connection(pg) as conn:
                wf.enqueue(conn)
                conn.commit()
            wait_until(lambda: "then" in recorder.ran(), timeout=5, description="the dependent")
        assert recorder.starts["then"][0] - recorder.ends["first"] < 1.0
    finally:
        source.close()  # type: ignore[attr-defined]


def big_workflow(size: int) -> tuple[Workflow, dict[Any, tuple[Any, ...]]]:
    """A workflow of `size` jobs in layers of ten, each after one to three jobs of the layer
    before, in two queues with two priorities, some waiting for any end: the jobs and their
    parents."""
    wf = Workflow(f"big-{size}")
    added: list[Any] = []
    parents: dict[Any, tuple[Any, ...]] = {}
    for n in range(size):
        layer = n // 10
        after = (
            tuple(added[(layer - 1) * 10 + (n + k) % 10] for k in range(n % 3 + 1)) if layer else ()
        )
        options: dict[str, Any] = {
            "queue": "big" if n % 2 else "default",
            "priority": int(n % 5 == 0),
        }
        when = "complete" if after and n % 7 == 0 else "success"
        job = wf.add("step", {"n": n}, after=after, when=when, **options)
        added.append(job)
        parents[job] = after
    return wf, parents


def test_a_thousand_job_workflow_is_enqueued_and_read_back_whole(backend: Backend) -> None:
    wf, parents = big_workflow(1000)
    with connection(backend) as conn:
        workflow_id = wf.enqueue(conn)
        conn.commit()
    job_of = {j.job_id: j for j in wf.jobs}
    deps = backend.query(
        f"SELECT parent_id, job_id, wait_for, parent_status FROM {backend.job_table}_dependencies"
    )
    assert {(as_uuid(p), as_uuid(c), w, s) for p, c, w, s in deps} == {
        (parent.job_id, job.job_id, job.when, None) for job in wf.jobs for parent in parents[job]
    }
    blocked = backend.query(f"SELECT job_id, wait_for FROM {backend.job_table}_blocked")
    assert {(as_uuid(j), w) for j, w in blocked} == {(j.job_id, j.when) for j in wf.jobs if j.after}
    members = backend.query(f"SELECT job_id, workflow_id, name FROM {backend.job_table}_workflows")
    assert sorted((as_uuid(j), as_uuid(w), n) for j, w, n in members) == sorted(
        (j.job_id, workflow_id, "big-1000") for j in wf.jobs
    )
    rows = backend.query(f"SELECT job_id, queue, priority, payload FROM {backend.job_table}")
    assert {as_uuid(j): (q, p, json.loads(t)) for j, q, p, t in rows} == {
        j.job_id: (j.options["queue"], j.options["priority"], j.payload) for j in wf.jobs
    }
    with connection(backend) as conn:
        info = admin.get_workflow(conn, workflow_id)
    assert info is not None and info.name == "big-1000" and not info.finished
    assert [j.job_id for j in info.jobs] == [j.job_id for j in wf.jobs]
    counted = backend.query(
        f"SELECT SUM(CASE WHEN process_at > '9999-12-31' THEN 1 ELSE 0 END), COUNT(*) "
        f"FROM {backend.job_table}"
    )
    assert info.states == {"queued": 10, "blocked": 990}
    assert (int(counted[0][0]), int(counted[0][1])) == (990, 1000)
    children: dict[Any, set[Any]] = {j.job_id: set() for j in wf.jobs}
    for job in wf.jobs:
        for parent in parents[job]:
            children[parent.job_id].add(job.job_id)
    for shown in info.jobs:
        job = job_of[shown.job_id]
        assert shown.workflow_id == workflow_id
        assert set(shown.parents) == {p.job_id for p in parents[job]}
        assert set(shown.children) == children[job.job_id]
        assert shown.state == ("blocked" if job.after else "queued")
        assert shown.wait_for == (job.when if job.after else None)
        assert dict(shown.parent_states) == dict.fromkeys(shown.parents, "waiting")
        assert shown.payload == job.payload and shown.queue == job.options["queue"]


def statements(backend: Backend, action: Any) -> int:
    """How many statements the server ran for `action(conn)`, rolled back after."""
    if backend.name == "mysql":
        counted = CountedConnections(backend)
        conn = counted()
        conn.autocommit(False)
        try:
            before = len(counted.queries)
            action(conn)
            return len(counted.queries) - before
        finally:
            conn.rollback()
            conn.close()
    log = StatementLog()
    with logged_pool(backend.url, log) as pool, pool.connection() as conn:
        conn.commit()
        with log.lock:
            log.statements.clear()
            log.executed.clear()
        action(conn)
        with log.lock:
            ran = len(log.statements) + len(log.executed)
        conn.rollback()
    return ran


def test_enqueuing_and_reading_a_workflow_take_as_many_statements_whatever_its_size(
    backend: Backend,
) -> None:
    counts = {}
    for size in (100, 1000):
        wf, _ = big_workflow(size)
        enqueued = statements(backend, wf.enqueue)
        with connection(backend) as conn:
            workflow_id = wf.enqueue(conn)
            conn.commit()
        read = functools.partial(admin.get_workflow, workflow_id=workflow_id)
        counts[size] = (enqueued, statements(backend, read))
        with connection(backend) as conn:
            info = read(conn)
        assert info is not None and len(info.jobs) == size
    assert counts[100] == counts[1000], counts
    assert counts[1000][0] < 20 and counts[1000][1] < 20, counts


@pytest.mark.parametrize("mode", MODES)
def test_a_worker_that_dies_after_its_parents_commit_leaves_the_release_to_the_sweep(
    backend: Backend, pool: Any, mode: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker writes a success's ends right after its commit; one that dies in between
    (here: writing them fails) leaves the parent archived and its dependent blocked, told
    as a polling error, and the sweep, off until then, releases the dependent once."""
    [parent] = enqueue_committed(backend, ("step", {"name": "p"}))
    with connection(backend) as conn:
        child = enqueue(conn, "step", {"name": "c"}, depends_on=[parent])
        conn.commit()
    monkeypatch.setattr(dependencies, "sweep", lambda *args, **kwargs: (0, None))

    def dies(*args: Any) -> None:
        raise ConnectionError("the worker's process died here")

    monkeypatch.setattr(steps.Steps, "_write_ends", dies)
    recorder = Recorder(pause=0)
    returns_none = lambda job_type, payload: recorder(job_type, payload) and None  # noqa: E731
    events = run_until(pool, returns_none, mode, lambda: parent in archive_by_id(backend))
    assert [e for e in events.named("polling_error") if "ends of jobs" in str(e["reason"])]
    assert recorder.ran() == {"p"} and state(backend, child) == "blocked"
    monkeypatch.undo()
    with connection(backend) as conn:
        dialect = dialect_for(conn, backend.job_table, backend.archived_job_table)
        released = dependencies.sweep(conn, dialect, datetime.now(timezone.utc))[0]
        conn.commit()
    assert released == 1 and state(backend, child) == "queued"
    assert due_and_blocked(backend) == (1, 0)


def test_the_sweep_passes_over_rows_a_parents_worker_is_writing(backend: Backend) -> None:
    """A parent archived, whose worker holds its rows while writing its ends after the
    commit: the sweep does not wait for that transaction (nor deadlock with it), and
    settles the rest of what it finds."""
    [first, second] = enqueue_committed(backend, ("step", {"name": "a"}), ("step", {"name": "b"}))
    with connection(backend) as conn:
        held = enqueue(conn, "step", {"name": "held"}, depends_on=[first])
        free = enqueue(conn, "step", {"name": "free"}, depends_on=[second])
        conn.commit()
    with connection(backend) as conn:
        dialect = dialect_for(conn, backend.job_table, backend.archived_job_table)
        raw = [dialect.default_id_strategy.encode(job_id) for job_id in (first, second)]
        dialect.archive(conn, raw, "success", datetime.now(timezone.utc))
        conn.commit()
    with connection(backend) as writer, connection(backend) as sweeper:
        deps = f"{backend.job_table}_dependencies"
        dialect = dialect_for(writer, backend.job_table, backend.archived_job_table)
        encoded = dialect.default_id_strategy.encode(first)
        dialect.execute(
            writer, f"UPDATE {deps} SET parent_status = 'success' WHERE parent_id = %s", [encoded]
        )
        sweeping = dialect_for(sweeper, backend.job_table, backend.archived_job_table)
        if backend.name == "postgresql":
            sweeper.execute("SET lock_timeout = '5s'")
        else:
            sweeping.execute(sweeper, "SET SESSION innodb_lock_wait_timeout = 5")
        settled = dependencies.sweep(sweeper, sweeping, datetime.now(timezone.utc))[0]
        sweeper.commit()
        writer.rollback()
    assert settled == 1
    assert state(backend, free) == "queued" and state(backend, held) == "blocked"

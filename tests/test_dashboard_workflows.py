"""The dashboard's workflows on both databases: the list's counts by state and the
workflow page's jobs by level checked against the database (`admin.get_workflow`,
`admin.get_job`), its graph's boxes and lines checked against the jobs' states and the
dependency rows, a workflow too big for a graph shown as a table, the job page's link and
parents' states, and the list's pages bounded in the statements and rows they read, each
workflow on exactly one page; the workflow page's statements do not grow with its jobs."""

from __future__ import annotations

import re
import uuid
import warnings
from typing import Any

import pytest
import test_dashboard_bounds as bounds_tests
from test_admin_workflows import boom, diamond, ok

from proletarian_di import Workflow, admin, process_next_job
from proletarian_di.contrib.dashboard import _app, _graph, dashboard

from backends import Backend, as_uuid, connection

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")

counted = bounds_tests.counted
pages_from = bounds_tests.pages_from


def counts(page: str, workflow_id: uuid.UUID) -> dict[str, str]:
    row = re.search(rf'<tr data-workflow-id="{workflow_id}">(.*?)</tr>', page, re.S)
    assert row, page
    return dict(re.findall(r'data-count="([a-z]+)">([^<]*)<', row.group(1)))


def test_the_list_counts_each_workflows_jobs_by_state(backend: Backend, pool: Any) -> None:
    started, _ = diamond(backend, "started", "w1")
    assert process_next_job(pool, ok, queue="w1") is True
    broken, _ = diamond(backend, "broken", "w2")
    assert process_next_job(pool, boom, queue="w2") is False
    client = TestClient(dashboard(pool))
    page = client.get("/workflows")
    assert page.status_code == 200
    assert page.text.index(str(broken)) < page.text.index(str(started))  # newest first
    with connection(backend) as conn:
        for workflow_id in (started, broken):
            info = admin.get_workflow(conn, workflow_id)
            assert info is not None
            states = info.states
            waiting = sum(states.get(s, 0) for s in ("queued", "scheduled", "retrying"))
            shown = counts(page.text, workflow_id)
            assert shown["jobs"] == str(len(info.jobs))
            assert shown["waiting"] == (str(waiting) if waiting else "-")
            for state in ("succeeded", "running", "blocked", "failed", "cancelled"):
                assert shown[state] == (str(states[state]) if states.get(state) else "-")
    assert counts(page.text, started) == {
        "jobs": "4",
        "succeeded": "1",
        "running": "-",
        "waiting": "2",
        "blocked": "1",
        "failed": "-",
        "cancelled": "-",
    }
    assert counts(page.text, broken)["failed"] == "1"
    assert counts(page.text, broken)["cancelled"] == "3"


def test_the_workflow_page_shows_each_level_and_the_states(backend: Backend, pool: Any) -> None:
    workflow_id, (a, b, c, d) = diamond(backend, "levels", "l")
    assert process_next_job(pool, ok, queue="l") is True
    client = TestClient(dashboard(pool))
    page = client.get(f"/workflows/{workflow_id}")
    assert page.status_code == 200 and "<h1>Workflow levels" in page.text
    levels = [
        re.findall(r'<tr data-job-id="([^"]+)" data-state="([a-z]+)">', body)
        for body in re.findall(r'<tbody data-level="\d+">(.*?)</tbody>', page.text, re.S)
    ]
    with connection(backend) as conn:
        truth = {j.job_id: admin.get_job(conn, j.job_id) for j in (a, b, c, d)}
    state = {job_id: info.state for job_id, info in truth.items() if info is not None}
    assert levels == [
        [(str(a.job_id), state[a.job_id])],
        [(str(b.job_id), state[b.job_id]), (str(c.job_id), state[c.job_id])],
        [(str(d.job_id), state[d.job_id])],
    ]
    assert [state[j.job_id] for j in (a, b, c, d)] == ["succeeded", "queued", "queued", "blocked"]
    assert f'href="/jobs/{d.job_id}"' in page.text
    # The job page links back, and shows its parents' states.
    job = client.get(f"/jobs/{d.job_id}")
    assert f'href="/workflows/{workflow_id}"' in job.text
    waits = re.search(r'<dd class="graph">(.*?)</dd>', job.text, re.S)
    assert waits is not None
    # As the dependencies tell it: both parents still waiting (queued, as read above).
    assert re.findall(r'state-([a-z]+)"', waits.group(1)) == ["waiting", "waiting"]
    assert re.findall(r'href="/jobs/([^"]+)"', waits.group(1)) == sorted(
        [str(b.job_id), str(c.job_id)]
    )


def test_a_workflow_too_big_for_a_page_says_so(backend, pool, monkeypatch) -> None:
    workflow_id, _ = diamond(backend, "big", "g")
    monkeypatch.setattr(_app, "WORKFLOW_PAGE_JOBS", 3)
    page = TestClient(dashboard(pool)).get(f"/workflows/{workflow_id}")
    assert page.status_code == 200
    assert "This workflow has 4 jobs, more than a page shows (3)" in page.text
    assert "data-job-id" not in page.text


def test_unknown_and_bad_ids_are_404_and_400(backend: Backend, pool: Any) -> None:
    client = TestClient(dashboard(pool))
    assert client.get(f"/workflows/{uuid.uuid4()}").status_code == 404
    assert client.get("/workflows/nope").status_code == 400
    assert client.get("/workflows", params={"before": "nope"}).status_code == 400
    assert "No workflows" in client.get("/workflows").text


def test_the_list_comes_in_bounded_pages_each_workflow_once(backend, counted, monkeypatch):
    monkeypatch.setattr(_app, "WORKFLOWS_PER_PAGE", 7)
    monkeypatch.setattr(_app, "WORKFLOW_LIST_JOBS", 20)  # of the 60 rows
    made = []
    with connection(backend) as conn:
        for n in range(30):
            wf = Workflow(f"wf{n}")
            first = wf.add("step", {"n": n}, queue="many")
            wf.add("step", {"n": n}, after=[first], queue="many")
            made.append(wf.enqueue(conn))
        conn.commit()
    client = TestClient(dashboard(counted))
    seen: list[str] = []
    for page in pages_from(client, counted, "/workflows"):
        assert counted.reads.statements <= 12, counted.reads.sql
        # The scan's 20 rows at most, the sizes of 8 workflows, and 16 jobs read twice (the
        # workflow each is of, then its row), with the probe of the running ones.
        assert counted.reads.rows <= 20 + 8 + 2 * 16 + 10, counted.reads.sql
        listed = re.findall(r'<tr data-workflow-id="([^"]+)">', page.text)
        assert len(listed) <= 7
        seen.extend(listed)
    assert seen == [str(w) for w in reversed(made)]


def graph_of(page: str) -> tuple[dict[str, tuple[str, int]], set[tuple[str, str]]]:
    """The graph as the page draws it: each box's job id, with its state and level, and
    each line's (parent, child). Each box's class, text and link agree with its job."""
    figure = re.search(r'<figure class="graph">(.*?)</figure>', page, re.S)
    assert figure, page
    boxes = re.findall(
        r'<a class="node s-([a-z]+)" href="/jobs/([^"]+)" data-job-id="([^"]+)" '
        r'data-state="([a-z]+)" data-level="(\d+)"[^>]*>(.*?)</a>',
        figure.group(1),
        re.S,
    )
    nodes = {}
    for kind, href, job_id, state, level, inside in boxes:
        assert kind == state and href == job_id
        assert re.search(rf'<text class="state"[^>]*>{state}</text>', inside), inside
        nodes[job_id] = (state, int(level))
    edges = set(re.findall(r'data-parent="([^"]+)" data-child="([^"]+)"', figure.group(1)))
    return nodes, edges


def dependency_rows(backend: Backend, jobs: set[uuid.UUID]) -> set[tuple[str, str]]:
    """The (parent, child) rows of the dependencies table whose child is one of `jobs`."""
    rows = backend.query(f"SELECT parent_id, job_id FROM {backend.job_table}_dependencies")
    return {(str(as_uuid(p)), str(as_uuid(c))) for p, c in rows if as_uuid(c) in jobs}


def test_the_workflow_graph_shows_each_jobs_state_and_each_dependency(
    backend: Backend, pool: Any
) -> None:
    started, (a, b, c, d) = diamond(backend, "started", "gs")
    assert process_next_job(pool, ok, queue="gs") is True
    broken, failing = diamond(backend, "broken", "gb")
    assert process_next_job(pool, boom, queue="gb") is False
    client = TestClient(dashboard(pool))
    for workflow_id, jobs in ((started, [a, b, c, d]), (broken, failing)):
        page = client.get(f"/workflows/{workflow_id}")
        assert page.status_code == 200
        nodes, edges = graph_of(page.text)
        with connection(backend) as conn:
            truth = {str(j.job_id): admin.get_job(conn, j.job_id) for j in jobs}
        assert {job_id: state for job_id, (state, _) in nodes.items()} == {
            job_id: info.state for job_id, info in truth.items() if info is not None
        }
        ids = {j.job_id for j in jobs}
        assert edges == dependency_rows(backend, ids)
        first, second, third, last = (str(j.job_id) for j in jobs)
        assert edges == {(first, second), (first, third), (second, last), (third, last)}
        assert all(nodes[parent][1] < nodes[child][1] for parent, child in edges)
        # The table by level stays, folded, as the graph's text alternative.
        assert '<details class="levels">' in page.text and "data-level=" in page.text
    started_page = client.get(f"/workflows/{started}").text
    assert {s for s, _ in graph_of(started_page)[0].values()} == {"succeeded", "queued", "blocked"}
    broken_page = client.get(f"/workflows/{broken}").text
    assert sorted(s for s, _ in graph_of(broken_page)[0].values()) == ["cancelled"] * 3 + ["failed"]


def test_a_workflow_too_big_for_a_graph_keeps_its_table(backend, pool, monkeypatch) -> None:
    workflow_id, jobs = diamond(backend, "wide", "gw")
    monkeypatch.setattr(_app, "WORKFLOW_GRAPH_JOBS", 4)
    client = TestClient(dashboard(pool))
    assert '<figure class="graph">' in client.get(f"/workflows/{workflow_id}").text
    monkeypatch.setattr(_app, "WORKFLOW_GRAPH_JOBS", 3)
    page = client.get(f"/workflows/{workflow_id}")
    assert page.status_code == 200
    assert '<figure class="graph">' not in page.text and "<details" not in page.text
    assert "With more than 3 jobs, this workflow is shown as a table by level" in page.text
    rows = re.findall(r'<tr data-job-id="([^"]+)"', page.text)
    assert sorted(rows) == sorted(str(j.job_id) for j in jobs)


def test_the_workflow_page_reads_as_many_statements_whatever_its_size(backend, counted) -> None:
    """A graph of the most jobs drawn reads no more statements than one of four, and at
    most five rows a job (its row, its edges as parent and as child, its workflow's row),
    with the schema's few."""
    client = TestClient(dashboard(counted))
    reads = []
    for size in (4, _app.WORKFLOW_GRAPH_JOBS):
        wf = Workflow(f"size{size}")
        first = wf.add("step", {"n": 0}, queue="sized")
        for n in range(1, size):
            wf.add("step", {"n": n}, after=[first], queue="sized")
        with connection(backend) as conn:
            workflow_id = wf.enqueue(conn)
            conn.commit()
        counted.reads.reset()
        page = client.get(f"/workflows/{workflow_id}")
        assert page.status_code == 200
        assert len(graph_of(page.text)[0]) == size
        reads.append(counted.reads.statements)
        assert counted.reads.rows <= 5 * size + 25, counted.reads.sql
    assert reads[0] == reads[1], counted.reads.sql


def test_a_long_job_type_is_cut_in_its_box_and_whole_in_its_name(
    backend: Backend, pool: Any
) -> None:
    long = "reconcile_every_ledger_entry_of_the_month"
    wf = Workflow("long")
    first = wf.add(long, {"n": 1}, queue="gl")
    wf.add("step", {"n": 2}, after=[first], queue="gl")
    with connection(backend) as conn:
        workflow_id = wf.enqueue(conn)
        conn.commit()
    page = TestClient(dashboard(pool)).get(f"/workflows/{workflow_id}").text
    box = re.search(
        rf'<a class="node[^"]*"[^>]*data-job-id="{first.job_id}"[^>]*'
        r'aria-label="([^"]*)">(.*?)</a>',
        page,
        re.S,
    )
    assert box is not None, page
    assert box.group(1) == f"{long}, queued, job {first.job_id}"
    shown = re.search(r'<text class="type"[^>]*>([^<]*)</text>', box.group(2))
    assert shown is not None and shown.group(1) == long[: _graph.TYPE_CHARS - 1] + "…"
    assert f"<title>{long}: queued ({first.job_id})</title>" in box.group(2)

"""`admin.list_workflows` and `WorkflowInfo.levels` on both databases: the newest workflows
first, a page at a time, each with how many of its jobs are in each state (checked against
`get_workflow` and against what the test did), within the bound of rows it reads."""

from __future__ import annotations

import uuid
from typing import Any

from proletarian_di import Workflow, admin, process_next_job

from backends import Backend, connection


def ok(job_type: str, payload: Any) -> None:
    return None


def boom(job_type: str, payload: Any) -> None:
    raise RuntimeError("boom")


def diamond(backend: Backend, name: str, queue: str) -> tuple[uuid.UUID, list[Any]]:
    """a; b and c after a; d after b and c."""
    wf = Workflow(name)
    a = wf.add("step", {"name": "a"}, queue=queue)
    b = wf.add("step", {"name": "b"}, after=[a], queue=queue)
    c = wf.add("step", {"name": "c"}, after=[a], queue=queue)
    d = wf.add("step", {"name": "d"}, after=[b, c], queue=queue)
    with connection(backend) as conn:
        workflow_id = wf.enqueue(conn)
        conn.commit()
    return workflow_id, [a, b, c, d]


def test_the_newest_workflows_first_with_their_states(backend: Backend, pool: Any) -> None:
    first, _ = diamond(backend, "first", "w1")
    assert process_next_job(pool, ok, queue="w1") is True  # a; b and c released
    second, _ = diamond(backend, "second", "w2")
    assert process_next_job(pool, boom, queue="w2") is False  # a fails: the rest cancelled
    third, _ = diamond(backend, "third", "w3")

    with connection(backend) as conn:
        page = admin.list_workflows(conn, limit=2)
        truth = {w: admin.get_workflow(conn, w) for w in (first, second, third)}
    assert [w.workflow_id for w in page.workflows] == [third, second]
    assert [w.name for w in page.workflows] == ["third", "second"]
    assert page.workflows[0].states == {"queued": 1, "blocked": 3}
    assert page.workflows[1].states == {"failed": 1, "cancelled": 3}
    for summary in page.workflows:
        info = truth[summary.workflow_id]
        assert info is not None and summary.states == info.states
        assert (summary.jobs, summary.read, summary.complete) == (4, 4, True)
        assert summary.created == min(job.enqueued_at for job in info.jobs)
    assert page.next_before is not None

    with connection(backend) as conn:
        rest = admin.list_workflows(conn, limit=2, before=page.next_before)
    assert [w.workflow_id for w in rest.workflows] == [first]
    assert rest.workflows[0].states == {"succeeded": 1, "queued": 2, "blocked": 1}
    assert rest.next_before is None


def test_a_page_reads_at_most_its_bound(backend: Backend, pool: Any) -> None:
    older, _ = diamond(backend, "older", "b1")
    newer, _ = diamond(backend, "newer", "b2")
    with connection(backend) as conn:
        # Three rows of the index: the newer workflow only, and a next page for the other.
        page = admin.list_workflows(conn, max_jobs=3)
        assert [w.workflow_id for w in page.workflows] == [newer]
        [big] = page.workflows
        assert (big.jobs, big.read, big.complete) == (4, 3, False)
        assert sum(big.states.values()) == 3
        assert page.next_before is not None
        rest = admin.list_workflows(conn, max_jobs=3, before=page.next_before)
    assert [w.workflow_id for w in rest.workflows] == [older]


def test_no_workflow_is_an_empty_page(backend: Backend, pool: Any) -> None:
    with connection(backend) as conn:
        page = admin.list_workflows(conn)
    assert page == admin.WorkflowPage((), None)


def test_levels_follow_the_graph(backend: Backend, pool: Any) -> None:
    workflow_id, (a, b, c, d) = diamond(backend, "levels", "l")
    with connection(backend) as conn:
        info = admin.get_workflow(conn, workflow_id)
    assert info is not None
    levels = [[job.job_id for job in level] for level in info.levels()]
    assert levels == [[a.job_id], [b.job_id, c.job_id], [d.job_id]]

"""A workflow's graph's geometry, for server-rendered SVG: its jobs as boxes in columns, a
column a level (`WorkflowInfo.levels`), left to right, each box labelled with its job type
and state; and a line from each parent to each job that waits on it. Within a column, the
jobs are ordered by where their parents are, so that fewer lines cross."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence

from ...admin import JobInfo

NODE_WIDTH, NODE_HEIGHT = 184, 44
"""A job's box, in SVG units (pixels: the graph is drawn at its own size, and scrolls)."""
COLUMN_GAP, ROW_GAP, MARGIN = 56, 12, 8
"""The room between levels (for the lines), between the boxes of a level, and around."""
TYPE_CHARS = 22
"""The most characters of a job type a box shows; a longer one is cut, whole in its title."""


@dataclasses.dataclass(frozen=True)
class Node:
    """A job's box: where it is (its top left corner), its job's id, type and state."""

    x: float
    y: float
    job_id: uuid.UUID
    job_type: str
    label: str
    """The job type as the box shows it (cut to `TYPE_CHARS`)."""
    state: str
    level: int


@dataclasses.dataclass(frozen=True)
class Edge:
    """A line from a parent's box to a box of a job that waits on it, as an SVG path."""

    parent: uuid.UUID
    child: uuid.UUID
    path: str


@dataclasses.dataclass(frozen=True)
class Graph:
    """The boxes, the lines and the size of the drawing."""

    nodes: list[Node]
    edges: list[Edge]
    width: int
    height: int
    node_width: int = NODE_WIDTH
    node_height: int = NODE_HEIGHT


def _label(job_type: str) -> str:
    return job_type if len(job_type) <= TYPE_CHARS else job_type[: TYPE_CHARS - 1] + "…"


def layout(levels: Sequence[Sequence[JobInfo]]) -> Graph:
    """The graph of a workflow's jobs by level (as `WorkflowInfo.levels` gives them): a
    column a level; within one, the jobs ordered by their parents' mean height (those
    without parents in the graph keep their order), each column centred on the tallest."""
    rows = max((len(level) for level in levels), default=0)
    height = 2 * MARGIN + rows * NODE_HEIGHT + max(rows - 1, 0) * ROW_GAP
    columns = len(levels)
    width = 2 * MARGIN + columns * NODE_WIDTH + max(columns - 1, 0) * COLUMN_GAP
    centre: dict[uuid.UUID, float] = {}
    nodes: list[Node] = []
    for depth, level in enumerate(levels):
        placed = [
            (n, [centre[p] for p in job.parents if p in centre], job) for n, job in enumerate(level)
        ]
        placed.sort(key=lambda item: (sum(item[1]) / len(item[1]) if item[1] else -1, item[0]))
        tall = len(level) * NODE_HEIGHT + max(len(level) - 1, 0) * ROW_GAP
        top = (height - tall) / 2
        x = MARGIN + depth * (NODE_WIDTH + COLUMN_GAP)
        for row, (_, _, job) in enumerate(placed):
            y = round(top + row * (NODE_HEIGHT + ROW_GAP), 2)
            centre[job.job_id] = y + NODE_HEIGHT / 2
            nodes.append(
                Node(x, y, job.job_id, job.job_type, _label(job.job_type), job.state, depth)
            )
    at = {node.job_id: node for node in nodes}
    parents = {job.job_id: job.parents for level in levels for job in level}
    edges = [
        Edge(parent, node.job_id, _curve(at[parent], node))
        for node in nodes
        for parent in sorted(set(parents[node.job_id]))
        if parent in at
    ]
    return Graph(nodes, edges, width, height)


def _curve(parent: Node, child: Node) -> str:
    """An S-shaped line from the middle of the parent's right side to the child's left."""
    x1, y1 = parent.x + NODE_WIDTH, parent.y + NODE_HEIGHT / 2
    x2, y2 = child.x - 4, child.y + NODE_HEIGHT / 2  # the arrowhead's room
    bend = (x2 - x1) / 2
    return f"M{x1:g} {y1:g} C{x1 + bend:g} {y1:g} {x2 - bend:g} {y2:g} {x2:g} {y2:g}"

"""Operator queries on any connection of either database: queue statistics, listing and
inspecting jobs, retrying failed jobs, cancelling waiting ones, pruning the archive, listing
periodic schedules and live workers, pausing and resuming queues, schema checks.

The CLI uses them, and so can your own tools. Like `enqueue`, none of them commits:
they run in the caller's transaction, and the caller commits (or rolls back a read).
Table names are validated identifiers and every value is a query parameter.

Every name is importable from here; each module holds one concern:

- `jobs`: a job as an operator sees it (`JobInfo`, its `Attempt`s, `STATES`), `get_job`,
  `list_jobs` and `list_jobs_page` (and their bounds, `MAX_LIMIT` and `MAX_EXAMINED`), and
  the reading of both tables they share.
- `queues`: the queues at a glance (`queue_stats`, `overview`, `overview_page`,
  `queue_overview`, `throughput`, `last_hour`, `recent_failures`, `waiting`), the hourly
  sums they read (`hourly_sums`, `recount_hours`) and the schema checks (`check`,
  `missing_columns`).
- `timings`: how long jobs waited and ran (`timings`, `Timing`; `timings_page`, `TimingsPage`;
  `last_hour_timings`, by minute).
- `actions`: `retry_jobs`, `retry_failed`, `discard_failed`, `cancel_jobs`,
  `reschedule_jobs`, `in_batches`,
  and pausing and resuming queues.
- `retention`: what the archive keeps (`prune_archive`, `purge_archive`,
  `delete_archived`, `still_needed`).
- `search`: `find_jobs`, `failure_groups` and `failure_causes`.
- `headline`: an error's first line, which names its group (`error_headline`), and its
  cause, the line with its variable parts taken out (`error_cause`).
- `explain`: why a job is not running now (`explain_job`), and what holds each queue's
  due jobs back (`queue_holds`).
- `idle`: why a queue's live workers' idle threads claim nothing now (`idle_reasons`,
  `IdleReason`), on `queue_holds`.
- `workflows`: `list_workflows`, `get_workflow` and `get_result`.
- `workers`: the live workers (`list_workers`, `prune_workers`).
- `schedules`: the periodic schedules (`list_schedules`), disabling, enabling and running
  them now (`disable_schedule`, `enable_schedule`, `request_run`) and their `recent_runs`.
- `doctor`: the queue's own health, read from the database's statistics (`diagnose`,
  `Thresholds`, `Finding`, `degraded`).
- `_checks` and `_sql`: the argument checks and the SQL pieces the others share.

They stand in layers, each importing only those below it, never this package:
`_checks` and `headline`; `_sql`; `workers`; `jobs`; the rest (`explain`, `search` and
`workflows` read jobs through `jobs`). `timings` is both a module and the function it holds:
`admin.timings` is the function. `pause_queue`, `resume_queue`, `paused_queues`,
`PRUNE_BATCH_SIZE` and `MAX_HOURS` import from here too, outside `__all__` as they always
were (hence their `X as X`).
"""

from __future__ import annotations

from .._store.outcomes import HourlyOutcomes
from .._store.tables import DEFAULT_TABLES, Tables
from .actions import (
    BATCH_SIZE,
    RESCHEDULABLE,
    cancel_jobs,
    discard_failed,
    in_batches,
    reschedule_jobs,
    retry_failed,
    retry_jobs,
)
from .actions import pause_queue as pause_queue
from .actions import paused_queues as paused_queues
from .actions import resume_queue as resume_queue
from .doctor import Finding, Thresholds, degraded, diagnose
from .explain import Explanation, Hold, explain_job, queue_holds
from .headline import HEADLINE_CHARS, MAX_ERRORS, error_cause, error_headline
from .idle import IdleReason, idle_reasons
from .jobs import (
    MAX_EXAMINED,
    MAX_LIMIT,
    STATES,
    Attempt,
    JobInfo,
    JobPage,
    get_job,
    list_jobs,
    list_jobs_page,
)
from .queues import (
    HourlySums,
    OverviewPage,
    QueueOverview,
    QueueStats,
    RecountedHours,
    ThroughputBucket,
    check,
    hourly_sums,
    last_hour,
    missing_columns,
    overview,
    overview_page,
    queue_overview,
    queue_stats,
    recent_failures,
    recount_hours,
    throughput,
    waiting,
)
from .retention import PRUNE_BATCH_SIZE as PRUNE_BATCH_SIZE
from .retention import Pruned, delete_archived, prune_archive, purge_archive, still_needed
from .schedules import (
    disable_schedule,
    enable_schedule,
    list_schedules,
    recent_runs,
    request_run,
)
from .search import (
    SEARCH_FIELDS,
    SEARCH_ROWS,
    ErrorGroup,
    ErrorGroups,
    FailureCause,
    FailureCauses,
    JobSearch,
    failure_causes,
    failure_groups,
    find_jobs,
    id_fragment,
)
from .timings import MAX_HOURS as MAX_HOURS
from .timings import Timing, TimingsPage, last_hour_timings, timings, timings_page
from .workers import STALE_AFTER, WorkerInfo, WorkerThread, list_workers, prune_workers
from .workflows import (
    MAX_WORKFLOW_JOBS,
    WorkflowInfo,
    WorkflowPage,
    WorkflowSummary,
    get_result,
    get_workflow,
    list_workflows,
)

__all__ = [
    "BATCH_SIZE",
    "DEFAULT_TABLES",
    "HEADLINE_CHARS",
    "MAX_ERRORS",
    "MAX_EXAMINED",
    "MAX_LIMIT",
    "MAX_WORKFLOW_JOBS",
    "RESCHEDULABLE",
    "SEARCH_FIELDS",
    "SEARCH_ROWS",
    "STALE_AFTER",
    "STATES",
    "Attempt",
    "ErrorGroup",
    "ErrorGroups",
    "Explanation",
    "FailureCause",
    "FailureCauses",
    "Finding",
    "Hold",
    "HourlyOutcomes",
    "HourlySums",
    "IdleReason",
    "JobInfo",
    "JobPage",
    "JobSearch",
    "OverviewPage",
    "Pruned",
    "QueueOverview",
    "QueueStats",
    "RecountedHours",
    "Tables",
    "Thresholds",
    "ThroughputBucket",
    "Timing",
    "TimingsPage",
    "WorkerInfo",
    "WorkerThread",
    "WorkflowInfo",
    "WorkflowPage",
    "WorkflowSummary",
    "cancel_jobs",
    "check",
    "degraded",
    "delete_archived",
    "diagnose",
    "disable_schedule",
    "discard_failed",
    "enable_schedule",
    "error_cause",
    "error_headline",
    "explain_job",
    "failure_causes",
    "failure_groups",
    "find_jobs",
    "get_job",
    "get_result",
    "get_workflow",
    "hourly_sums",
    "id_fragment",
    "idle_reasons",
    "in_batches",
    "last_hour",
    "last_hour_timings",
    "list_jobs",
    "list_jobs_page",
    "list_schedules",
    "list_workers",
    "list_workflows",
    "missing_columns",
    "overview",
    "overview_page",
    "prune_archive",
    "prune_workers",
    "purge_archive",
    "queue_holds",
    "queue_overview",
    "queue_stats",
    "recent_failures",
    "recent_runs",
    "recount_hours",
    "request_run",
    "reschedule_jobs",
    "retry_failed",
    "retry_jobs",
    "still_needed",
    "throughput",
    "timings",
    "timings_page",
    "waiting",
]

"""The dashboard's routes: pages that read through `proletarian_di.admin`, and the actions
(retry, cancel, discard, pause, resume) that change data once enabled for an authenticated
user; an action on more than one job first shows what it would do, counted."""

from __future__ import annotations

import dataclasses
import json
import logging
import numbers
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta, timezone
from importlib import resources
from typing import Any, TypeVar
from urllib.parse import urlencode

import jinja2
import markupsafe
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from ... import admin
from ..._common.checks import JobTypeStyle, check_job_type_style, job_type_as_stored
from ..._store.datasource import connection_factory
from ..._store.dialects import is_transient
from ..._store.probes import ProbeTimeout, bounded_read, check_timeout
from ...errors import ConfigurationError, SchemaError
from ...serializers import (
    DEFAULT_SERIALIZER,
    Serializer,
    SerializerName,
    check_serializer,
    jsonable,
)
from . import _chart, _graph
from ._security import (
    CSRF_COOKIE,
    CSRF_FIELD,
    Auth,
    Identity,
    Signer,
    authenticated,
    same_origin,
)

Redact = Callable[[str, Any], Any]
"""`redact(job_type, payload) -> payload`: what the pages show of a job's payload."""
LogFn = Callable[[str, dict[str, Any]], None]
Pair = tuple[str, str]

FLASH_COOKIE = "proletarian_dashboard_flash"
REFRESH_HEADER = "x-dashboard-refresh"
PAGE_SIZE = 50
QUEUES_PER_PAGE = 50
WAITING = ("blocked", "queued", "scheduled", "retrying")
PREVIEW = 120
TIMEOUT_S = 5.0
"""How long a page waits for the database, connecting included, before it answers 503."""
TIMINGS_TTL_S = 60.0
"""How long the timings page shows a read before it reads the archive again."""
TIMINGS_KEPT = 16
"""The most filters and pages whose timings the page keeps."""
TIMINGS_PER_PAGE = 50
"""The queue and job type pairs a timings page shows, each with up to 24 hours."""
PAYLOAD_CHARS = 1000
"""The most characters of a payload a listing reads (the job's own page reads all of it)."""
ID_CHARS = 12
"""The hex digits of a job id a listing shows: its last ones, which tell apart the jobs of one
millisecond (the first ones are its time); the whole id is the link's title."""
QUEUE_FAILURES = 10
"""The latest failures a queue's page lists (its "every failure" link lists them all)."""
OLDEST_DUE_WARN = timedelta(minutes=1)
OLDEST_DUE_BAD = timedelta(minutes=5)
"""How long the oldest due job of a queue may wait before its age is shown as a warning,
then as bad: a worker that keeps up claims a due job within its polling interval."""
GROUPS_SHOWN = 200
"""The most exact errors the failures page lists, under their causes."""
SEARCH_RESULTS = 100
"""The most jobs the search page lists."""
EXACT = "_exact"
"""The suffix of the hidden field beside a form field that carries its exact value as JSON:
a form field cannot hold a CR or LF as it is (a text input drops them, a browser sends
either as CRLF)."""
_STATIC = {
    "dashboard.css": "text/css",
    "dashboard.js": "text/javascript",
    "favicon.svg": "image/svg+xml",
}
_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
_logger = logging.getLogger("proletarian_di.dashboard")
T = TypeVar("T")


def default_log(event: str, data: dict[str, Any]) -> None:
    """Write the event to the `proletarian_di.dashboard` logger, its data as `key=value`,
    one line whatever the values hold (a value's repr with its controls escaped)."""
    from ..._common.logging import escape_controls

    fields = " ".join(f"{key}={escape_controls(repr(value))}" for key, value in data.items())
    _logger.info("%s %s", event, fields)


def dashboard(
    data_source: Any,
    *,
    actions: bool = False,
    auth: Auth | None = None,
    redact: Redact | None = None,
    tables: admin.Tables = admin.DEFAULT_TABLES,
    refresh_s: float = 5.0,
    log: LogFn | None = None,
    csrf_secret: str | bytes | None = None,
    timeout_s: float = TIMEOUT_S,
    serializer: Serializer | SerializerName | None = None,
    job_type_style: JobTypeStyle | None = None,
) -> Starlette:
    """The dashboard as an ASGI app to mount (`app.mount("/jobs", dashboard(pool))`).

    `data_source` is what a worker takes: a pool, a function returning a new connection,
    or a dependency-injector provider of either (`container.pool`, resolved per request).
    Read-only unless `actions`; actions need `auth`, which names the user (None: 401) and
    guards the pages too. `redact` filters every payload shown; `log` gets each action.
    `csrf_secret` signs the forms' tokens: give every process serving the dashboard the
    same one (by default each process draws its own, and a form only works on its own).
    Each page reads on a connection of its own beside the pool where the data source says
    how it connects, within `timeout_s` (connect, statement and socket timeouts): a
    database that does not answer by then gets a 503 page saying so. `serializer` and
    `job_type_style` are the workers' (`create_queue_worker`): the payloads are decoded with
    that serializer ("transit" for a queue shared with Clojure), and with "keyword" a job type
    filter is a Clojure keyword's name (`app.jobs/send-email` finds `:app.jobs/send-email`).
    """
    if not isinstance(actions, bool):
        raise ConfigurationError(f"actions must be True or False, got {actions!r}")
    if actions and auth is None:
        raise ConfigurationError(
            "dashboard(actions=True) needs an auth hook: actions need an authenticated user, "
            "to refuse strangers and to log who did what; pass auth=a function of the request "
            "that returns the user's name (or None)"
        )
    for name, hook in (("auth", auth), ("redact", redact), ("log", log)):
        if hook is not None and not callable(hook):
            raise ConfigurationError(f"{name} must be a function or None, got {hook!r}")
    if not isinstance(tables, admin.Tables):
        raise ConfigurationError(f"tables must be an admin.Tables, got {tables!r}")
    if isinstance(refresh_s, bool) or not isinstance(refresh_s, numbers.Real) or refresh_s < 0:
        raise ConfigurationError(f"refresh_s must be a number of seconds >= 0, got {refresh_s!r}")
    if isinstance(csrf_secret, str):
        csrf_secret = csrf_secret.encode()
    if csrf_secret is not None and (not isinstance(csrf_secret, bytes) or len(csrf_secret) < 16):
        raise ConfigurationError("csrf_secret must be a str or bytes of at least 16 characters")
    timeout_s = check_timeout("timeout_s", timeout_s)
    storage = (check_serializer(serializer), check_job_type_style(job_type_style or "plain"))
    site = _Dashboard(
        data_source,
        actions,
        auth,
        redact,
        tables,
        float(refresh_s),
        log,
        csrf_secret,
        timeout_s,
        *storage,
    )
    return Starlette(
        routes=site.routes(),
        exception_handlers={
            HTTPException: site.http_error,
            ConfigurationError: site.bad_request,
            ProbeTimeout: site.database_late,
            Exception: site.server_error,
        },
    )


@dataclasses.dataclass(frozen=True)
class _Health:
    """A queue's health at a glance: its last hour by minute (and as a sparkline), and what
    holds its due jobs back now (`admin.queue_holds`)."""

    minutes: list[admin.ThroughputBucket]
    sparkline: _chart.Sparkline
    holds: list[admin.Hold]

    @property
    def failure_rate(self) -> float | None:
        """The share of the last hour's finished jobs that failed (None: none finished)."""
        failed = self.sparkline.failed
        finished = self.sparkline.succeeded + failed
        return failed / finished if finished else None


@dataclasses.dataclass(frozen=True)
class _Timings:
    """The timings page's read: a page of queue and job type pairs, each's day with its
    hours, and when."""

    page: admin.TimingsPage
    read_at: datetime
    taken: float
    minutes: list[admin.ThroughputBucket] = dataclasses.field(default_factory=list)
    """The last hour's throughput by minute, of the queue filtered on, else of all."""
    last_hour: list[admin.Timing] | None = None
    """With a queue and a job type filtered on, their timings by minute of the last hour."""


class _Dashboard:
    """The routes and what they share: the data source, the options, the templates."""

    def __init__(
        self,
        data_source: Any,
        actions: bool,
        auth: Auth | None,
        redact: Redact | None,
        tables: admin.Tables,
        refresh_s: float,
        log: LogFn | None,
        csrf_secret: bytes | None,
        timeout_s: float,
        serializer: Serializer = DEFAULT_SERIALIZER,
        job_type_style: JobTypeStyle = "plain",
    ) -> None:
        self.data_source = data_source
        self.timeout_s = timeout_s
        self.connect = connection_factory(data_source)
        self.actions = actions
        self.auth = auth
        self.redact = redact
        self.tables = tables
        self.outcomes = admin.HourlyOutcomes()
        self.timings_read: dict[tuple[str | None, str | None, Pair | None], _Timings] = {}
        """The timings page's last reads, per filter and page (the oldest dropped past
        `TIMINGS_KEPT`)."""
        self.refresh_s = refresh_s
        self.log = log or default_log
        self.signer = Signer(csrf_secret)
        self.templates = _environment()
        folder = resources.files(__package__).joinpath("static")
        self.static_files = {name: folder.joinpath(name).read_bytes() for name in _STATIC}
        self.serializer = serializer
        self.job_type_style = job_type_style

    def _job_type(self, values: Mapping[str, Any]) -> str | None:
        """The job type filter given, as the rows hold it (see `job_type_style`)."""
        text = _value(values, "job_type")
        return None if text is None else job_type_as_stored(text, self.job_type_style)

    def routes(self) -> list[Route]:
        return [
            Route("/", self.overview, name="overview"),
            Route("/queue", self.queue, name="queue"),
            Route("/jobs", self.jobs, name="jobs"),
            Route("/jobs/{job_id}", self.job, name="job"),
            Route("/failed", self.failed, name="failed"),
            Route("/failed/errors", self.errors, name="errors"),
            Route("/workflows", self.workflows, name="workflows"),
            Route("/workflows/{workflow_id}", self.workflow, name="workflow"),
            Route("/search", self.search, name="search"),
            Route("/timings", self.timings, name="timings"),
            Route("/schedules", self.schedules, name="schedules"),
            Route("/processes", self.processes, name="processes"),
            Route("/health", self.health, name="health"),
            Route("/static/{name}", self.static, name="static"),
            Route("/retry", self.retry, methods=["POST"]),
            Route("/cancel", self.cancel, methods=["POST"]),
            Route("/discard", self.discard, methods=["POST"]),
            Route("/reschedule", self.reschedule, methods=["POST"]),
            Route("/pause", self.pause, methods=["POST"]),
            Route("/resume", self.resume, methods=["POST"]),
            Route("/schedules/act", self.schedule_action, methods=["POST"]),
        ]

    # The database: admin functions are sync and never commit ---------------------------------

    def _write_now(self, change: Callable[[Any], T]) -> T:
        with self.connect() as conn:
            try:
                result = change(conn)
                conn.commit()
                return result
            except BaseException:
                conn.rollback()
                raise

    async def read(self, query: Callable[[Any], T]) -> T:
        """`query(conn)` in a thread, rolled back (reads leave no transaction open), within
        `timeout_s` (`bounded_read`)."""
        return await run_in_threadpool(bounded_read, self.data_source, query, self.timeout_s)

    async def write(self, change: Callable[[Any], T]) -> T:
        """`change(conn)` in a thread, committed."""
        return await run_in_threadpool(self._write_now, change)

    # Pages -----------------------------------------------------------------------------------

    async def overview(self, request: Request) -> Response:
        user = await authenticated(self.auth, request)
        number = _page(_value(request.query_params, "page"))
        page, sums, health = await self.read(lambda conn: self._overview(conn, number))
        here = f"{_base(request)}/"
        return self.render(
            request,
            user,
            "overview.html",
            section="overview",
            queues=page.queues,
            health=health,
            page=page,
            previous=_url(here, page=number - 1 if number > 2 else None) if number > 1 else None,
            next=_url(here, page=number + 1) if number < page.pages else None,
            chart=_chart.chart(page.last_day if page.total else [], link=_finished(request)),
            sums=sums,
        )

    def _overview(
        self, conn: Any, number: int
    ) -> tuple[admin.OverviewPage, admin.HourlySums, dict[str, _Health]]:
        """A page of the overview, the hourly sums, and each of its queues' health."""
        page = admin.overview_page(
            conn, page=number, per_page=QUEUES_PER_PAGE, tables=self.tables, outcomes=self.outcomes
        )
        sums = admin.hourly_sums(conn, tables=self.tables)
        return page, sums, self._health(conn, page.queues)

    def _health(self, conn: Any, queues: list[admin.QueueOverview]) -> dict[str, _Health]:
        """Each queue's last hour by minute and what holds its due jobs back, in a few reads
        for all of them."""
        now = datetime.now(timezone.utc)
        names = [q.queue for q in queues]
        minutes = admin.last_hour(conn, names, now=now, tables=self.tables)
        due = {
            q.queue: q.queued > 0 or (q.retrying > 0 and q.oldest_due is not None) for q in queues
        }
        holds = admin.queue_holds(conn, due, now=now, tables=self.tables)
        return {
            q.queue: _Health(minutes[q.queue], _chart.sparkline(minutes[q.queue]), holds[q.queue])
            for q in queues
        }

    async def queue(self, request: Request) -> Response:
        """One queue: its counts, what holds it back, its last hour by minute and its day by
        hour, its live workers with their options, and its latest failures."""
        user = await authenticated(self.auth, request)
        name = _value(request.query_params, "name")
        if name is None:
            raise HTTPException(400, "which queue? give its name: /queue?name=…")
        item, health, workers, failures, missing = await self.read(
            lambda conn: self._queue(conn, name)
        )
        return self.render(
            request,
            user,
            "queue.html",
            section="overview",
            q=item,
            health=health,
            workers=workers,
            missing=missing,
            rows=[(job, self.preview(job)) for job in failures],
            minutes=_chart.chart(health.minutes, span="hour", link=_finished(request, name)),
            day=_chart.chart(item.last_day, link=_finished(request, name)),
        )

    def _queue(self, conn: Any, name: str) -> tuple[Any, ...]:
        """One queue's overview, health, workers (with why there are none: `missing`), and
        latest failures."""
        item = admin.queue_overview(conn, name, tables=self.tables, outcomes=self.outcomes)
        health = self._health(conn, [item])[name]
        missing: str | None = None
        try:
            workers = admin.list_workers(conn, queue=name, tables=self.tables)
        except SchemaError as exc:
            workers, missing = [], str(exc)
        failures = admin.list_jobs_page(
            conn,
            queue=name,
            state="failed",
            limit=QUEUE_FAILURES,
            payload_chars=PAYLOAD_CHARS,
            tables=self.tables,
        ).jobs
        return item, health, workers, failures, missing

    async def jobs(self, request: Request) -> Response:
        return await self._listing(request, "jobs")

    async def failed(self, request: Request) -> Response:
        return await self._listing(request, "failed")

    async def _listing(self, request: Request, section: str) -> Response:
        """The jobs page, or the failed page (its state fixed): filters, one keyset page."""
        user = await authenticated(self.auth, request)
        params = request.query_params
        job_id = _value(params, "id")
        if job_id is not None:
            return RedirectResponse(f"{_base(request)}/jobs/{_job_id(job_id.strip())}", 303)
        filters: dict[str, str | None] = {
            "queue": _value(params, "queue"),
            "job_type": self._job_type(params),
            "state": "failed" if section == "failed" else _state(_value(params, "state")),
            "error": _value(params, "error"),
            "finished_since": _value(params, "finished_since"),
            "finished_until": _value(params, "finished_until"),
        }
        since = _moment(filters["finished_since"], "finished_since")
        until = _moment(filters["finished_until"], "finished_until")
        limit, before = _limit(_value(params, "limit")), _value(params, "before")
        page = await self.read(
            lambda conn: admin.list_jobs_page(
                conn,
                queue=filters["queue"],
                job_type=filters["job_type"],
                state=filters["state"],
                limit=limit,
                before=before,
                payload_chars=PAYLOAD_CHARS,
                error=filters["error"],
                tables=self.tables,
                serializer=self.serializer,
                finished_since=since,
                finished_until=until,
            )
        )
        shown = {**filters, "state": None} if section == "failed" else filters
        older = None
        if page.next_before is not None:
            page_size = None if limit == PAGE_SIZE else limit
            older = _url(
                f"{_base(request)}/{section}", **shown, limit=page_size, before=page.next_before
            )
        rows = [(job, self.preview(job)) for job in page.jobs]
        return self.render(
            request,
            user,
            "jobs.html",
            section=section,
            rows=rows,
            filters=filters,
            finished=(since, until) if since or until else None,
            older=older,
            partial=page.partial,
            examined=page.examined,
            first_page=_url(f"{_base(request)}/{section}", **shown) if before else None,
        )

    async def errors(self, request: Request) -> Response:
        """The failures by cause (`admin.failure_causes`), each with its exact first lines
        under it, each a link to its jobs; with actions, each cause retried or discarded."""
        user = await authenticated(self.auth, request)
        params = request.query_params
        filters = {"queue": _value(params, "queue"), "job_type": self._job_type(params)}
        found = await self.read(
            lambda conn: admin.failure_causes(
                conn, queue=filters["queue"], job_type=filters["job_type"], tables=self.tables
            )
        )
        shown, left = [], GROUPS_SHOWN
        for cause in found.causes:
            if left <= 0:
                break
            errors = cause.errors[:left]
            shown.append((cause, errors, len(cause.errors) - len(errors)))
            left -= len(errors)
        return self.render(
            request,
            user,
            "errors.html",
            section="failed",
            filters=filters,
            found=found,
            causes=shown,
            hidden_causes=len(found.causes) - len(shown),
        )

    async def search(self, request: Request) -> Response:
        """Jobs found by id (whole, its start or its end), job type or payload."""
        user = await authenticated(self.auth, request)
        params = request.query_params
        text, by = _value(params, "q"), _value(params, "by") or "any"
        if by not in admin.SEARCH_FIELDS:
            raise HTTPException(
                400, f"by {by!r}: search by one of {', '.join(admin.SEARCH_FIELDS)}"
            )
        found = None
        if text is not None:
            query = text
            found = await self.read(
                lambda conn: admin.find_jobs(
                    conn,
                    query,
                    by=by,
                    limit=SEARCH_RESULTS,
                    max_examined=admin.SEARCH_ROWS,
                    payload_chars=PAYLOAD_CHARS,
                    tables=self.tables,
                    serializer=self.serializer,
                )
            )
            digits = admin.id_fragment(text) if by in ("any", "id") else None
            whole = digits is not None and len(digits) == 32
            if whole and found and [job.job_id.hex for job in found.jobs] == [digits]:
                return RedirectResponse(f"{_base(request)}/jobs/{found.jobs[0].job_id}", 303)
        return self.render(
            request,
            user,
            "search.html",
            section="search",
            text=text or "",
            by=by,
            found=found,
            rows=[(job, self.preview(job)) for job in found.jobs] if found else [],
        )

    async def job(self, request: Request) -> Response:
        user = await authenticated(self.auth, request)
        job_id = _job_id(request.path_params["job_id"])
        job, why = await self.read(lambda conn: self._job_and_why(conn, job_id))
        if job is None:
            raise HTTPException(404, f"no job {job_id}: it never existed, or was pruned")
        return self.render(
            request,
            user,
            "job.html",
            section="jobs",
            job=job,
            why=why,
            payload=self.payload(job, indent=2),
        )

    def _job_and_why(
        self, conn: Any, job_id: uuid.UUID
    ) -> tuple[admin.JobInfo | None, admin.Explanation | None]:
        """The job, and for a waiting one, what holds it back (`admin.explain_job`)."""
        job = admin.get_job(conn, job_id, tables=self.tables, serializer=self.serializer)
        if job is None or job.state not in WAITING:
            return job, None
        return job, admin.explain_job(conn, job_id, tables=self.tables)

    async def timings(self, request: Request) -> Response:
        """Wait and run times of the last day, per queue and job type: over the day, then
        hour by hour, `TIMINGS_PER_PAGE` pairs a page, under the last hour's throughput by
        minute; filtered to one pair, its wait and run as charts by hour and by minute. Each
        page read at most once every `TIMINGS_TTL_S` per filter (ranking a day of the
        archive is the dearest read of the dashboard, and the page refreshes itself)."""
        user = await authenticated(self.auth, request)
        params = request.query_params
        queue, job_type = _value(params, "queue"), self._job_type(params)
        after = _after(params)
        key = (queue, job_type, after)
        kept = self.timings_read.get(key)
        if kept is None or time.monotonic() - kept.taken > TIMINGS_TTL_S:
            now = datetime.now(timezone.utc)
            page, minutes, last_hour = await self.read(
                lambda conn: self._timings(conn, queue, job_type, after, now)
            )
            kept = _Timings(page, now, time.monotonic(), minutes, last_hour)
            self.timings_read.pop(key, None)
            while len(self.timings_read) >= TIMINGS_KEPT:
                del self.timings_read[next(iter(self.timings_read))]
            self.timings_read[key] = kept
        here = f"{_base(request)}/timings"
        following = kept.page.next_after
        return self.render(
            request,
            user,
            "timings.html",
            section="timings",
            groups=kept.page.groups,
            read_at=kept.read_at,
            minutes=_chart.chart(kept.minutes, span="hour", link=_finished(request, queue)),
            charts=self._timing_charts(request, kept) if queue and job_type else None,
            filters={"queue": queue, "job_type": job_type},
            next=following
            and _url(
                here,
                queue=queue,
                job_type=job_type,
                after_queue=following[0],
                after_job_type=following[1],
            ),
            first_page=_url(here, queue=queue, job_type=job_type) if after else None,
        )

    def _timings(
        self,
        conn: Any,
        queue: str | None,
        job_type: str | None,
        after: Pair | None,
        now: datetime,
    ) -> tuple[admin.TimingsPage, list[admin.ThroughputBucket], list[admin.Timing] | None]:
        """A timings page, the last hour's throughput by minute, and with one queue and job
        type, their last hour's timings by minute."""
        page = admin.timings_page(
            conn,
            after=after,
            per_page=TIMINGS_PER_PAGE,
            queue=queue,
            job_type=job_type,
            now=now,
            tables=self.tables,
        )
        end = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
        minutes = admin.throughput(
            conn, hours=1, buckets=60, queue=queue, now=end, tables=self.tables
        )
        last_hour = None
        if queue is not None and job_type is not None:
            last_hour = admin.last_hour_timings(
                conn, queue=queue, job_type=job_type, now=now, tables=self.tables
            )
        return page, minutes, last_hour

    def _timing_charts(self, request: Request, kept: _Timings) -> list[_chart.Lines]:
        """The charts of the one queue and job type shown: wait and run over the day by
        hour, then over the last hour by minute; each slot a link to its jobs."""
        if not kept.page.groups:
            return []
        whole, hours = kept.page.groups[0]
        link = _finished(request, whole.queue, whole.job_type)
        day_start = kept.read_at.replace(minute=0, second=0, microsecond=0) - timedelta(hours=23)
        hour_start = kept.read_at.replace(second=0, microsecond=0) - timedelta(minutes=59)
        minute = timedelta(minutes=1)
        return [
            _chart.lines(hours, "wait", day_start, 24, timedelta(hours=1), "Wait, by hour", link),
            _chart.lines(hours, "run", day_start, 24, timedelta(hours=1), "Run, by hour", link),
            _chart.lines(
                kept.last_hour or [], "wait", hour_start, 60, minute, "Wait, by minute", link
            ),
            _chart.lines(
                kept.last_hour or [], "run", hour_start, 60, minute, "Run, by minute", link
            ),
        ]

    async def workflows(self, request: Request) -> Response:
        """The newest workflows, `WORKFLOWS_PER_PAGE` a page, with their jobs' states
        (`admin.list_workflows`, bounded)."""
        user = await authenticated(self.auth, request)
        before = request.query_params.get("before") or None  # a bad one: a 400
        found = await self.read(
            lambda conn: admin.list_workflows(
                conn,
                limit=WORKFLOWS_PER_PAGE,
                before=before,
                max_jobs=WORKFLOW_LIST_JOBS,
                tables=self.tables,
            )
        )
        older = None
        if found.next_before is not None:
            older = _url(_base(request) + "/workflows", before=found.next_before)
        return self.render(
            request,
            user,
            "workflows.html",
            section="workflows",
            page=found,
            older=older,
            first_page=before is not None,
        )

    async def workflow(self, request: Request) -> Response:
        """A workflow's jobs by level, each with its state (`admin.get_workflow`), when it
        has at most `WORKFLOW_PAGE_JOBS`; drawn as a graph too when it has at most
        `WORKFLOW_GRAPH_JOBS` (a bigger graph is too big to follow)."""
        user = await authenticated(self.auth, request)
        workflow_id = _job_id(request.path_params["workflow_id"])
        info = await self.read(
            lambda conn: admin.get_workflow(
                conn, workflow_id, tables=self.tables, max_jobs=WORKFLOW_PAGE_JOBS
            )
        )
        if info is None:
            raise HTTPException(404, f"no workflow {workflow_id}: it never existed, or was purged")
        levels = info.levels()
        return self.render(
            request,
            user,
            "workflow.html",
            section="workflows",
            info=info,
            levels=levels,
            states=info.states,
            limit=WORKFLOW_PAGE_JOBS,
            graph=_graph.layout(levels) if 0 < len(info.jobs) <= WORKFLOW_GRAPH_JOBS else None,
            graph_limit=WORKFLOW_GRAPH_JOBS,
        )

    async def schedules(self, request: Request) -> Response:
        return await self._table_page(request, "schedules", admin.list_schedules)

    async def processes(self, request: Request) -> Response:
        """The worker processes connected now, by host and process, the stale ones apart:
        each worker's threads and the jobs they run, and why the idle ones are idle, where
        that is known (`admin.idle_reasons`)."""
        return await self._table_page(request, "processes", admin.list_workers, self._idle)

    def _idle(self, conn: Any, workers: list[admin.WorkerInfo]) -> dict[str, Any]:
        """Why the running workers' idle threads are idle (`idle`, by queue), for the first
        `QUEUES_PER_PAGE` queues that have one."""
        queues = [
            queue
            for worker in workers
            if worker.state == "running" and worker.busy < len(worker.threads)
            for queue in worker.queues
        ]
        shown = list(dict.fromkeys(queues))[:QUEUES_PER_PAGE]
        return {"idle": admin.idle_reasons(conn, shown, tables=self.tables)}

    async def health(self, request: Request) -> Response:
        """The queue's own health (`admin.diagnose`): a few statements on the database's
        statistics, whatever the size of the tables."""
        return await self._table_page(request, "health", admin.diagnose)

    async def _table_page(
        self,
        request: Request,
        section: str,
        query: Callable[..., list[Any]],
        more: Callable[[Any, list[Any]], dict[str, Any]] | None = None,
    ) -> Response:
        """A page listing what `query` reads from a table of its own (`<section>.html`, the
        rows as `rows`), or why there is none: `missing`, when the table is not there.
        `more(conn, rows)` reads what else the page shows, on the same connection."""
        user = await authenticated(self.auth, request)
        missing: str | None = None

        def read(conn: Any) -> tuple[list[Any], dict[str, Any]]:
            rows = query(conn, tables=self.tables)
            return rows, more(conn, rows) if more else {}

        try:
            found, extra = await self.read(read)
        except SchemaError as exc:
            found, extra, missing = [], {}, str(exc)
        if section == "processes":
            extra.setdefault("idle", {})
            live = [w for w in found if w.state != "stale"]
            hosts: dict[str, list[_Process]] = {}
            for process in _processes(live):
                hosts.setdefault(process.host, []).append(process)
            extra["hosts"] = [_Host(name, tuple(procs)) for name, procs in hosts.items()]
            extra["stale"] = _processes([w for w in found if w.state == "stale"])
        return self.render(
            request,
            user,
            f"{section}.html",
            section=section,
            rows=found,
            missing=missing,
            **extra,
        )

    async def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in _STATIC:
            raise HTTPException(404, f"no file {name}")
        headers = {"Cache-Control": "max-age=300", "X-Content-Type-Options": "nosniff"}
        return Response(self.static_files[name], media_type=_STATIC[name], headers=headers)

    def preview(self, job: admin.JobInfo) -> str:
        """The start of the payload for a listing, which read only its first characters: a
        longer one is shown as its raw text, unless a redact hook must see it decoded."""
        if not job.payload_truncated:
            return _preview(self.payload(job))
        if self.redact is not None:
            return "(a large payload: open the job to see it)"
        return _preview(str(job.payload))

    def payload(self, job: admin.JobInfo, indent: int | None = None) -> str:
        """The job's payload as JSON, through the redact hook; hidden when the hook fails."""
        try:
            shown = job.payload if self.redact is None else self.redact(job.job_type, job.payload)
        except Exception:
            _logger.exception("the redact hook failed on job %s", job.job_id)
            return "(hidden: the redact hook failed)"
        return json.dumps(jsonable(shown), indent=indent, ensure_ascii=False)

    # Actions ---------------------------------------------------------------------------------

    async def actor(self, request: Request) -> tuple[Identity, FormData]:
        """The user allowed to act, and the form: 403 when read-only, 401 without a user,
        403 from another site, for a viewer (logged: `dashboard_action_refused`), or without
        the form's CSRF token."""
        if not self.actions:
            raise HTTPException(403, "this dashboard is read-only: actions are not enabled")
        user = await authenticated(self.auth, request)
        if user is None:  # actions need an auth hook: never so
            raise HTTPException(401, "sign in: this dashboard needs an authenticated user")
        if not same_origin(request):
            raise HTTPException(403, "refused: the request comes from another site")
        if not user.operator:
            action = _here(request).partition("?")[0].strip("/")
            refused = {"user": user.user, "role": user.role, "action": action}
            self._log("dashboard_action_refused", refused)
            raise HTTPException(
                403,
                f"refused: {user.user} is a {user.role}, who sees every page and changes "
                "nothing; ask an operator to do it",
            )
        form = await request.form()
        if not self.signer.csrf_valid(request, user.user, form.get(CSRF_FIELD)):
            raise HTTPException(
                403, "refused: the form's CSRF token is missing or wrong; reload the page and retry"
            )
        return user, form

    async def retry(self, request: Request) -> Response:
        return await self._on_jobs(request, "retry")

    async def cancel(self, request: Request) -> Response:
        return await self._on_jobs(request, "cancel")

    async def discard(self, request: Request) -> Response:
        return await self._on_jobs(request, "discard")

    async def reschedule(self, request: Request) -> Response:
        return await self._on_jobs(request, "reschedule")

    async def _on_jobs(self, request: Request, action: str) -> Response:
        """Retry, cancel or discard the jobs the form names: by ids, or by queue, job type,
        state and error. One job is retried or cancelled at once; anything else is counted
        first, as of now, and done once the user confirms that count: then only what was
        there when counted (later failures and jobs are left out), a batch per transaction,
        and the message says so when fewer changed than were counted. A request acts for
        `STEP_SECONDS` at most: past them, it shows how far it got and what is left, counted
        in the database, and the page goes on with the next step (`_step`)."""
        user, form = await self.actor(request)
        chosen = _Chosen.of(form, action, self._job_type(form))
        change = _ACTIONS[action].change
        expected, until = _confirmed(form)
        if expected is None and not chosen.at_once(action):
            now = datetime.now(timezone.utc)
            count = await self.read(
                lambda conn: change(
                    conn,
                    chosen.ids,
                    **chosen.options(action, now),
                    dry_run=True,
                    tables=self.tables,
                )
            )
            return self.render(
                request,
                user,
                "confirm.html",
                refresh=False,
                section=None,
                action=action,
                verb=_ACTIONS[action].verb,
                question=chosen.question(action, count),
                count=count,
                chosen=chosen,
                fields=chosen.fields(),
                until=now.isoformat(),
                counted_at=now,
                back=_back(form),
            )
        before = self._done(form, action)
        moved, left = await self.write(lambda conn: self._step(conn, action, chosen, until))
        count = before + moved
        selection = chosen.logged(expected)
        if left:
            data = {"user": user.user, "action": action, **selection, "count": moved, "left": left}
            self._log("dashboard_action_step", data)
            return self.render(
                request,
                user,
                "progress.html",
                refresh=False,
                section=None,
                action=action,
                outcome=_ACTIONS[action].outcome,
                done=count,
                done_signed=self.signer.sign(f"{action} {count}"),
                left=left,
                expected=expected,
                chosen=chosen,
                fields=chosen.fields(),
                until=until and until.isoformat(),
                back=_back(form),
            )
        said = f"{_jobs(count)} {_ACTIONS[action].outcome}"
        if expected is not None and count != expected:
            said += f", of the {expected:,} counted: the others changed in the meantime"
        return self.done(request, form, user, action, selection, count, said)

    def _done(self, form: FormData, action: str) -> int:
        """The jobs the earlier steps of this action moved (0 at its first), as this
        dashboard signed them on the progress page, so that the total it says is so."""
        signed = _value(form, "done")
        if signed is None:
            return 0
        text = self.signer.unsign(signed)
        verb, _, count = (text or "").partition(" ")
        if verb != action or not (count.isascii() and count.isdigit()):
            raise HTTPException(400, "done: not a count of this action that this dashboard signed")
        return int(count)

    def _step(
        self, conn: Any, action: str, chosen: _Chosen, until: datetime | None
    ) -> tuple[int, int]:
        """Act on the chosen jobs a batch per transaction, for `STEP_SECONDS` at most: how
        many jobs it moved, and how many it left (0 when it went through them all, or when
        it moved none, so that a step always moves some or ends the action)."""
        change = _ACTIONS[action].change
        options = chosen.options(action, until)
        ends = time.monotonic() + STEP_SECONDS
        done = 0
        steps = admin.in_batches(
            conn, change, chosen.ids, batch_size=BATCH_SIZE, tables=self.tables, **options
        )
        for moved in steps:
            conn.commit()
            done += moved
            if time.monotonic() >= ends:
                break
        else:
            return done, 0
        if not done:
            return done, 0
        left = change(conn, chosen.ids, **options, dry_run=True, tables=self.tables)
        conn.rollback()
        return done, left

    async def pause(self, request: Request) -> Response:
        return await self._pause_or_resume(request, admin.pause_queue, "pause", "paused")

    async def resume(self, request: Request) -> Response:
        return await self._pause_or_resume(request, admin.resume_queue, "resume", "resumed")

    async def schedule_action(self, request: Request) -> Response:
        """Run now, disable or enable a schedule (see _schedules)."""
        from ._schedules import act

        return await act(self, request, _value)

    async def _pause_or_resume(
        self, request: Request, change: Callable[..., bool], action: str, done: str
    ) -> Response:
        user, form = await self.actor(request)
        queue = _value(form, "queue")
        if queue is None:
            raise HTTPException(400, f"{action} needs a queue")
        changed = await self.write(lambda conn: change(conn, queue, tables=self.tables))
        said = f"queue {queue} {done}" if changed else f"queue {queue} was {done} already"
        return self.done(request, form, user, action, {"queue": queue}, int(changed), said)

    def done(
        self,
        request: Request,
        form: FormData,
        user: Identity,
        action: str,
        selection: dict[str, Any],
        count: int,
        message: str,
    ) -> Response:
        """Log the action, then send the browser back to its page with a flash message."""
        data = {"user": user.user, "action": action, **selection, "count": count}
        self._log("dashboard_action", data)
        base = _base(request)
        response = RedirectResponse(base + _back(form), 303)
        response.set_cookie(
            FLASH_COOKIE,
            self.signer.sign(message),
            path=f"{base}/",
            httponly=True,
            samesite="strict",
        )
        return response

    def _log(self, event: str, data: dict[str, Any]) -> None:
        """Give the event to the log function; to the default log when that fails."""
        try:
            self.log(event, data)
        except Exception:
            _logger.exception("the dashboard's log function failed")
            default_log(event, data)

    # Rendering -------------------------------------------------------------------------------

    def render(
        self,
        request: Request,
        user: Identity | None,
        template: str,
        status: int = 200,
        headers: Mapping[str, str] | None = None,
        refresh: bool = True,
        **context: Any,
    ) -> HTMLResponse:
        """A page, with the CSRF cookie set when the browser has none, and the flash message
        shown once (a refresh leaves it for the page it belongs to). Its action controls are
        there only for an operator of a dashboard with actions."""
        base = _base(request)
        nonce, new = self.signer.nonce(request)
        refreshing = request.headers.get(REFRESH_HEADER) == "1"
        flash_cookie = None if refreshing else request.cookies.get(FLASH_COOKIE)
        name = None if user is None else user.user
        html = self.templates.get_template(template).render(
            base=base,
            here=_here(request),
            actions=self.actions and (user is None or user.operator),
            user=name,
            role=None if user is None else user.role,
            csrf_field=CSRF_FIELD,
            csrf=self.signer.csrf_token(nonce, name),
            refresh_s=self.refresh_s if refresh else 0,
            flash=flash_cookie and self.signer.unsign(flash_cookie),
            now=datetime.now(timezone.utc),
            **context,
        )
        response = HTMLResponse(html, status, headers={**_HEADERS, **(headers or {})})
        secure = request.url.scheme == "https"
        if new:
            response.set_cookie(
                CSRF_COOKIE, nonce, path=f"{base}/", httponly=True, samesite="strict", secure=secure
            )
        if flash_cookie is not None:
            response.delete_cookie(FLASH_COOKIE, path=f"{base}/")
        return response

    async def http_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return self.render(
            request,
            None,
            "error.html",
            exc.status_code,
            headers=exc.headers,
            section=None,
            message=exc.detail,
        )

    async def bad_request(self, request: Request, exc: Exception) -> Response:
        return self.render(request, None, "error.html", 400, section=None, message=str(exc))

    async def database_late(self, request: Request, exc: Exception) -> Response:
        message = f"the database is not answering: {exc}; the page will try again"
        return self.render(request, None, "error.html", 503, section=None, message=message)

    async def server_error(self, request: Request, exc: Exception) -> Response:
        if is_transient(exc):
            message = f"the database is not answering ({type(exc).__name__}); see the server's log"
            return self.render(request, None, "error.html", 503, section=None, message=message)
        message = f"the dashboard could not answer ({type(exc).__name__}); see the server's log"
        return self.render(request, None, "error.html", 500, section=None, message=message)


# Request values: anything a user can type is checked here, and a bad one is a 400 --------------


def _value(values: Mapping[str, Any], name: str) -> str | None:
    """A query or form field exactly as sent, never stripped (`billing` and `billing ` are two
    queues); None when absent or empty. When its `EXACT` companion is there and the field
    still shows that value (but for CRs and LFs), the companion's value, CRs and LFs as
    stored. A NUL is refused: no database compares it as the text it was meant to be."""
    value = values.get(name)
    if not isinstance(value, str) or value == "":
        value = None
    exact = values.get(name + EXACT)
    if value is not None and isinstance(exact, str):
        try:
            decoded = json.loads(exact)
        except ValueError:
            decoded = None
        if not isinstance(decoded, str):
            raise HTTPException(400, f"{name}{EXACT} must be a JSON string, got {exact!r}")
        if _unbroken(decoded) == _unbroken(value):
            value = decoded
    if value is not None and "\x00" in value:
        raise HTTPException(400, f"{name} {value!r} contains a NUL character, which it cannot")
    return value


def _unbroken(text: str) -> str:
    return text.replace("\r", "").replace("\n", "")


def _exact(value: Any) -> str:
    """A value as JSON in ASCII, for an `EXACT` field: no CR or LF left to mangle."""
    return json.dumps(value)


def _attribute(value: Any) -> markupsafe.Markup:
    """A value for an HTML attribute, escaped, its CRs as references: an HTML parser reads a
    CR written as it is as an LF, and `billing\r` would be `billing\n` in the page."""
    return markupsafe.Markup(str(markupsafe.escape(value)).replace("\r", "&#13;"))


def _needs_exact(value: Any) -> bool:
    """Whether a form field cannot carry this value as it is (see `EXACT`)."""
    return isinstance(value, str) and ("\r" in value or "\n" in value)


def _page(text: str | None) -> int:
    if text is None:
        return 1
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= 10**6:
        raise HTTPException(400, f"page {text!r} is not a number from 1 to 1000000")
    return int(text)


def _after(params: Mapping[str, Any]) -> Pair | None:
    """The queue and job type pair a timings page starts after (both or neither)."""
    queue, job_type = _value(params, "after_queue"), _value(params, "after_job_type")
    if (queue is None) != (job_type is None):
        raise HTTPException(400, "after_queue and after_job_type go together: give both or neither")
    return None if queue is None or job_type is None else (queue, job_type)


def _moment(text: str | None, name: str) -> datetime | None:
    """A time filter: an ISO 8601 date and time, UTC unless it says its offset."""
    if text is None:
        return None
    given = text.strip()
    try:
        at = datetime.fromisoformat(given[:-1] + "+00:00" if given.endswith("Z") else given)
    except ValueError:
        raise HTTPException(
            400, f"{name} {text!r} is not a date and time: give one as 2026-05-01T09:00:00Z"
        ) from None
    return at.replace(tzinfo=timezone.utc) if at.tzinfo is None else at.astimezone(timezone.utc)


def _job_id(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise HTTPException(400, f"job id {text!r} is not a UUID") from None


def _state(text: str | None) -> str | None:
    if text is not None and text not in admin.STATES:
        raise HTTPException(400, f"unknown state {text!r}; states: {', '.join(admin.STATES)}")
    return text


def _limit(text: str | None) -> int:
    if text is None:
        return PAGE_SIZE
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= admin.MAX_LIMIT:
        raise HTTPException(400, f"limit {text!r} is not a number from 1 to {admin.MAX_LIMIT}")
    return int(text)


@dataclasses.dataclass(frozen=True)
class _Action:
    change: Callable[..., int]
    verb: str
    outcome: str


_ACTIONS = {
    "retry": _Action(admin.retry_jobs, "Retry", "back in the queue"),
    "cancel": _Action(admin.cancel_jobs, "Cancel", "cancelled"),
    "discard": _Action(admin.discard_failed, "Discard", "discarded"),
    "reschedule": _Action(admin.reschedule_jobs, "Reschedule", "rescheduled"),
}
DUE_AT = (timedelta(days=1), timedelta(days=3653))
"""How far before now and after now a time given to retry or reschedule at may be: further
is taken for a typo (a wrong year), refused."""
BATCH_SIZE = admin.BATCH_SIZE
STEP_SECONDS = 20.0
"""The most seconds one request of a confirmed action acts, well within a proxy's usual
60 s: a larger action goes on in further requests, its progress shown between them."""
MAX_SELECTED = admin.MAX_LIMIT
WORKFLOWS_PER_PAGE = 20
WORKFLOW_LIST_JOBS = admin.MAX_WORKFLOW_JOBS
"""The most rows the workflows' page reads of the workflows' table, and of their jobs."""
WORKFLOW_PAGE_JOBS = 1000
"""The most jobs a workflow's page shows: a bigger one shows its size only."""
WORKFLOW_GRAPH_JOBS = 60
"""The most jobs a workflow's page draws as a graph: a bigger one shows its table by level
only (more boxes than fit a screen or two are no longer followed at a glance)."""


@dataclasses.dataclass(frozen=True)
class _Chosen:
    """The jobs a form acts on: its ids (None: no ids), and its filters."""

    ids: list[uuid.UUID] | None
    queue: str | None
    job_type: str | None
    state: str | None
    error: str | tuple[str, ...] | None
    """One error's first line, or those of one cause (the form's `errors`, a JSON list)."""
    at: datetime | None = None
    """When a retried or rescheduled job falls due (None: now)."""
    every: bool = False
    """Every job of the filters, not only the ones ticked on the page (the form's `all`)."""

    @classmethod
    def of(cls, form: FormData, action: str, job_type: str | None) -> _Chosen:
        texts = [text for text in form.getlist("job_id") if isinstance(text, str) and text]
        if len(texts) > MAX_SELECTED:
            raise HTTPException(400, f"select at most {MAX_SELECTED} jobs, got {len(texts)}")
        ids = list(dict.fromkeys(_job_id(text.strip()) for text in texts)) if texts else None
        every = _value(form, "all") is not None
        ticked = _value(form, "selected") is not None and not every
        if every:
            ids = None  # every job of the filters, not only those ticked
        elif ticked and ids is None:
            raise HTTPException(400, f"no job selected to {action}: tick the jobs first")
        if ticked:
            # The ticked jobs alone: the page's filters, in the form for `all`, do not apply.
            form = _without(form, ("queue", "job_type", "state", "error", "errors"))
        state = _state(_value(form, "state"))
        if action == "cancel" and state not in (None, *WAITING):
            raise HTTPException(
                400,
                f"cancel acts on waiting jobs (blocked, queued, scheduled, retrying), not {state}",
            )
        if action == "reschedule" and state not in (None, *admin.RESCHEDULABLE):
            raise HTTPException(
                400, f"reschedule acts on queued, scheduled and retrying jobs, not {state}"
            )
        if action in ("retry", "discard") and state not in (None, "failed"):
            raise HTTPException(400, f"{action} acts on failed jobs, not {state}")
        at = _due_at(_value(form, "at"))
        if at is not None and action not in ("retry", "reschedule"):
            raise HTTPException(
                400, f"a time to be due at is for retry and reschedule, not {action}"
            )
        error: str | tuple[str, ...] | None = _value(form, "error")
        errors = _errors(_value(form, "errors"))
        if errors is not None:
            if error is not None:
                raise HTTPException(400, "give error or errors, not both")
            error = errors
        return cls(ids, _value(form, "queue"), job_type, state, error, at, every)

    def at_once(self, action: str) -> bool:
        """Whether to act without a confirmation: a retry, cancel or run now of one job by
        its id."""
        one = self.ids is not None and len(self.ids) == 1
        filters = (self.queue, self.job_type, self.state, self.error, self.at)
        return one and all(value is None for value in filters) and action != "discard"

    def options(self, action: str, until: datetime | None) -> dict[str, Any]:
        """The filters as the admin function of `action` takes them, as of `until`."""
        options: dict[str, Any] = {
            "queue": self.queue,
            "job_type": self.job_type,
            "error": self.error,
        }
        if action == "cancel":
            return {**options, "state": self.state, "enqueued_until": until}
        if action == "reschedule":
            return {**options, "state": self.state, "enqueued_until": until, "at": self.at}
        if action == "retry":
            return {**options, "until": until, "at": self.at}
        return {**options, "until": until}

    def fields(self) -> dict[str, str | None]:
        """The filters as form fields (the ids go apart, one field each; a cause's errors
        as one JSON list)."""
        one = self.error if isinstance(self.error, str) else None
        many = _exact(list(self.error)) if isinstance(self.error, tuple) else None
        return {
            "queue": self.queue,
            "job_type": self.job_type,
            "state": self.state,
            "error": one,
            "errors": many,
            "at": self.at.isoformat() if self.at is not None else None,
            "all": "1" if self.every else None,
        }

    def question(self, action: str, count: int) -> str:
        """`Retry 1,234 failed jobs of queue email?`"""
        waits = action in ("cancel", "reschedule")
        kind = (self.state or "waiting") if waits else "failed"
        noun = f"{kind} job{'' if count == 1 else 's'}"
        scope = [
            f"of queue {self.queue}" if self.queue is not None else "",
            f"of type {self.job_type}" if self.job_type is not None else "",
            self._errors_said(),
        ]
        if self.ids is not None:
            scope.append(f"(of the {len(self.ids):,} selected)")
        if self.every:
            scope.append("(every one of this filter, not only this page)")
        said = "".join(f" {part}" for part in scope if part)
        if not count:
            return f"There are no {kind} jobs{said} to {action} now."
        if action == "reschedule":
            when = "now" if self.at is None else f"at {_utc(self.at)}"
            return f"Make {count:,} {noun}{said} due {when}?"
        due = f", due at {_utc(self.at)}" if self.at is not None and action == "retry" else ""
        return f"{_ACTIONS[action].verb} {count:,} {noun}{said}{due}?"

    def _errors_said(self) -> str:
        """The errors chosen, in words: one, or a cause's (named when they share one)."""
        if self.error is None:
            return ""
        if isinstance(self.error, str):
            return f"with the error “{self.error}”"
        causes = {admin.error_cause(error) for error in self.error}
        n = len(self.error)
        errors = f"{n} error{'' if n == 1 else 's'}"
        if len(causes) == 1:
            return f"with the cause “{causes.pop()}” ({errors})"
        return f"with one of {errors}"

    def logged(self, expected: int | None) -> dict[str, Any]:
        """What the action log says of the jobs (the filters set, and the count confirmed)."""
        data: dict[str, Any] = {
            "job_ids": self.ids and [str(i) for i in self.ids],
            "queue": self.queue,
            "job_type": self.job_type,
        }
        error = list(self.error) if isinstance(self.error, tuple) else self.error
        extra = {
            "state": self.state,
            "error": error,
            "at": self.at.isoformat() if self.at is not None else None,
            "all": self.every or None,
            "confirmed": expected,
        }
        return {**data, **{key: value for key, value in extra.items() if value is not None}}


@dataclasses.dataclass(frozen=True)
class _Process:
    """A worker process of the Processes page: its host and pid, and its workers."""

    host: str
    pid: int
    workers: tuple[admin.WorkerInfo, ...]

    @property
    def busy(self) -> int:
        return sum(w.busy for w in self.workers)

    @property
    def threads(self) -> int:
        return sum(w.worker_threads for w in self.workers)


@dataclasses.dataclass(frozen=True)
class _Host:
    name: str
    processes: tuple[_Process, ...]


def _processes(workers: list[admin.WorkerInfo]) -> list[_Process]:
    """The workers by process (host and pid), by host then pid, each process's workers in
    the order read."""
    by: dict[tuple[str, int], list[admin.WorkerInfo]] = {}
    for worker in workers:
        by.setdefault((worker.host, worker.pid), []).append(worker)
    return [_Process(host, pid, tuple(by[host, pid])) for host, pid in sorted(by)]


def _errors(text: str | None) -> tuple[str, ...] | None:
    """The `errors` field: a JSON list of 1 to `admin.MAX_ERRORS` first lines (None: none)."""
    if text is None:
        return None
    try:
        decoded = json.loads(text)
    except ValueError:
        decoded = None
    if (
        not isinstance(decoded, list)
        or not 1 <= len(decoded) <= admin.MAX_ERRORS
        or not all(isinstance(each, str) and each for each in decoded)
    ):
        raise HTTPException(
            400, f"errors must be a JSON list of 1 to {admin.MAX_ERRORS} first lines of errors"
        )
    return tuple(decoded)


def _without(form: FormData, names: tuple[str, ...]) -> FormData:
    """The form without the fields `names` (nor their exact values)."""
    dropped = {*names, *(name + EXACT for name in names)}
    return FormData([(key, value) for key, value in form.multi_items() if key not in dropped])


def _due_at(text: str | None) -> datetime | None:
    """The form's `at`: an ISO 8601 date and time, in UTC unless it says its offset (a
    datetime-local field sends `2026-05-01T09:30`); None when empty. Refused when it does
    not parse, or lies further than `DUE_AT` from now."""
    if text is None or not text.strip():
        return None
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        raise HTTPException(
            400, f"at {text!r} is not a date and time: give one as 2026-05-01T09:30 (UTC)"
        ) from None
    at = at.replace(tzinfo=timezone.utc) if at.tzinfo is None else at.astimezone(timezone.utc)
    now = datetime.now(timezone.utc)
    earliest, latest = now - DUE_AT[0], now + DUE_AT[1]
    if not earliest <= at <= latest:
        raise HTTPException(
            400,
            f"at {_utc(at)} is out of range: give a time between {_utc(earliest)} and "
            f"{_utc(latest)}",
        )
    return at


def _confirmed(form: FormData) -> tuple[int | None, datetime | None]:
    """The count a confirmation showed, and as of when (None, None: not confirmed yet)."""
    count, until = _value(form, "confirmed"), _value(form, "until")
    if count is None:
        return None, None
    if not (count.isascii() and count.isdigit()) or until is None:
        raise HTTPException(400, f"confirmed {count!r} needs a count and the time it was made")
    try:
        at = datetime.fromisoformat(until)
    except ValueError:
        raise HTTPException(400, f"until {until!r} is not an ISO 8601 time") from None
    if at.tzinfo is None:
        raise HTTPException(400, f"until {until!r} needs its time zone")
    return int(count), at


def _back(form: FormData) -> str:
    """Where an action sends the browser back to: a path of this dashboard, else its root."""
    back = _value(form, "next") or "/"
    if not back.startswith("/") or back.startswith("//") or "\\" in back:
        return "/"
    return back


def _jobs(count: int) -> str:
    return f"{count:,} job{'' if count == 1 else 's'}"


def _preview(text: str) -> str:
    return text if len(text) <= PREVIEW else text[: PREVIEW - 1] + "…"


# Paths and links -------------------------------------------------------------------------------


def _base(request: Request) -> str:
    """Where the dashboard is mounted ('' at the root)."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def _here(request: Request) -> str:
    """This page's path below the mount point, with its query: where an action comes back to."""
    path, root = request.url.path, str(request.scope.get("root_path", ""))
    if root and path.startswith(root):
        path = path[len(root) :] or "/"
    query = request.url.query
    return f"{path}?{query}" if query else path


def _finished(
    request: Request, queue: str | None = None, job_type: str | None = None
) -> _chart.Link:
    """The link of a chart's bar: the jobs (of `queue` and `job_type`) that finished in its
    bucket."""
    path = f"{_base(request)}/jobs"

    def link(start: datetime, end: datetime) -> str:
        return _url(
            path,
            queue=queue,
            job_type=job_type,
            finished_since=_iso(start),
            finished_until=_iso(end),
        )

    return link


def _iso(moment: datetime) -> str:
    """A time for a link: UTC, to the second, `Z` for its zone."""
    return f"{moment.astimezone(timezone.utc):%Y-%m-%dT%H:%M:%S}Z"


def _url(path: str, **params: Any) -> str:
    """`path` with the given query parameters, the empty ones left out."""
    given = {name: value for name, value in params.items() if value not in (None, "")}
    return f"{path}?{urlencode(given)}" if given else path


# Templates -------------------------------------------------------------------------------------


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader(__package__ or "", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        ago=_ago,
        utc=_utc,
        utc_ms=_utc_ms,
        span=_span,
        duration=_duration,
        exact=_exact,
        attr=_attribute,
        short_id=_short_id,
        age_class=_age_class,
        percent=_percent,
    )
    env.globals.update(
        url=_url,
        states=admin.STATES,
        waiting=WAITING,
        exact_suffix=EXACT,
        needs_exact=_needs_exact,
        oldest_warn=OLDEST_DUE_WARN,
        oldest_bad=OLDEST_DUE_BAD,
    )
    return env


def _age_class(oldest_due: timedelta | None) -> str:
    """The class of an oldest due job's age: "age-ok" under `OLDEST_DUE_WARN`, "age-warn"
    under `OLDEST_DUE_BAD`, else "age-bad" ("age-none" when nothing is due)."""
    if oldest_due is None:
        return "age-none"
    if oldest_due < OLDEST_DUE_WARN:
        return "age-ok"
    return "age-warn" if oldest_due < OLDEST_DUE_BAD else "age-bad"


def _percent(share: float | None) -> str:
    """A share as a percentage to one decimal, never rounded to 0 % or 100 % when it is
    not ("-" for none)."""
    if share is None:
        return "-"
    value = share * 100
    if 0 < value < 0.1:
        return "<0.1%"
    if 99.9 < value < 100:
        return ">99.9%"
    return f"{value:.1f}%" if 0 < value < 100 else f"{value:.0f}%"


def _short_id(job_id: uuid.UUID) -> str:
    """The last `ID_CHARS` hex digits of a job id: the part that tells one job from another."""
    return "…" + job_id.hex[-ID_CHARS:]


def _utc(moment: datetime | None) -> str:
    return "-" if moment is None else f"{moment.astimezone(timezone.utc):%Y-%m-%d %H:%M:%S} UTC"


def _utc_ms(moment: datetime) -> str:
    """A moment to the millisecond, for attempts that start within a second of each other."""
    at = moment.astimezone(timezone.utc)
    return f"{at:%Y-%m-%d %H:%M:%S}.{at.microsecond // 1000:03d} UTC"


def _span(delta: timedelta | None) -> str:
    """A duration, short: 4.2s, 3.5m, 2.0h, 1.5d."""
    if delta is None:
        return "-"
    seconds = abs(delta.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.1f}s"


def _duration(delta: timedelta | None) -> str:
    """A duration precise enough for a run: 12 ms, 4.25 s, then as `_span` (3.5m, 2.0h)."""
    if delta is None:
        return "-"
    seconds = delta.total_seconds()
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.3g} s"
    return _span(delta)


def _ago(moment: datetime | None) -> str:
    """How long ago, or 'in …' for a time to come."""
    if moment is None:
        return "-"
    delta = datetime.now(timezone.utc) - moment
    return f"in {_span(delta)}" if delta.total_seconds() < 0 else f"{_span(delta)} ago"

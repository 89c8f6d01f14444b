"""`JobRouter`: one function per job type, Proletarian's multimethod as a handler.

    router = JobRouter()

    @router.handler("send_email")
    def send_email(job_type, payload):
        ...

    create_queue_worker(pool, router)   # the router is itself a handler

Inside a `make_handler(system)` factory the registered functions close over
the system's components (mailer, search client, database), and tests call
the router directly with stubs.

Advanced mode: a worker with `handler_fn_mode="advanced"` calls its handler
with one `Job`; the router then dispatches on `job.job_type` and calls the
registered function with that `Job` (so register `def f(job)` functions in a
router meant for advanced mode).

Clojure keywords: a leading `:` is the keyword spelling of the same job type, so
`":app.jobs/send-email"` and `"app.jobs/send-email"` name one registration. Jobs
that a worker with `job_type_style="keyword"` hands over (`"app.jobs/send-email"`)
and the raw row text a plain-style worker hands over (`":app.jobs/send-email"`)
reach the same function, registered in either spelling.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from .errors import ArgumentTypeError, ConfigurationError, UnknownJobType
from .jobs import Job

F = TypeVar("F", bound=Callable[..., Any])


class JobRouter:
    """Dispatch a job to the function registered for its job type; itself a handler."""

    def __init__(
        self,
        handlers: Mapping[str, Callable[..., Any]] | None = None,
        *,
        default: Callable[..., Any] | None = None,
    ) -> None:
        self._handlers: dict[str, Callable[..., Any]] = {}
        if default is not None and not callable(default):
            raise ConfigurationError(f"default must be callable, got {default!r}")
        self.default = default
        for job_type, fn in (handlers or {}).items():
            self.register(job_type, fn)

    def __repr__(self) -> str:
        return f"<JobRouter {sorted(self._handlers)}>"

    def register(self, job_type: str, fn: F) -> F:
        """Register `fn` for `job_type` (`":ns/name"` is the keyword spelling of `"ns/name"`:
        one registration); registering a type twice is an error."""
        if not isinstance(job_type, str) or job_type in ("", ":"):
            raise ConfigurationError(f"job_type must be a non-empty string, got {job_type!r}")
        if not callable(fn):
            raise ConfigurationError(f"handler for {job_type!r} must be callable, got {fn!r}")
        key = _unkeyword(job_type)
        if key in self._handlers:
            raise ConfigurationError(
                f"job type {job_type!r} already has a handler: {self._handlers[key]!r}"
            )
        self._handlers[key] = fn
        return fn

    def handler(self, *job_types: str) -> Callable[[F], F]:
        """Decorator: register the function for one or more job types."""
        if not job_types:
            raise ConfigurationError('router.handler needs a job type: @router.handler("x")')

        def decorate(fn: F) -> F:
            for job_type in job_types:
                self.register(job_type, fn)
            return fn

        return decorate

    def lookup(self, job_type: str) -> Callable[..., Any]:
        """The function for `job_type` in either spelling (or the default); `UnknownJobType`
        if there is none."""
        fn = self._handlers.get(job_type)
        if fn is None and job_type[:1] == ":":
            fn = self._handlers.get(job_type[1:])
        if fn is None:
            fn = self.default
        if fn is None:
            raise UnknownJobType(job_type, tuple(sorted(self._handlers)))
        return fn

    def __call__(self, job_type: str | Job, *payload: Any) -> Any:
        """Run the job: `router(job_type, payload)`, or `router(job)` in advanced mode."""
        if isinstance(job_type, Job) and not payload:
            return self.lookup(job_type.job_type)(job_type)
        if len(payload) != 1:
            raise ArgumentTypeError(
                "a JobRouter is called as router(job_type, payload) or router(job)"
            )
        return self.lookup(job_type)(job_type, payload[0])  # type: ignore[arg-type]

    def __contains__(self, job_type: object) -> bool:
        return isinstance(job_type, str) and _unkeyword(job_type) in self._handlers

    def __iter__(self) -> Iterator[str]:
        return iter(self._handlers)

    def __len__(self) -> int:
        return len(self._handlers)

    @property
    def job_types(self) -> tuple[str, ...]:
        """The registered job types, in registration order (keywords without the colon)."""
        return tuple(self._handlers)


def _unkeyword(job_type: str) -> str:
    """A job type as the router keys it: a Clojure keyword's text without its colon."""
    return job_type[1:] if job_type[:1] == ":" else job_type

"""`proletarian-di worker`: import a target the way Dramatiq does, run it until a signal."""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import importlib
import importlib.util
import inspect
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Annotated, Any

import typer

from ... import admin
from ..._common.logging import describe
from ..._engine.options import storage_defaults
from ..._engine.signals import Signals, total_summary
from ..._engine.signals import exit_now as _exit_now
from ..._engine.signals import stop_all as _stop_all
from ..._store.secrets import scrub
from ...health import serve_health
from ...lifecycle import (
    _resources,
    as_container,
    container_workers,
    init_resources,
    shutdown_resources,
)
from ...observers import observing_all
from ...worker import QueueWorker
from ._app import (
    EXIT_CODES_HELP,
    JOB_TYPE_STYLE_OPTION,
    SERIALIZER_OPTION,
    CLIError,
    ExitCode,
    _classify,
    _error,
    _escape,
    _guarded,
    _log_level,
    _one_line,
    app,
    err,
)
from .supervisor import Supervised, Supervisor, child_arguments, processes_option

# worker ---------------------------------------------------------------------------------------


@dataclasses.dataclass
class Target:
    """A loaded `module:attr` worker target: a container or a QueueWorker."""

    spec: str
    container: Any = None
    worker: QueueWorker | None = None


def _import_module(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
            raise CLIError(
                f"cannot import module {name!r}: no module named {exc.name!r} "
                f"(searched {sys.path[0]} and the installed packages; use --path to add a folder)",
                ExitCode.IMPORT,
            ) from None
        raise CLIError(
            f"cannot import module {name!r}: {_one_line(scrub(describe(exc)))}{_where(exc)}",
            ExitCode.IMPORT,
        ) from None
    except Exception as exc:
        raise CLIError(
            f"cannot import module {name!r}: {_one_line(scrub(describe(exc)))}{_where(exc)}",
            ExitCode.IMPORT,
        ) from None


def _where(exc: BaseException) -> str:
    if isinstance(exc, SyntaxError) and exc.filename:
        return f" ({exc.filename}:{exc.lineno})"
    frames = traceback.extract_tb(exc.__traceback__)
    for frame in reversed(frames):
        if "importlib" not in frame.filename:
            return f" ({frame.filename}:{frame.lineno})"
    return ""


def _as_target(spec: str, obj: Any, called: bool = False) -> Target:
    if isinstance(obj, QueueWorker):
        return Target(spec, worker=obj)
    container = as_container(obj)
    if container is not None:
        return Target(spec, container=container)
    if callable(obj) and not called and not isinstance(obj, type):
        try:
            required = [
                p
                for p in inspect.signature(obj).parameters.values()
                if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
            ]
        except (TypeError, ValueError):
            required = []
        if required:
            raise CLIError(
                f"{spec} is a function with required arguments "
                f"({', '.join(p.name for p in required)}); a target function takes none",
                ExitCode.TARGET,
            )
        return _as_target(spec, obj(), called=True)
    what = f"{spec}() returned" if called else f"{spec} is"
    raise CLIError(
        f"{what} {type(obj).__name__} {_short_repr(obj)}, not a runnable target: expected a "
        "dependency-injector container (class or instance), a QueueWorker, "
        "or a function of no arguments returning one",
        ExitCode.TARGET,
    )


def _short_repr(obj: Any) -> str:
    text = _one_line(repr(obj))
    return text if len(text) <= 60 else text[:57] + "..."


def load_target(spec: str) -> Target:
    """Import `module:attr` and turn it into a runnable target (user errors as `CLIError`)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise CLIError(
            f"target {spec!r} must be module:attribute, e.g. myapp.containers:Container",
            ExitCode.USAGE,
        )
    module = _import_module(module_name)
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise CLIError(
                f"module {module_name!r} has no attribute {attr!r}", ExitCode.TARGET
            ) from None
    try:
        return _as_target(spec, obj)
    except CLIError:
        raise
    except Exception as exc:
        error = _classify(exc, ExitCode.TARGET)
        if error is not None:
            raise error from None
        raise CLIError(
            f"{spec} raised {_one_line(scrub(describe(exc)))}{_where(exc)}", ExitCode.TARGET
        ) from None


def _start(target: Target) -> list[QueueWorker]:
    if target.worker is not None:
        if not target.worker.running:
            target.worker.start()
        return [target.worker]
    init_resources(target.container)
    workers = container_workers(target.container)
    if not workers:
        with contextlib.suppress(Exception):
            shutdown_resources(target.container)
        raise CLIError(
            f"{target.spec} started no QueueWorker: declare one with "
            "providers.Resource(proletarian_di.di.queue_worker, pool, handler, queue=...)",
            ExitCode.TARGET,
        )
    return workers


def _port_option(flag: str, envvar: str, help: str) -> Any:
    """An optional port to serve on (0: a free one, printed at start)."""
    return typer.Option(flag, envvar=envvar, min=0, max=65535, help=help, show_default=False)


class LogLevel(str, enum.Enum):
    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


@app.command(epilog=EXIT_CODES_HELP, rich_help_panel="Run")
@_guarded
def worker(
    ctx: typer.Context,
    target: Annotated[
        str,
        typer.Argument(
            help="module:attribute — a dependency-injector container (class or instance), "
            "a QueueWorker, or a function of no arguments returning one.",
            show_default=False,
        ),
    ],
    path: Annotated[
        list[Path] | None,
        typer.Option(
            "--path",
            "-P",
            envvar="PROLETARIAN_PATH",
            help="Folder to import the target from (repeatable). Default: the current directory.",
            show_default=False,
        ),
    ] = None,
    log_level: Annotated[
        LogLevel,
        typer.Option("--log-level", envvar="PROLETARIAN_LOG_LEVEL", help="Worker log level."),
    ] = LogLevel.info,
    metrics_port: Annotated[
        int | None,
        _port_option(
            "--metrics-port",
            "PROLETARIAN_METRICS_PORT",
            "Serve Prometheus metrics at http://HOST:PORT/metrics (extra `metrics`).",
        ),
    ] = None,
    health_port: Annotated[
        int | None,
        _port_option(
            "--health-port",
            "PROLETARIAN_HEALTH_PORT",
            "Answer liveness at http://HOST:PORT/livez and readiness at /readyz.",
        ),
    ] = None,
    host: Annotated[
        str,
        typer.Option(
            "--host",
            envvar="PROLETARIAN_LISTEN_HOST",
            help="Address the metrics and health ports listen on.",
        ),
    ] = "127.0.0.1",
    serializer: Annotated[str | None, SERIALIZER_OPTION] = None,
    job_type_style: Annotated[str | None, JOB_TYPE_STYLE_OPTION] = None,
    processes: Annotated[
        str,
        typer.Option(
            "--processes",
            envvar="PROLETARIAN_PROCESSES",
            callback=processes_option,
            help="Worker processes to run, each importing TARGET, under one supervisor "
            "(a positive integer, or 'auto': one per CPU). 1: no supervisor.",
        ),
    ] = "1",
) -> None:
    """Run the workers of TARGET until SIGTERM or SIGINT.

    A container is started with init_resources() and stopped with
    shutdown_resources(). The first signal drains in-flight jobs (up to each
    worker's await timeout) and exits 0; a second one exits at once, and the
    jobs still running are rolled back by the database and run again later.
    --serializer and --job-type-style apply to every worker and periodic scheduler
    the target creates without one; one created with another value is an error.
    With --processes N, a supervisor runs N such processes and serves one
    metrics port and one health port for all of them.
    """
    if int(processes) > 1:
        arguments = child_arguments(ctx)
        supervisor = Supervisor(target, int(processes), arguments, metrics_port, health_port, host)
        raise typer.Exit(supervisor.run())
    supervised = Supervised.from_environ()
    for folder in reversed(path or [Path.cwd()]):
        sys.path.insert(0, str(folder.resolve()))
    servers = contextlib.ExitStack()
    with _log_level(log_level.value), Signals(on_second=_exit_now) as signals:
        storage = functools.partial(storage_defaults, serializer, job_type_style)
        with storage():
            loaded = load_target(target)
        if metrics_port is not None or (supervised is not None and supervised.metrics):
            servers.enter_context(observing_all(_metrics_observer()))
        try:
            with storage():
                workers = _start(loaded)
        except CLIError:
            raise
        except Exception as exc:
            error = _classify(exc, ExitCode.TARGET)
            if error is None:
                raise
            raise error from None
        described = ", ".join(
            f"{w.queue_worker_id} (queue {w.options.queue!r} of {w.options.job_table} / "
            f"{w.options.archived_job_table}, {w.options.worker_threads} "
            f"thread{'s' if w.options.worker_threads != 1 else ''})"
            for w in workers
        )
        described += _with_schedulers(loaded)
        err.print(_escape(f"proletarian-di worker {target}: running {described}"))
        stopped_alone: list[QueueWorker] = []
        try:
            servers.enter_context(_observing(workers, metrics_port, health_port, host))
            if supervised is not None:
                servers.enter_context(supervised.reporting(workers, _serve_metrics))
            else:
                err.print("stop with Ctrl-C or SIGTERM (a second signal exits at once)")
            while signals.wait(0.2) is None:
                stopped_alone = [w for w in workers if not w.running]
                if stopped_alone:
                    break
            if not stopped_alone:
                err.print(
                    f"{signals.first} received: draining in-flight jobs, then shutting down "
                    "(send it again to exit at once)"
                )
        finally:
            clean = _stop_all(workers)
            servers.close()
            if loaded.container is not None:
                shutdown_resources(loaded.container)
        totals, summary = total_summary(workers)
        if stopped_alone:
            _error(f"{'; '.join(map(_why_stopped, stopped_alone))}; {summary}")
            raise typer.Exit(ExitCode.ERROR)
        if not clean:
            err.print(f"stopped: {totals['abandoned']} abandoned (they run again); {summary}")
            raise typer.Exit(ExitCode.ABANDONED)
        err.print(f"stopped cleanly: {summary}")


def _with_schedulers(target: Target) -> str:
    """What the start-up line adds for the periodic schedulers the container started:
    `, with the periodic scheduler (3 schedules)`, or nothing."""
    if target.container is None:
        return ""
    from ...periodic import Scheduler

    started = [
        provider()
        for provider in _resources(target.container)
        if provider.initialized and isinstance(provider(), Scheduler)
    ]
    if not started:
        return ""
    count = sum(len(scheduler.jobs) for scheduler in started)
    which = "the periodic scheduler" if len(started) == 1 else f"{len(started)} periodic schedulers"
    return f", with {which} ({count} schedule{'s' if count != 1 else ''})"


@contextlib.contextmanager
def _observing(
    workers: list[QueueWorker], metrics_port: int | None, health_port: int | None, host: str
) -> Iterator[None]:
    """Serve the workers' metrics and health checks while they run, as asked."""
    with contextlib.ExitStack() as stack:
        if metrics_port is not None:
            server = _serve_metrics(workers, metrics_port, host)
            stack.callback(server.shutdown)
            stack.callback(server.server_close)
            err.print(f"metrics at http://{_hostport(host, server.server_address[1])}/metrics")
        if health_port is not None:
            health = serve_health(workers, port=health_port, host=host)
            stack.callback(health.close)
            err.print(f"health checks at http://{_hostport(host, health.port)}/livez and /readyz")
        yield


def _metrics_observer() -> Any:
    try:
        from ..prometheus import metrics_observer
    except ImportError:
        raise CLIError(
            "--metrics-port needs prometheus-client: pip install 'proletarian-di[metrics]'",
            ExitCode.USAGE,
        ) from None
    return metrics_observer()


def _serve_metrics(workers: list[QueueWorker], port: int, host: str, registry: Any = None) -> Any:
    from prometheus_client import REGISTRY

    from ..prometheus import register_queue_depth, register_queue_health, serve_metrics

    registry = REGISTRY if registry is None else registry

    by_source: dict[int, tuple[Any, list[admin.Tables]]] = {}
    for worker in workers:
        pair = admin.Tables(worker.options.job_table, worker.options.archived_job_table)
        by_source.setdefault(id(worker.data_source), (worker.data_source, []))[1].append(pair)
    (first, tables), *others = by_source.values()
    depth = register_queue_depth(first, tables, registry)
    health = register_queue_health(first, tables, registry)
    for data_source, more in others:
        depth.add(data_source, more)
        health.add(data_source, more)
    try:
        server, _ = serve_metrics(port, host, registry)
    except OSError as exc:
        raise CLIError(f"cannot serve metrics on {host}:{port}: {exc}", ExitCode.USAGE) from None
    return server


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _why_stopped(worker: QueueWorker) -> str:
    if worker.failure is not None:
        return (
            f"{worker.queue_worker_id} failed: a worker thread died of "
            f"{_one_line(describe(worker.failure))} (see the log above)"
        )
    return f"{worker.queue_worker_id} stopped on its own: on_polling_error asked it to stop"

"""`proletarian-di worker --processes N`: a supervisor running N worker processes of one target.

The supervisor imports nothing of the application: each child is the same `worker` command,
run again by the interpreter (`python -m proletarian_di.cli worker TARGET ...`), and imports the
target itself. The supervisor forwards signals (the first drains, a second hard-stops),
restarts a child that dies unexpectedly after a growing delay, gives up on a child in a crash
loop, and serves one metrics port and one health port for all of them.

A child learns it is supervised from its environment (a folder the supervisor made, its
process number, the supervisor's pid): it then writes the ports of its own health and
queue-depth servers, on 127.0.0.1, to `<folder>/<number>.json`, counts its metrics into the
folder through prometheus-client's multiprocess mode, and drains when the supervisor goes
away.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import typer

from ...health import PING_TIMEOUT_S, Health, HealthServer, WorkerHealth
from ...worker import QueueWorker
from ._app import CLIError, ExitCode, _error, err

DIR_ENV = "PROLETARIAN_SUPERVISOR_DIR"
"""The supervisor's folder, set in its children's environment (and only there)."""
NUMBER_ENV = "PROLETARIAN_WORKER_PROCESS"
"""A child's process number, 1 to N, set in its environment by the supervisor."""
PARENT_ENV = "PROLETARIAN_SUPERVISOR_PID"
"""The supervisor's pid: a child whose parent is no longer that process drains."""
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
SERVED_BY_SUPERVISOR = ("processes", "metrics_port", "health_port", "host")
"""The worker options the supervisor keeps for itself: children are not given them."""
OWN_ENV = ("PROLETARIAN_PROCESSES", "PROLETARIAN_METRICS_PORT", "PROLETARIAN_HEALTH_PORT")

CRASH_LOOP_DEATHS = 5
"""A child that dies this many times within `CRASH_LOOP_WINDOW_S` is in a crash loop: the
supervisor stops restarting it, drains the others and exits 1."""
CRASH_LOOP_WINDOW_S = 60.0
RESTART_DELAY_S = 0.5
"""The wait before restarting a child after its first death in the window; each further
death in the window doubles it, up to `MAX_RESTART_DELAY_S`."""
MAX_RESTART_DELAY_S = 30.0
HARD_STOP_WAIT_S = 5.0
"""After a second signal, how long the children have to exit before they are killed."""
CHILD_ANSWER_S = PING_TIMEOUT_S + 1.0
"""How long the supervisor waits for a child's health or queue-depth answer."""
POLL_S = 0.1
START_ERRORS = frozenset(
    {ExitCode.USAGE, ExitCode.IMPORT, ExitCode.TARGET, ExitCode.DATABASE, ExitCode.SCHEMA}
)
"""A child exiting with one of these failed at start for a reason a restart cannot cure."""


def parse_processes(value: str) -> int:
    """`--processes`: a positive integer, or `auto` (one per CPU this process may use)."""
    text = str(value).strip().lower()
    if text == "auto":
        return _cpus()
    try:
        count = int(text)
    except ValueError:
        raise typer.BadParameter(
            f"must be a positive integer or 'auto', got {value!r}", param_hint="'--processes'"
        ) from None
    if count < 1:
        raise typer.BadParameter(
            f"must be at least 1 (or 'auto'), got {count}", param_hint="'--processes'"
        )
    return count


def processes_option(value: str) -> str:
    """The `--processes` option's check: its value as a count of processes."""
    return str(parse_processes(value))


def _cpus() -> int:
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def child_arguments(ctx: typer.Context) -> list[str]:
    """The command line of this `worker` run again in a child: every option given, except
    those the supervisor serves itself (the ports, the host, `--processes`)."""
    arguments: list[str] = []
    options: list[str] = []
    for param in ctx.command.params:
        name = param.name
        if name is None or name in SERVED_BY_SUPERVISOR:
            continue
        value: Any = ctx.params.get(name)
        if param.param_type_name == "argument":
            arguments += [_text(v) for v in (value if param.multiple else [value])]
            continue
        source = ctx.get_parameter_source(name)
        if param.param_type_name != "option" or value is None or source is None:
            continue
        if source.name in ("DEFAULT", "DEFAULT_MAP"):
            continue
        if getattr(param, "is_flag", False):
            options += [param.opts[0]] if value else param.secondary_opts[:1]
            continue
        for item in value if param.multiple else [value]:
            options += [param.opts[0], _text(item)]
    return [*options, "--", *arguments]


def _text(value: Any) -> str:
    return str(value.value if isinstance(value, enum.Enum) else value)


# The supervisor ------------------------------------------------------------------------------


@dataclasses.dataclass
class Child:
    """One worker process slot: its process now, its recent deaths, its pending restart."""

    number: int
    proc: subprocess.Popen[bytes] | None = None
    deaths: list[float] = dataclasses.field(default_factory=list)
    restart_at: float | None = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class Supervisor:
    """Runs `count` children of the same `worker` command until a signal or a crash loop."""

    def __init__(
        self,
        target: str,
        count: int,
        arguments: Sequence[str],
        metrics_port: int | None,
        health_port: int | None,
        host: str,
    ) -> None:
        self.target, self.count, self.arguments = target, count, list(arguments)
        self.metrics_port, self.health_port, self.host = metrics_port, health_port, host
        self.children = [Child(n) for n in range(1, count + 1)]
        self.folder = Path(tempfile.mkdtemp(prefix="proletarian-di-workers-"))
        self.failure: int | None = None
        self.hard_stop: int | None = None

    def run(self) -> int:
        """Start every child, supervise them until a signal (or a failure), drain them; the
        exit code: the worst of the children's, or 1 after a crash loop."""
        from ..._engine.signals import Signals

        try:
            with contextlib.ExitStack() as servers, Signals(on_second=self._second) as signals:
                self._serve(servers)
                for child in self.children:
                    self._spawn(child)
                pids = ", ".join(str(c.proc.pid) for c in self.children if c.proc)
                err.print(
                    f"proletarian-di worker {self.target}: supervising {self.count} worker "
                    f"processes (pids {pids}); stop with Ctrl-C or SIGTERM "
                    "(a second signal exits at once)"
                )
                while signals.wait(POLL_S) is None and self.failure is None:
                    self._tend()
                if self.failure is None:
                    err.print(
                        f"{signals.first} received: draining every worker process, then "
                        "shutting down (send it again to exit at once)"
                    )
                codes = self._drain()
                servers.close()
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)
        code = worst(codes)
        if self.hard_stop is not None:
            code = 128 + self.hard_stop
        elif self.failure is not None:
            code = self.failure
        ended = ", ".join(str(c) for c in codes)
        err.print(f"every worker process has stopped (exit codes {ended}): exiting {code}")
        return code

    def _serve(self, servers: contextlib.ExitStack) -> None:
        if self.metrics_port is not None:
            server = _serve_summed_metrics(self, self.metrics_port, self.host)
            servers.callback(server.server_close)
            servers.callback(server.shutdown)
            err.print(f"metrics at http://{_hostport(self.host, server.server_address[1])}/metrics")
        if self.health_port is not None:
            try:
                health = HealthServer((), self.host, self.health_port, check=self.health)
            except OSError as exc:
                raise CLIError(
                    f"cannot serve health checks on {self.host}:{self.health_port}: {exc}",
                    ExitCode.USAGE,
                ) from None
            servers.callback(health.close)
            err.print(
                f"health checks at http://{_hostport(self.host, health.port)}/livez and /readyz"
            )

    def _spawn(self, child: Child) -> None:
        env = {k: v for k, v in os.environ.items() if k not in OWN_ENV}
        env.pop("PROLETARIAN_LISTEN_HOST", None)
        env[DIR_ENV] = str(self.folder)
        env[NUMBER_ENV] = str(child.number)
        env[PARENT_ENV] = str(os.getpid())
        if self.metrics_port is not None:
            env[MULTIPROC_ENV] = str(self.folder)
        with contextlib.suppress(FileNotFoundError):
            (self.folder / f"{child.number}.json").unlink()
        # A session of its own: a terminal's Ctrl-C reaches the supervisor only, which forwards
        # it once (the process group would get it twice: a hard stop).
        child.proc = subprocess.Popen(
            [sys.executable, "-m", "proletarian_di.cli", "worker", *self.arguments],
            env=env,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        child.restart_at = None

    def _tend(self) -> None:
        """Restart the children that died, once their delay is over; stop on a crash loop."""
        now = time.monotonic()
        for child in self.children:
            if child.restart_at is not None:
                if now >= child.restart_at:
                    self._spawn(child)
                    assert child.proc is not None
                    err.print(f"worker process {child.number} restarted (pid {child.proc.pid})")
                continue
            if child.proc is None or child.proc.poll() is None:
                continue
            code, pid = child.proc.returncode, child.proc.pid
            how = _how_it_ended(code)
            if code in START_ERRORS:
                _error(
                    f"worker process {child.number} (pid {pid}) {how} at start; "
                    "a restart cannot cure that: stopping the others"
                )
                self.failure = code
                return
            child.deaths = [t for t in child.deaths if now - t < CRASH_LOOP_WINDOW_S] + [now]
            if len(child.deaths) >= CRASH_LOOP_DEATHS:
                _error(
                    f"worker process {child.number} is in a crash loop: it died "
                    f"{len(child.deaths)} times within {CRASH_LOOP_WINDOW_S:g} s (last: pid {pid} "
                    f"{how}); not restarting it: draining the others"
                )
                self.failure = ExitCode.ERROR
                return
            delay = min(RESTART_DELAY_S * 2 ** (len(child.deaths) - 1), MAX_RESTART_DELAY_S)
            err.print(
                f"worker process {child.number} (pid {pid}) {how} unexpectedly; restarting it "
                f"in {delay:g} s"
            )
            child.restart_at = now + delay

    def _drain(self) -> list[int]:
        """SIGTERM every running child (today's drain) and wait for them; their exit codes,
        a child still starting that the SIGTERM ended counting as a clean stop."""
        draining = [child for child in self.children if child.running]
        for child in self.children:
            child.restart_at = None
        for child in draining:
            if self.hard_stop is None and child.proc is not None:
                with contextlib.suppress(ProcessLookupError):
                    child.proc.send_signal(signal.SIGTERM)
        deadline: float | None = None
        while any(child.running for child in self.children):
            if self.hard_stop is not None:
                deadline = deadline or time.monotonic() + HARD_STOP_WAIT_S
                if time.monotonic() > deadline:
                    for child in self.children:
                        if child.running and child.proc is not None:
                            child.proc.kill()
            time.sleep(POLL_S)
        codes = [c.proc.returncode for c in draining if c.proc is not None]
        return [
            0 if code == -signal.SIGTERM else 128 - code if code < 0 else code for code in codes
        ]

    def _second(self, signum: int, frame: FrameType | None) -> None:
        """A second signal: pass it to every child (each exits at once), then exit."""
        self.hard_stop = signum
        for child in self.children:
            if child.running and child.proc is not None:
                with contextlib.suppress(ProcessLookupError):
                    child.proc.send_signal(signum)
        message = (
            f"second {signal.Signals(signum).name}: passed to every worker process, exiting now; "
            "jobs still running are rolled back by the database and will run again\n"
        )
        with contextlib.suppress(OSError):
            os.write(2, message.encode())

    def reports(self) -> Iterator[tuple[Child, dict[str, Any] | None]]:
        """Each child and what it reported (its ports), None while it has not (or is down)."""
        for child in self.children:
            report = None
            if child.running and child.proc is not None:
                with contextlib.suppress(OSError, ValueError):
                    found = json.loads((self.folder / f"{child.number}.json").read_text())
                    report = found if found.get("pid") == child.proc.pid else None
            yield child, report

    def health(self, database: bool) -> Health:
        """Every child's own answer, put together: alive while every child that runs is,
        ready when every child runs and is ready, degraded for each reason a child gives
        (the children read the same tables: each reason once)."""
        answers: list[WorkerHealth] = []
        degraded: dict[str, None] = {}
        for child, report in self.reports():
            name = f"worker process {child.number}"
            if report is None or report.get("health") is None:
                state = "restarting" if child.restart_at is not None else "starting"
                answers.append(WorkerHealth(name, state, True, False, [], [f"{name} is {state}"]))
                continue
            name += f" (pid {report['pid']})"
            path = "/readyz" if database else "/livez"
            try:
                body = _fetch_json(f"http://127.0.0.1:{report['health']}{path}")
            except Exception as exc:
                problem = f"{name} did not answer its health check: {exc}"
                answers.append(WorkerHealth(name, "unknown", False, False, [], [problem]))
                continue
            for one in body.get("workers", []):
                one = {**one, "queue_worker_id": f"{one['queue_worker_id']} in {name}"}
                answers.append(WorkerHealth(**one))
            degraded.update(dict.fromkeys(body.get("degraded", [])))
        readiness = [answer.ready for answer in answers]
        ready: bool | None = bool(answers) and all(readiness)
        if answers and False not in readiness and None in readiness:
            ready = None
        alive = all(a.alive for a in answers)
        return Health(alive=alive, ready=ready, workers=answers, degraded=list(degraded))


def worst(codes: Sequence[int]) -> int:
    """The children's exit codes as one: a hard stop (128+N) over a start error over an error
    over an abandoned job over a clean stop."""
    return max(codes, key=_severity, default=ExitCode.OK)


def _severity(code: int) -> int:
    order: dict[int, int] = {ExitCode.OK: 0, ExitCode.ABANDONED: 1, ExitCode.ERROR: 2}
    return order.get(code, 3 + code)


def _how_it_ended(code: int) -> str:
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _fetch_json(url: str) -> dict[str, Any]:
    """A child's health answer (200 or 503 alike carry its JSON)."""
    try:
        with urllib.request.urlopen(url, timeout=CHILD_ANSWER_S) as answer:
            return dict(json.load(answer))
    except urllib.error.HTTPError as exc:
        with exc:
            return dict(json.load(exc))


def _serve_summed_metrics(supervisor: Supervisor, port: int, host: str) -> Any:
    """Serve the children's counters and histograms summed (from their multiprocess files),
    and the queue depths as one running child reads them."""
    if importlib.util.find_spec("prometheus_client") is None:
        extra = "pip install 'proletarian-di[metrics]'"
        raise CLIError(f"--metrics-port needs prometheus-client: {extra}", ExitCode.USAGE)
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(supervisor.folder))
    registry.register(_DepthRelay(supervisor))
    try:
        server, _ = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise CLIError(f"cannot serve metrics on {host}:{port}: {exc}", ExitCode.USAGE) from None
    return server


class _DepthRelay:
    """At each scrape, the queue-depth gauges of the first child that answers (they read the
    same tables); `proletarian_database_up 0` when none does."""

    def __init__(self, supervisor: Supervisor) -> None:
        self.supervisor = supervisor

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily
        from prometheus_client.parser import text_string_to_metric_families

        for _, report in self.supervisor.reports():
            if report is None or report.get("depth") is None:
                continue
            url = f"http://127.0.0.1:{report['depth']}/metrics"
            try:
                with urllib.request.urlopen(url, timeout=CHILD_ANSWER_S) as answer:
                    text = answer.read().decode()
            except OSError:
                continue
            yield from text_string_to_metric_families(text)
            return
        up = GaugeMetricFamily("proletarian_database_up", "No worker process answered.")
        up.add_metric([], 0)
        yield up

    def describe(self) -> list[Any]:
        """Nothing at registration: collecting then would ask the children."""
        return []


# A child's side ------------------------------------------------------------------------------


@dataclasses.dataclass
class Supervised:
    """What a child run by a supervisor knows: its folder and number, and what to report."""

    folder: Path
    number: int
    parent: int
    metrics: bool

    @classmethod
    def from_environ(cls) -> Supervised | None:
        """The supervisor's settings, taken out of the environment (so that nothing this
        process starts believes it is supervised too); None when run by hand."""
        folder, number = os.environ.pop(DIR_ENV, None), os.environ.pop(NUMBER_ENV, None)
        parent = os.environ.pop(PARENT_ENV, None)
        if not folder or not number or not parent:
            return None
        metrics = os.environ.get(MULTIPROC_ENV) == folder
        return cls(Path(folder), int(number), int(parent), metrics)

    @contextlib.contextmanager
    def reporting(self, workers: list[QueueWorker], serve_depth: Any) -> Iterator[None]:
        """While the workers run: serve their health and queue depths on 127.0.0.1, write
        the ports for the supervisor, and drain (SIGTERM to itself) if the supervisor dies."""
        from ...health import serve_health

        with contextlib.ExitStack() as stack:
            health = serve_health(workers, port=0)
            stack.callback(health.close)
            depth = None
            if self.metrics:
                from prometheus_client import CollectorRegistry

                server = serve_depth(workers, 0, "127.0.0.1", registry=CollectorRegistry())
                stack.callback(server.server_close)
                stack.callback(server.shutdown)
                depth = server.server_address[1]
            report = {"pid": os.getpid(), "health": health.port, "depth": depth}
            path = self.folder / f"{self.number}.json"
            partial = path.with_suffix(".tmp")
            partial.write_text(json.dumps(report))
            partial.replace(path)
            stack.callback(path.unlink, missing_ok=True)
            stop = threading.Event()
            watch = threading.Thread(
                target=_drain_when_orphaned, args=(self.parent, stop), daemon=True
            )
            watch.start()
            stack.callback(stop.set)
            yield


def _drain_when_orphaned(parent: int, stop: threading.Event) -> None:
    """A supervisor that died (SIGKILL, OOM) leaves its children to drain, not to run on."""
    while not stop.wait(0.5):
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)
            return
